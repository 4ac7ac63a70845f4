"""Programs with code and changed programs over HTTP and from the `threadline` command: `remembers` and
`earlier_without` on a send, the refusals' codes and statuses (real HTTP on loopback, real subprocesses,
a real dev server and worker)."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import pytest_asyncio
from temporalio.client import Client

from core.settings import Settings
from store.backends.folder import FolderStore
from tests.support.service_kit import send, serving
from tests.surfaces.test_cli import clean_env, threadline, threadline_json
from threadline.client import Threadline, connect
from threadline.http import create_app
from worker import build_worker


@pytest_asyncio.fixture(name="desk")
async def _desk(client: Client, settings: Settings) -> AsyncIterator[Threadline]:
    settings = dataclasses.replace(settings, programs=("tests.support.support_programs",))
    async with build_worker(client, settings):
        yield await connect(settings, client=client)


@pytest_asyncio.fixture(name="http")
async def _http(desk: Threadline) -> AsyncIterator[httpx.AsyncClient]:
    async with serving(create_app(desk)) as http:
        yield http


@pytest.fixture(name="cli")
def _cli(settings: Settings) -> dict[str, str]:
    return clean_env(
        temporal_address=settings.address,
        data=str(settings.data),
        task_queue=settings.task_queue,
        payloads=str(settings.payload_folder),
        programs="tests.support.support_programs",
    )


def records(tl: Threadline, cid: str) -> list[dict[str, Any]]:
    return FolderStore(tl.settings.store_folder("default")).read(cid)


async def test_http_sends_with_earlier_without_and_remembers(
    desk: Threadline, http: httpx.AsyncClient, cid: str
) -> None:
    """A program that now writes its reasoning: 422 `conversation-signature`, then 200 with
    `earlier_without`; `remembers` makes a helper's calls remembered (`call` records)."""
    await send(http, cid, message="Hi, I'm Kim.", wait=True)

    refused = await send(http, cid, message="And 1/2 + 1/3?", program="tutor_thinks", wait=True)
    allowed = await send(
        http, cid, message="And 1/2 + 1/3?", program="tutor_thinks", earlier_without=["reasoning"], wait=True
    )
    remembered = await send(
        http, f"{cid}-s", message="shipping?", program="support", remembers={"answer": "conversation"}, wait=True
    )

    assert (422, "conversation-signature") == (refused.status_code, refused.json()["error"]["code"])
    assert (200, "done") == (allowed.status_code, allowed.json()["state"])
    assert (200, "done") == (remembered.status_code, remembered.json()["state"])
    assert 1 == sum(r["kind"] == "call" for r in records(desk, f"{cid}-s"))


@pytest.mark.parametrize(
    ("program", "code"), [("opaque", "conversation-opaque"), ("secretive", "conversation-content")]
)
async def test_http_refusals_are_422_and_record_nothing(
    desk: Threadline, http: httpx.AsyncClient, cid: str, program: str, code: str
) -> None:
    """A program a conversation cannot keep: 422 with its code; the log stays empty."""
    inputs = {"message": "hello", "count": 1} if program == "opaque" else {"message": "hello"}

    refused = await send(http, cid, inputs=inputs, program=program, wait=True)

    assert (422, code) == (refused.status_code, refused.json()["error"]["code"])
    assert [] == records(desk, cid)


async def test_cli_sends_with_earlier_without_and_remember(desk: Threadline, cli: dict[str, str], cid: str) -> None:
    """`--earlier-without reasoning` goes on where the plain send is refused; `--remember answer=conversation`
    remembers the helper's calls; a bad `--remember` is `invalid-request`."""
    await threadline_json(cli, "send", cid, "Hi, I'm Sam.")

    refused = await threadline(cli, "send", cid, "And 1/2?", "--program", "tutor_thinks")
    allowed = await threadline_json(
        cli, "send", cid, "And 1/2?", "--program", "tutor_thinks", "--earlier-without", "reasoning"
    )
    remembered = await threadline_json(
        cli, "send", f"{cid}-s", "shipping?", "--program", "support", "--remember", "answer=conversation:steps"
    )
    bad = await threadline(cli, "send", f"{cid}-b", "x", "--program", "support", "--remember", "answer=always")

    assert 1 == refused.returncode
    assert "conversation-signature" in refused.stderr
    assert "done" == allowed["state"]
    assert "done" == remembered["state"]
    assert 1 == sum(r["kind"] == "call" for r in records(desk, f"{cid}-s"))
    assert (1, True) == (bad.returncode, "invalid-request" in bad.stderr)
