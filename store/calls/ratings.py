"""Rating a turn as functai rates a call, and which ratings count.

A rating is a person's judgement of one call, written to the call log next to the calls (the
writing process's file of the day) as functai's `rate` writes it. "right" means correct for this
input; "wrong" may carry the right answer (`answer`, `outputs`), which makes the turn a row of
data (`store.calls.rated`). One person's later rating of a call replaces their earlier one; a rating
made without naming a person (under the computer's account, which may be shared) stands alone.
A merged turn is no call: its rating goes to the call of the function that merged it.
"""

from __future__ import annotations

import getpass
import os
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from core.errors import ErrorCode, ThreadlineError
from store.backends.base import Store
from store.programs.shape import canonical_json
from store.records import Record, iso, uuid7

from .lines import CallLog, is_call_id
from .log import call_log, find_turn, write_call
from .record import RATING_FORMAT, call_line

VERDICTS = ("right", "wrong", None)
"""A verdict: right, wrong, or None (this person withdraws their rating)."""


def rate(
    store: Store | CallLog | str | os.PathLike[str],
    turn: str,
    verdict: str | None,
    answer: Any = None,
    outputs: Mapping[str, Any] | None = None,
    note: str | None = None,
    reasons: Iterable[str] = (),
    by: str | None = None,
    *,
    conversation: str | None = None,
    calls: CallLog | None = None,
    clock: Callable[[], float] = time.time,
) -> Record:
    """Judge a turn's answer; return the rating as written.

    Args:
        store: The turn's store (its call log is beside it), or a call log or its folder.
        turn: The turn's id (also its call's id).
        verdict: "right", "wrong", or None to withdraw `by`'s earlier rating.
        answer: With "wrong": the right answer (None: not known).
        outputs: With "wrong": right values for other outputs, by name.
        note: Why, in a sentence.
        reasons: Short tags.
        by: The person judging; None rates under this computer's account.
        conversation: The turn's conversation, when known (the store is not searched).
        calls: The store's call log, when it is not beside the store (`THREADLINE_CALL_LOGS`).
        clock: Seconds since the epoch.

    Raises:
        ThreadlineError: `rating-invalid` for a bad verdict, a correction of a right answer or a
            value with no JSON form; `turn-unknown` when neither the call log nor the store has
            the turn; `turn-state` when it has not ended. Nothing is written then.
    """
    fields = _rating_fields(verdict, answer, outputs, note, list(reasons), by)
    calls = calls if calls is not None else call_log(store)
    target = _target(store, calls, turn, conversation)
    record: Record = {"functai_rating": RATING_FORMAT, "id": uuid7(), "call": target, "at": iso(clock())}
    record.update(_who(by))
    record.update(fields)
    try:
        calls.write([call_line(record)], durable=True)
    except OSError as err:
        message = f"the call log at {calls.where} cannot be written ({type(err).__name__}): fix it, then rate again"
        raise ThreadlineError(ErrorCode.STORE_UNAVAILABLE, message, retryable=True) from None
    return record


def _rating_fields(
    verdict: Any, answer: Any, outputs: Mapping[str, Any] | None, note: Any, reasons: list[Any], by: Any
) -> Record:
    def invalid(why: str) -> ThreadlineError:
        return ThreadlineError(ErrorCode.RATING_INVALID, f"{why}; nothing was written")

    if verdict not in VERDICTS:
        raise invalid(f"{str(verdict)[:40]!r} is not a verdict: rate 'right', 'wrong', or None to withdraw")
    corrected = answer is not None or bool(outputs)
    if corrected and verdict != "wrong":
        raise invalid("only a wrong answer takes a correction: give answer= or outputs= with 'wrong'")
    if by is not None and (not isinstance(by, str) or not by.strip()):
        raise invalid("by names the person judging: give a non-empty text, or None for this account")
    if not all(isinstance(r, str) for r in reasons) or (note is not None and not isinstance(note, str)):
        raise invalid("reasons are short texts and a note is one sentence of text")
    if outputs is not None and not all(isinstance(k, str) for k in outputs):
        raise invalid("outputs map output names to their right values")
    out: Record = {"verdict": verdict}
    if answer is not None:
        out["answer"] = answer
    if outputs:
        out["outputs"] = dict(outputs)
    if reasons:
        out["reasons"] = reasons
    if note:
        out["note"] = note
    try:
        canonical_json(out)
    except (TypeError, ValueError):
        raise invalid("the correction has no JSON form: give JSON values (text, numbers, lists, objects)") from None
    return out


def _who(by: str | None) -> Record:
    """A person when one was named; else the account, which names no one (it may be shared)."""
    if by:
        return {"by": by}
    try:
        account = getpass.getuser()
    except (KeyError, OSError):
        account = "unknown"
    return {"account": account or "unknown"}


def _target(store: object, calls: CallLog, turn: str, conversation: str | None) -> str:
    """The call a rating of `turn` is about: its own, or for a merge, its merging function's."""
    if not is_call_id(turn):
        raise ThreadlineError(ErrorCode.TURN_UNKNOWN, f"{str(turn)[:60]!r} is not a turn id")
    if calls.find(turn) is not None:
        return turn
    found = find_turn(store, turn, conversation=conversation) if isinstance(store, Store) else None
    if found is None:
        message = f"turn {turn} is in neither the store nor its call log"
        raise ThreadlineError(ErrorCode.TURN_UNKNOWN, message, turn=turn)
    cid, log_, t = found
    made_by = t.record.get("made_by")
    if isinstance(made_by, Mapping) and is_call_id(made_by.get("call")):
        return str(made_by["call"])
    if write_call(calls, cid, log_, turn) is None and calls.find(turn) is None:
        state = t.state(time.time())
        raise ThreadlineError(
            ErrorCode.TURN_STATE, f"turn {turn} is {state}: rate a turn once its call has ended", turn=turn
        )
    return turn
