"""The stores the conversation contract names: the process's memory (`store=None`, `"memory"`) with an
embedded worker, functai's default folder (`store=True`, moved by `XDG_DATA_HOME`), and a store object
of the user's own (functai's `append`/`read`, or `append_records`/`read_records`)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from functai import stores as functai_stores
from functai.stores import MemoryConversations
from temporalio.client import Client

from core.errors import ErrorCode, ThreadlineError
from core.settings import Settings
from store.backends.folder import FolderStore
from tests.support.functai_kit import offline, reply, tutor
from threadline.client import connect
from worker import build_worker

OFFLINE = "(offline) You said: {}. I was shown {} earlier turn(s)."


class RecordBook:
    """A store object of the contract's shape, keeping records as given (unnumbered) in a dict."""

    def __init__(self) -> None:
        self.books: dict[str, list[dict[str, Any]]] = {}

    def append_records(self, conversation: str, records: Sequence[dict[str, Any]], *, expect: int | None = None) -> int:
        held = self.books.setdefault(conversation, [])
        if expect is not None and expect != len(held):
            raise ThreadlineError(ErrorCode.STORE_CONFLICT, f"{len(held)} records, not {expect}")
        held.extend(dict(r) for r in records)
        return len(held)

    def read_records(self, conversation: str, after: int = 0) -> list[dict[str, Any]]:
        return [dict(r) for r in self.books.get(conversation, [])[after:]]


def no_folder_records(settings: Settings) -> bool:
    return not (settings.store_folder("default") / "conversations").exists()


async def test_the_memory_store_is_shared_with_an_embedded_worker(client: Client, settings: Settings, cid: str) -> None:
    """`connect(embedded=True)`: `store=None` and `store="memory"` are one memory store the client reads and
    its own worker writes; nothing reaches the folder, and closing stops the worker."""
    tl = await connect(settings, client=client, embedded=True)
    try:
        chat = tl.conversation("tutor", id=cid, store=None)
        first = await chat("Hi")
        second = await tl.conversation("tutor", id=cid, store="memory")("Again")
        turns = await chat.turns()
    finally:
        await tl.close()

    assert OFFLINE.format("Hi", 0) == first
    assert OFFLINE.format("Again", 1) == second
    assert ["Hi", "Again"] == [t.inputs["message"] for t in turns]
    assert chat.config.store.startswith("memory-")
    assert no_folder_records(settings)
    assert tl.settings.task_queue != settings.task_queue  # its own: no other worker takes its turns


async def test_two_embedded_clients_have_two_memory_stores(client: Client, settings: Settings, cid: str) -> None:
    """The same id in two processes' memory is two conversations (two workflows), as in functai."""
    one = await connect(settings, client=client, embedded=True)
    two = await connect(settings, client=client, embedded=True)
    try:
        await one.conversation("tutor", id=cid, store=None)("one")
        answer = await two.conversation("tutor", id=cid, store=None)("two")
    finally:
        await one.close()
        await two.close()

    assert OFFLINE.format("two", 0) == answer


@pytest.mark.parametrize("store", [None, "memory", False])
async def test_the_memory_store_without_an_embedded_worker_is_refused(
    client: Client, settings: Settings, store: object
) -> None:
    """No worker elsewhere reaches this process's memory: `store-kind`, saying what to do."""
    tl = await connect(settings, client=client)

    with pytest.raises(ThreadlineError) as refused:
        tl.conversation("tutor", store=store)

    assert ErrorCode.STORE_KIND == refused.value.code
    assert "embedded=True" in refused.value.message


async def test_store_true_is_functais_default_folder(
    client: Client, settings: Settings, tmp_path: Path, cid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`store=True` writes where functai's `store=True` reads (`XDG_DATA_HOME` moves both), and functai
    continues the conversation there."""
    xdg = tmp_path / "xdg"
    monkeypatch.setenv("XDG_DATA_HOME", str(xdg))  # what functai reads, in this process
    settings = dataclasses.replace(settings, functai_store=Settings.from_env({"XDG_DATA_HOME": str(xdg)}).functai_store)
    assert functai_stores.default_folder() == settings.functai_store
    async with build_worker(client, settings):
        tl = await connect(settings, client=client)
        chat = tl.conversation("tutor", id=cid, store=True)
        await chat("Hi")

        def functai_turn() -> Any:
            with offline([reply("From functai")]):
                return tutor.conversation(cid, store=True)("And you?")

        theirs = await asyncio.to_thread(functai_turn)
        turns = await chat.turns()
        await tl.close()

    assert "From functai" == theirs
    assert ["Hi", "And you?"] == [t.inputs["message"] for t in turns]
    assert FolderStore(xdg / "functai" / "conversations").read(cid)
    assert no_folder_records(settings)


async def test_a_store_object_with_an_embedded_worker(client: Client, settings: Settings, cid: str) -> None:
    """A store object of the contract's names, given to `conversation(store=...)`: the embedded worker writes
    it, numbered; functai's own memory store object works the same, and functai continues there."""
    book, theirs = RecordBook(), MemoryConversations()
    tl = await connect(settings, client=client, embedded=True)
    try:
        answer = await tl.conversation("tutor", id=cid, store=book)("Hi")
        chat = tl.conversation("tutor", id=cid, store=theirs)
        await chat("Hi")

        def functai_turn() -> Any:
            with offline([reply("From functai")]):
                return tutor.conversation(cid, store=theirs)("And you?")

        continued = await asyncio.to_thread(functai_turn)
        turns = await chat.turns()
    finally:
        await tl.close()

    assert OFFLINE.format("Hi", 0) == answer
    assert ["turn", "lease", "ended"] == [r["kind"] for r in book.books[cid] if r["kind"] != "program"]
    assert "From functai" == continued
    assert ["Hi", "And you?"] == [t.inputs["message"] for t in turns]
    assert no_folder_records(settings)


async def test_a_store_object_named_for_a_worker_of_the_process(client: Client, settings: Settings, cid: str) -> None:
    """Without an embedded worker, an object given to `connect(stores=...)` under the name a worker of this
    process knows it by is usable as itself or by name; an object given to neither is refused."""
    book = RecordBook()
    async with build_worker(client, settings, stores={"book": book}):
        tl = await connect(settings, client=client, stores={"book": book})
        first = await tl.conversation("tutor", id=cid, store=book)("Hi")
        second = await tl.conversation("tutor", id=cid, store="book")("Again")
        with pytest.raises(ThreadlineError) as refused:
            tl.conversation("tutor", store=RecordBook())
        await tl.close()

    assert OFFLINE.format("Hi", 0) == first
    assert OFFLINE.format("Again", 1) == second
    assert ErrorCode.STORE_KIND == refused.value.code
