"""Approval deadlines on Temporal's time-skipping test server: a question nobody answers is denied by
its deadline (recorded as an answer by `deadline`) even when the worker restarts and the run continues
as new meanwhile; an escalation changes who may answer; reminders are counted in the `status` query;
a wrong rule is refused `invalid-request` with nothing recorded. Hours pass in seconds."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from temporalio.client import WorkflowHandle
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer

import threadline
from core.errors import ErrorCode, ThreadlineError
from core.models import ConversationState, ConversationStatus
from core.settings import Settings
from core.temporal import workflow_id
from store.backends.folder import FolderStore
from tests.support import acting_programs
from tests.support.timeskip import skipping_settings, time_skipping
from threadline.acting import Waiting
from threadline.client import Conversation, connect
from worker import build_worker
from workflows.conversation import ConversationWorkflow

PROGRAMS = ("tests.support.acting_programs",)
DENY_IN_AN_HOUR = {"calls": "changes", "within": "PT1H", "then": "deny", "remind_every": "PT10M"}


@pytest_asyncio.fixture(name="skipping")
async def _skipping(tmp_path: Path) -> AsyncIterator[WorkflowEnvironment]:
    """A time-skipping server of the test's own: no timer of another test can hold its clock."""
    async with await time_skipping(tmp_path / "payloads") as env:
        yield env


@pytest.fixture(name="timed")
def _timed(skipping: WorkflowEnvironment, tmp_path: Path) -> Settings:
    return skipping_settings(skipping, tmp_path, programs=PROGRAMS)


async def started(
    env: WorkflowEnvironment, settings: Settings, chat: Conversation, **config: Any
) -> WorkflowHandle[Any, Any]:
    """Start the conversation's workflow with `config` changed (`turns_per_run`, which no option sets)."""
    state = ConversationState(config=chat.config.model_copy(update=config))
    return await env.client.start_workflow(
        ConversationWorkflow.run, state, id=workflow_id("default", chat.id), task_queue=settings.task_queue
    )


async def waiting_turn(chat: Conversation, message: str) -> Any:
    with pytest.raises(Waiting) as waiting:
        await chat(message)
    return waiting.value.turn


async def status_when(handle: WorkflowHandle[Any, Any], ready: Any) -> ConversationStatus:
    """The `status` query once `ready(status)` holds (at most 10 s of real time: a timer that fired when
    the clock jumped is handled by the worker a moment later)."""
    for _ in range(200):
        status: ConversationStatus = await handle.query("status", result_type=ConversationStatus)
        if ready(status):
            return status
        await asyncio.sleep(0.05)
    return status


async def ended(chat: Conversation, turn: str) -> Any:
    for _ in range(200):
        if (found := await chat.turn(turn)).state not in ("waiting", "running"):
            return found
        await asyncio.sleep(0.05)
    return found


def approvals(settings: Settings, cid: str) -> list[tuple[str, str | None]]:
    records = FolderStore(settings.store_folder("default")).read(cid)
    return [(r["verdict"], r.get("by")) for r in records if r["kind"] == "approval"]


async def test_a_deadline_denies_across_a_worker_restart_and_continue_as_new(
    skipping: WorkflowEnvironment, timed: Settings, cid: str
) -> None:
    """The refund waits under `within: PT1H, then: deny, remind_every: PT10M`; 25 minutes on (two
    reminders), a send beside it ends the run's share of turns, so the run continues as new carrying the
    wait and its clock; the worker is replaced; the third reminder comes at 30 minutes, and at the hour
    from the question (not from the new run) the deadline answers no (`by: deadline`): the model is
    told, and the turn ends done without the refund."""
    # The first worker caches no run: a sticky queue of a stopped worker holds the test server's clock.
    async with build_worker(skipping.client, dataclasses.replace(timed, workflow_cache=0)):
        tl = await connect(timed, client=skipping.client)
        chat = tl.conversation("shop", id=cid, sends="branch", approve=DENY_IN_AN_HOUR)
        handle = await started(skipping, timed, chat, turns_per_run=1)
        first = (await handle.describe()).run_id
        turn = await waiting_turn(chat, "Refund order 7")
        await skipping.sleep(25 * 60)
        reminded = await status_when(handle, lambda s: s.deadlines[turn.id].reminders >= 2)
        await chat.predict("Refund order 8", approve=[])  # beside it, asking nothing: the run's one turn
        for _ in range(200):
            if (await handle.describe()).run_id != first:
                break
            await asyncio.sleep(0.05)
        second = await handle.describe()
    history = await skipping.client.get_workflow_handle(handle.id, run_id=second.run_id).fetch_history()
    carried = history.events[0].workflow_execution_started_event_attributes.input
    (state,) = await skipping.client.data_converter.decode(carried.payloads, [ConversationState])
    runs = len(acting_programs.RUNS)

    async with build_worker(skipping.client, timed):
        await skipping.sleep(10 * 60)
        later = await status_when(handle, lambda s: s.deadlines[turn.id].reminders >= 3)
        await skipping.sleep(30 * 60)
        denied = await ended(chat, turn.id)
    replayer = Replayer(workflows=[ConversationWorkflow], data_converter=skipping.client.data_converter)
    await replayer.replay_workflow(await handle.fetch_history())  # the continued run: reminders, the denial

    assert first != second.run_id
    assert [turn.id] == [w.turn for w in state.waiting]
    assert (2, 3) == (reminded.deadlines[turn.id].reminders, later.deadlines[turn.id].reminders)
    assert [("no", "deadline")] == approvals(timed, cid)
    assert "done" == denied.state
    assert "refund: The person did not allow this call. Reason: nobody answered before the deadline" in denied.result
    assert [] == [name for name in acting_programs.RUNS[runs:] if name == "refund"]


