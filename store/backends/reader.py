"""The read side every surface shares: one conversation's log, read incrementally, safely.

A `ConversationLog` is the only way the worker's activities, the Python API, the CLI and the
HTTP service read a conversation. It parses only what was appended since its last read, never
blocks the event loop, and applies each record exactly once however many coroutines ask at the
same time. It reads through `AsyncStore`, the seam a store that is not a folder plugs into: a
client then needs no store folder mounted, only what the store's own protocol reaches.
"""

from __future__ import annotations

import asyncio
import contextvars
import errno
import functools
import itertools
import json
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar, runtime_checkable

from core import telemetry
from core.errors import ErrorCode, ThreadlineError
from core.limits import check_text
from core.logs import get_logger
from store.log.state import Log, Turn
from store.records import Record

from .base import READ_BATCH, Store, encode

T = TypeVar("T")
logger = get_logger(__name__)

APPEND_SECONDS = (telemetry.APPEND_SECONDS, "How long appends to conversation logs took (those that succeeded).")
APPEND_ERRORS = (
    "threadline_store_append_errors",
    "Appends to conversation logs that failed, by error code (`store-conflict` is an ordinary race).",
)


class AsyncStore(Protocol):
    """A record log as a coroutine API: the same contract as `Store` (docs/format-1.md 1.6), awaited."""

    async def append(self, conversation: str, records: Sequence[Record], *, expect: int | None = None) -> int:
        """Append `records` all or nothing; `store-conflict` when `expect` is not the current count."""
        ...

    async def read(self, conversation: str, after: int = 0, *, limit: int | None = None) -> list[Record]:
        """The records after position `after`, in order; at most `limit` of them (None: all)."""
        ...

    async def wait(self, conversation: str, after: int, timeout: float) -> bool:
        """Wait until the conversation holds more than `after` records (True) or `timeout` passes."""
        ...

    async def conversations(self) -> list[str]:
        """The ids of the conversations that hold records, sorted."""
        ...

    async def identity(self) -> str:
        """The store's identity: made once, kept in the store, the same for every process that opens it."""
        ...


@runtime_checkable
class Purging(Protocol):
    """A store that can remove a conversation (docs/http.md, *Deleting a conversation*)."""

    async def purge(self, conversation: str) -> int:
        """Remove every record of `conversation` (its id can then be used again, from record 1);
        return how many it held."""
        ...


@runtime_checkable
class Recent(Protocol):
    """A store that can tell which conversations were appended to last (`LogCache.warm`)."""

    async def recent(self, limit: int) -> list[str]:
        """The ids of the `limit` conversations appended to last, the latest first."""
        ...


OUTAGES = frozenset(
    {errno.EROFS, errno.EIO, errno.ENOSPC, errno.EDQUOT, errno.ESTALE, errno.ETIMEDOUT, errno.EAGAIN, errno.EBUSY}
    | {errno.EPERM, errno.EACCES}
)
"""File errors that a store outage causes and that pass (a read-only remount, a full or failing disk,
a log made immutable or a folder read-only for this worker's user, until someone gives it back)."""


_WAIT_FIRST_S = 0.02
_WAIT_MOST_S = 0.2
STORE_THREADS = 32
"""Threads for blocking store calls. They wait on the disk (an fsync takes milliseconds), not on a
core, so a worker with many turns at once needs more of them than the loop's default executor has
(cores + 4): there, appends queued behind each other and a send's placing, in its first workflow
task, waited seconds. Concurrent fsyncs also share the file system's journal commits."""
_STORE_POOL = ThreadPoolExecutor(max_workers=STORE_THREADS, thread_name_prefix="threadline-store")


