"""Messages recorded without a model call (the article's `add_user_message` and
`add_assistant_message`: importing an existing transcript), as ordinary done turns.

Each user message and the assistant message after it become one turn of the conversation's
program: the user's text is its one input, the assistant's its answer (`model` `imported`, shown
no earlier turn). A message without its partner becomes a turn with an empty other half, as a
flow's first prompt is a turn with an empty message. The turns follow the head, one after the
other, appended in one conditional batch (`program?`, then `turn` and `ended` for each, no lease:
nothing runs); the first carries the call's request id, so a retry records nothing again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from core.errors import ErrorCode, ThreadlineError
from store.programs.program import Program
from store.records import Record, ended_record, iso, turn_record, uuid7

from .rules import parent_for
from .state import Log
from .turns import check_program, lmcc

MODEL = "imported"
"""The `model` of an imported turn's `ended` record: no model answered it here."""
MAX_MESSAGES = 1000
"""The most messages one import may carry."""


@dataclass(frozen=True, slots=True)
class Imported:
    """The turns an import made (or, `existing`, made before under the same request id)."""

    turns: list[str]
    records: list[Record]
    expect: int
    existing: bool = False


def pairs_of(messages: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    """`(role, content)` messages as `(user, assistant)` exchanges, in order.

    Raises:
        ThreadlineError: `invalid-request` for a role other than `user` or `assistant`, or too many messages.
    """
    if not 0 < len(messages) <= MAX_MESSAGES:
        raise ThreadlineError(ErrorCode.INVALID_REQUEST, f"an import holds 1 to {MAX_MESSAGES} messages")
    pairs: list[tuple[str, str]] = []
    waiting: str | None = None
    for role, content in messages:
        if role not in ("user", "assistant"):
            raise ThreadlineError(ErrorCode.INVALID_REQUEST, f"a message's role is user or assistant, not {role!r}")
        if role == "user":
            if waiting is not None:
                pairs.append((waiting, ""))
            waiting = content
        else:
            pairs.append((waiting or "", content))
            waiting = None
    return [*pairs, (waiting, "")] if waiting is not None else pairs


def import_turns(
    log: Log, program: Program, pairs: Sequence[tuple[str, str]], *, request_id: str, now: float
) -> Imported:
    """The records of `pairs` as done turns after the head (refused while the head runs).

    Raises:
        ThreadlineError: `conversation-busy` while the head runs or waits, `conversation-signature`
            when the branch was made with other fields, `inputs-invalid` for a program that does not
            take one text and answer one.
    """
    first = log.request_ids.get(request_id)
    if first is not None:
        start = log.order.index(first)
        return Imported(log.order[start : start + len(pairs)], [], log.n, existing=True)
    if len(program.inputs) != 1:
        wrong = f"{program.name} takes {len(program.inputs)} inputs; an imported message is one text"
        raise ThreadlineError(ErrorCode.INPUTS_INVALID, wrong)
    parent = parent_for(log, log.head, "refuse", now).parent
    check_program(log, program, parent)
    at = iso(now)
    records: list[Record] = [] if program.version in log.programs else [program.record(at=at)]
    turns: list[str] = []
    for user, assistant in pairs:
        tid = uuid7()
        records += _exchange(program, tid, (user, assistant), parent, request_id if not turns else None, at)
        turns.append(tid)
        parent = tid
    return Imported(turns, records, log.n)


def _exchange(
    program: Program, tid: str, said: tuple[str, str], parent: str | None, request_id: str | None, at: str
) -> list[Record]:
    """One imported exchange: its `turn` record and its `done` end, as functai writes a merge's."""
    inputs = program.validate_inputs({program.inputs[0][0]: said[0]})
    outputs = program.validate_outputs({program.answer: said[1]})
    turn = turn_record(tid, parent=parent, program=program.version, inputs=inputs, request_id=request_id, at=at)
    done = {"outputs": outputs, "value": outputs[program.answer], "lmcc": lmcc(program, inputs, outputs)}
    return [turn, ended_record(tid, attempt=1, state="done", saw=[], model=MODEL, at=at, **done)]
