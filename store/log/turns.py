"""Deciding and recording turns (docs/format-1.md 4.5-4.7): what a writer appends to begin a turn,
end it, stop it or claim it again. Pure over a `Log`; the caller appends the records with
`expect=log.n` and, on `store-conflict`, reads again and decides again.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from core.context import ContextRule
from core.errors import ErrorCode, ThreadlineError
from store.programs.program import Program, check_fields
from store.records import Record, abandoned_record, ended_record, iso, lease_record, stop_record, turn_record, uuid7

from .collected import sections as flow_sections
from .preamble import sections as setup_sections
from .rules import Sends, Shown, View, branch_versions, parent_for, shown, view_head
from .state import Log, Turn
from .steers import steer_record
from .summary import latest as latest_summary
from .summary import section


@dataclass(frozen=True, slots=True)
class Begin:
    """Append `records` with `expect` to begin turn `turn` after `parent`, showing it `shown`."""

    turn: str
    parent: str | None
    records: list[Record]
    expect: int
    shown: Shown


@dataclass(frozen=True, slots=True)
class Existing:
    """The request id was already sent: it is that turn, and nothing is recorded."""

    turn: str


@dataclass(frozen=True, slots=True)
class Busy:
    """The head is running (`queue`): wait for a new record, then decide again."""

    turn: str


@dataclass(frozen=True, slots=True)
class Steered:
    """The head is running (`steer`): append `records` (its `steer` entry) with `expect` to join turn `turn`."""

    turn: str
    parent: str | None
    records: list[Record]
    expect: int


@dataclass(frozen=True, slots=True)
class TurnRequest:
    """What a sender asks for: inputs, and how the turn is placed and shown."""

    inputs: Mapping[str, Any]
    request_id: str | None = None
    view: View = field(default_factory=View)
    sends: Sends = "queue"
    rule: ContextRule = field(default_factory=ContextRule)
    settings: Mapping[str, Any] = field(default_factory=dict)
    earlier_without: Sequence[str] = ()
    placed_by: str | None = None
    """Who places the turn (a conversation's workflow), recorded on it as its owner."""
    metadata: Mapping[str, Any] = field(default_factory=dict)
    """The message's metadata, kept in its `turn` record."""


def check_program(log: Log, program: Program, turn: str | None, earlier_without: Sequence[str] = ()) -> None:
    """Refuse `conversation-signature` when the branch through `turn` was made with other fields.

    A branch made by this very program version alone needs no comparison: the version is a hash of
    the program's fields among the rest (comparing them field by field cost every turn about 0.6 ms)."""
    versions = sorted(branch_versions(log, turn))
    if versions == [program.version]:
        return
    recorded = [log.programs[v] for v in versions if v in log.programs]
    check_fields(program.field_records(), recorded, earlier_without=earlier_without, program_name=program.name)


def begin_turn(
    log: Log, program: Program, request: TurnRequest, *, now: float, turn_id: str | None = None
) -> Begin | Existing | Busy | Steered:
    """Decide a new turn: the request-id rule first, then the parent under the `sends` policy.

    Raises:
        ThreadlineError: `conversation-busy` (refused) or `conversation-signature`.
    """
    if request.request_id and request.request_id in log.request_ids:
        return Existing(log.request_ids[request.request_id])
    decided = parent_for(log, view_head(log, request.view), request.sends, now)
    if decided.waits is not None:
        return Busy(decided.waits)
    if decided.steers is not None:
        head = log.turns[decided.steers]
        rid = request.request_id or uuid7()
        steer = steer_record(head.id, rid, request.inputs, metadata=request.metadata or None, now=now)
        return Steered(turn=head.id, parent=head.parent, records=[steer], expect=log.n)
    parent = decided.parent
    check_program(log, program, parent, request.earlier_without)
    tid = turn_id or uuid7()
    seen = shown_for(log, program, parent, request.rule, now=now)
    records: list[Record] = [stop_record(decided.stops, at=iso(now))] if decided.stops else []
    if program.version not in log.programs:
        records.append(program.record(at=iso(now)))
    settings = {k: v for k, v in request.settings.items() if _recorded_setting(k, v)}
    records.append(
        turn_record(
            tid,
            parent=parent,
            program=program.version,
            inputs=request.inputs,
            request_id=request.request_id,
            settings=settings or None,
            context=seen.context,
            metadata=request.metadata or None,
            at=iso(now),
            placed_by=request.placed_by,
        )
    )
    records.append(lease_record(tid, attempt=1, now=now))
    return Begin(turn=tid, parent=parent, records=records, expect=log.n, shown=seen)


def unowned(log: Log, owner: str, holding: Collection[str] = ()) -> list[Turn]:
    """The turns `owner` placed that have not ended and that it does not hold (`holding`): it lost
    the task that placed them, so nothing of its own runs them. Oldest first."""
    return [
        turn for tid in log.open if (turn := log.turns[tid]).record.get("placed_by") == owner and tid not in holding
    ]


def _recorded_setting(name: str, value: Any) -> bool:
    """`lm` as functai records it; Threadline adds a per-turn `approve` rule and the caller's `tools`
    (functai ignores both) so a resume anywhere asks about, and offers, the same calls."""
    return (name == "lm" and isinstance(value, str)) or (name in ("approve", "tools") and value is not None)


def shown_for(log: Log, program: Program, parent: str | None, rule: ContextRule, *, now: float) -> Shown:
    """What a new turn after `parent` is shown: the rule over the turns no summary covers, plus as
    sections of the instruction, after the conversation's system prompt and metadata
    (`store.log.preamble`), the newest summary on the branch (when the rule has a `summary`) and the
    data of the guided flows completed on it."""
    data = latest_summary(log, parent) if rule.summary is not None else None
    added = [*setup_sections(log), *([section(data)] if data else []), *flow_sections(log, parent)]
    return shown(
        log,
        parent,
        fields=program.field_records(),
        signature=program.signature,
        now=now,
        rule=rule,
        covered=set(data["turns"]) if data else (),
        sections=added,
        module=program.kind == "module",
    )


def lmcc(program: Program, inputs: Mapping[str, Any], outputs: Mapping[str, Any]) -> dict[str, Any]:
    """A valid lmcc turn for a plain model answer (docs/format-1.md 2.11), keys sorted as functai writes them.

    It carries no `message` or `request`: functai then renders the earlier turn in its own layout.
    """
    return {
        "inputs": dict(inputs),
        "outputs": dict(outputs),
        "signature": program.signature,
        "steps": [{"kind": "model", "outputs": dict(outputs)}],
    }


@dataclass(frozen=True, slots=True)
class Answer:
    """What a model call produced for a turn."""

    outputs: Mapping[str, Any]
    model: str | None = None
    usage: Mapping[str, int] = field(default_factory=dict)
    seconds: float = 0.0


def done_record(log: Log, program: Program, turn: str, answer: Answer, *, attempt: int, saw: list[Record]) -> Record:
    """The `ended` record of a turn that answered."""
    inputs = log.turns[turn].inputs if turn in log.turns else {}
    outputs = dict(answer.outputs)
    return ended_record(
        turn,
        attempt=attempt,
        state="done",
        saw=saw,
        seconds=answer.seconds,
        usage=answer.usage,
        outputs=outputs,
        value=outputs.get(program.answer),
        lmcc=lmcc(program, inputs, outputs),
        model=answer.model,
    )


def failed_record(turn: str, error: ThreadlineError | Mapping[str, Any], *, attempt: int, saw: list[Record]) -> Record:
    """The `ended` record of a turn that failed, with a coded error and no prompt text."""
    if isinstance(error, ThreadlineError):
        body = {"type": "ThreadlineError", "message": error.message, "code": str(error.code)}
    else:
        body = dict(error)
    return ended_record(turn, attempt=attempt, state="failed", saw=saw, error=body)


def stop_records(log: Log, turn: str, *, now: float) -> list[Record]:
    """What `stop(turn)` appends: a `stop` for a running turn, an abandonment for a waiting or
    interrupted one, nothing for one that ended.

    Raises:
        ThreadlineError: `turn-unknown` when the log has no such turn.
    """
    t = log.turns.get(turn)
    if t is None:
        raise ThreadlineError(ErrorCode.TURN_UNKNOWN, f"turn {turn} is not in this conversation", turn=turn)
    state = t.state(now)
    if state == "running":
        return [stop_record(turn, at=iso(now))]
    if state in ("waiting", "interrupted"):
        return [abandoned_record(turn, attempt=t.attempt, at=iso(now))]
    return []


def claim_records(log: Log, turn: str, *, now: float) -> list[Record]:
    """The conditional `lease` of attempt + 1 that resumes an `interrupted` turn (4.7).

    Raises:
        ThreadlineError: `turn-state` unless the turn really reads `interrupted` with nothing unfinished.
    """
    t = log.turns.get(turn)
    if t is None:
        raise ThreadlineError(ErrorCode.TURN_UNKNOWN, f"turn {turn} is not in this conversation", turn=turn)
    state = t.state(now)
    if state != "interrupted" or t.unanswered() or t.unfinished():
        raise ThreadlineError(ErrorCode.TURN_STATE, f"turn {turn} is {state}: only an interrupted turn is resumed")
    return [lease_record(turn, attempt=t.attempt + 1, now=now)]
