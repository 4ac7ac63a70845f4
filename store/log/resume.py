"""Acting on a turn that waits or was interrupted (docs/format-1.md 4.7, 4.9): answering its approvals,
resuming it, abandoning it. Pure over a `Log`: each returns the records to append with `expect=log.n`
(decided again on `store-conflict`), or refuses with a coded error and records nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from core.errors import ErrorCode, ThreadlineError
from store.programs.tools import ToolCall
from store.records import Record, abandoned_record, iso, lease_record

from .state import Log, Turn
from .toolturn import approval_record, tool_record

__all__ = ["abandon_records", "answer_records", "find", "pending", "resume_records"]


def find(log: Log, turn: str) -> Turn:
    """The turn `turn` of `log` (`turn-unknown` when it has none)."""
    found = log.turns.get(turn)
    if found is None:
        raise ThreadlineError(ErrorCode.TURN_UNKNOWN, f"turn {turn} is not in this conversation", turn=turn)
    return found


def pending(turn: Turn, *, site: str | None = None, invocation: int | None = None) -> list[Record]:
    """The unanswered questions of `turn` that `site` and `invocation` pick (all when both are None).

    Raises:
        ThreadlineError: `turn-state` when it waits for no answer; `approval-unknown` when it asks
            nothing at that site and invocation.
    """
    unanswered = turn.unanswered()
    if not unanswered:
        raise ThreadlineError(ErrorCode.TURN_STATE, f"turn {turn.id} waits for no approval", turn=turn.id)

    def picked(items: list[Record]) -> list[Record]:
        return [
            a
            for a in items
            if (site is None or a.get("site") == site)
            and (invocation is None or int(a.get("invocation") or 0) == invocation)
        ]

    chosen = picked(unanswered)
    if chosen:
        return chosen
    if picked([a for a in (turn.waiting or {}).get("approvals") or [] if isinstance(a, dict)]):
        message = f"turn {turn.id}: that approval was answered already; a second answer is not taken"
        raise ThreadlineError(ErrorCode.TURN_STATE, message, turn=turn.id)
    where = f"site {site!r} " if site is not None else ""
    message = f"turn {turn.id} asks nothing at {where}invocation {invocation}; list its approvals and pick one"
    raise ThreadlineError(ErrorCode.APPROVAL_UNKNOWN, message, turn=turn.id)


def answer_records(
    log: Log,
    turn: str,
    *,
    yes: bool,
    by: str | None = None,
    reason: str | None = None,
    site: str | None = None,
    invocation: int | None = None,
    now: float,
) -> list[Record]:
    """One `approval` record per question answered (every unanswered one `site` and `invocation` pick).

    Raises:
        ThreadlineError: `turn-unknown`, `turn-state` (it waits for no answer, or that one was given),
            `approval-unknown` (no such question).
    """
    found = find(log, turn)
    return [
        approval_record(turn, a, yes=yes, by=by, reason=reason, at=iso(now))
        for a in pending(found, site=site, invocation=invocation)
    ]


def resume_records(
    log: Log,
    turn: str,
    *,
    now: float,
    results: Mapping[str, Any] | None = None,
    rerun: Sequence[str | int] = (),
) -> list[Record]:
    """What resuming `turn` appends: a `given` or `rerun` record for each tool that may have run, then
    the `lease` of attempt + 1 that claims it (4.7).

    `results` maps an invocation (or a call id) to what the tool returned; `rerun` names those to run again.

    Raises:
        ThreadlineError: `turn-state` unless it waits with every approval answered or was interrupted;
            `turn-unfinished` for a tool that may have run and that neither `results` nor `rerun` names.
    """
    found = find(log, turn)
    state = found.state(now)
    if state not in ("waiting", "interrupted"):
        message = f"turn {turn} is {state}: only a waiting or interrupted turn goes on"
        raise ThreadlineError(ErrorCode.TURN_STATE, message, turn=turn)
    if found.unanswered():
        message = f"turn {turn} still waits for {len(found.unanswered())} approval(s): answer them first"
        raise ThreadlineError(ErrorCode.TURN_STATE, message, turn=turn)
    records = _settle(found, {str(k): v for k, v in (results or {}).items()}, {str(r) for r in rerun})
    return [*records, lease_record(turn, attempt=found.attempt + 1, now=now)]


def _settle(turn: Turn, given: Mapping[str, Any], again: set[str]) -> list[Record]:
    """A `given` or `rerun` record for each tool of `turn` that may have run (`turn-unfinished` for one
    that neither names), by its invocation or its call id."""
    records: list[Record] = []
    for tool in turn.unfinished():
        invocation, site = int(tool.get("invocation") or 0), str(tool.get("site"))
        call = ToolCall(str(tool.get("id") or ""), str(tool.get("name") or ""), {})
        names = {str(invocation), call.id}
        hit = next((given[n] for n in names if n in given), None)
        if hit is not None:
            output = hit if isinstance(hit, str) else str(hit)
            records.append(tool_record(turn.id, "given", site=site, invocation=invocation, call=call, output=output))
        elif names & again:
            records.append(tool_record(turn.id, "rerun", site=site, invocation=invocation, call=call))
        else:
            message = (
                f"turn {turn.id}: {call.name} (invocation {invocation}) started and may have run; resume with "
                f"results={{{invocation}: <what it returned>}} or rerun=[{invocation}]"
            )
            raise ThreadlineError(ErrorCode.TURN_UNFINISHED, message, turn=turn.id, invocation=invocation)
    return records


def abandon_records(log: Log, turn: str, *, now: float) -> list[Record]:
    """End a turn that waits or was interrupted, without going on (`abandoned`).

    Raises:
        ThreadlineError: `turn-state` for a turn in any other state.
    """
    found = find(log, turn)
    state = found.state(now)
    if state not in ("waiting", "interrupted"):
        message = f"only a waiting or interrupted turn can be abandoned; turn {turn} is {state}"
        raise ThreadlineError(ErrorCode.TURN_STATE, message, turn=turn)
    return [abandoned_record(turn, attempt=found.attempt, at=iso(now))]
