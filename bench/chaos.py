"""Chaos benchmark: what large inputs cost a conversation's history, and how soon a conversation serves
again after its store was away for two minutes.

    python -m bench.chaos            # both parts
    python -m bench.chaos history    # part 1 alone (a minute or two)

1. History bytes per send, for inputs of 1 KB, 100 KB and 1 MB: threadline (the claim check: payloads
   over 8 KB cross Temporal as references to the payload store) against the anchor, the same worker
   and client without the claim check, whose history carries every input. Target: flat, under 8 KB.
   Then the events a turn adds to history in a conversation of ten turns.
2. A store outage of two minutes while a turn runs and a send waits behind it: the seconds from the
   store coming back to the waiting send's answer (threadline), against the same send's answer with
   no outage (anchor); and how often the model was asked for the turn the outage hit (anchor: once).
   As root the record log's folder is remounted read-only (the real fault); otherwise a store whose
   appends fail with EROFS stands in, and the header says so.
"""

from __future__ import annotations

import asyncio
import dataclasses
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from activities.language_model import ModelReply, ModelRequest, OfflineModel, TextSink
from bench._report import exit_now, run_benchmark
from bench._server import start_dev_server
from bench.turns import check
from core.settings import Settings
from core.temporal import workflow_id
from tests.chaos.invariants import PER_SEND_HISTORY, history_bytes
from tests.chaos.outage import Outage, can_mount, outage_of
from threadline.client import Threadline, connect
from worker import build_worker

SIZES = (1_000, 100_000, 1_000_000)
SENDS = 3
TURNS = 10
EVENTS_ANCHOR = 14.5
"""Events per turn of the same ten-turn conversation in release 0.2.0 (145 events, measured here: a
`publish attributes` timer started and cancelled around every turn)."""
OUTAGE_S = 120.0
RECOVERY_TARGET_S = 5.0
"""The kept reply is written within a pause (at most 2 s) of the store coming back; the send behind it then runs."""


@dataclass(slots=True)
class Row:
    """One line of the table: Threadline's figure beside the anchor's (lower is better)."""

    measure: str
    threadline: float
    anchor: float
    unit: str
    target: str = "-"
    met: bool | None = None

    def markdown(self) -> str:
        ratio = self.threadline / self.anchor if self.anchor else float("nan")
        met = "-" if self.met is None else ("yes" if self.met else "no")
        cells = [self.measure, f"{self.threadline:,.1f} {self.unit}", f"{self.anchor:,.1f} {self.unit}"]
        return "| " + " | ".join([*cells, f"{ratio:.3f}", self.target, met]) + " |"