async def in_store_thread(function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """`asyncio.to_thread` on the store's own threads (`STORE_THREADS`)."""
    call = functools.partial(contextvars.copy_context().run, function, *args, **kwargs)
    return await asyncio.get_running_loop().run_in_executor(_STORE_POOL, call)


class Threaded:
    """A blocking `Store` (a folder, memory) as an `AsyncStore`: each call runs in a worker thread,
    but a read of a store that can answer it at once (`read_nowait`: this machine's files or memory,
    when no append of this process holds the conversation) is made on the caller's loop. A hand-off
    to a thread and back costs more than such a read, and a turn reads its log before each step.

    A file error that an outage causes (`OUTAGES`, permissions included) becomes `store-unavailable`
    (retryable), with the system's reason and no path; any other file error stays what it is.
    """

    def __init__(self, store: Store) -> None:
        self.store = store
        self._read_now: Callable[..., list[Record] | None] | None = getattr(store, "read_nowait", None)

    def __repr__(self) -> str:
        return f"Threaded({self.store!r})"

    async def append(self, conversation: str, records: Sequence[Record], *, expect: int | None = None) -> int:
        """See `AsyncStore.append`."""
        return await self._call("written", self.store.append, conversation, list(records), expect=expect)

    async def read(self, conversation: str, after: int = 0, *, limit: int | None = None) -> list[Record]:
        """See `AsyncStore.read`."""
        if self._read_now is not None:
            try:
                records = self._read_now(conversation, after, limit=limit)
            except OSError as err:
                raise _outage("read", err) from None
            if records is not None:
                await asyncio.sleep(0)  # still a point where others run, as a read in a thread was
                return records
        return await self._call("read", self.store.read, conversation, after, limit=limit)

    async def wait(self, conversation: str, after: int, timeout: float) -> bool:
        """See `AsyncStore.wait`.

        Polls (20 ms, doubling to 200 ms, as FolderStore does) instead of blocking a worker thread for
        the whole wait: the loop's default executor has only a few threads, and long waits (an HTTP
        long poll) would hold every one of them.
        """
        deadline = time.monotonic() + timeout
        pause = _WAIT_FIRST_S
        while True:
            if await self._call("read", self.store.wait, conversation, after, 0):
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            await asyncio.sleep(min(pause, left))
            pause = min(pause * 2, _WAIT_MOST_S)

    async def close(self) -> None:
        """Nothing to release: a blocking store holds no connection."""

    async def conversations(self) -> list[str]:
        """See `AsyncStore.conversations`."""
        return await self._call("read", self.store.conversations)

    async def recent(self, limit: int) -> list[str]:
        """See `Recent.recent`: the store's own `recent`, or none for a store that has none (memory,
        another object: nothing a new process could find warm)."""
        recent = getattr(self.store, "recent", None)
        return [] if recent is None else list(await self._call("read", recent, limit))

    async def purge(self, conversation: str) -> int:
        """See `Purging.purge`: the store's own `purge`.

        Raises:
            ThreadlineError: `store-kind` for a store object that has none.
        """
        purge = getattr(self.store, "purge", None)
        if purge is None:
            message = f"a {type(self.store).__name__} cannot remove a conversation: remove it from that store yourself"
            raise ThreadlineError(ErrorCode.STORE_KIND, message)
        return await self._call("written", purge, conversation)

    async def identity(self) -> str:
        """See `AsyncStore.identity`."""
        from .identity import store_identity  # the PostgreSQL driver only loads where it is used

        return await self._call("read", store_identity, self.store)

    async def _call(self, what: str, function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        try:
            return await in_store_thread(function, *args, **kwargs)
        except OSError as err:
            raise _outage(what, err) from None


def _outage(what: str, err: OSError) -> Exception:
    """`store-unavailable` for a file error an outage causes (`OUTAGES`); any other error as it is."""
    if err.errno not in OUTAGES:
        return err
    message = f"the store cannot be {what} now ({err.strerror}); it is retried until the store is back"
    return ThreadlineError(ErrorCode.STORE_UNAVAILABLE, message, retryable=True)


class ConversationLog:
    """One conversation of one store, read incrementally into a `Log`.

    Reads are serialised by a lock, so each record is applied once; callers use the returned
    `Log` without awaiting in between (it changes only inside `read` and `append`). Each read tells
    the log when the one before it began: what it finds was written since, by this process's clock,
    which is what keeps the lease of a writer whose clock runs behind live (`Turn.state`).
    """

    def __init__(self, store: AsyncStore, conversation: str) -> None:
        self.store = store
        self.conversation = conversation
        self.log = Log()
        self._reading = asyncio.Lock()
        self._read_at: float | None = None
        self._last: Record | None = None
        """The last record applied, as read (what the next read checks the store still holds)."""
        self._looked: float | None = None
        """When the last read that completed began (monotonic)."""

    async def read(self, *, within: float = 0.0) -> Log:
        """The log with every record appended until now applied (a long log `READ_BATCH` records at a
        time, so a cold read of a long conversation never holds all its parsed records at once).

        Each read starts at the last record applied, read again: when it is not the one applied (the
        conversation was removed, and perhaps begun again under its id by another process), the log
        is read anew from its first record instead of applying another conversation's records.

        `within`: a read begun less than that many seconds ago stands for this one (a look right after
        another reads nothing new but costs a thread and a file open; what it would find is what a look
        that long earlier finds, a race the log's rules already settle)."""
        if within > 0 and self._looked is not None and time.monotonic() - self._looked < within:
            return self.log
        async with self._reading:
            began, looked = now(), time.monotonic()
            while True:
                n = self.log.n
                records = await self.store.read(self.conversation, max(n - 1, 0), limit=READ_BATCH + bool(n))
                if n:
                    if not records or records[0] != self._last:
                        self.log, self._last = Log(), None
                        continue
                    records = records[1:]
                self.log.apply(records, unseen_at=self._read_at)
                if records:
                    self._last = records[-1]
                if len(records) < READ_BATCH:
                    break
                await asyncio.sleep(0)  # let heartbeats and workflow tasks run between batches
            self._read_at, self._looked = began, looked
        return self.log

    async def turn(self, turn: str, *, within: float = 0.0) -> Turn:
        """The turn as the log says now (`within`: as `read`'s).

        Raises:
            ThreadlineError: `turn-unknown`.
        """
        log = await self.read(within=within)
        found = log.turns.get(turn)
        if found is None:
            raise ThreadlineError(ErrorCode.TURN_UNKNOWN, f"turn {turn} is not in conversation {self.conversation}")
        return found

    async def append(self, records: Sequence[Record], *, expect: int | None = None) -> int:
        """Append `records` (conditionally with `expect`); return the new count.

        Appended on exactly what this log holds (`expect` is its count), they are applied here as a
        reader would see them, numbered and through JSON, so the next read does not fetch them back.
        """
        began, timed = now(), time.monotonic()
        try:
            count = await self.store.append(self.conversation, records, expect=expect)
        except ThreadlineError as err:
            telemetry.count(*APPEND_ERRORS, {"code": str(err.code)})
            raise
        telemetry.seconds(*APPEND_SECONDS, {}, time.monotonic() - timed)
        async with self._reading:
            if expect is not None and expect == self.log.n and count == expect + len(records):
                written = [json.loads(encode(dict(record), expect + i + 1)) for i, record in enumerate(records)]
                self.log.apply(written, unseen_at=began)
                if written:
                    self._last = written[-1]
        return count

    async def append_if(
        self, turn: str, build: Callable[[Log, Turn], list[Record] | None], *, within: float = 0.0
    ) -> Turn:
        """Append what `build` decides from the current log, on exactly that log (decided again on conflict).

        `build` returns None to append nothing. Returns the turn as it reads after the append. `within`:
        the first decision may use a read that recent (`read`); the append is conditional on exactly
        that log, so a record it missed makes it decide again, on a fresh read.
        """
        while True:
            found = await self.turn(turn, within=within)
            within = 0.0
            records = build(self.log, found)
            if not records:
                return found
            try:
                count = await self.append(records, expect=self.log.n)
            except ThreadlineError as err:
                if err.code != ErrorCode.STORE_CONFLICT:
                    raise
                continue
            return self.log.turns[turn] if self.log.n >= count else await self.turn(turn)

    async def wait(self, after: int, timeout: float) -> bool:
        """Wait until the conversation holds more than `after` records (True) or `timeout` passes."""
        return await self.store.wait(self.conversation, after, timeout)


KEPT_LOGS = 1024
"""Conversations whose parsed log a process keeps between reads (least recently used go)..."""
KEPT_RECORDS = 600_000
"""... and at most this many parsed records in all (about 1.3 KB each, 1.8 KB in a long branch whose
showing is kept, `store.log.memo`: about 1.1 GB), so a conversation of 100,000 turns (300,000 records)
stays cached beside others instead of being read again at its next turn."""


WARM_RECORDS = 100_000
"""The most records a worker that starts reads before its turns ask (`LogCache.warm`): about 130 MB."""


class Stores:
    """The stores a process knows, by name, each opened on first use (a folder is made then, not before)."""

    def __init__(self, openers: Mapping[str, Callable[[], AsyncStore]]) -> None:
        self._openers = dict(openers)
        self._listed = set(self._openers)
        self._opened: dict[str, AsyncStore] = {}
        self._identities: dict[str, str] = {}

    def names(self) -> list[str]:
        """The names of the stores the settings list, sorted (not those `add` gave unlisted)."""
        return sorted(self._listed)

    def add(self, name: str, opener: Callable[[], AsyncStore], *, listed: bool = False) -> None:
        """Know one more store by `name` (unlisted: reached by its name, never listed or walked)."""
        self._openers[name] = opener
        if listed:
            self._listed.add(name)

    def get(self, name: str) -> AsyncStore:
        """The store named `name`, opened now if it was not yet.

        Raises:
            ThreadlineError: `store-unknown`.
        """
        check_text(name, "a store name")
        found = self._opened.get(name)
        if found is not None:
            return found
        opener = self._openers.get(name)
        if opener is None:
            known = ", ".join(self.names()) or "none"
            raise ThreadlineError(ErrorCode.STORE_UNKNOWN, f"no store is named {name!r} here (known: {known})")
        found = self._opened[name] = opener()
        return found

    def check(self, name: str) -> None:
        """Refuse a name no store has (`store-unknown`) without opening anything."""
        if name not in self._openers:
            self.get(name)

    async def identity(self, name: str) -> str:
        """The identity of the store named `name`, read once per process."""
        found = self._identities.get(name)
        if found is None:
            found = self._identities[name] = await self.get(name).identity()
        return found

    async def verify(self, name: str, expected: str | None) -> None:
        """Refuse to touch a store that is not the one a conversation lives in.

        Raises:
            ThreadlineError: `store-mismatch` when `expected` is set and the store named `name` here
                has another identity (this process is configured with another store under that name).
        """
        if expected is None:
            return
        found = await self.identity(name)
        if found != expected:
            logger.error("store.mismatch", store=name, expected=expected, found=found)
            message = (
                f"store {name!r} here is another store than the conversation's; give every worker of this "
                "task queue the same stores (THREADLINE_DATA, THREADLINE_STORES)"
            )
            raise ThreadlineError(ErrorCode.STORE_MISMATCH, message, retryable=True, expected=expected, found=found)

    async def close(self) -> None:
        """Close the stores opened so far that hold something to close (connections, threads)."""
        opened, self._opened = list(self._opened.values()), {}
        for store in opened:
            close = getattr(store, "close", None)
            if close is not None:
                await close()


class LogCache:
    """The `ConversationLog`s a process keeps, by store and conversation, within `KEPT_*` bounds."""

    def __init__(self, stores: Stores, *, logs: int = KEPT_LOGS, records: int = KEPT_RECORDS) -> None:
        self.stores = stores
        self._logs: OrderedDict[tuple[str, str], ConversationLog] = OrderedDict()
        self._bounds = (logs, records)

    async def open(self, store: str, conversation: str, store_id: str | None) -> ConversationLog:
        """`get`, after checking the store is the one the conversation lives in (`store-mismatch`)."""
        await self.stores.verify(store, store_id)
        return self.get(store, conversation)

    def get(self, store: str, conversation: str) -> ConversationLog:
        """The log of `conversation` in `store`, made on first use and kept while it is used."""
        key = (store, conversation)
        found = self._logs.get(key)
        if found is not None:
            self._logs.move_to_end(key)
            return found
        found = self._logs[key] = ConversationLog(self.stores.get(store), conversation)
        logs, records = self._bounds
        kept = sum(held.log.n for held in self._logs.values())
        while len(self._logs) > 1 and (len(self._logs) > logs or kept > records):
            kept -= self._logs.popitem(last=False)[1].log.n
        return found

    def forget(self, store: str, conversation: str) -> None:
        """Drop the log of `conversation` in `store` (removed: its id may begin again)."""
        self._logs.pop((store, conversation), None)

    async def warm(
        self,
        stores: Sequence[str],
        conversations: int,
        *,
        most_records: int = WARM_RECORDS,
        prepare: Callable[[Log], bool] | None = None,
    ) -> Warmed:
        """Read the logs of the `conversations` conversations appended to last in `stores` (the latest
        of each store first, the stores in turn), so that their next turns in this process read only
        what was appended since: what a worker that starts does, before and while it takes turns.
        `prepare` then works out what a next turn of each is shown (True: something was kept).

        At most half the logs this cache keeps, and `most_records` records (at most half of its
        records), are read: warming never pushes out a log a turn is using, and a worker that starts
        beside the 256 longest conversations does not take a cache's worth of memory at once. A store
        that cannot list its recent conversations (memory, an object) is passed over; one that fails
        is named in the result and the others are still read.
        """
        logs, records = self._bounds
        limit = min(conversations, logs // 2)
        warmed = Warmed()
        if limit <= 0:
            return warmed
        listed: list[list[tuple[str, str]]] = []
        for name in stores:
            try:
                store = self.stores.get(name)
                recent = await store.recent(limit) if isinstance(store, Recent) else []
            except (ThreadlineError, OSError) as err:
                warmed.failed[name] = _failure(err)
                continue
            listed.append([(name, conversation) for conversation in recent])
        for name, conversation in (pair for row in itertools.zip_longest(*listed) for pair in row if pair):
            if warmed.conversations >= limit or warmed.records >= min(records // 2, most_records):
                break
            if name in warmed.failed:
                continue
            try:
                log = await self.get(name, conversation).read()
            except (ThreadlineError, OSError) as err:
                warmed.failed[name] = _failure(err)
                continue
            warmed.conversations += 1
            warmed.records += log.n
            if prepare is not None and prepare(log):
                warmed.prepared += 1
                await asyncio.sleep(0)  # a long branch's showing took milliseconds: let turns run
        return warmed


@dataclass(slots=True)
class Warmed:
    """What `LogCache.warm` read: logs and records, the logs whose next turn's showing it kept, and the
    stores that failed with their error codes."""

    conversations: int = 0
    records: int = 0
    prepared: int = 0
    failed: dict[str, str] = field(default_factory=dict)


def _failure(err: ThreadlineError | OSError) -> str:
    """A failed store's error, as a code (never a message: it may name a path or a database)."""
    return str(err.code) if isinstance(err, ThreadlineError) else errno.errorcode.get(err.errno or 0, "OSError")


def now() -> float:
    """The wall clock, for lease and state decisions (readers and activities may read it; workflows may not)."""
    return time.time()


__all__ = ["AsyncStore", "ConversationLog", "LogCache", "Purging", "Recent", "Stores", "Threaded", "Warmed", "now"]
