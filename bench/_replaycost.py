"""What replaying a conversation's run costs a worker: the SDK's sandbox against the workers' runner.

    python -m bench._replaycost [TURNS ...]     (default 4 9 99; bench/profiles/cold-replay.txt: where it goes)

A conversation takes `max(TURNS)` turns through an in-process worker (the offline model, one run:
`turns_per_run` above them), recording its history after each size in `TURNS`. Each recorded
history is then replayed `REPS` times in this process by temporalio's `Replayer`, with the SDK's
own `SandboxedWorkflowRunner` and with the runner every worker uses (`worker.workflow_runner`: the
workflow modules passed through, payload contexts answered outside the sandbox), alternating. The
figure is this process's CPU time per replay (all threads; the median): what a cold turn's replay
costs, load on the machine inflating both sides alike.
"""

from __future__ import annotations

import asyncio
import dataclasses
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer, WorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from bench._server import start_dev_server
from bench.turns import question, settings_for
from core.temporal import data_converter
from store.backends.blobs import FolderBlobs
from threadline.client import connect
from worker import build_worker, workflow_runner
from workflows.conversation import ConversationWorkflow

REPS = 9


async def record(sizes: list[int], root: Path) -> dict[int, WorkflowHistory]:
    """One conversation's history when it had taken each of `sizes` turns (one run)."""
    histories = {}
    async with await start_dev_server(root / "payloads") as env:
        settings = dataclasses.replace(
            settings_for(env, root / "data", f"bench-replay-{uuid.uuid4().hex[:8]}"),
            payloads=root / "payloads",
            turns_per_run=max(sizes) + 1,
        )
        async with build_worker(env.client, settings):
            tl = await connect(settings, client=env.client)
            chat = tl.conversation("tutor", id=f"replay-{uuid.uuid4().hex[:8]}")
            for i in range(1, max(sizes) + 1):
                await chat.predict(question(i))
                if i in sizes:
                    histories[i] = await chat.handle.fetch_history()
    return histories


async def cpu_ms(replayer: Replayer, history: WorkflowHistory) -> float:
    start = time.process_time()
    await replayer.replay_workflow(history)
    return 1000 * (time.process_time() - start)


async def main(sizes: list[int]) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-replay-") as tmp:
        root = Path(tmp)
        histories = await record(sizes, root)
        dc = data_converter(FolderBlobs(root / "payloads"))
        runners: dict[str, WorkflowRunner] = {"SDK sandbox": SandboxedWorkflowRunner(), "workers'": workflow_runner(dc)}
        replayers = {
            name: Replayer(workflows=[ConversationWorkflow], data_converter=dc, workflow_runner=r)
            for name, r in runners.items()
        }
        print("| run replayed | SDK sandbox | workers' runner | ratio |")
        print("|---|---:|---:|---:|")
        for size, history in histories.items():
            for replayer in replayers.values():
                await replayer.replay_workflow(history)  # first-time imports out of the figures
            took: dict[str, list[float]] = {name: [] for name in replayers}
            for k in range(REPS):
                for name in list(replayers) if k % 2 == 0 else list(replayers)[::-1]:
                    took[name].append(await cpu_ms(replayers[name], history))
            theirs, ours = (statistics.median(took[name]) for name in replayers)
            run = f"{size} turns, {len(history.events):,} events"
            print(f"| {run} | {theirs:.0f} ms | {ours:.0f} ms | {ours / theirs:.2f} |")


if __name__ == "__main__":
    from bench._report import exit_now, quiet_logs

    quiet_logs()
    asyncio.run(main([int(n) for n in sys.argv[1:]] or [4, 9, 99]))
    exit_now()
