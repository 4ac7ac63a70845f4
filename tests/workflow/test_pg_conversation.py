"""Conversations on a PostgreSQL store end to end: a real dev server, a worker and a client that
reach the store only through its URL (no folder anywhere), a real PostgreSQL 15."""

from __future__ import annotations

import asyncio
import dataclasses
from collections import Counter
from collections.abc import AsyncIterable, AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import pytest_asyncio
from temporalio.client import Client

from core.errors import ThreadlineError
from core.settings import Settings
from store.backends.locate import postgres_url
from store.backends.opening import StoreSet
from store.backends.postgres import PostgresStore
from store.log.state import Log
from tests.support.kit import slow
from threadline.client import Conversation, Threadline
from threadline.reading import Turn
from worker import build_worker


@pytest.fixture(name="pg_settings")
def _pg_settings(settings: Settings, pg_spec: str, tmp_path: Path) -> Settings:
    """Settings whose one store is a PostgreSQL schema of this test's own, and whose data folder never exists."""
    return dataclasses.replace(settings, data=tmp_path / "no-folder", stores={"default": pg_spec})


@asynccontextmanager
async def pg_worker(client: Client, settings: Settings) -> AsyncIterator[None]:
    """An in-process worker on `settings`' stores, closed (connections and all) at the end."""
    stores = StoreSet(settings.named_stores())
    try:
        async with build_worker(client, settings, stores=stores):
            yield
    finally:
        await stores.close()


@pytest_asyncio.fixture(name="pg_tl")
async def _pg_tl(client: Client, pg_settings: Settings) -> AsyncIterator[Threadline]:
    tl = Threadline(client, pg_settings)
    yield tl
    await tl.close()


@pytest.fixture(name="pg")
def _pg(pg_spec: str) -> Iterator[PostgresStore]:
    url, schema = postgres_url(pg_spec)
    with PostgresStore(url, schema=schema) as store:
        yield store


def ended_per_turn(pg: PostgresStore, conversation: str) -> Counter[str]:
    return Counter(str(r["turn"]) for r in pg.read(conversation) if r.get("kind") == "ended")


async def until_running(chat: Conversation, turn: str) -> None:
    """Wait until the turn's model call is under way."""
    for _ in range(200):
        if (await chat.turn(turn)).state == "running":
            return
        await asyncio.sleep(0.05)
    raise TimeoutError(f"turn {turn} never ran")


async def collect(chat_stream: AsyncIterable[str | Turn | None]) -> tuple[list[str | None], Turn]:
    pieces: list[str | None] = []
    async for item in chat_stream:
        if isinstance(item, Turn):
            return pieces, item
        pieces.append(item)
    raise AssertionError("the stream ended without its turn")


async def test_turns_history_and_render_on_postgres(
    client: Client, pg_settings: Settings, pg_tl: Threadline, pg: PostgresStore, cid: str
) -> None:
    """Turns see the earlier ones, history and render read the database, and nothing makes a folder."""
    async with pg_worker(client, pg_settings):
        chat = pg_tl.conversation("tutor", id=cid)
        first = await chat.predict("Hi, I'm Alex.")
        second = await chat.predict("What is 1/2 + 1/3?")
        history = await chat.history()
        rendered = await chat.render("And 1/4?")

    records = pg.read(cid)
    assert [first.id] == second.saw
    assert "I was shown 1 earlier turn(s)." in second.result
    assert ["done", "done"] == [t.state for t in await chat.turns()]
    assert (second.id, 2) == (history["head"], history["branch_turns"])
    assert (second.id, [first.id, second.id]) == (rendered.parent, rendered.shown)
    assert list(range(1, len(records) + 1)) == [r["seq"] for r in records]
    assert {first.id: 1, second.id: 1} == ended_per_turn(pg, cid)
    assert not pg_settings.data.exists()


async def test_text_streams_through_postgres(
    client: Client, pg_settings: Settings, pg_tl: Threadline, pg: PostgresStore, cid: str
) -> None:
    """`stream` yields the model's text in pieces from the database's streams, then the turn."""
    async with pg_worker(client, slow(pg_settings, 0.6)):
        pieces, turn = await collect(pg_tl.conversation("tutor", id=cid).stream("Tell me about fractions."))
        rewatched = [piece.text async for piece in pg_tl.conversation("tutor", id=cid).watch(turn.id)]

    assert "done" == turn.state
    assert len(pieces) >= 2
    assert turn.result == "".join(p for p in pieces if p)
    assert pieces == rewatched
    assert {turn.id: 1} == ended_per_turn(pg, cid)


async def test_a_stop_ends_a_running_turn_on_postgres(
    client: Client, pg_settings: Settings, pg_tl: Threadline, pg: PostgresStore, cid: str
) -> None:
    """A stop sent while the model runs ends the turn `stopped`, with one `ended` record."""
    async with pg_worker(client, slow(pg_settings, 5.0)):
        chat = pg_tl.conversation("tutor", id=cid)
        placed = await chat.send("Take your time.")
        assert placed.id is not None
        await until_running(chat, placed.id)
        await chat.stop(placed.id)
        stopped = await placed.result()

    assert "stopped" == stopped.state
    assert {placed.id: 1} == ended_per_turn(pg, cid)
    assert "stopped" == Log(pg.read(cid)).turns[placed.id].ended["state"]  # type: ignore[index]


async def test_a_folder_is_refused_where_a_database_is_named(pg_settings: Settings) -> None:
    """Asking for the folder of a PostgreSQL store is a coded `store-kind`, not a path into nowhere."""
    with pytest.raises(ThreadlineError) as refused:
        pg_settings.store_folder("default")

    assert "store-kind" == refused.value.code
