"""Spend limits on a real dev server and worker, the model at the fake provider: a budget in tokens or
money refuses the turn that would cross it `budget-exceeded` before the model is asked, with nothing
recorded; the turns before it answered; `render` reports the request's tokens and cost; a store's budget
(`THREADLINE_BUDGETS`) bounds each of its conversations."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import pytest_asyncio
from temporalio.client import Client

from core.budgets import Price, parse_budgets, parse_prices
from core.errors import ErrorCode, ThreadlineError
from core.models import Budget
from core.settings import Settings
from store.backends.folder import FolderStore
from store.log.spend import spent
from store.log.state import Log
from tests.support.fakeprovider import FakeProvider, Reply
from tests.support.service_kit import send, serving
from tests.surfaces.test_cli import settings_env, threadline
from threadline.client import Threadline, connect
from threadline.http import create_app
from worker import build_worker

LM = "openai:gpt-test"
PRICES = {"gpt-test": Price(input=1000.0, output=2000.0)}
"""Per million tokens: a turn reporting 400 read and 100 written costs 0.4 + 0.2 = 0.6."""
TURN = Reply("an answer", input_tokens=400, output_tokens=100)
"""500 tokens and 0.6 spent per turn: two turns fit a budget of 1020 tokens (or 1.21), a third does not."""


@pytest_asyncio.fixture(name="priced")
async def _priced(client: Client, settings: Settings, fake: FakeProvider) -> AsyncIterator[Threadline]:
    """A worker with a price table whose OpenAI provider is the fake server."""
    from activities.providers import build_providers

    settings = dataclasses.replace(settings, prices=PRICES)
    env = {"OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": fake.openai_url}
    async with (
        httpx.AsyncClient() as http,
        build_worker(client, settings, providers=build_providers(settings, http, env=env)),
    ):
        yield await connect(settings, client=client)


def records(tl: Threadline, cid: str) -> list[dict[str, Any]]:
    return FolderStore(tl.settings.store_folder("default")).read(cid)


@pytest.mark.parametrize("budget", [{"tokens": 1020}, {"cost": 1.21}], ids=["tokens", "cost"])
async def test_a_budget_refuses_the_turn_that_would_cross_it_and_records_nothing(
    priced: Threadline, fake: FakeProvider, cid: str, budget: dict[str, Any]
) -> None:
    """Two turns answered; the third would cross the budget: refused before its model is asked, the log
    as it was; `render` showed the figures the refusal counted."""
    chat = priced.conversation("tutor", id=cid, lm=LM, budget=budget)
    fake.add(TURN, TURN, TURN)
    answered = [await chat.predict("first"), await chat.predict("second")]
    rendered = await chat.render("third")
    before, asked = records(priced, cid), len(fake.requests)

    with pytest.raises(ThreadlineError) as refused:
        await chat.predict("third")

    assert ["done", "done"] == [turn.state for turn in answered]
    assert ErrorCode.BUDGET_EXCEEDED == refused.value.code
    assert before == records(priced, cid)  # nothing recorded
    assert asked == len(fake.requests)  # the model was not asked
    assert (1000, pytest.approx(1.2)) == dataclasses.astuple(spent(Log(before), PRICES))
    assert rendered.tokens is not None
    assert 20 < rendered.tokens
    assert pytest.approx(rendered.tokens * 1000.0 / 1_000_000) == rendered.cost


async def test_a_send_over_budget_asks_no_topic_classifier_and_records_no_topic(
    priced: Threadline, fake: FakeProvider, cid: str
) -> None:
    """With topics tracked, a send is classified (a model call, recorded) before it is placed: a send over
    budget is refused before that call too."""
    chat = priced.conversation("tutor", id=cid, lm=LM, context={"topics": "track"}, budget={"tokens": 520})
    topic = Reply(outputs={"shift": "continuation", "confidence": 0.9, "result": "fractions"})
    fake.add(TURN, topic, TURN)
    await chat.predict("What is 1/2 + 1/3?")  # a first message is a new topic without a model call
    before, asked = records(priced, cid), len(fake.requests)

    with pytest.raises(ThreadlineError) as refused:
        await chat.predict("And 1/4?")

    assert ErrorCode.BUDGET_EXCEEDED == refused.value.code
    assert (before, asked) == (records(priced, cid), len(fake.requests))


async def test_render_reports_tokens_and_no_cost_for_a_model_without_a_price(
    priced: Threadline, fake: FakeProvider, cid: str
) -> None:
    """The estimate grows with what the request shows; a model missing from the table has no cost."""
    chat = priced.conversation("tutor", id=cid, lm=LM)
    fake.add(TURN)
    first = await chat.render("a question")
    await chat.predict("a question")
    second = await chat.render("a question")
    unpriced = await chat.render("a question", lm="openai:gpt-other")

    assert first.tokens is not None
    assert second.tokens is not None
    assert second.tokens > first.tokens  # the first exchange is shown now
    assert first.cost == pytest.approx(first.tokens / 1000)
    assert (second.tokens, None) == (unpriced.tokens, unpriced.cost)


async def test_a_cost_budget_with_an_unpriced_model_is_refused_invalid_request(priced: Threadline, cid: str) -> None:
    """Money cannot be counted without a price: the send is refused before anything is recorded."""
    chat = priced.conversation("tutor", id=cid, lm="openai:gpt-other", budget={"cost": 1.0})

    with pytest.raises(ThreadlineError) as refused:
        await chat.predict("hello")

    assert ErrorCode.INVALID_REQUEST == refused.value.code
    assert [] == records(priced, cid)


async def test_http_create_sets_the_budget_and_a_send_over_it_answers_409(
    priced: Threadline, fake: FakeProvider, cid: str
) -> None:
    """The budget given when the conversation is made holds for the sends after it (which name none)."""
    fake.add(TURN, TURN)
    async with serving(create_app(priced)) as http:
        made = await http.post(
            "/v1/conversations",
            json={"program": "tutor", "id": cid, "lm": LM, "system_prompt": "Be brief.", "budget": {"tokens": 520}},
        )
        first = await send(http, cid, message="first", lm=LM, wait=True)
        before = records(priced, cid)
        second = await send(http, cid, message="second", lm=LM, wait=True)
        wrong = await http.post("/v1/conversations", json={"id": f"{cid}-x", "budget": {"tokens": -1}})

    assert (201, 200, "done") == (made.status_code, first.status_code, first.json()["state"])
    assert (409, "budget-exceeded") == (second.status_code, second.json()["error"]["code"])
    assert before == records(priced, cid)
    assert 422 == wrong.status_code


async def test_threadline_send_takes_a_budget_and_render_prints_the_price(
    priced: Threadline, settings: Settings, fake: FakeProvider, cid: str
) -> None:
    """`threadline send --budget '{...}'`: the send over it exits 1 `budget-exceeded`, nothing recorded;
    `threadline render` prints the tokens and cost beside the request."""
    env = settings_env(settings)
    fake.add(TURN, TURN)
    budget = ["--lm", LM, "--budget", '{"tokens": 520}']
    first = await threadline(env, "send", cid, "first", *budget)
    rendered = await threadline(env, "render", cid, "second", "--lm", LM)
    before = records(priced, cid)
    second = await threadline(env, "send", cid, "second", *budget)
    wrong = await threadline(env, "send", f"{cid}-x", "first", "--budget", '{"tokens": "many"}')

    assert 0 == first.returncode, first.stderr
    assert "tokens  about " in rendered.stdout
    assert "cost    about 0.0" in rendered.stdout
    assert (1, True) == (second.returncode, "budget-exceeded" in second.stderr)
    assert before == records(priced, cid)
    assert (1, True) == (wrong.returncode, "invalid-request" in wrong.stderr)


async def test_a_store_budget_bounds_every_conversation_of_the_store_beside_their_own(
    client: Client, settings: Settings, fake: FakeProvider, cid: str
) -> None:
    """`THREADLINE_BUDGETS`: each conversation of the store may spend that much, whatever its own budget
    says; a conversation's own smaller budget still holds."""
    from activities.providers import build_providers

    settings = dataclasses.replace(settings, budgets={"default": Budget(tokens=520)})
    env = {"OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": fake.openai_url}
    fake.add(TURN, TURN)
    async with (
        httpx.AsyncClient() as http,
        build_worker(client, settings, providers=build_providers(settings, http, env=env)),
    ):
        tl = await connect(settings, client=client)
        roomy = tl.conversation("tutor", id=cid, lm=LM, budget={"tokens": 10_000})
        other = tl.conversation("tutor", id=f"{cid}-2", lm=LM, budget={"tokens": 1})
        first = await roomy.predict("first")
        before = records(tl, cid)
        with pytest.raises(ThreadlineError) as over_store:
            await roomy.predict("second")
        with pytest.raises(ThreadlineError) as over_own:
            await other.predict("first")

    assert "done" == first.state
    assert ErrorCode.BUDGET_EXCEEDED == over_store.value.code
    assert ErrorCode.BUDGET_EXCEEDED == over_own.value.code
    assert before == records(tl, cid)
    assert [] == records(tl, f"{cid}-2")


def test_the_price_table_is_read_from_its_variable() -> None:
    """`THREADLINE_PRICES`: per million tokens; a wrong shape is `invalid-request`."""
    assert {"gpt-4o-mini": Price(0.15, 0.6)} == parse_prices('{"gpt-4o-mini": {"input": 0.15, "output": 0.6}}')
    assert {} == Settings.from_env({}).prices
    for wrong in ('["x"]', '{"m": {"input": "1"}}', '{"m": {"in": 1}}', "{"):
        with pytest.raises(ThreadlineError) as refused:
            Settings.from_env({"THREADLINE_PRICES": wrong})
        assert ErrorCode.INVALID_REQUEST == refused.value.code
    assert {"team": Budget(tokens=5, cost=0.5)} == parse_budgets('{"team": {"tokens": 5, "cost": 0.5}}')
    for wrong in ('{"team": 5}', '{"team": {"tokens": -1}}', '{"team": {"tokens": "5"}}', '{"team": {"usd": 1}}'):
        with pytest.raises(ThreadlineError) as refused:
            Settings.from_env({"THREADLINE_BUDGETS": wrong})
        assert ErrorCode.INVALID_REQUEST == refused.value.code
