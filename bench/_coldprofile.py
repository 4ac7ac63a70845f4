"""Where the first turn after a worker restart spends the worker's CPU: py-spy on the new worker.

    python -m bench._coldprofile [TURNS]     (bench/profiles/cold-turn.txt keeps one run)

Two conversations take `TURNS` turns each (by default one fewer than `THREADLINE_TURNS_PER_RUN`'s
default: a workflow run then holds the most turns a run holds before it continues as new) through
a worker process, with the offline model. Once the timer that writes their search attributes
after a burst of turns has fired (so nothing replays them before their next turn), the worker is
stopped, a new one started and warmed with one turn of a new conversation. The first
conversation's next turn, a cold one, is timed; then py-spy samples the new worker (`record
--format raw`, 500 Hz, active threads only) while the second takes its cold turn; then a warm
turn is timed. Printed: the latencies, and the sampled cold turn's CPU by function (inclusive and
self).
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from core.settings import DEFAULT_TURNS_PER_RUN
from threadline.client import Conversation

RATE = 500
TURNS = DEFAULT_TURNS_PER_RUN - 1
WAITS = ("select (selectors.py)", "_worker (concurrent/futures/thread.py)", "wait (threading.py)")
"""Leaf frames of a thread that waits (py-spy's idle detection misses these): left out."""


def summarise(raw: Path, top: int = 30) -> None:
    """Samples by function from py-spy's raw (collapsed) output: inclusive, then self."""
    inclusive: collections.Counter[str] = collections.Counter()
    own: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = [_short(f) for f in stack.split(";") if f]
        if not frames or frames[-1].endswith(WAITS):
            continue
        n = int(count)
        total += n
        for frame in set(frames):
            inclusive[frame] += n
        own[frames[-1]] += n
    print(f"{total} samples at {RATE} Hz = {1000 * total / RATE:.0f} ms of the worker's threads on CPU\n")
    for title, counter in (("inclusive (the function and what it called)", inclusive), ("self", own)):
        print(f"By function, {title}:")
        for frame, n in counter.most_common(top):
            print(f"  {100 * n / total:5.1f} %  {1000 * n / RATE:7.1f} ms  {frame}")
        print()


def _short(frame: str) -> str:
    name, _, where = frame.partition(" (")
    where = where.rstrip(")")
    for marker in ("site-packages/", f"{Path(__file__).resolve().parent.parent}/", "python3.11/"):
        if marker in where:
            where = where.split(marker, 1)[1]
    return f"{name} ({where.rsplit(':', 1)[0]})"


async def profile(turns: int) -> None:
    from bench._scale_kit import QUIET_S
    from bench._scale_long import current_run
    from bench._server import start_dev_server
    from bench.turns import check, question, settings_for
    from tests.support.processes import WorkerProcess
    from threadline.client import connect

    spy_bin = Path(sys.executable).with_name("py-spy")
    check(spy_bin.exists(), "py-spy is installed in this environment (the test extra pins it)")
    with tempfile.TemporaryDirectory(prefix="bench-coldprofile-") as tmp:
        root = Path(tmp)
        async with await start_dev_server(root / "payloads") as env:
            settings = dataclasses.replace(
                settings_for(env, root / "data", f"bench-cold-{uuid.uuid4().hex[:8]}"), payloads=root / "payloads"
            )
            worker = WorkerProcess(settings, root / "worker-0.log")
            await asyncio.to_thread(worker.wait_ready)
            tl = await connect(settings, client=env.client)
            plain, spied = (tl.conversation("tutor", id=f"cold-{uuid.uuid4().hex[:8]}") for _ in range(2))
            for i in range(turns):
                await plain.predict(question(i))
                await spied.predict(question(i))
            run_turns, events = await current_run(spied)
            print(f"two conversations of {turns} turns; each current run holds {run_turns} turns, {events:,} events")
            await asyncio.sleep(settings.attributes_every_s + QUIET_S)  # their attribute timers fire here, not later
            await asyncio.to_thread(worker.stop)
            worker = WorkerProcess(settings, root / "worker-1.log")
            try:
                await asyncio.to_thread(worker.wait_ready)
                await tl.conversation("tutor", id=f"first-{uuid.uuid4().hex[:8]}").predict("Hello")
                cold = await timed_turn(plain, question(turns))
                raw = root / "cold.raw"
                spy = await asyncio.to_thread(record, spy_bin, worker.process.pid, raw)
                spied_cold = await timed_turn(spied, question(turns))
                await asyncio.sleep(0.3)
                spy.send_signal(signal.SIGINT)
                await asyncio.to_thread(spy.wait, 30)
                warm = await timed_turn(plain, question(turns + 1))
            finally:
                await asyncio.to_thread(worker.stop)
            print(
                f"cold turn {cold:.0f} ms; with py-spy attached (it stops the process 500 times a second) "
                f"{spied_cold:.0f} ms; a warm turn after them {warm:.0f} ms\n"
            )
            summarise(raw)


async def timed_turn(chat: Conversation, text: str) -> float:
    start = time.perf_counter()
    await chat.predict(text)
    return 1000 * (time.perf_counter() - start)


def record(spy_bin: Path, pid: int, raw: Path) -> subprocess.Popen[bytes]:
    """Start py-spy on `pid`; return once it samples."""
    command = [str(spy_bin), "record", "-p", str(pid), "-r", str(RATE), "-f", "raw", "-o", str(raw)]
    spy = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)  # py-spy attaches and starts sampling
    return spy


if __name__ == "__main__":
    from bench._report import quiet_logs

    quiet_logs()
    asyncio.run(profile(int(sys.argv[1]) if len(sys.argv) > 1 else TURNS))
    sys.stdout.flush()
    os._exit(0)
