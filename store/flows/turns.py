"""A guided flow's exchanges as turns: each prompt and answer is an ordinary turn of the built-in
program `flow_step(message: str) -> str` (the user's answer in, the flow's response out), with the
fields and signature of functai's `tutor`, so functai lists, shows and continues them as any turn.

An exchange is appended as `program?`, `turn` and `ended` (no lease: nothing runs, the flow has
answered already) and the flow's `entry` records, in one batch with `expect` = the length it was
decided on; the turn carries the call's request id, so a retry finds it and writes nothing again.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from store.log.collected import PLUGIN
from store.log.rules import parent_for
from store.log.state import Log
from store.log.turns import check_program, lmcc
from store.programs.program import Program
from store.records import Record, ended_record, entry_record, iso, turn_record

from .definition import Flow, Transition
from .progress import Progress


def flow_step(message: str) -> str:
    """Answer with the guided flow's response: its next prompt, a re-prompt, or its closing words."""
    raise NotImplementedError("a flow answers for it; no model is asked")


FLOW_STEP = Program.from_function(flow_step)
"""The program of every flow turn: the same fields and signature as functai's `tutor`."""


@dataclass(frozen=True, slots=True)
class Exchange:
    """What a flow call decided: the records to append with `expect`, and what they mean.

    `in_flow` is False when no flow took the call (no flow is active, or a timer is stale): nothing
    is appended and a message goes on as a normal turn. `existing` says the request id was already
    recorded: the exchange is read back from the log and `records` is empty.
    """

    in_flow: bool
    progress: Progress
    expect: int
    records: list[Record] = field(default_factory=list)
    response: str | None = None
    valid: bool | None = None
    flow_data: dict[str, Any] | None = None
    """Everything collected, once: on the exchange that completed the flow (or handed it to a person)."""
    events: tuple[str, ...] = ()
    turn: str | None = None
    existing: bool = False
    parent: str | None = None
    """The turn the exchange's turn continues (None: it is a root, or no turn was recorded)."""


def exchange(log: Log, flow: Flow, moved: Transition, said: tuple[str, str, str], now: float) -> Exchange:
    """The records of one exchange: the turn (`message` in, the response out) and the flow's entries."""
    message, tid, request_id = said
    parent = parent_for(log, log.head, "branch", now).parent  # never waits: nothing runs in a flow turn
    check_program(log, FLOW_STEP, parent)
    at = iso(now)
    inputs, outputs = {"message": message}, {"result": moved.response or ""}
    records = [] if FLOW_STEP.version in log.programs else [FLOW_STEP.record(at=at)]
    records.append(
        turn_record(tid, parent=parent, program=FLOW_STEP.version, inputs=inputs, request_id=request_id, at=at)
    )
    ended = ended_record(
        tid,
        attempt=1,
        state="done",
        saw=[],  # the flow answered without being shown any earlier turn
        outputs=outputs,
        value=outputs["result"],
        lmcc=lmcc(FLOW_STEP, inputs, outputs),
        model=f"flow:{flow.name}",
        at=at,
    )
    records += [ended, *(entry_record(PLUGIN, kind, data, turn=tid, at=at) for kind, data in moved.made)]
    return replace(_result(log, moved, records, turn=tid), parent=parent)


def entries_only(log: Log, moved: Transition, now: float, *, in_flow: bool = True) -> Exchange:
    """The records of a move with no exchange of words (a reminder, an abandonment): entries only."""
    records = [entry_record(PLUGIN, kind, data, at=iso(now)) for kind, data in moved.made]
    return _result(log, moved, records, in_flow=in_flow)


def _result(
    log: Log, moved: Transition, records: list[Record], *, turn: str | None = None, in_flow: bool = True
) -> Exchange:
    ends = {"completed", "handed_off"} & set(moved.events)
    return Exchange(
        in_flow=in_flow,
        progress=moved.progress,
        expect=log.n,
        records=records,
        response=moved.response,
        valid=moved.valid,
        flow_data=dict(moved.progress.data) if ends else None,
        events=moved.events,
        turn=turn,
    )
