"""The worker process's garbage collector, tuned while a worker runs (`THREADLINE_WORKER_GC`).

CPython's cycle collector runs a young collection every 700 net allocations of container objects and
a full one when enough of them have outlived two young ones. A worker under load allocates tens of
thousands of containers a second (activations, payloads, parsed records), so in-flight turns'
objects keep reaching the oldest generation and full collections come every few seconds. A full
collection walks every tracked object of the process (a few hundred thousand in a worker caching
hundreds of conversations) and stops the event loop meanwhile: 0.4 s each on these machines
(`python -m bench.service`, docs/benchmarks.md), which every turn in flight waits out.

While a worker runs (`collector_plugin`, a worker plugin):

- everything that exists when the first worker starts (modules, classes, the SDK, the worker's
  setup) is moved to the permanent generation (`gc.freeze`), which no collection walks again;
- a young collection waits for `YOUNG` allocations instead of 700, so most of a turn's objects are
  freed by their reference counts before a collection could promote them.

Both are process-wide, so the first worker to start applies them and the last to stop puts back
what it found (several workers may run in one process: tests, an embedded worker).
"""

from __future__ import annotations

import gc
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from temporalio.plugin import SimplePlugin

YOUNG = 10_000
"""Net container allocations between young collections while a worker runs (CPython's default: 700)."""

_lock = threading.Lock()
_running = 0
_found: tuple[int, int, int] | None = None
"""The thresholds the first worker found, put back when the last one stops."""


def tune() -> None:
    """Apply the worker's collector settings (the first of nested calls does; see the module docstring)."""
    global _running, _found
    with _lock:
        _running += 1
        if _running > 1:
            return
        _found = gc.get_threshold()
        gc.freeze()
        gc.set_threshold(YOUNG, _found[1], _found[2])


def restore() -> None:
    """Undo `tune` (the last of nested calls does): the thresholds as found, nothing frozen."""
    global _running, _found
    with _lock:
        _running -= 1
        if _running > 0 or _found is None:
            return
        gc.set_threshold(*_found)
        gc.unfreeze()
        _found = None


@asynccontextmanager
async def tuned() -> AsyncIterator[None]:
    """The collector tuned meanwhile (`tune`), put back however the block ends (`restore`)."""
    tune()
    try:
        yield
    finally:
        restore()


def collector_plugin() -> SimplePlugin:
    """The worker plugin that runs its worker with the process's collector `tuned`."""
    return SimplePlugin("threadline.worker-gc", run_context=tuned)
