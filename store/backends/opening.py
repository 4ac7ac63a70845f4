"""Open the stores a process's settings name: the one way the worker, the Python API, the CLI and
the HTTP service reach a store, whatever it is.

    folder                  Threaded(FolderStore(folder))   and StreamLog(folder)
    postgresql://...        AsyncPostgresStore (lazily)      and PostgresStreams (lazily, written off the loop;
                                                             a worker's call log writes through its pool too)

Nothing is opened until it is first used: a folder is made, a database connected and migrated, then.
A `StoreSet` holds what it opened and closes it all at the end: whoever makes one closes it (a
worker, a `Threadline` client, the HTTP service through its client, a command).
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.settings import StoreSpec, is_database_url
from store.records import Record

from .base import Store
from .folder import FolderStore, conversations_folder
from .locate import postgres_url
from .memory import MemoryStore
from .objects import ObjectStore
from .reader import AsyncStore, Stores, Threaded
from .streams import StreamLog, Streams

# psycopg and the PostgreSQL modules load when a database store is first opened: a process that
# only reads folders (the CLI's commands) does not pay for them.
if TYPE_CHECKING:
    from .postgres import AsyncPostgresStore, PostgresStore


class LazyPostgres:
    """An `AsyncPostgresStore` opened (its schema migrated, its pool filled) by the first call that needs it.

    Args:
        url: A `postgresql://` URL, with an optional `schema` parameter.
        max_size: The most connections its pool opens.
    """

    def __init__(self, url: str, *, max_size: int = 8) -> None:
        self.url, self.schema = postgres_url(url)
        self._max_size = max_size
        self._store: AsyncPostgresStore | None = None
        self._opening: asyncio.Lock | None = None

    def __repr__(self) -> str:
        return f"<LazyPostgres schema={self.schema}>"  # never the URL: it may hold a password

    async def opened(self) -> AsyncPostgresStore:
        """The store, opened now if it was not yet."""
        if self._store is not None:
            return self._store
        self._opening = self._opening or asyncio.Lock()
        async with self._opening:
            if self._store is None:
                from .postgres import AsyncPostgresStore

                store = AsyncPostgresStore(self.url, schema=self.schema, max_size=self._max_size)
                await store.open()
                self._store = store
        return self._store

    async def append(self, conversation: str, records: Sequence[Record], *, expect: int | None = None) -> int:
        """See `AsyncStore.append`."""
        return await (await self.opened()).append(conversation, records, expect=expect)

    async def read(self, conversation: str, after: int = 0, *, limit: int | None = None) -> list[Record]:
        """See `AsyncStore.read`."""
        return await (await self.opened()).read(conversation, after, limit=limit)

    # The timeout is part of the store contract (docs/format-1.md 1.6).
    async def wait(self, conversation: str, after: int, timeout: float) -> bool:  # noqa: ASYNC109
        """See `AsyncStore.wait` (woken by NOTIFY, holding no connection of the pool)."""
        return await (await self.opened()).wait(conversation, after, timeout)

    async def conversations(self) -> list[str]:
        """See `AsyncStore.conversations`."""
        return await (await self.opened()).conversations()

    async def recent(self, limit: int) -> list[str]:
        """See `reader.Recent.recent`."""
        return await (await self.opened()).recent(limit)

    async def purge(self, conversation: str) -> int:
        """See `reader.Purging.purge`."""
        return await (await self.opened()).purge(conversation)

    async def identity(self) -> str:
        """See `AsyncStore.identity` (one row of the store's schema, written by its first migration)."""
        return await (await self.opened()).identity()

    async def close(self) -> None:
        """Close the pool and the listener, if they were opened."""
        store, self._store = self._store, None
        if store is not None:
            await store.close()


def open_records(spec: StoreSpec) -> AsyncStore:
    """The record log at `spec` as an `AsyncStore` (a folder is made now; a database is reached on first use)."""
    if is_database_url(spec):
        return LazyPostgres(str(spec))
    return Threaded(FolderStore(spec))


def open_streams(spec: StoreSpec) -> Streams:
    """The turn text streams of the store at `spec` (nothing is opened until a stream is written or read)."""
    if is_database_url(spec):
        from .pgstreams import PostgresStreams

        url, schema = postgres_url(str(spec))
        return PostgresStreams(url, schema=schema, max_size=8)  # a worker's call log shares its pool
    return StreamLog(spec)


def open_sync(spec: StoreSpec, **options: Any) -> FolderStore | PostgresStore:
    """The blocking store at `spec` (for copies and checks, and for functai): opened now."""
    if is_database_url(spec):
        from .postgres import PostgresStore

        url, schema = postgres_url(str(spec))
        return PostgresStore(url, schema=schema, **options)
    return FolderStore(Path(spec), **options)


async def migrate_stores(specs: Mapping[str, StoreSpec]) -> dict[str, int]:
    """Bring every PostgreSQL store of `specs` to this package's schema version; return each one's."""
    versions = {}
    for name, spec in specs.items():
        if is_database_url(spec):
            from .migrate import migrate

            url, schema = postgres_url(str(spec))
            versions[name] = await asyncio.to_thread(migrate, url, schema=schema)
    return versions


class StoreSet:
    """The stores a process's settings name: record logs (`records`, a `reader.Stores`) and their
    streams, each opened on first use; `close()` releases whatever was opened.

    Besides those, a set knows stores it never lists: `hidden` ones by name (functai's folder), its own
    memory store (`memory`, a name unique to the set: two processes' memory stores are two stores), and
    store objects handed to `adopt`. A client and an embedded worker that share one set share them.

    Args:
        specs: Where each store is, by name (`Settings.named_stores()`).
        records: Record logs to use instead of opening `specs`' (tests hand in their own).
        hidden: Stores reached by name but not listed (`Settings.hidden_stores()`).
    """

    def __init__(
        self,
        specs: Mapping[str, StoreSpec],
        *,
        records: Mapping[str, AsyncStore] | None = None,
        hidden: Mapping[str, StoreSpec] | None = None,
    ) -> None:
        self.specs = dict(specs)
        self._given = records is not None
        if records is None:
            self.records = Stores({name: _opener(spec) for name, spec in self.specs.items()})
        else:
            self.records = Stores({name: _given(store) for name, store in records.items()})
        self.streams = {name: open_streams(spec) for name, spec in self.specs.items()}
        self.hidden = {name: spec for name, spec in (hidden or {}).items() if name not in self.specs}
        for name, spec in self.hidden.items():
            self.records.add(name, _opener(spec))
            self.streams[name] = open_streams(spec)
        self._scratch = Path(tempfile.gettempdir()) / f"threadline-{uuid.uuid4().hex}"
        """Where the streams of stores with no folder of their own go (made on the first stream written)."""
        self._memory = MemoryStore()
        self.memory = f"memory-{self._memory.identity()[:12]}"
        """The name of this set's memory store."""
        self._keep(self.memory, self._memory)
        self._objects = {id(_raw(store)): name for name, store in (records or {}).items()}
        """The names of the objects given, by the object (see `adopt`)."""

    def names(self) -> list[str]:
        """The names of the stores, sorted."""
        return self.records.names()

    def existing(self) -> list[str]:
        """The names of the stores that are there already (a database, a folder that holds
        conversations, a store object given), sorted: what a worker that starts reads from
        (`reader.LogCache.warm`), which makes no folder."""
        return [
            name
            for name in self.names()
            if name not in self.specs  # given as an object
            or self._given
            or is_database_url(self.specs[name])
            or conversations_folder(self.specs[name]).is_dir()
        ]

    def knows(self, target: object) -> bool:
        """Whether store object `target` was given to this set (by name, or adopted before)."""
        return id(target) in self._objects

    def adopt(self, target: object, name: str | None = None) -> str:
        """The name of store object `target` in this set: the name it was given under before, else
        `name` (listed), else a new unlisted one."""
        found = self._objects.get(id(target))
        if found is None:
            found = self._objects[id(target)] = name or f"object-{id(target):x}"
            self._keep(found, as_store(target), listed=name is not None)
        return found

    def _keep(self, name: str, store: Store, *, listed: bool = False) -> None:
        threaded = Threaded(store)
        self.records.add(name, lambda: threaded, listed=listed)
        self.streams[name] = StreamLog(self._scratch / name)

    async def close(self) -> None:
        """Close every store and stream log opened so far."""
        await self.records.close()
        for streams in self.streams.values():
            if not isinstance(streams, StreamLog):  # a database's streams hold a pool; a folder's nothing
                await asyncio.to_thread(streams.close)
        await asyncio.to_thread(shutil.rmtree, self._scratch, True)


def as_store(target: object) -> Store:
    """A store object as a `Store`: this package's own as they are, any other through `ObjectStore`."""
    from .postgres import PostgresStore  # a store object of the caller's own: it may be one of these

    if isinstance(target, FolderStore | MemoryStore | PostgresStore):
        return target
    return ObjectStore(target)


def _raw(store: AsyncStore) -> object:
    """The object a user gave for `store` (what `adopt` is handed again)."""
    inner = store.store if isinstance(store, Threaded) else store
    return inner.target if isinstance(inner, ObjectStore) else inner


def _opener(spec: StoreSpec) -> Callable[[], AsyncStore]:
    return lambda: open_records(spec)


def _given(store: AsyncStore) -> Callable[[], AsyncStore]:
    return lambda: store


__all__ = ["LazyPostgres", "StoreSet", "as_store", "migrate_stores", "open_records", "open_streams", "open_sync"]
