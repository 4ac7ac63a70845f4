"""The CLI through the HTTP service (`THREADLINE_URL`): no Temporal address, no store, only a URL and a key."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest_asyncio
from temporalio.client import Client

from core.settings import Settings
from tests.support.kit import slow
from tests.support.service_kit import serving
from tests.surfaces.test_cli import clean_env, threadline, threadline_json
from tests.workflow.test_pg_conversation import pg_worker
from threadline.client import Threadline
from threadline.http import create_app

KEY = "k-operator-5d1c"


@pytest_asyncio.fixture(name="remote_env")
async def _remote_env(
    client: Client, settings: Settings, pg_spec: str, tmp_path: Path
) -> AsyncIterator[dict[str, str]]:
    """The environment of an operator's shell: the service's URL and a key; a Temporal address nothing
    answers on and a data folder that does not exist, so any use of either would fail."""
    served = dataclasses.replace(settings, data=tmp_path / "service", stores={"default": pg_spec})
    tl = Threadline(client, served)
    async with pg_worker(client, slow(served, 0.3)), serving(create_app(tl, keys=[KEY])) as http:
        yield clean_env(url=str(http.base_url), api_key=KEY, temporal_address="127.0.0.1:1", data=str(tmp_path / "x"))
    await tl.close()


async def test_send_turns_show_and_history_through_the_service(remote_env: dict[str, str], cid: str) -> None:
    """`send` waits for the turn and streams its text; `turns`, `show` and `history` read through the service."""
    first = await threadline_json(remote_env, "send", cid, "Hi, I'm Alex.")
    second = await threadline(remote_env, "send", cid, "What is 1/2 + 1/3?")
    turns = await threadline_json(remote_env, "turns", cid)
    shown = await threadline_json(remote_env, "show", cid)
    history = await threadline_json(remote_env, "history", cid)

    assert ("done", None) == (first["state"], first["parent"])
    assert 0 == second.returncode, second.stderr
    assert "I was shown 1 earlier turn(s)." in second.stdout
    assert [first["turn"], turns["turns"][1]["id"]] == [t["id"] for t in turns["turns"]]
    assert turns["turns"][1]["id"] == shown["head"]
    assert (2, 2, shown["head"]) == (history["branch_turns"], history["done_turns"], history["head"])
    assert not await asyncio.to_thread(Path(remote_env["THREADLINE_DATA"]).exists)


async def test_head_stop_and_chat_through_the_service(remote_env: dict[str, str], cid: str) -> None:
    """`head` moves the head, `stop` answers, `chat` sends lines and runs commands, all over HTTP."""
    first = await threadline_json(remote_env, "send", cid, "one")
    await threadline_json(remote_env, "send", cid, "two")

    moved = await threadline_json(remote_env, "head", cid, first["turn"])
    after = await threadline_json(remote_env, "send", cid, "after the head")
    stopped = await threadline_json(remote_env, "stop", cid)
    chat = await threadline(remote_env, "chat", cid, "--json", stdin="three\n/turns\n")

    events = [json.loads(line) for line in chat.stdout.splitlines()]
    assert first["turn"] == moved["head"] == after["parent"]
    assert {"conversation": cid, "store": "default", "stop": None} == stopped
    assert 0 == chat.returncode, chat.stderr
    assert "done" == next(e for e in events if e["event"] == "turn")["state"]
    assert 3 == len(next(e for e in events if e["event"] == "turns")["turns"])


async def test_what_the_service_cannot_do_is_refused(remote_env: dict[str, str], cid: str) -> None:
    """`render` needs Temporal: refused with a coded error naming THREADLINE_URL; a wrong key is `unauthorized`."""
    render = await threadline(remote_env, "render", cid, "hello")
    wrong = await threadline({**remote_env, "THREADLINE_API_KEY": "k-wrong"}, "turns", cid)

    assert (1, True) == (render.returncode, "THREADLINE_URL" in render.stderr)
    assert "error: invalid-request" in render.stderr
    assert (1, True) == (wrong.returncode, "error: unauthorized" in wrong.stderr)


async def test_settings_through_the_service(remote_env: dict[str, str], cid: str) -> None:
    """`settings` reads and changes the budget over HTTP; a budget of 0 tokens then refuses the next send."""
    await threadline_json(remote_env, "send", cid, "one")

    before = await threadline_json(remote_env, "settings", cid)
    changed = await threadline_json(remote_env, "settings", cid, "--budget", '{"tokens": 0}')
    refused = await threadline_json(remote_env, "send", cid, "two", status=1)
    lifted = await threadline_json(remote_env, "settings", cid, "--budget", "null")
    nothing = await threadline_json(remote_env, "settings", f"{cid}-none", status=1)

    assert (True, None, []) == (before["open"], before["budget"], before["configured"])
    assert ({"tokens": 0, "cost": None}, ["budget"]) == (changed["budget"], changed["configured"])
    assert "budget-exceeded" == refused["error"]["code"]
    assert (None, ["budget"]) == (lifted["budget"], lifted["configured"])
    assert "conversation-not-found" == nothing["error"]["code"]
