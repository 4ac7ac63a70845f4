"""Acting on waiting turns over HTTP and from the `threadline` command (real HTTP on loopback, real
subprocesses, a real dev server and worker)."""

from __future__ import annotations

import asyncio
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
from threadline.acting import Waiting
from threadline.client import Threadline, connect
from threadline.http import create_app
from worker import build_worker


@pytest_asyncio.fixture(name="shop")
async def _shop(client: Client, settings: Settings) -> AsyncIterator[Threadline]:
    settings = dataclasses.replace(settings, programs=("tests.support.acting_programs",))
    async with build_worker(client, settings):
        yield await connect(settings, client=client)


@pytest_asyncio.fixture(name="http")
async def _http(shop: Threadline) -> AsyncIterator[httpx.AsyncClient]:
    async with serving(create_app(shop)) as http:
        yield http


@pytest.fixture(name="cli")
def _cli(settings: Settings) -> dict[str, str]:
    return clean_env(
        temporal_address=settings.address,
        data=str(settings.data),
        task_queue=settings.task_queue,
        payloads=str(settings.payload_folder),
        programs="tests.support.acting_programs",
    )


async def waiting_turn(shop: Threadline, cid: str, message: str = "Refund order 7", **options: Any) -> str:
    with pytest.raises(Waiting) as waiting:
        await shop.conversation("careful_shop", id=cid, **options)(message)
    return waiting.value.turn.id


def count(shop: Threadline, cid: str) -> int:
    return len(FolderStore(shop.settings.store_folder("default")).read(cid))


# ----- HTTP


async def test_http_lists_the_question_then_an_approval_resumes_the_turn(
    shop: Threadline, http: httpx.AsyncClient, cid: str
) -> None:
    """GET lists what the turn asks; POST .../approvals records the answer and the turn ends done."""
    turn = await waiting_turn(shop, cid)

    asked = (await http.get(f"/v1/conversations/{cid}/turns/{turn}")).json()
    answered = await http.post(
        f"/v1/conversations/{cid}/turns/{turn}/approvals", json={"verdict": "yes", "by": "ann", "wait": True}
    )

    assert ("waiting", ["refund"]) == (asked["state"], [a["name"] for a in asked["approvals"]])
    assert 200 == answered.status_code
    assert ("done", []) == (answered.json()["state"], answered.json()["approvals"])


async def test_http_refusals_are_coded_and_record_nothing(shop: Threadline, http: httpx.AsyncClient, cid: str) -> None:
    """An unknown invocation 404 `approval-unknown`; a done turn 409 `turn-state`; a bad verdict 422;
    resuming a turn that still waits 409 `turn-state`; nothing is recorded."""
    turn = await waiting_turn(shop, cid)
    before = count(shop, cid)
    url = f"/v1/conversations/{cid}/turns/{turn}"

    answers = [
        await http.post(f"{url}/approvals", json={"verdict": "yes", "invocation": 9}),
        await http.post(f"{url}/approvals", json={"verdict": "maybe"}),
        await http.post(f"{url}/resume", json={}),
    ]

    codes = [(a.status_code, a.json()["error"]["code"]) for a in answers]
    assert [(404, "approval-unknown"), (422, "invalid-request"), (409, "turn-state")] == codes
    assert before == count(shop, cid)


async def test_http_abandon_and_a_queued_send_while_waiting(
    shop: Threadline, http: httpx.AsyncClient, cid: str
) -> None:
    """A send while the head waits is refused 409; `abandon` ends the turn, and then sends go on."""
    turn = await waiting_turn(shop, cid)

    busy = await send(http, cid, program="careful_shop", inputs={"request": "again"}, wait=True)
    abandoned = await http.post(f"/v1/conversations/{cid}/turns/{turn}/abandon")
    again = await http.post(f"/v1/conversations/{cid}/turns/{turn}/abandon")

    assert (409, "conversation-busy") == (busy.status_code, busy.json()["error"]["code"])
    assert (200, "abandoned") == (abandoned.status_code, abandoned.json()["state"])
    assert (409, "turn-state") == (again.status_code, again.json()["error"]["code"])


