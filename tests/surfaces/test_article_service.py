"""The article's conversation service, called exactly as the article calls it, over real HTTP on
loopback with a real dev server and worker: create, the order flow through `/messages`, the
conversation and its history, delete, health; 404 for unknown conversations on every route."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio
from temporalio.worker import Worker

from store.backends.folder import FolderStore
from store.flows.progress import flow_entries
from store.log.state import Log
from tests.support.service_kit import serving
from threadline.client import Threadline
from threadline.http import create_app

ORDER = [
    ("Two pizzas, please.", "How many would you like?", True),
    ("lots", "Please enter a valid number.", True),
    ("3", "What's your email address for the confirmation?", True),
    ("nope", "Please enter a valid email address.", True),
    ("ada@example.com", "Great! I'll send the confirmation to your email. Is there anything else?", True),
    ("No, that's all.", "Flow completed", True),
]
"""The article's order flow: each message, the response, and whether the flow took it."""


@pytest_asyncio.fixture(name="http")
async def _http(tl: Threadline) -> AsyncIterator[httpx.AsyncClient]:
    async with serving(create_app(tl)) as http:
        yield http


async def create(http: httpx.AsyncClient, **body: Any) -> str:
    created = await http.post("/v1/conversations", json={"system_prompt": "", **body})
    assert 201 == created.status_code, created.text
    return str(created.json()["conversation_id"])


async def message(http: httpx.AsyncClient, conversation: str, text: str) -> dict[str, Any]:
    answered = await http.post(f"/v1/conversations/{conversation}/messages", json={"message": text})
    assert 200 == answered.status_code, answered.text
    reply: dict[str, Any] = answered.json()
    return reply


async def test_the_order_flow_end_to_end(http: httpx.AsyncClient, worker: Worker, folder: Path) -> None:
    """Invalid answers re-prompt with `on_invalid`, valid ones advance, completion returns `flow_data`
    once, and the conversation then goes on freely with the program's answers."""
    conversation = await create(http)

    started = (await http.post(f"/v1/conversations/{conversation}/flows", json={"flow_name": "order"})).json()
    replies = [await message(http, conversation, text) for text, _, _ in ORDER]
    after = await message(http, conversation, "When will it arrive?")

    assert ("order", "Welcome! What product would you like to order?") == (started["flow_started"], started["prompt"])
    assert [(response, in_flow) for _, response, in_flow in ORDER] == [(r["response"], r["in_flow"]) for r in replies]
    assert [False] * 5 + [True] == [r["flow_completed"] for r in replies]
    assert [None] * 5 + [
        {"welcome": "Two pizzas, please.", "quantity": 3, "email": "ada@example.com", "confirm": "No, that's all."}
    ] == [r["flow_data"] for r in replies]
    assert list(range(1, 7)) == [r["turn_count"] for r in replies]  # the flow's start is no user message
    assert (False, False, None, 7) == (
        after["in_flow"],
        after["flow_completed"],
        after["flow_data"],
        after["turn_count"],
    )
    assert after["response"].startswith("(offline) You said: When will it arrive?")
    kinds = [str(e["entry"]) for e in flow_entries(Log(FolderStore(folder).read(conversation)))]
    assert ["started", "answered", "invalid", "answered", "invalid", "answered", "answered", "completed"] == kinds


async def test_the_conversation_and_its_history_show_the_articles_keys(http: httpx.AsyncClient, worker: Worker) -> None:
    """GET answers `turn_count`, `created_at`, `updated_at` and `messages` (role, content, timestamp);
    the history answers `summary`, `key_facts`, `recent_turn_count` and `original_turn_count`."""
    conversation = await create(http, system_prompt="You are terse.", metadata={"user": "u-1"})
    await message(http, conversation, "Hello")

    state = (await http.get(f"/v1/conversations/{conversation}")).json()
    history = (await http.get(f"/v1/conversations/{conversation}/history")).json()

    assert (1, "You are terse.", {"user": "u-1"}) == (state["turn_count"], state["system_prompt"], state["metadata"])
    assert ["user", "assistant"] == [m["role"] for m in state["messages"]]
    assert "Hello" == state["messages"][0]["content"]
    assert all(m["timestamp"] for m in state["messages"])
    assert state["created_at"] <= state["messages"][0]["timestamp"] <= state["updated_at"]
    assert {
        "summary": None,
        "key_facts": [],
        "recent_turn_count": 1,
        "original_turn_count": 1,
    }.items() <= history.items()


async def test_every_turn_is_shown_the_system_prompt_and_metadata(
    http: httpx.AsyncClient, worker: Worker, tl: Threadline, folder: Path
) -> None:
    """The setup is recorded once; each turn records it among the sections it was shown, and the
    request a turn would send carries it in its instruction."""
    conversation = await create(http, system_prompt="You are a pirate.", metadata={"ship": "Ada"})
    first = await message(http, conversation, "Ahoy")

    turn = (await http.get(f"/v1/conversations/{conversation}/turns/{first['turn']}")).json()
    state = (await http.get(f"/v1/conversations/{conversation}")).json()
    preview = await tl.conversation("chat", id=conversation).render("Arr")

    shown = Log(FolderStore(folder).read(conversation)).turns[first["turn"]].record["context"]["sections"]
    assert ["You are a pirate.", 'Metadata of this conversation: {"ship": "Ada"}'] == shown
    assert "chat" == state["program"]
    assert turn["started_at"] <= turn["ended_at"]
    assert "You are a pirate." in str(preview.request)


