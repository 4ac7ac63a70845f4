"""The approve rule's object form with a deadline, over HTTP and from the `threadline` command (real
HTTP on loopback, real subprocesses, a real dev server and worker): spelt the same everywhere, the
waiting turn's clock in the `status` query, and a wrong object refused `invalid-request` with
nothing recorded."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterator

import httpx
import pytest
import pytest_asyncio
from temporalio.client import Client

from core.deadlines import seconds_of
from core.models import ConversationStatus
from core.settings import Settings
from store.backends.folder import FolderStore
from tests.support.service_kit import send, serving
from tests.surfaces.test_cli import settings_env, threadline
from threadline.client import Threadline, connect
from threadline.http import create_app
from worker import build_worker

RULE = {"calls": "changes", "within": "PT1H", "then": {"escalate": ["boss"]}, "remind_every": 600}


@pytest_asyncio.fixture(name="shop")
async def _shop(client: Client, settings: Settings) -> AsyncIterator[Threadline]:
    settings = dataclasses.replace(settings, programs=("tests.support.acting_programs",))
    async with build_worker(client, settings):
        yield await connect(settings, client=client)


@pytest_asyncio.fixture(name="http")
async def _http(shop: Threadline) -> AsyncIterator[httpx.AsyncClient]:
    async with serving(create_app(shop)) as http:
        yield http


def recorded(shop: Threadline, cid: str) -> int:
    return len(FolderStore(shop.settings.store_folder("default")).read(cid))


async def status(shop: Threadline, cid: str) -> ConversationStatus:
    handle = shop.conversation("shop", id=cid).handle
    result: ConversationStatus = await handle.query("status", result_type=ConversationStatus)
    return result


async def test_http_takes_the_object_form_and_the_status_shows_the_clock(
    shop: Threadline, http: httpx.AsyncClient, cid: str
) -> None:
    """`"approve": {...}` on a send: the refund waits, and its clock is due an hour on, anyone may answer."""
    answered = await send(http, cid, program="shop", inputs={"request": "Refund order 3"}, approve=RULE, wait=True)
    clocks = (await status(shop, cid)).deadlines

    assert (200, "waiting") == (answered.status_code, answered.json()["state"])
    clock = clocks[answered.json()["turn"]]
    assert clock.due is not None
    assert clock.next_reminder is not None
    assert (None, 3000.0) == (clock.approvers, (clock.due - clock.next_reminder).total_seconds())


async def test_http_refuses_a_wrong_object_and_records_nothing(
    shop: Threadline, http: httpx.AsyncClient, cid: str
) -> None:
    """A month (`P1M`), an unknown key, and `then: "maybe"` are 422 `invalid-request`; nothing is recorded."""
    bodies = [{"within": "P1M"}, {"within": 60, "remind": 5}, {"within": 60, "then": "maybe"}]

    answers = [await send(http, cid, program="shop", inputs={"request": "Refund"}, approve=b) for b in bodies]

    assert [(422, "invalid-request")] * 3 == [(a.status_code, a.json()["error"]["code"]) for a in answers]
    assert 0 == recorded(shop, cid)


async def test_threadline_send_takes_the_object_form(shop: Threadline, settings: Settings, cid: str) -> None:
    """`threadline send --approve '{...}'`: the turn waits under the deadline; a wrong object exits 1
    `invalid-request` with nothing recorded."""
    env = settings_env(settings, programs="tests.support.acting_programs")
    wrong = await threadline(
        env, "send", f"{cid}-x", "Refund order 2", "--program", "shop", "--approve", '{"within": 0}'
    )
    sent = await threadline(
        env, "send", cid, "Refund order 2", "--program", "shop", "--approve", json.dumps(RULE), "--json"
    )
    clocks = (await status(shop, cid)).deadlines

    assert (1, True) == (wrong.returncode, "invalid-request" in wrong.stderr)
    assert 0 == recorded(shop, f"{cid}-x")
    assert "waiting" in sent.stdout
    assert 1 == len(clocks)


@pytest.mark.parametrize("value", [10**400, -(10**400), float("nan"), float("inf"), 0, "P", "PT0S"])
def test_a_duration_out_of_bounds_is_refused_not_a_crash(value: object) -> None:
    """An integer past a float's range was an OverflowError (HTTP 500 `internal`); it is out of bounds."""
    with pytest.raises(ValueError, match="a duration"):
        seconds_of(value)
