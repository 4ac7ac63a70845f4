"""Merges (docs/format-1.md 4.10): a turn whose answer another AI program made from several branches.

A merge reads branches that continue the same turn (the view's head), asks a merging program to
combine their answers, and records the result as this program's turn after that head: a `turn`
record with `reads` (the merged turns) and `made_by` (the merging program and its call), then an
`ended` record `done` with `saw: []`, `model: null` and no lease, appended together exactly as
functai 1.2.0 writes them. The next turn sees it as an ordinary earlier turn. Pure over a `Log`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from core.errors import ErrorCode, ThreadlineError
from store.log.state import Log, Turn
from store.programs.program import Program
from store.programs.shape import canonical_json
from store.records import FORMAT, Record, iso

from .record import call_record


def merged_turns(log: Log, reads: Sequence[str], head: str | None, *, now: float) -> list[Turn]:
    """The turns a merge reads, each checked to be a `done` child of the view's head.

    Raises:
        ThreadlineError: `invalid-request` for no turns or one named twice, `turn-unknown` for a
            turn the log does not hold, `turn-state` for one that is not done or does not continue
            from `head` (a merge reads branches of the turn it follows).
    """
    if not reads:
        raise ThreadlineError(ErrorCode.INVALID_REQUEST, "a merge needs the turns to merge: name at least one")
    if len(set(reads)) != len(reads):
        raise ThreadlineError(ErrorCode.INVALID_REQUEST, "a merge names each turn once")
    out: list[Turn] = []
    for tid in reads:
        turn = log.turns.get(tid)
        if turn is None:
            raise ThreadlineError(ErrorCode.TURN_UNKNOWN, f"turn {tid} is not in this conversation", turn=tid)
        if turn.parent != head:
            message = f"turn {tid} does not continue from {head}: a merge reads branches of the turn it follows"
            raise ThreadlineError(ErrorCode.TURN_STATE, message, turn=tid)
        state = turn.state(now)
        if state != "done":
            raise ThreadlineError(ErrorCode.TURN_STATE, f"turn {tid} is {state}: only done turns are merged", turn=tid)
        out.append(turn)
    return out


def merging_inputs(merging: Program, turns: Sequence[Turn], given: Mapping[str, Any] | None) -> dict[str, Any]:
    """What the merging program is asked: `given` by name; with none given and a single input, the
    branches' answers as functai gives them (`[{"model", <inputs>..., <outputs>...}]`), bound as JSON.

    Raises:
        ThreadlineError: `inputs-invalid` when it takes several inputs and none are given, or they
            do not fit its types.
    """
    if not given:
        names = [name for name, _ in merging.inputs]
        if len(names) != 1:
            message = f"{merging.name} takes {len(names)} inputs: give them by name"
            raise ThreadlineError(ErrorCode.INPUTS_INVALID, message)
        given = {names[0]: [{"model": (t.ended or {}).get("model"), **t.inputs, **t.outputs} for t in turns]}
    return merging.validate_inputs(given)


def check_answers(program: Program, merging: Program) -> None:
    """Refuse a merging program whose answer is not of the shape of `program`'s answer.

    Raises:
        ThreadlineError: `program-invalid`, before anything is asked or recorded.
    """
    ours, theirs = _answer_shape(program), _answer_shape(merging)
    if ours != theirs:
        message = (
            f"{merging.name}'s answer ({canonical_json(theirs)}) does not fit {program.name}'s "
            f"({canonical_json(ours)}): merge with a program that answers like it"
        )
        raise ThreadlineError(ErrorCode.PROGRAM_INVALID, message)


def _answer_shape(program: Program) -> Any:
    return next(
        f["shape"] for f in program.field_records() if f["name"] == program.answer and f["direction"] == "output"
    )


def merge_records(
    log: Log,
    program: Program,
    *,
    turn: str,
    parent: str | None,
    reads: Sequence[str],
    made_by: Mapping[str, Any],
    value: Any,
    request_id: str | None = None,
    now: float,
) -> list[Record]:
    """What a merge appends, in one batch: the `program` record if the log lacks it, the `turn`
    (the first merged turn's inputs, `reads`, `made_by`) and its `ended` record, keys in functai's order."""
    base = log.turns[reads[0]].inputs
    at = iso(now)
    records: list[Record] = [] if program.version in log.programs else [program.record(at=at)]
    turn_rec: Record = {"functai_conversation": FORMAT, "kind": "turn", "at": at, "turn": turn, "parent": parent}
    turn_rec.update(program=program.version, inputs=dict(base), reads=list(reads), made_by=dict(made_by))
    if request_id:
        turn_rec["request_id"] = request_id
    answer = {program.answer: value}
    lmcc = json.loads(canonical_json({"inputs": dict(base), "outputs": answer, "signature": program.signature}))
    lmcc["steps"] = []
    ended: Record = {"functai_conversation": FORMAT, "kind": "ended", "at": at, "turn": turn, "state": "done"}
    ended.update(outputs=answer, value=value, lmcc=dict(sorted(lmcc.items())), saw=[], model=None, attempt=1)
    return [*records, turn_rec, ended]


def merging_call(
    merging: Program,
    call: str,
    inputs: Mapping[str, Any],
    outputs: Mapping[str, Any],
    *,
    model: str | None,
    usage: Mapping[str, int],
    seconds: float,
    ended_at: float,
    caller: Mapping[str, Any] | None = None,
) -> Record:
    """The call record of the merging program's call (`made_by.call`), as functai logs any call of a
    program outside a conversation: a rating of the merged turn belongs to it."""
    at = iso(ended_at)
    turn: Record = {"turn": call, "at": iso(ended_at - seconds), "parent": None, "inputs": dict(inputs)}
    if model:
        turn["settings"] = {"lm": model}
    ended: Record = {"at": at, "state": "done", "outputs": dict(outputs), "value": outputs.get(merging.answer)}
    ended.update(seconds=seconds, usage=dict(usage), model=model, saw=[], attempt=1)
    record = call_record("", turn, ended, merging.record(at=at), caller=caller)
    del record["conversation"]
    return record