async def test_an_escalated_approval_is_answered_by_its_new_approver(
    skipping: WorkflowEnvironment, timed: Settings, cid: str
) -> None:
    """Ten minutes without an answer escalate the question to `boss`: an answer by anyone else is refused
    `forbidden` with nothing recorded; boss's yes runs the refund; the next deadline never fires."""
    rule = {"calls": "changes", "within": 600, "then": {"escalate": ["boss"], "within": "PT1H", "then": "deny"}}
    async with build_worker(skipping.client, timed):
        tl = await connect(timed, client=skipping.client)
        chat = tl.conversation("shop", id=cid, approve=rule)
        turn = await waiting_turn(chat, "Refund order 9")
        handle = skipping.client.get_workflow_handle(workflow_id("default", cid))
        before = await handle.query("status", result_type=ConversationStatus)
        await skipping.sleep(11 * 60)
        escalated = await status_when(handle, lambda s: s.deadlines[turn.id].escalations == 1)
        with pytest.raises(ThreadlineError) as refused:
            await turn.approve(by="ana")
        answered = approvals(timed, cid)
        runs = len(acting_programs.RUNS)
        approved = await turn.approve(by="boss")
        await skipping.sleep(2 * 3600)
        after = await handle.query("status", result_type=ConversationStatus)
    replayer = Replayer(workflows=[ConversationWorkflow], data_converter=skipping.client.data_converter)
    await replayer.replay_workflow(await handle.fetch_history())

    assert (None, ("boss",)) == (before.deadlines[turn.id].approvers, escalated.deadlines[turn.id].approvers)
    assert ErrorCode.FORBIDDEN == refused.value.code
    assert [] == answered
    assert ("done", ["refund"]) == (approved.state, acting_programs.RUNS[runs:])
    assert [("yes", "boss")] == approvals(timed, cid)
    assert {} == after.deadlines


async def test_a_programs_own_deadline_approves_a_question_nobody_answered(
    skipping: WorkflowEnvironment, timed: Settings, cid: str
) -> None:
    """`@threadline.program(approve={"within": 60, "then": "approve"})`: a minute on, the deadline says
    yes (`by: deadline`), the refund runs once and the turn ends done."""
    async with build_worker(skipping.client, timed):
        chat = (await connect(timed, client=skipping.client)).conversation("hurried_shop", id=cid)
        turn = await waiting_turn(chat, "Refund order 4")
        runs = len(acting_programs.RUNS)
        await skipping.sleep(61)
        approved = await ended(chat, turn.id)

    assert [("yes", "deadline")] == approvals(timed, cid)
    assert ("done", ["refund"]) == (approved.state, acting_programs.RUNS[runs:])


async def test_a_helpers_own_deadline_approves_a_question_nobody_answered(
    skipping: WorkflowEnvironment, timed: Settings, cid: str
) -> None:
    """`@threadline.ai(approve={"within": 60, "then": "approve"})` on the helper a program's code calls:
    its deadline holds as a program's does (the clock is in `status`); a minute on it says yes."""
    async with build_worker(skipping.client, timed):
        chat = (await connect(timed, client=skipping.client)).conversation("hurried_desk", id=cid)
        handle = skipping.client.get_workflow_handle(workflow_id("default", cid))
        turn = await waiting_turn(chat, "Refund order 5")
        clock = await status_when(handle, lambda s: turn.id in s.deadlines)
        runs = len(acting_programs.RUNS)
        await skipping.sleep(61)
        approved = await ended(chat, turn.id)

    assert turn.id in clock.deadlines
    assert [("yes", "deadline")] == approvals(timed, cid)
    assert ("done", ["refund"]) == (approved.state, acting_programs.RUNS[runs:])


def test_a_program_with_a_wrong_deadline_is_refused_where_it_is_defined() -> None:
    """The object form is checked with the program: `program-invalid`, naming what is wrong."""
    with pytest.raises(ThreadlineError) as refused:

        @threadline.program(approve={"within": "soon"})
        def shop(request: str) -> str:
            """Help."""
            raise NotImplementedError

    assert ErrorCode.PROGRAM_INVALID == refused.value.code


@pytest.mark.parametrize(
    "rule",
    [
        {"calls": "changes", "within": 0},
        {"within": "P1M"},
        {"within": 60, "then": "maybe"},
        {"within": 60, "then": {"escalate": []}},
        {"within": 60, "remind": 10},
    ],
)
async def test_a_wrong_deadline_is_refused_with_nothing_recorded(
    skipping: WorkflowEnvironment, timed: Settings, cid: str, rule: dict[str, Any]
) -> None:
    """A zero or month-long `within`, an unknown `then`, an empty escalation or an unknown key:
    `invalid-request` before anything is sent."""
    tl = await connect(timed, client=skipping.client)

    with pytest.raises(ThreadlineError) as refused:
        await tl.conversation("shop", id=cid).send("Refund order 1", approve=rule)

    assert ErrorCode.INVALID_REQUEST == refused.value.code
    assert not FolderStore(timed.store_folder("default")).read(cid)
