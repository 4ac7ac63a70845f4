"""Where a worker's memory per idle conversation goes: tracemalloc in a worker process.

    python -m bench._memprofile [COUNT] [bare]   (bench/profiles/idle-memory*.txt keep one run each)

A worker process (`worker.py`'s `main`; with `bare`, the bare Temporal conversation's worker of
bench/_bare_worker.py) serves `WARMUP` conversations of one turn. Then tracemalloc starts in it
(12 frames; on SIGUSR1, so the imports and first workflow tasks are not traced), `COUNT` more
conversations take one turn each, 10 at a time, and a snapshot is written (SIGUSR1 again). What
the snapshot holds is what was allocated while they were added and is still alive: the cost of
the cached conversations in Python objects, by line, by file and by traceback. The worker's RSS
growth over the same span is printed beside it; tracemalloc's own bookkeeping inflates that
growth, so read RSS per conversation from bench/scale.py (no tracing) and subtract the Python
figure from it for what lies outside Python's heap (Temporal's core, in Rust, and allocator slack).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
import subprocess
import sys
import tempfile
import time
import tracemalloc
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

from core.settings import Settings

FRAMES = 12
WARMUP = 50
COUNT = 1000
CONCURRENCY = 10


def serve(folder: str, kind: str) -> None:
    """In the worker process: the first SIGUSR1 starts tracing, the second writes a snapshot."""

    def on_signal(_signum: int, _frame: object) -> None:
        import gc

        gc.collect()
        if not tracemalloc.is_tracing():
            tracemalloc.start(FRAMES)
            (Path(folder) / "started").touch()
            return
        tracemalloc.take_snapshot().dump(str(Path(folder) / "after.snap"))
        (Path(folder) / "after.done").touch()

    signal.signal(signal.SIGUSR1, on_signal)
    if kind == "bare":
        from bench._bare_worker import serve as bare_worker

        env = os.environ
        cache = int(env["THREADLINE_WORKFLOW_CACHE"])
        address, queue, payloads = (
            env["THREADLINE_TEMPORAL_ADDRESS"],
            env["THREADLINE_TASK_QUEUE"],
            env["THREADLINE_PAYLOADS"],
        )
        asyncio.run(bare_worker(address, queue, payloads, cache))
    else:
        import worker

        worker.main()


def signalled(process: subprocess.Popen[bytes], marker: Path) -> None:
    """SIGUSR1 to the worker, then wait for the marker file its handler writes."""
    process.send_signal(signal.SIGUSR1)
    while not marker.exists():
        time.sleep(0.2)


def worker_process(settings: Settings, kind: str, folder: Path, log: Path, cache: int) -> subprocess.Popen[bytes]:
    from tests.support.processes import ROOT

    env = {
        **os.environ,
        "THREADLINE_TEMPORAL_ADDRESS": settings.address,
        "THREADLINE_TASK_QUEUE": settings.task_queue,
        "THREADLINE_DATA": str(settings.data),
        "THREADLINE_PAYLOADS": str(settings.payloads_spec()),
        "THREADLINE_WORKFLOW_CACHE": str(cache),
    }
    command = [sys.executable, "-m", "bench._memprofile", "serve", str(folder), kind]
    return subprocess.Popen(command, cwd=ROOT, env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT)


def report(kind: str, after: tracemalloc.Snapshot, count: int, rss: tuple[int, int]) -> None:
    after = after.filter_traces([tracemalloc.Filter(False, tracemalloc.__file__)])
    traced = sum(s.size for s in after.statistics("filename"))
    grew = (rss[1] - rss[0]) * 1024
    print(f"{kind}: {count:,} conversations of one turn added to a worker caching all of them")
    print(f"  worker RSS grew {grew / count / 1024:.1f} KiB a conversation (tracemalloc's own bookkeeping included)")
    print(f"  Python objects allocated meanwhile and still alive: {traced / count / 1024:.1f} KiB a conversation")
    print("\nBy line (the allocating line; KiB a conversation, blocks a conversation):")
    for stat in after.statistics("lineno")[:30]:
        frame = stat.traceback[0]
        print(
            f"  {stat.size / count / 1024:8.2f} KiB {stat.count / count:7.1f}  {_short(frame.filename)}:{frame.lineno}"
        )
    print("\nBy file (KiB a conversation):")
    for stat in after.statistics("filename")[:25]:
        print(f"  {stat.size / count / 1024:8.2f} KiB  {_short(stat.traceback[0].filename)}")
    print(f"\nThe largest by traceback ({FRAMES} frames, innermost last):")
    for stat in after.statistics("traceback")[:12]:
        print(f"\n  {stat.size / count / 1024:.2f} KiB a conversation, {stat.count / count:.1f} blocks")
        for line in stat.traceback.format():
            print(f"    {line.strip()}" if line.startswith("  File") else f"        {line.strip()}")


def _short(filename: str) -> str:
    for marker in ("site-packages/", f"{Path(__file__).resolve().parent.parent}/", "python3.11/"):
        if marker in filename:
            return filename.split(marker, 1)[1]
    return filename


async def profile(kind: str, count: int) -> None:
    from bench._scale_kit import expected, status_kb
    from bench._server import start_dev_server
    from bench.turns import BareChat, check, question, settings_for
    from threadline.client import connect

    with tempfile.TemporaryDirectory(prefix="bench-memprofile-") as tmp:
        root = Path(tmp)
        snaps = root / "snaps"
        snaps.mkdir()
        async with await start_dev_server(root / "payloads") as env:
            queue = f"bench-memprofile-{uuid.uuid4().hex[:8]}"
            settings = dataclasses.replace(settings_for(env, root / "data", queue), payloads=root / "payloads")
            log = root / "worker.log"
            process = worker_process(settings, kind, snaps, log, WARMUP + count + 100)
            try:
                while not any(word in log.read_text(errors="replace") for word in ("worker.started", "ready")):
                    check(process.poll() is None, f"the worker started: {log.read_text(errors='replace')}")
                    await asyncio.sleep(0.2)
                tl = await connect(settings, client=env.client)

                async def threadline_turn(i: int) -> None:
                    turn = await tl.conversation("tutor", id=f"mem-{i:05d}").predict(question(i))
                    check(turn.result == expected(question(i), 0), "the turn was answered")

                async def bare_turn(i: int) -> None:
                    cid = f"mem-{i:05d}"
                    await BareChat(env.client, queue, f"bare/{cid}", root / f"{cid}.jsonl").predict(question(i))

                turn = bare_turn if kind == "bare" else threadline_turn
                await each(turn, 0, WARMUP)
                await asyncio.sleep(3)
                rss0 = status_kb(process.pid, "VmRSS")
                await asyncio.to_thread(signalled, process, snaps / "started")
                start = time.perf_counter()
                await each(turn, WARMUP, WARMUP + count)
                print(f"(added in {time.perf_counter() - start:.0f} s under tracemalloc)\n")
                await asyncio.sleep(3)
                await asyncio.to_thread(signalled, process, snaps / "after.done")
                rss1, after = status_kb(process.pid, "VmRSS"), tracemalloc.Snapshot.load(str(snaps / "after.snap"))
            finally:
                process.send_signal(signal.SIGTERM)
                process.wait(30)
    report(kind, after, count, (rss0, rss1))


async def each(turn: Callable[[int], Awaitable[None]], first: int, upto: int) -> None:
    gate = asyncio.Semaphore(CONCURRENCY)

    async def one(i: int) -> None:
        async with gate:
            await turn(i)

    await asyncio.gather(*(one(i) for i in range(first, upto)))


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"]:
        serve(sys.argv[2], sys.argv[3])
    else:
        from bench._report import quiet_logs

        quiet_logs()
        numbers = [int(a) for a in sys.argv[1:] if a.isdigit()]
        asyncio.run(profile("bare" if "bare" in sys.argv[1:] else "threadline", numbers[0] if numbers else COUNT))
        sys.stdout.flush()
        os._exit(0)
