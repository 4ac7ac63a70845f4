"""Listing conversations from Temporal visibility: 30 conversations of a store of their own, page by
page and by program, state and last update, each listed once even after it closed and reopened;
through the Python API, over HTTP and with `threadline list`."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
import pytest_asyncio
from temporalio.client import Client

from core.errors import ThreadlineError
from core.settings import Settings
from tests.support.service_kit import serving
from threadline.client import Threadline, connect
from threadline.http import create_app
from threadline.listing import ConversationInfo
from worker import build_worker


@dataclasses.dataclass(frozen=True)
class Thirty:
    """30 conversations in store `store`: `chats` (a message each) then `tutors` (a setup each),
    created on either side of `between`; `closed` were closed and `reopened` closed and sent to again."""

    tl: Threadline
    settings: Settings
    store: str
    chats: list[str]
    tutors: list[str]
    between: datetime
    closed: list[str]
    reopened: str


async def until(check: Callable[[], Awaitable[bool]]) -> None:
    """Visibility is written after the workflow moves: ask again until it shows what the test did."""
    for _ in range(100):
        if await check():
            return
        await asyncio.sleep(0.2)
    raise TimeoutError("visibility never showed it")


async def every(tl: Threadline, store: str, **filters: object) -> list[ConversationInfo]:
    page = await tl.conversations(store=store, limit=1000, **filters)  # type: ignore[arg-type]
    return page.conversations


@pytest_asyncio.fixture(name="thirty")
async def _thirty(client: Client, settings: Settings, tmp_path: Path) -> AsyncIterator[Thirty]:
    store = f"s{uuid.uuid4().hex[:12]}"
    mine = dataclasses.replace(settings, stores={**settings.stores, store: tmp_path / store})
    async with build_worker(client, mine):
        tl = await connect(mine, client=client)
        chats = [f"chat-{i:02d}" for i in range(18)]
        for cid in chats:
            await tl.conversation("chat", id=cid, store=store).message("Hello")
        await asyncio.sleep(0.05)
        between = datetime.now(UTC)
        await asyncio.sleep(0.05)
        tutors = [f"tutor-{i:02d}" for i in range(12)]
        for cid in tutors:
            await tl.conversation("tutor", id=cid, store=store).setup("Teach fractions.")
        closed = chats[:4]
        for cid in closed:
            await tl.conversation("chat", id=cid, store=store).handle.terminate(reason="closed by the test")
        reopened = closed.pop()
        await tl.conversation("chat", id=reopened, store=store).message("Back again")

        async def settled() -> bool:
            listed = await every(tl, store)
            states = sorted(c.state for c in listed)
            return len(listed) == 30 and states == sorted(["closed"] * 3 + ["idle"] * 27)

        await until(settled)
        yield Thirty(tl, mine, store, chats, tutors, between, closed, reopened)


async def test_pages_hold_every_conversation_once(thirty: Thirty) -> None:
    """Pages of 7 with their cursors list all 30 conversations, each once, the last page ending the list."""
    seen: list[str] = []
    cursor: str | None = None
    pages = 0
    while True:
        page = await thirty.tl.conversations(store=thirty.store, limit=7, cursor=cursor)
        seen += [c.conversation for c in page.conversations]
        pages += 1
        cursor = page.cursor
        if cursor is None:
            break

    assert sorted(thirty.chats + thirty.tutors) == sorted(seen)
    assert len(seen) == len(set(seen))
    assert pages in (5, 6)  # the server may hand a cursor after a full last page, which then reads empty


async def test_filters_by_program_state_and_last_update(thirty: Thirty) -> None:
    """`program`, `state` and `updated_after` select by the search attributes; a reopened conversation
    is listed once, by its newest run."""
    tutors = await every(thirty.tl, thirty.store, program="tutor")
    closed = await every(thirty.tl, thirty.store, state="closed")
    idle_chats = await every(thirty.tl, thirty.store, program="chat", state="idle")
    recent = await every(thirty.tl, thirty.store, updated_after=thirty.between)

    assert sorted(thirty.tutors) == sorted(c.conversation for c in tutors)
    assert sorted(thirty.closed) == sorted(c.conversation for c in closed)
    assert len(thirty.chats) - len(thirty.closed) == len(idle_chats)
    assert ["idle"] == [c.state for c in await every(thirty.tl, thirty.store) if c.conversation == thirty.reopened]
    assert sorted([*thirty.tutors, thirty.reopened]) == sorted(c.conversation for c in recent)


async def test_the_service_lists_with_the_same_filters(thirty: Thirty) -> None:
    """`GET /v1/conversations?program=&state=&updated_after=&limit=&cursor=` pages the same list."""
    async with serving(create_app(thirty.tl)) as http:
        first = (await http.get("/v1/conversations", params={"store": thirty.store, "limit": 20})).json()
        rest = await http.get("/v1/conversations", params={"store": thirty.store, "cursor": first["cursor"]})
        tutors = await http.get(
            "/v1/conversations", params={"store": thirty.store, "program": "tutor", "state": "idle"}
        )
        bad = await http.get("/v1/conversations", params={"store": thirty.store, "state": "asleep"})

    listed = [c["conversation"] for c in first["conversations"] + rest.json()["conversations"]]
    assert sorted(thirty.chats + thirty.tutors) == sorted(listed)
    assert sorted(thirty.tutors) == sorted(c["conversation"] for c in tutors.json()["conversations"])
    assert 422 == bad.status_code


@pytest.mark.parametrize("cursor", ["not a cursor!", "null"], ids=["not-base64", "base64-not-a-token"])
async def test_a_cursor_no_listing_gave_is_refused(thirty: Thirty, cursor: str) -> None:
    """A cursor that is not one a listing gave: `invalid-request`, before the server is asked (a cursor
    that is base64 but no token, such as `null`, once made the server fail again and again: 503)."""
    with pytest.raises(ThreadlineError) as caught:
        await thirty.tl.conversations(store=thirty.store, cursor=cursor)

    assert "invalid-request" == caught.value.code
