"""Learning benchmark: what a merge and an evaluation cost, beside their anchors, in one run.

    python -m bench.learning

Measured with the offline model on a real dev server and an in-process worker (medians; read the
ratios, not the absolute times):
1. A merge of two branches (place, ask the merging program, record: three activities) against the
   anchor, one plain turn of the same conversation.
2. An evaluation of 40 rated-style rows (each shown two earlier turns) at concurrency 1, 4 and 16
   (one activity per row, through the Evaluation workflow), against the anchor functai 1.2.0's own
   `evaluate` of the same rows in-process with FakeLM (no Temporal, no network).
"""

from __future__ import annotations

import asyncio
import dataclasses
import statistics
import tempfile
import time
import uuid
import warnings
from pathlib import Path
from typing import Any

import functai

import threadline
from bench._report import exit_now, quiet_logs
from bench._server import start_dev_server
from bench.turns import settings_for
from tests.support.functai_kit import offline, reply, tutor
from worker import build_worker

ROWS = 40
REPEATS = 7


def rows() -> list[dict[str, Any]]:
    """Rows as `rated()` gives them: a question, its answer, two earlier turns, a conversation."""
    earlier = [{"inputs": {"message": f"q{i}"}, "outputs": {"result": f"a{i}"}} for i in range(2)]
    return [
        {"message": f"row {i}", "result": f"(offline) You said: row {i}. I was shown 2 earlier turn(s).",
         "earlier": earlier, "conversation": f"c{i % 8}"}
        for i in range(ROWS)
    ]  # fmt: skip


async def run() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-learning-") as tmp:
        async with await start_dev_server() as env:
            data = Path(tmp)
            settings = dataclasses.replace(
                settings_for(env, data, f"bench-{uuid.uuid4()}"),
                payloads=data / "payloads",
                programs=("tests.support.learning_programs",),
            )
            async with build_worker(env.client, settings):
                tl = await threadline.connect(settings, client=env.client)
                await merges(tl)
                await evaluations(tl)


async def merges(tl: threadline.Threadline) -> None:
    turns, merged = [], []
    for i in range(REPEATS):
        chat = tl.conversation("tutor", id=f"merge-{i}-{uuid.uuid4().hex[:8]}")
        root = await chat.predict("root")
        left = await chat.continue_from(root).predict("left")
        started = time.perf_counter()
        right = await chat.continue_from(root).predict("right")
        turns.append(time.perf_counter() - started)
        started = time.perf_counter()
        await chat.continue_from(root).merge([left, right], "pick")
        merged.append(time.perf_counter() - started)
    turn, merge = statistics.median(turns), statistics.median(merged)
    print(
        f"merge of two branches {merge * 1000:7.1f} ms; anchor one turn {turn * 1000:6.1f} ms; ratio {merge / turn:.2f}"
    )


async def evaluations(tl: threadline.Threadline) -> None:
    data = rows()
    with warnings.catch_warnings(), offline([reply(r["result"]) for r in data]):
        warnings.simplefilter("ignore")
        started = time.perf_counter()
        functai.evaluate(tutor, data)
        anchor = time.perf_counter() - started
    print(f"evaluation of {ROWS} rows: anchor functai.evaluate in-process {anchor * 1000:7.1f} ms")
    for concurrency in (1, 4, 16):
        started = time.perf_counter()
        report = await threadline.evaluate("tutor", data, "exact_match", concurrency=concurrency, tl=tl)
        took = time.perf_counter() - started
        assert report.mean == 1.0, report.table()
        print(
            f"  concurrency {concurrency:2d}: {took * 1000:7.1f} ms, {ROWS / took:6.1f} rows/s, "
            f"ratio to the anchor {took / anchor:6.1f}"
        )


def main() -> None:
    quiet_logs()
    print("Learning: merges and evaluations (offline model, dev server, in-process worker)")
    asyncio.run(run())


if __name__ == "__main__":
    main()
    exit_now()