# ----- the command


async def test_threadline_show_lists_the_question_and_approve_answers_it(
    shop: Threadline, cli: dict[str, str], cid: str
) -> None:
    """`show` prints what the waiting turn asks; `approve --deny --reason` answers; the model is told."""
    turn = await waiting_turn(shop, cid)

    shown = await threadline(cli, "show", cid)
    denied = await threadline_json(cli, "approve", cid, turn, "--deny", "--reason", "no receipt")

    assert 0 == shown.returncode, shown.stderr
    assert "? refund" in shown.stdout
    assert "done" == denied["state"]
    assert "The person did not allow this call. Reason: no receipt" in denied["result"]


async def test_threadline_approve_refusals_exit_1_with_their_code(
    shop: Threadline, cli: dict[str, str], cid: str
) -> None:
    """An invocation the turn never asked: `error: approval-unknown`, exit 1, nothing recorded."""
    turn = await waiting_turn(shop, cid)
    before = count(shop, cid)

    refused = await threadline(cli, "approve", cid, turn, "--invocation", "5")

    assert 1 == refused.returncode
    assert "approval-unknown" in refused.stderr
    assert before == count(shop, cid)


async def test_threadline_abandon_and_resume(shop: Threadline, cli: dict[str, str], cid: str) -> None:
    """`resume` of a turn that still waits is refused; `abandon` ends it."""
    turn = await waiting_turn(shop, cid)

    resumed = await threadline(cli, "resume", cid, turn)
    abandoned = await threadline_json(cli, "abandon", cid, turn)

    assert (1, True) == (resumed.returncode, "turn-state" in resumed.stderr)
    assert "abandoned" == abandoned["state"]


async def test_threadline_chat_asks_inline_and_goes_on(shop: Threadline, cli: dict[str, str], cid: str) -> None:
    """`threadline chat` asks about the call the turn waits for; `y` allows it and the answer follows."""
    chatted = await threadline(cli, "chat", cid, "--program", "careful_shop", stdin="Refund order 7\ny\n")

    assert 0 == chatted.returncode, chatted.stderr
    assert "waits for your answer" in chatted.stdout
    assert "Tools said: order_status: order Refund order 7 is in Leeds; refund: refunded 0" in chatted.stdout
    turn = (await shop.conversation("careful_shop", id=cid).turns())[-1]
    assert ("done", 2) == (turn.state, turn.attempt)
    await asyncio.sleep(0)


async def test_http_a_send_may_ask_about_nothing(shop: Threadline, http: httpx.AsyncClient, cid: str) -> None:
    """`approve: []` on one send: its refund asks nobody and the turn ends done at once."""
    body = {"program": "careful_shop", "inputs": {"request": "Refund order 3"}, "approve": [], "wait": True}

    answered = await send(http, cid, **body)

    assert (200, "done") == (answered.status_code, answered.json()["state"])


async def test_tool_exchanges_are_tool_messages(http: httpx.AsyncClient, shop: Threadline, cid: str) -> None:
    """`messages()` and `GET /v1/conversations/{id}` show a turn's tool calls as the assistant's `tool_calls`
    and each result as a `role: "tool"` message, between the user's message and the answer."""
    chat = shop.conversation("shop", id=cid)
    answer = await chat("Where is order 7?")

    got = (await http.get(f"/v1/conversations/{cid}")).json()["messages"]
    messages = await chat.messages()

    assert ["user", "assistant", "tool", "tool", "assistant"] == [m["role"] for m in got]
    assert ["order_status", "refund"] == [c["name"] for c in got[1]["tool_calls"]]
    assert [c["id"] for c in got[1]["tool_calls"]] == [m["tool_call_id"] for m in got[2:4]]
    assert ["order_status", "refund"] == [m["name"] for m in got[2:4]]
    assert answer == got[-1]["content"]
    assert [m["role"] for m in got] == [m["role"] for m in messages]
