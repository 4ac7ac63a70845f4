"""Learning from conversations, client side: merges, ratings, rated rows and train/test splits.

    merged = await chat.continue_from(root).merge([left, right], "pick")
    await merged.rate("right", by="ana")
    rows = threadline.rated("tutor")                  # rows with known answers, as functai's rated() gives
    train, test = threadline.train_test(rows, test=0.34)

Ratings and rows live in each store's call log (`<store folder>/calls`, functai's `log_calls`
folder), which the worker writes for every turn it ends; a functai process pointed at the same
folder rates and reads the same calls.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from core.errors import ErrorCode, ThreadlineError
from core.limits import MAX_NOTE, check_names, check_text
from core.models import MergeSpec, TurnOutcome, TurnSend, check_inputs
from core.settings import Settings
from store.backends.folder import FolderStore
from store.calls.folder import call_folder
from store.calls.lines import CallLog
from store.calls.log import backfill
from store.calls.rated import RatedRows
from store.calls.rated import rated as rated_rows
from store.calls.ratings import rate
from store.calls.split import train_test
from store.programs.program import Program, load_programs

from .options import SendOptions
from .reading import Turn

__all__ = ["backfill_calls", "call_log_of", "merge", "rate_turn", "rated", "train_test"]


def call_log_of(settings: Settings, store: str = "default") -> CallLog:
    """The call log of the store named `store` (`THREADLINE_CALL_LOGS`, else `<store folder>/calls`)."""
    return call_folder(settings.call_log_folder(store))


async def rate_turn(
    settings: Settings,
    store: str,
    conversation: str,
    turn: str,
    verdict: str | None,
    *,
    answer: Any = None,
    outputs: Mapping[str, Any] | None = None,
    note: str | None = None,
    reasons: Iterable[str] = (),
    by: str | None = None,
) -> dict[str, Any]:
    """Rate `turn` of `conversation` in `store` (off the event loop); return the rating written."""
    check_text(by, "a rater's name")
    check_text(note, "a note", limit=MAX_NOTE)
    reasons = list(reasons)
    check_names(reasons, "reason")
    folder = FolderStore(settings.store_folder(store))
    calls = call_log_of(settings, store)
    return await asyncio.to_thread(
        rate, folder, turn, verdict, answer, outputs, note, list(reasons), by, conversation=conversation, calls=calls
    )


def rated(
    program: Program | str | None = None,
    *,
    store: str | Sequence[str] = "default",
    settings: Settings | None = None,
    by: str | None = None,
    since: str = "",
) -> RatedRows:
    """The rated turns of `program` as rows with known answers, equal to functai's `rated()` rows.

    Each row holds the turn's inputs, the right answer (its own, rated right; the correction, rated
    wrong), what it was shown (`earlier`: its earlier turns as data, `conversation`: its id) and the
    rating (`rating`, `rated_by`, `call`, ...). `rows.left` counts the rated calls left out and why.

    Args:
        program: A program (its calls by name and module, made with its current fields), a program
            name (every call of that name, or the program of that name known here), or None (all).
        store: The store (or stores) whose call log is read.
        settings: Where the stores are (default: the environment's).
        by: Only this person's ratings.
        since: Only calls and ratings from this RFC 3339 UTC time on.
    """
    settings = settings or Settings.from_env()
    names = [store] if isinstance(store, str) else list(store)
    return rated_rows(program, calls=[call_log_of(settings, name) for name in names], by=by, since=since)


def backfill_calls(settings: Settings, store: str = "default") -> int:
    """Write the call record of every ended turn of `store` its call log lacks (turns that ended
    before the worker logged calls); return how many were written."""
    folder = FolderStore(settings.store_folder(store))
    return backfill(folder, calls=call_log_of(settings, store))


class Sender(Protocol):
    """What a merge needs of a conversation handle (`threadline.client.Conversation`)."""

    def sent(self, inputs: dict[str, Any], options: SendOptions | None = None) -> TurnSend:
        """The send the handle's view makes."""
        ...

    async def submit(self, send: TurnSend) -> TurnOutcome:
        """Deliver the send and wait for how it ended."""
        ...

    async def follow_turn(self, turn: str) -> Turn:
        """Follow the turn; return it."""
        ...


async def merge(
    chat: Sender,
    turns: Sequence[str | Turn],
    program: str | Program,
    *,
    options: SendOptions,
    inputs: Mapping[str, Any] | None = None,
) -> Turn:
    """`chat.merge(...)`: send a merge, wait for it to be recorded, and follow it."""
    ids = [t.id if isinstance(t, Turn) else t for t in turns]
    check_inputs(dict(inputs or {}))
    spec = MergeSpec(turns=ids, program=program.name if isinstance(program, Program) else program, inputs=inputs)
    send = chat.sent({}, options).model_copy(update={"merge": spec})
    outcome = await chat.submit(send)
    if outcome.error is not None:
        raise outcome.error.to_error()
    if outcome.turn is None or outcome.state != "done":
        message = f"the merge was {outcome.state} before it was recorded; nothing was written"
        raise ThreadlineError(ErrorCode.TURN_STATE, message)
    return await chat.follow_turn(outcome.turn)


def known_program(settings: Settings, name: str) -> Program | str:
    """The program named `name` as this client knows it (THREADLINE_PROGRAMS), else the bare name."""
    return load_programs(settings.programs).get(name, name)
