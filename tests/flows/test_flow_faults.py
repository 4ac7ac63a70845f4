"""A flow whose own code fails (a validator, an extractor, a `next_step` that raises) ends, `abandoned`
with reason `failed`: the send it failed on is refused `flow-invalid` with the way out, the exception's
type is logged without its text, and the conversation takes the next message as usual."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from structlog.testing import capture_logs
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.flows import FlowActivities
from activities.language_model import OfflineModel, Providers
from core.errors import ThreadlineError
from core.models import FlowAnswer, FlowStart
from core.settings import Settings
from store.backends.folder import FolderStore
from store.backends.reader import LogCache, Stores, Threaded
from store.flows.manager import load_flows
from store.flows.progress import flow_entries
from store.log.state import Log
from tests.support.faulty_flows import SECRET
from threadline.client import Threadline
from worker import build_worker


@pytest_asyncio.fixture(name="faulty")
async def _faulty(client: Client, settings: Settings) -> AsyncIterator[Threadline]:
    """A worker that registers the faulty flows, and a client of its task queue."""
    settings = dataclasses.replace(settings, flows=("tests.support.faulty_flows",))
    async with build_worker(client, settings):
        yield Threadline(client, settings)


@pytest.mark.parametrize(
    ("flow", "error"),
    [("faulty-validator", "RuntimeError"), ("faulty-extractor", "RuntimeError"), ("faulty-next", "KeyError")],
)
async def test_a_flow_whose_code_fails_ends_and_the_conversation_goes_on(
    faulty: Threadline, settings: Settings, cid: str, flow: str, error: str
) -> None:
    """The failing answer is refused `flow-invalid` naming the way out; the flow is `abandoned`
    (`failed`, with the exception's type); the next message is the program's, and so is the one after."""
    chat = faulty.conversation("chat", id=cid)
    await chat.start_flow(flow)

    with capture_logs() as logs, pytest.raises(ThreadlineError) as refused:
        await chat.message("hello")
    view = await chat.flow()
    after = await chat.message("Anyone there?")
    again = await chat.message("Still there?")

    entries = flow_entries(Log(FolderStore(settings.stores["default"]).read(cid)))
    ended = entries[-1]["data"]
    assert "flow-invalid" == refused.value.code
    assert "start the flow again once its code is fixed" in refused.value.message
    assert ("abandoned", "failed", error) == (view.state, ended["reason"], ended["error"])
    assert (False, False) == (after.in_flow, again.in_flow)
    assert str(after.response).startswith("(offline) You said: Anyone there?")
    assert [error] == [line["error"] for line in logs if line["event"] == "flow.failed"]
    assert SECRET not in repr(logs) + refused.value.message


async def test_a_retried_answer_the_flow_failed_on_is_refused_again_and_records_nothing(
    tmp_path: Path, cid: str
) -> None:
    """The activity run again with the same request id (a worker lost after the append) finds the
    `failed` entry it wrote: the same refusal, nothing appended, never a flow answer without a turn."""
    store = FolderStore(tmp_path / "store")
    logs = LogCache(Stores({"default": lambda: Threaded(store)}))
    flows = FlowActivities(logs, load_flows(["tests.support.faulty_flows"]), Providers({"offline": OfflineModel()}))
    start = FlowStart(store="default", conversation=cid, flow="faulty-validator", request_id="start")
    answer = FlowAnswer(store="default", conversation=cid, request_id="answer", message="hello")
    await ActivityEnvironment().run(flows.start_flow, start)

    refusals = []
    for _ in range(2):
        with pytest.raises(ApplicationError) as refused:
            await ActivityEnvironment().run(flows.flow_step, answer)
        refusals.append((refused.value.type, len(store.read(cid))))

    assert "flow-invalid" == refusals[0][0]
    assert refusals[0] == refusals[1]
