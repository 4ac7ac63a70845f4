"""Flow benchmark: what a guided flow's answer costs to record, against placing a plain turn.

    python -m bench.flows

Two conversations in one folder store grow side by side, call by call, through the activities in
Temporal's `ActivityEnvironment` (no server, no model):

- threadline (a flow answer): `flow_step` of a one-step flow that asks again after every answer,
  so each call reads the log, rebuilds the flow's progress from its entries, checks the answer and
  appends the turn, its `ended` record and the flow's entry in one conditional append;
- anchor (a plain turn): `begin_turn` of `tutor`, which reads the log, decides the parent and what
  the turn is shown, and appends its `turn` and `lease` in one conditional append (its `ended`
  record is appended after the timed call, so the next one is not kept waiting).

Measured: the median latency of the 20 calls before each point in `POINTS` (exchanges so far), and
rebuilding from scratch at the end: the flow's progress from a fresh read against the fresh read
alone. Absolute times depend on the machine; the ratios are what to read.
"""

from __future__ import annotations

import statistics
import tempfile
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from temporalio.testing import ActivityEnvironment

from activities.flows import FlowActivities
from activities.language_model import OfflineModel, Providers
from activities.transcript import TranscriptActivities
from bench._report import run_benchmark
from bench.turns import check
from core.models import BeginInput, ConversationConfig, FlowAnswer, FlowStart, TurnSend
from store.backends.folder import FolderStore
from store.backends.reader import LogCache, Stores, Threaded
from store.flows.manager import FlowBuilder
from store.flows.progress import progress_of
from store.log.state import Log
from store.programs.program import TUTOR
from store.records import ended_record

POINTS = (10, 100, 1000)
WINDOW = 20


def _again(_data: Mapping[str, Any]) -> str:
    return "note"


NOTES = FlowBuilder("notes").add_step("note", "Anything else to note?", validator=str.strip, next_step=_again).build()


@dataclass(slots=True)
class Row:
    """One line of the table: Threadline's figure beside the anchor's (lower is better)."""

    measure: str
    threadline: float
    anchor: float
    met: bool | None = None

    def markdown(self) -> str:
        ratio = self.threadline / self.anchor if self.anchor else float("nan")
        cells = [self.measure, f"{self.threadline:.2f} ms", f"{self.anchor:.2f} ms", f"{ratio:.2f}", "-", "-"]
        return "| " + " | ".join(cells) + " |"


class Side:
    """Both conversations and the activities that grow them."""

    def __init__(self, folder: Path) -> None:
        self.store = FolderStore(folder)
        logs = LogCache(Stores({"default": lambda: Threaded(self.store)}))
        self.flows = FlowActivities(logs, {"notes": NOTES}, Providers({"offline": OfflineModel()}))
        self.transcript = TranscriptActivities(logs, {"tutor": TUTOR})
        self.config = ConversationConfig(store="default", conversation="plain")

    async def answer(self, i: int) -> float:
        answer = FlowAnswer(store="default", conversation="flow", request_id=str(uuid.uuid4()), message=f"note {i}")
        start = time.perf_counter()
        result = await ActivityEnvironment().run(self.flows.flow_step, answer)
        elapsed = time.perf_counter() - start
        check(bool(result.valid) and not result.existing, "every note is taken as a new answer")
        return elapsed

    async def turn(self, i: int) -> float:
        send = TurnSend(request_id=str(uuid.uuid4()), inputs={"message": f"note {i}"})
        start = time.perf_counter()
        begun = await ActivityEnvironment().run(self.transcript.begin_turn, BeginInput(config=self.config, send=send))
        elapsed = time.perf_counter() - start
        outputs = {"result": "noted"}
        ended = ended_record(begun.turn, attempt=1, state="done", outputs=outputs, value="noted", model="bench")
        self.store.append("plain", [ended])
        return elapsed


async def run() -> list[Row]:
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="bench-flows-") as tmp:
        side = Side(Path(tmp))
        start = FlowStart(store="default", conversation="flow", flow="notes", request_id="start")
        await ActivityEnvironment().run(side.flows.start_flow, start)
        flow_ms: list[float] = []
        turn_ms: list[float] = []
        for i in range(1, max(POINTS) + 1):
            flow_ms.append(await side.answer(i))
            turn_ms.append(await side.turn(i))
            if i in POINTS:
                window = slice(i - min(WINDOW, i), i)
                flow, turn = (1000 * statistics.median(ms[window]) for ms in (flow_ms, turn_ms))
                rows.append(Row(f"record one exchange, {i} so far (median)", flow, turn))
        rows.append(rebuild(side.store))
    return rows


def rebuild(store: FolderStore) -> Row:
    """A new worker's first look at the flow's conversation: a fresh read and the flow's progress,
    against the same fresh read alone (best of 5)."""
    reads: list[float] = []
    progress: list[float] = []
    for _ in range(5):
        start = time.perf_counter()
        Log(store.read("flow"))
        reads.append(time.perf_counter() - start)
        start = time.perf_counter()
        progress_of(Log(store.read("flow")))
        progress.append(time.perf_counter() - start)
    measure = f"rebuild after {max(POINTS)} exchanges (read + progress vs read)"
    return Row(measure, 1000 * min(progress), 1000 * min(reads))


def header() -> None:
    print("Flow benchmark: a flow answer recorded (threadline) against a plain turn placed (anchor)")
    print(f"points {POINTS}, median of the {WINDOW} calls before each; activity level, one folder store")


def main() -> list[Row]:
    return run_benchmark(header, run, "activity level, no server")


if __name__ == "__main__":
    main()