class Counting:
    """The offline model, held by a gate, counting the calls for each turn's last message."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.gate.set()
        self.model = OfflineModel(hold=self.gate)
        self.asked: dict[str, int] = {}

    async def complete(self, request: ModelRequest, on_text: TextSink | None = None) -> ModelReply:
        """Count the call by its message, then answer as the offline model does."""
        said = request.messages[-1].content
        self.asked[said] = self.asked.get(said, 0) + 1
        return await self.model.complete(request, on_text)


def settings_for(tmp: Path, client: Client, payloads: Path) -> Settings:
    """Settings for a worker and client of this run, on their own task queue and store folder."""
    data = tmp / uuid.uuid4().hex[:8]
    return dataclasses.replace(
        Settings.from_env({}),
        data=data,
        stores={"default": data / "store"},
        address=client.service_client.config.target_host,
        task_queue=f"bench-chaos-{uuid.uuid4()}",
        payloads=payloads,
    )


async def per_send(tl: Threadline, client: Client, size: int) -> float:
    """History bytes one send of `size` characters adds (the mean of `SENDS`, after a warm-up)."""
    conversation = f"size-{size}-{uuid.uuid4().hex[:8]}"
    chat = tl.conversation("tutor", id=conversation)
    await chat.predict("warm up")
    before = await history_bytes(client, conversation)
    for k in range(SENDS):
        turn = await chat.predict(f"{k}" + "x" * (size - 1))
        check(size == len(turn.inputs["message"]), "every input is recorded whole")
    return (await history_bytes(client, conversation) - before) / SENDS


async def events_per_turn(tl: Threadline, client: Client) -> float:
    """The events of a conversation of `TURNS` sends, by turn (its one run holds them all)."""
    conversation = f"events-{uuid.uuid4().hex[:8]}"
    chat = tl.conversation("tutor", id=conversation)
    for k in range(TURNS):
        await chat.predict(f"message {k}: " + "x" * 100)
    history = await client.get_workflow_handle(workflow_id("default", conversation)).fetch_history()
    return len(history.events) / TURNS


async def history_rows(tmp: Path, client: Client, payloads: Path) -> list[Row]:
    """Part 1: per-send history with the claim check (threadline) and without it (anchor), then
    the events per turn of a ten-turn conversation against release 0.2.0's."""
    plain = await Client.connect(
        client.service_client.config.target_host, namespace=client.namespace, data_converter=pydantic_data_converter
    )
    rows = []
    ours, theirs = settings_for(tmp, client, payloads), settings_for(tmp, plain, payloads)
    async with build_worker(client, ours), build_worker(plain, theirs):
        with_check, without = await connect(ours, client=client), await connect(theirs, client=plain)
        for size in SIZES:
            mine, anchor = await per_send(with_check, client, size), await per_send(without, plain, size)
            met = mine < PER_SEND_HISTORY
            target = f"< {PER_SEND_HISTORY // 1024} KB"
            rows.append(
                Row(f"history per send, {size // 1000:,} KB input", mine / 1024, anchor / 1024, "KB", target, met)
            )
        events = await events_per_turn(with_check, client)
        rows.append(Row(f"history events per turn, {TURNS} turns", events, EVENTS_ANCHOR, "events"))
    return rows


async def timed(step: Callable[[], Awaitable[object]]) -> float:
    start = time.perf_counter()
    await step()
    return time.perf_counter() - start


async def outage_rows(tmp: Path, client: Client, payloads: Path, outage_s: float) -> list[Row]:
    """Part 2: a turn runs when the store goes away for `outage_s`; a send waits behind it."""
    settings = settings_for(tmp, client, payloads)
    outage: Outage = outage_of(settings.store_folder("default"))
    model = Counting()
    async with build_worker(client, settings, stores=outage.stores, providers={"offline": model}):
        tl = await connect(settings, client=client)
        chat = tl.conversation("tutor", id=f"outage-{uuid.uuid4().hex[:8]}")
        await chat.predict("warm up")
        calm = await timed(lambda: chat.predict("no outage"))
        model.gate.clear()
        await chat.send("hit by the outage")
        waiting = asyncio.create_task(chat.predict("waiting behind it"))
        outage.begin()
        try:
            model.gate.set()  # the reply comes; its end cannot be written
            await asyncio.sleep(outage_s)
        finally:
            outage.end()
        back = await timed(lambda: waiting)
    check(waiting.result().state == "done", "the waiting send is answered after the outage")
    return [
        Row(
            f"serve again after a {outage_s:.0f} s outage",
            back,
            calm,
            "s",
            f"< {RECOVERY_TARGET_S:.0f} s",
            back < RECOVERY_TARGET_S,
        ),
        Row("model calls for the turn the outage hit", model.asked["hit by the outage"], 1, "calls", "1", None),
    ]


async def run() -> list[Row]:
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="bench-chaos-") as tmp:
        env = await start_dev_server(Path(tmp) / "payloads")
        try:
            payloads = Path(tmp) / "payloads"
            rows += await history_rows(Path(tmp), env.client, payloads)
            if "history" not in sys.argv[1:]:
                rows += await outage_rows(Path(tmp), env.client, payloads, OUTAGE_S)
        finally:
            await env.shutdown()
    return rows


def header() -> None:
    kind = "read-only bind mount of the log's folder" if can_mount() else "not root: a store failing writes (EROFS)"
    print("Chaos benchmark: history per send by input size, and serving again after a store outage")
    print(f"inputs {', '.join(f'{s:,}' for s in SIZES)} characters, {SENDS} sends each; outage {OUTAGE_S:.0f} s")
    print(f"the outage: {kind}")


def main() -> list[Row]:
    return run_benchmark(header, run, "one dev server, offline model")


if __name__ == "__main__":
    main()
    exit_now()
