"""Every Threadline turn in functai's call log, beside its store's conversations.

    <store folder>/conversations/   the record log (format 1)
    <store folder>/calls/           the call log: one call record per ended turn, and ratings

functai writes a call record for each of its own conversation turns when `log_calls` is on; a
functai turn that was shown a Threadline turn can only be rated when that turn has one too
(`rated` leaves the row out as `no_context` otherwise). So after a Threadline turn's `ended`
record is appended, `write_call` adds the turn's call record, built by `store.calls.record` from
the conversation log alone. A functai process sharing a folder store points its `log_calls` at
`<store folder>/calls`; a PostgreSQL store keeps its call log in its own table (`store.calls.postgres`).
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from typing import Any

from core.errors import ErrorCode, ThreadlineError
from core.logs import get_logger
from core.settings import Settings
from store.backends.base import Store
from store.backends.folder import FolderStore
from store.backends.opening import StoreSet
from store.backends.pgstreams import PostgresStreams
from store.backends.postgres import PostgresStore
from store.log.state import Log, Turn
from store.records import Record

from .folder import CallFolder, call_folder
from .lines import CallLog, Logged
from .postgres import PostgresCallLog
from .record import call_line, call_record, has_call

__all__ = [
    "CallFolder",
    "CallLog",
    "Logged",
    "backfill",
    "call_log",
    "find_turn",
    "store_call_log",
    "turn_call",
    "write_call",
]

CALLS_FOLDER = "calls"
"""The call log's folder inside a folder store's folder."""
_REMEMBERED = 4096

log = get_logger(__name__)
_written: OrderedDict[tuple[str, str], None] = OrderedDict()
_written_lock = threading.Lock()


def call_log(where: object, *, folder: str | os.PathLike[str] | None = None) -> CallLog:
    """The call log of a store, or the call-log folder `where` names.

    Args:
        where: A `FolderStore` (its log is `<folder>/calls`), a `PostgresStore` (its `call_log`
            table), a call log, or a path (the call-log folder itself, as functai's `log_calls`).
        folder: Keep a folder store's call log in this folder instead.

    Raises:
        ThreadlineError: `store-unknown` for anything else.
    """
    if folder is not None:
        return call_folder(folder)
    if isinstance(where, CallFolder | PostgresCallLog):
        return where
    if isinstance(where, str | os.PathLike):
        return call_folder(where)
    if isinstance(where, FolderStore):
        return call_folder(where.folder / CALLS_FOLDER)
    if isinstance(where, PostgresStore):
        return PostgresCallLog(where)
    message = f"a {type(where).__name__} has no call log: give a store or a folder"
    raise ThreadlineError(ErrorCode.STORE_UNKNOWN, message)


def store_call_log(settings: Settings, stores: StoreSet, name: str) -> CallLog | None:
    """The call log of the store named `name` in `stores`: a PostgreSQL store's in its schema (through
    the pool of its streams), a folder store's in `settings.call_log_folder(name)`; None for a memory
    store or a store object, which keep none."""
    streams = stores.streams.get(name)
    if isinstance(streams, PostgresStreams):
        return PostgresCallLog(streams)
    if name in stores.specs or name in stores.hidden:
        return call_folder(settings.call_log_folder(name))
    return None


def turn_call(log_: Log, conversation: str, turn: str, *, caller: Mapping[str, Any] | None = None) -> Record | None:
    """The call record of `turn` as its conversation's records say, or None when it has none.

    A turn has none until it ends `done`, `failed` or `stopped` (an abandoned turn ran no call, a
    merge's call is its merging function's), nor when its `program` record is missing (no reader
    could tell whose call it is).

    Raises:
        ThreadlineError: `turn-unknown` when the conversation has no such turn.
    """
    t = log_.turns.get(turn)
    if t is None:
        raise ThreadlineError(ErrorCode.TURN_UNKNOWN, f"turn {turn} is not in conversation {conversation}", turn=turn)
    program = log_.programs.get(str(t.record.get("program")))
    if program is None or not has_call(t.record, t.ended):
        return None
    assert t.ended is not None
    return call_record(conversation, t.record, t.ended, program, caller=caller)


def write_call(
    calls: CallLog, conversation: str, log_: Log, turn: str, *, caller: Mapping[str, Any] | None = None
) -> Record | None:
    """Log `turn`'s call: call it once the turn's `ended` record is appended; return what was written.

    Like functai's logging it never stands in the way of a turn: a call log that cannot be written
    is a warning and None. A record this process already wrote is not written twice (an activity
    retried after the append); one written again by another process is harmless, as every reader
    keeps one record per call.

    Raises:
        ThreadlineError: `turn-unknown` when the conversation has no such turn.
    """
    record = turn_call(log_, conversation, turn, caller=caller)
    if record is None or _seen(calls, turn):
        return None
    try:
        calls.write([call_line(record)])
    except (OSError, ThreadlineError) as err:
        log.warning("calls.not_written", conversation=conversation, turn=turn, error=type(err).__name__)
        _forget(calls, turn)
        return None
    return record


def backfill(store: Store, *, calls: CallLog | None = None, conversations: Iterable[str] | None = None) -> int:
    """Write the call record of every ended turn the call log lacks; return how many were written.

    For turns that ended before their calls were logged (or whose record was lost with a power
    cut: call records are not fsynced, their conversation is). A call the log already holds,
    functai's own included, is never written again.
    """
    target = calls if calls is not None else call_log(store)
    known = {str(rec.get("id")) for rec in target.read().calls}
    written = 0
    for conversation in conversations if conversations is not None else store.conversations():
        log_ = Log(store.read(conversation))
        records = [turn_call(log_, conversation, tid) for tid in log_.order if tid not in known]
        lines = [call_line(rec) for rec in records if rec is not None]
        target.write(lines)
        written += len(lines)
    return written


def find_turn(store: Store, turn: str, *, conversation: str | None = None) -> tuple[str, Log, Turn] | None:
    """The conversation that holds `turn` (only `conversation` when given), its log and the turn."""
    for cid in [conversation] if conversation is not None else store.conversations():
        log_ = Log(store.read(cid))
        if turn in log_.turns:
            return cid, log_, log_.turns[turn]
    return None


def _seen(calls: CallLog, turn: str) -> bool:
    """Remember `turn` as written to `calls`; whether it already was (by this process)."""
    key = (calls.where, turn)
    with _written_lock:
        if key in _written:
            return True
        _written[key] = None
        while len(_written) > _REMEMBERED:
            _written.popitem(last=False)
    return False


def _forget(calls: CallLog, turn: str) -> None:
    with _written_lock:
        _written.pop((calls.where, turn), None)