async def test_an_unknown_flow_is_400_and_records_nothing(
    http: httpx.AsyncClient, worker: Worker, folder: Path
) -> None:
    """The article answers 400 for a flow it does not know: `flow-unknown`, and no turn is recorded."""
    conversation = await create(http)

    refused = await http.post(f"/v1/conversations/{conversation}/flows", json={"flow_name": "nope"})

    assert (400, "flow-unknown") == (refused.status_code, refused.json()["error"]["code"])
    assert [] == Log(FolderStore(folder).read(conversation)).order


async def test_delete_answers_deleted_and_keeps_the_records(
    http: httpx.AsyncClient, worker: Worker, folder: Path
) -> None:
    """`DELETE` answers `{"status": "deleted"}`; the records stay (and say so), and GET still reads them."""
    conversation = await create(http)
    await message(http, conversation, "Hello")

    deleted = await http.delete(f"/v1/conversations/{conversation}")
    after = await http.get(f"/v1/conversations/{conversation}")

    assert (200, "deleted", True) == (deleted.status_code, deleted.json()["status"], deleted.json()["records_kept"])
    assert (200, 1) == (after.status_code, after.json()["turn_count"])


async def test_health_answers_healthy(http: httpx.AsyncClient) -> None:
    """`GET /health` answers the article's `{"status": "healthy"}`."""
    health = await http.get("/health")

    assert (200, {"status": "healthy"}) == (health.status_code, health.json())


UNKNOWN_ROUTES = [
    ("GET", "/v1/conversations/{cid}", None),
    ("GET", "/v1/conversations/{cid}/history", None),
    ("GET", "/v1/conversations/{cid}/turns", None),
    ("GET", "/v1/conversations/{cid}/turns/t-1", None),
    ("GET", "/v1/conversations/{cid}/turns/t-1/events", None),
    ("POST", "/v1/conversations/{cid}/turns/t-1/stop", None),
    ("POST", "/v1/conversations/{cid}/stop", None),
    ("POST", "/v1/conversations/{cid}/head", {"turn": "t-1"}),
    ("DELETE", "/v1/conversations/{cid}", None),
    ("POST", "/v1/conversations/{cid}/messages", {"message": "Hi"}),
    ("POST", "/v1/conversations/{cid}/flows", {"flow_name": "order"}),
    ("GET", "/v1/conversations/{cid}/flows", None),
    ("POST", "/v1/conversations/{cid}/flows/stop", None),
    ("POST", "/v1/conversations/{cid}/transcript", {"messages": [{"role": "user", "content": "Hi"}]}),
]


@pytest.mark.parametrize(("method", "path", "body"), UNKNOWN_ROUTES, ids=lambda v: str(v))
async def test_an_unknown_conversation_is_404_on_every_route(
    http: httpx.AsyncClient, worker: Worker, folder: Path, cid: str, method: str, path: str, body: Any
) -> None:
    """Every route but the first send answers 404 `conversation-not-found` for a conversation with no
    records and no workflow, and records nothing."""
    answered = await http.request(method, path.format(cid=cid), json=body)

    assert (404, "conversation-not-found") == (answered.status_code, answered.json()["error"]["code"])
    assert [] == FolderStore(folder).conversations()


async def test_openapi_describes_every_endpoint_with_examples(http: httpx.AsyncClient) -> None:
    """`/openapi.json` (shown at `/docs`) gives every operation a description, and every request body an example."""
    spec = (await http.get("/openapi.json")).json()
    schemas = spec["components"]["schemas"]

    operations = [(path, method, op) for path, item in spec["paths"].items() for method, op in item.items()]
    undescribed = [f"{method} {path}" for path, method, op in operations if not op.get("description")]
    bodies = [
        op["requestBody"]["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[-1]
        for _, _, op in operations
        if "requestBody" in op
    ]

    assert [] == undescribed
    assert [] == [name for name in bodies if not schemas[name].get("examples")]
    assert {"/v1/conversations/{conversation_id}/messages", "/v1/conversations/{conversation_id}/flows"} <= set(
        spec["paths"]
    )


async def test_turn_count_counts_user_messages_only(http: httpx.AsyncClient, worker: Worker) -> None:
    """An imported assistant message is no user turn (`turn_count` 0); a user message then counts one."""
    conversation = await create(http)
    url = f"/v1/conversations/{conversation}/transcript"

    alone = await http.post(url, json={"messages": [{"role": "assistant", "content": "Welcome!"}]})
    state = (await http.get(f"/v1/conversations/{conversation}")).json()
    after = await message(http, conversation, "Hello")

    assert (201, 0) == (alone.status_code, alone.json()["turn_count"])
    assert (0, ["assistant"]) == (state["turn_count"], [m["role"] for m in state["messages"]])
    assert 1 == after["turn_count"]


async def test_a_messages_metadata_is_kept_and_returned(http: httpx.AsyncClient, worker: Worker) -> None:
    """Per-message `metadata` given with a message is kept with its turn and returned with the message."""
    conversation = await create(http)

    sent = await http.post(
        f"/v1/conversations/{conversation}/messages", json={"message": "Hello", "metadata": {"channel": "sms"}}
    )
    await message(http, conversation, "Again")
    got = (await http.get(f"/v1/conversations/{conversation}")).json()["messages"]

    assert 200 == sent.status_code
    assert [{"channel": "sms"}, {}] == [m["metadata"] for m in got if m["role"] == "user"]
