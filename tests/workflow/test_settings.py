"""A conversation's settings changed while it runs (the `configure` update), on a real dev server and
worker, the model at the fake provider: a budget raised lets the refused turn run; a budget lowered
refuses the next turn `budget-exceeded` before its model is asked, with nothing recorded, whatever
budget the sender's handle carries; the change survives continue-as-new; HTTP, the CLI and the
Temporal contract spell it the same way."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator

import httpx
import pytest
import pytest_asyncio
from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.worker import Replayer, Worker

from core.errors import ErrorCode, ThreadlineError
from core.models import Budget, ConversationSettings, ConversationStatus, SettingsSend
from core.settings import Settings
from core.temporal import workflow_id
from tests.clients.test_minimal_start import start_bare
from tests.support.fakeprovider import FakeProvider
from tests.support.service_kit import send, serving
from tests.surfaces.test_cli import settings_env, threadline
from tests.workflow.test_budgets import LM, PRICES, TURN, records
from threadline.client import Threadline, connect
from threadline.http import create_app
from worker import build_worker
from workflows.conversation import ConversationWorkflow


@pytest_asyncio.fixture(name="priced")
async def _priced(client: Client, settings: Settings, fake: FakeProvider) -> AsyncIterator[Threadline]:
    """A worker with a price table whose OpenAI provider is the fake server; runs of 2 turns."""
    from activities.providers import build_providers

    settings = dataclasses.replace(settings, prices=PRICES, turns_per_run=2)
    env = {"OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": fake.openai_url}
    async with (
        httpx.AsyncClient() as http,
        build_worker(client, settings, providers=build_providers(settings, http, env=env)),
    ):
        yield await connect(settings, client=client)


async def test_a_raised_budget_lets_the_refused_turn_run(priced: Threadline, fake: FakeProvider, cid: str) -> None:
    """500 tokens a turn: the second crosses 520 and is refused; raised, the same send runs, and so do the
    sends of another handle that still carries the old budget (the conversation's setting holds)."""
    chat = priced.conversation("tutor", id=cid, lm=LM, budget={"tokens": 520})
    other = priced.conversation("tutor", id=cid, lm=LM, budget={"tokens": 520})
    fake.add(TURN, TURN, TURN)
    await chat.predict("first")
    with pytest.raises(ThreadlineError) as refused:
        await chat.predict("second")

    raised = await chat.configure(budget={"tokens": 2000})
    second = await chat.predict("second")
    third = await other.predict("third")

    assert ErrorCode.BUDGET_EXCEEDED == refused.value.code
    assert ConversationSettings(budget=Budget(tokens=2000), configured=["budget"]) == raised
    assert ("done", "done") == (second.state, third.state)
    assert raised == await other.settings()


async def test_a_lowered_budget_refuses_the_next_turn_and_records_nothing(
    priced: Threadline, fake: FakeProvider, cid: str
) -> None:
    """Lowered through another handle, the budget refuses the next send of the handle that carries a
    larger one, before its model is asked; `{}` then lifts the limit."""
    chat = priced.conversation("tutor", id=cid, lm=LM, budget={"tokens": 10_000})
    fake.add(TURN, TURN)
    await chat.predict("first")
    lowered = await priced.conversation(id=cid).configure(budget={"tokens": 520})
    before, asked = records(priced, cid), len(fake.requests)

    with pytest.raises(ThreadlineError) as refused:
        await chat.predict("second")

    assert Budget(tokens=520) == lowered.budget
    assert ErrorCode.BUDGET_EXCEEDED == refused.value.code
    assert (before, asked) == (records(priced, cid), len(fake.requests))
    assert ConversationSettings(configured=["budget"]) == await chat.configure(budget={})
    assert "done" == (await chat.predict("second")).state


async def test_a_changed_budget_survives_continue_as_new(
    priced: Threadline, client: Client, fake: FakeProvider, cid: str
) -> None:
    """Runs of 2 turns: the budget changed in the first run holds in the second."""
    chat = priced.conversation("tutor", id=cid, lm=LM)
    handle = client.get_workflow_handle(workflow_id("default", cid))
    fake.add(TURN, TURN)
    await chat.predict("first")
    first_run = (await handle.describe()).run_id
    await priced.conversation(id=cid).configure(budget={"tokens": 1020})
    await chat.predict("second")  # the run's last: the next send finds a new run
    before = records(priced, cid)

    with pytest.raises(ThreadlineError) as refused:
        await chat.predict("third")

    assert first_run != (await handle.describe()).run_id
    assert ErrorCode.BUDGET_EXCEEDED == refused.value.code
    assert before == records(priced, cid)
    status = await handle.query("status", result_type=ConversationStatus)
    assert ConversationSettings(budget=Budget(tokens=1020), configured=["budget"]) == status.settings


async def test_a_change_naming_nothing_or_a_wrong_budget_is_refused_and_changes_nothing(
    priced: Threadline, client: Client, fake: FakeProvider, cid: str
) -> None:
    """The Python API and the workflow itself (any SDK may ask it) refuse `invalid-request`."""
    chat = priced.conversation("tutor", id=cid, lm=LM, budget={"tokens": 520})
    fake.add(TURN)
    await chat.predict("first")
    handle = client.get_workflow_handle(workflow_id("default", cid))

    for wrong in ({"tokens": -1}, {"usd": 1}, {"tokens": "many"}):
        with pytest.raises(ThreadlineError) as refused:
            await chat.configure(budget=wrong)
        assert ErrorCode.INVALID_REQUEST == refused.value.code
    with pytest.raises(ThreadlineError) as empty:
        await chat.configure()
    with pytest.raises(WorkflowUpdateFailedError) as raw:
        await handle.execute_update("configure", SettingsSend(), result_type=ConversationSettings)

    assert ErrorCode.INVALID_REQUEST == empty.value.code
    assert ErrorCode.INVALID_REQUEST == getattr(raw.value.cause, "type", None)
    assert ConversationSettings(budget=Budget(tokens=520)) == await chat.settings()


async def test_http_settings_route_reads_and_changes_the_budget(
    priced: Threadline, fake: FakeProvider, cid: str
) -> None:
    """`GET` and `PATCH .../settings`: a refused send runs once the budget is raised; a wrong body is 422
    with nothing changed; `null` lifts the limit; an unknown conversation is 404."""
    fake.add(TURN, TURN)
    async with serving(create_app(priced)) as http:
        await http.post(
            "/v1/conversations",
            json={"program": "tutor", "id": cid, "lm": LM, "system_prompt": "Be brief.", "budget": {"tokens": 520}},
        )
        first = await send(http, cid, message="first", lm=LM, wait=True)
        refused = await send(http, cid, message="second", lm=LM, wait=True)
        path = f"/v1/conversations/{cid}/settings"
        read = await http.get(path)
        wrong = [await http.patch(path, json=body) for body in ({"budget": {"tokens": -1}}, {"lm": "x"}, {})]
        raised = await http.patch(path, json={"budget": {"tokens": 2000}})
        second = await send(http, cid, message="second", lm=LM, wait=True)
        lifted = await http.patch(path, json={"budget": None})
        unknown = await http.get(f"/v1/conversations/{cid}-none/settings")

    assert ("done", 409) == (first.json()["state"], refused.status_code)
    assert {"conversation": cid, "store": "default", "open": True, "budget": {"tokens": 520, "cost": None}} == {
        k: v for k, v in read.json().items() if k != "configured"
    }
    assert [422, 422, 422] == [answer.status_code for answer in wrong]
    assert ["invalid-request"] * 3 == [answer.json()["error"]["code"] for answer in wrong]
    assert (200, {"tokens": 2000, "cost": None}, ["budget"]) == (
        raised.status_code,
        raised.json()["budget"],
        raised.json()["configured"],
    )
    assert (200, "done") == (second.status_code, second.json()["state"])
    assert (200, None) == (lifted.status_code, lifted.json()["budget"])
    assert 404 == unknown.status_code


async def test_threadline_settings_prints_and_changes_the_budget(
    priced: Threadline, settings: Settings, fake: FakeProvider, cid: str
) -> None:
    """`threadline settings ID [--budget JSON]`: the send refused over budget runs once it is raised."""
    env = settings_env(settings)
    fake.add(TURN, TURN)
    budget = ["--lm", LM, "--budget", '{"tokens": 520}']
    await threadline(env, "send", cid, "first", *budget)
    refused = await threadline(env, "send", cid, "second", *budget)
    shown = await threadline(env, "settings", cid)
    raised = await threadline(env, "settings", cid, "--budget", '{"tokens": 2000}')
    second = await threadline(env, "send", cid, "second", *budget)
    wrong = await threadline(env, "settings", cid, "--budget", '{"tokens": -5}')
    closed = await threadline(env, "settings", f"{cid}-none")

    assert (1, True) == (refused.returncode, "budget-exceeded" in refused.stderr)
    assert "budget      520 tokens" in shown.stdout, shown.stderr
    assert (0, True) == (raised.returncode, "2000 tokens" in raised.stdout)
    assert 0 == second.returncode, second.stderr
    assert (1, True) == (wrong.returncode, "invalid-request" in wrong.stderr)
    assert (0, True) == (closed.returncode, "no running workflow" in closed.stdout)


async def test_a_bare_start_configured_by_plain_json_holds_the_budget_and_replays(
    client: Client, settings: Settings, worker: Worker, cid: str
) -> None:
    """A client that knows only docs/workflow.md starts the conversation and configures it at once, by
    plain JSON: the budget holds (the send is refused before its model is asked), the `status` query
    shows it, and the history replays."""
    handle = await start_bare(client, settings, cid)

    changed = await handle.execute_update("configure", {"budget": {"tokens": 0}})
    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await handle.execute_update("send", {"request_id": "r-1", "inputs": {"message": "Hello"}})
    status = await handle.query("status", result_type=ConversationStatus)

    assert {"budget": {"tokens": 0, "cost": None}, "configured": ["budget"]} == changed
    assert ErrorCode.BUDGET_EXCEEDED == getattr(refused.value.cause, "type", None)
    assert Budget(tokens=0) == status.settings.budget
    await Replayer(workflows=[ConversationWorkflow], data_converter=client.data_converter).replay_workflow(
        await handle.fetch_history()
    )
