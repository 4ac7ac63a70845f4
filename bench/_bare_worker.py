"""The anchors' worker as a process of its own: both bare Temporal conversations (bench/_bare.py) alone.

    python -m bench._bare_worker ADDRESS TASK_QUEUE PAYLOADS CACHE

It prints `ready` once it polls and stops at SIGTERM, so its memory can be read from /proc as a
Threadline worker's is (bench/_scale_idle.py, bench/_memprofile.py). Its garbage collector is set
as a Threadline worker's is by default (`core.collector.tune`): the two processes differ in their
designs, not in their collectors' settings (in one process, as bench/turns.py's `started` runs
them, they share one collector).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

from temporalio.client import Client
from temporalio.worker import Worker

from bench._bare import BareConversation, BestBareConversation, bare_append, bare_place_and_append
from core.collector import tune
from core.settings import Settings
from core.temporal import data_converter
from store.backends.blobs import FolderBlobs
from tests.support.processes import ROOT


def start(settings: Settings, queue: str, cache: int) -> subprocess.Popen[str]:
    """Start the process for `settings`' server and payload folder; its stdout is a pipe."""
    command = [sys.executable, "-m", "bench._bare_worker", settings.address, queue]
    command += [str(settings.payloads_spec()), str(cache)]
    return subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, text=True)


@contextlib.asynccontextmanager
async def running(settings: Settings, queue: str, cache: int) -> AsyncIterator[subprocess.Popen[str]]:
    """The process (`start`), once it polls; stopped (SIGTERM) however the block ends."""
    process = start(settings, queue, cache)
    try:
        assert process.stdout is not None
        if await asyncio.to_thread(process.stdout.readline) != "ready\n":
            raise RuntimeError(f"the bare worker did not start (exit code {process.poll()})")
        yield process
    finally:
        process.send_signal(signal.SIGTERM)
        await asyncio.to_thread(process.wait, 15)


async def serve(address: str, queue: str, payloads: str, cache: int) -> None:
    """Run the worker until SIGTERM, caching up to `cache` conversations; print `ready` once it polls."""
    client = await Client.connect(address, data_converter=data_converter(FolderBlobs(Path(payloads))))
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    worker = Worker(
        client,
        task_queue=queue,
        workflows=[BareConversation, BestBareConversation],
        activities=[bare_append, bare_place_and_append],
        max_concurrent_activities=200,
        max_cached_workflows=cache,
    )
    tune()
    async with worker:
        print("ready", flush=True)
        await stop.wait()


if __name__ == "__main__":
    address, queue, payloads, cache = sys.argv[1:5]
    asyncio.run(serve(address, queue, payloads, int(cache)))
