"""Programs with code on the offline model: the body runs as the turn on the worker, its helpers ask the
turn's model and are recorded as functai records them; the conversation refusals record nothing."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator
from typing import Any

import functai
import pytest
import pytest_asyncio
from functai import schemas
from functai.conversations import _fields
from temporalio.client import Client
from temporalio.worker import Replayer

import threadline
from core.errors import ErrorCode, ThreadlineError
from core.settings import Settings
from core.temporal import workflow_id
from store.backends.folder import FolderStore
from tests.support import support_programs
from tests.support.calllog_kit import call_records
from threadline.acting import Waiting
from threadline.client import Threadline, connect
from worker import build_worker
from workflows.conversation import ConversationWorkflow

CALL_KEYS = ("functai_conversation", "kind", "at", "turn", "attempt", "call", "site", "program", "lmcc", "saw", "seq")
"""A `call` record's keys, in functai 1.2.0's order."""


@pytest_asyncio.fixture(name="desk")
async def _desk(client: Client, settings: Settings) -> AsyncIterator[Threadline]:
    settings = dataclasses.replace(settings, programs=("tests.support.support_programs",))
    async with build_worker(client, settings):
        yield await connect(settings, client=client)


def records(tl: Threadline, cid: str) -> list[dict[str, Any]]:
    return FolderStore(tl.settings.store_folder("default")).read(cid)


def ended(tl: Threadline, cid: str, turn: str) -> dict[str, Any]:
    return next(r for r in records(tl, cid) if r["kind"] == "ended" and r["turn"] == turn)


def of_turn(tl: Threadline, cid: str, turn: str) -> list[str]:
    return [r["kind"] for r in records(tl, cid) if r.get("turn") == turn]


async def test_support_sorts_answers_and_hands_over(desk: Threadline, cid: str) -> None:
    """The seed's `support`: `topic` sorts each message; a shipping one is answered by `answer`, whose call
    the conversation remembers (a `call` record); another kind is handed to a person with `earlier()`."""
    chat = desk.conversation("support", id=cid, remembers={"answer": "conversation"})
    handoffs = len(support_programs.HANDOFFS)

    first = await chat.predict("My parcel is late, a shipping question")
    second = await chat.predict("Something other entirely")

    assert "topic: shipping" in first.result
    assert "A person from our team will write to you shortly." == second.result
    assert ["turn", "lease", "reply", "reply", "call", "ended"] == of_turn(desk, cid, first.id)
    assert ["turn", "lease", "reply", "reply", "ended"] == of_turn(desk, cid, second.id)
    [summary] = support_programs.HANDOFFS[handoffs:]
    assert "My parcel is late, a shipping question" in summary  # the handoff was given the conversation so far
    [call] = [r for r in records(desk, cid) if r["kind"] == "call"]
    assert CALL_KEYS == tuple(call)
    identity = {
        "name": "answer",
        "module": "tests.support.support_programs",
        "signature": support_programs.answer.signature,
    }
    assert ("support#1/answer#1", identity, []) == (call["site"], call["program"], call["saw"])
    assert {"message": "My parcel is late, a shipping question", "topic": "shipping"} == call["lmcc"]["inputs"]
    assert [{"call": first.id}] == ended(desk, cid, second.id)["saw"]
    assert first.usage["input_tokens"] > 0


async def test_a_program_record_is_a_modules(desk: Threadline, cid: str) -> None:
    """The `program` record says `module`, names the code's module, and has the fields functai derives."""
    await desk.conversation("support", id=cid)("shipping, please")

    [program] = [r for r in records(desk, cid) if r["kind"] == "program"]

    assert ("module", "tests.support.support_programs", "result") == (
        program["program_kind"],
        program["module"],
        program["answer"],
    )
    assert "signature" not in program
    assert _fields(support_programs.functai_programs()["support"]) == program["fields"]


async def test_an_async_program_awaits_its_helpers(desk: Threadline, cid: str) -> None:
    """An `async def` body runs on the worker's event loop and awaits its helpers."""
    answer = await desk.conversation("support_async", id=cid)("A product question")

    assert answer.startswith("(offline) You said: message: A product question\ntopic: product")


async def test_code_that_raises_fails_the_turn_with_its_exception(desk: Threadline, cid: str) -> None:
    """An exception of the code fails the turn `program-failed`; its type and message are the turn's error."""
    chat = desk.conversation("broken", id=cid)

    with pytest.raises(ThreadlineError) as failed:
        await chat("hello")

    assert ErrorCode.PROGRAM_FAILED == failed.value.code
    [turn] = await chat.turns()
    assert turn.error is not None
    assert ("failed", "ValueError", "the desk is closed") == (turn.state, turn.error["type"], turn.error["message"])


@pytest.mark.parametrize(
    ("program", "remembers", "code"),
    [
        ("opaque", {}, ErrorCode.CONVERSATION_OPAQUE),
        ("secretive", {}, ErrorCode.CONVERSATION_CONTENT),
        ("support", {"nobody": "conversation"}, ErrorCode.INVALID_REQUEST),
        ("tutor", {"answer": "conversation"}, ErrorCode.INVALID_REQUEST),
    ],
)
async def test_a_conversation_that_cannot_keep_its_turns_is_refused(
    desk: Threadline, cid: str, program: str, remembers: dict[str, str], code: ErrorCode
) -> None:
    """An untyped field, a `log_content` that keeps a field out, `remembers` naming what the code does not
    call (or an AI program's helpers): the send is refused with its code, and nothing is recorded."""
    chat = desk.conversation(program, id=cid, remembers=remembers)

    with pytest.raises(ThreadlineError) as refused:
        await chat.send(message="hello", count=1) if program == "opaque" else await chat.send("hello")

    assert code == refused.value.code
    assert [] == records(desk, cid)


async def test_a_conversation_used_inside_a_turn_is_refused_unless_declared(desk: Threadline, cid: str) -> None:
    """A program's code sending to another conversation: `conversation-nested` before the outer turn is
    placed (neither conversation records anything); declared `own` (by its program's name), it goes on."""
    inner = desk.conversation("tutor", id=f"{cid}-inner")
    support_programs.INNER.append(inner)

    with pytest.raises(ThreadlineError) as refused:
        await desk.conversation("nesting", id=cid)("hello")
    allowed = await desk.conversation("nesting", id=f"{cid}-2", remembers={"tutor": "own"})("hello")

    assert ErrorCode.CONVERSATION_NESTED == refused.value.code
    assert [] == [r for r in records(desk, cid) if r["kind"] in ("turn", "ended")]
    assert "(offline) You said: hello. I was shown 0 earlier turn(s)." == allowed
    assert 1 == sum(r["kind"] == "turn" for r in records(desk, f"{cid}-inner"))


async def test_reasoning_turned_on_goes_on_with_earlier_without(desk: Threadline, cid: str) -> None:
    """A program that now writes its reasoning continues earlier turns without it only when `earlier_without`
    names it (else `conversation-signature`, nothing recorded); earlier turns are shown by their values."""
    first = await desk.conversation("tutor", id=cid).predict("Hi, I'm Alex.")
    n = len(records(desk, cid))

    with pytest.raises(ThreadlineError) as refused:
        await desk.conversation("tutor_thinks", id=cid)("What is 1/2 + 1/3?")
    after_refusal = len(records(desk, cid))
    thinking = desk.conversation("tutor_thinks", id=cid, earlier_without=["reasoning"])
    second = await thinking.predict("What is 1/2 + 1/3?")
    third = await thinking.predict("Is it 5/6?")

    assert ErrorCode.CONVERSATION_SIGNATURE == refused.value.code
    assert n == after_refusal
    assert ["reasoning", "result"] == list(second.outputs)
    assert [{"call": first.id}] == ended(desk, cid, second.id)["saw"]
    assert [{"saw_of": second.id}, {"call": second.id, "steps": True}] == ended(desk, cid, third.id)["saw"]


def test_a_reasoning_program_has_functais_fields_and_signature() -> None:
    """`reasoning=True` gives the fields and signature functai gives the same function with chain of thought."""

    @functai.ai(module="cot")  # type: ignore[untyped-decorator]
    def tutor_thinks(message: str) -> str:
        """Tutor."""
        return functai._ai  # type: ignore[no-any-return]

    assert _fields(tutor_thinks) == support_programs.tutor_thinks.field_records()
    assert functai.calllog.signature_id(tutor_thinks._spec().signature) == support_programs.tutor_thinks.signature


def test_a_body_that_stands_in_for_the_model_is_an_ai_program() -> None:
    """A docstring, `...` or `raise NotImplementedError` is the model's body; anything else is code."""
    assert "ai" == support_programs.topic.kind
    assert "ai" == support_programs.tutor_thinks.kind
    assert "module" == support_programs.support.kind
    assert isinstance(support_programs.support, threadline.CodeProgram)
    assert {"topic", "answer", "handoff"} == set(support_programs.support.helpers)

    def shout(message: str) -> str:
        return message.upper()

    with pytest.raises(ThreadlineError) as invalid:
        threadline.ai(shout)
    assert ErrorCode.PROGRAM_INVALID == invalid.value.code
    assert "module" == threadline.program(shout).kind


async def test_a_helpers_tool_that_asks_a_person_makes_the_turn_wait(desk: Threadline, cid: str) -> None:
    """Under `approve="changes"` a helper's changing tool waits for a person (asked at the helper's site);
    approved, the turn runs its code again: the replies recorded before are taken, the tool runs once."""
    chat = desk.conversation("canceller", id=cid, approve="changes")
    cancelled = len(support_programs.CANCELLED)

    with pytest.raises(Waiting) as waiting:
        await chat("Cancel shipping order 7")
    [asked] = waiting.value.approvals
    turn = await waiting.value.turn.approve()

    assert ("canceller#1/cancel#1", "canceller/cancel/cancel_order") == (asked["site"], asked["path"])
    assert ("done", 2) == (turn.state, turn.attempt)
    assert "order shipping: Cancel shipping order 7 is cancelled" in turn.result
    assert 1 == len(support_programs.CANCELLED) - cancelled
    found = [r for r in records(desk, cid) if r.get("turn") == turn.id]
    assert 3 == sum(r["kind"] == "reply" for r in found)  # topic, the tool call, the answer: each once
    assert [("started", 2), ("done", 2)] == [(r["state"], r["attempt"]) for r in found if r["kind"] == "tool"]


async def test_a_stopped_turn_asks_no_helper_after_the_stop(desk: Threadline, cid: str) -> None:
    """A stop while the code runs between two helpers ends the turn `stopped` at once; the code, woken
    later, asks its next helper nothing and records nothing more."""
    chat = desk.conversation("slow_support", id=cid)
    support_programs.PAUSES.append(1.5)
    try:
        placed = await chat.send("shipping, please")
        await until(lambda: any(r["kind"] == "reply" for r in records(desk, cid)))

        await chat.stop(placed.id)
        stopped = await placed.result()
        await asyncio.sleep(2.0)  # the code wakes and calls `answer`
    finally:
        support_programs.PAUSES.pop()

    assert "stopped" == stopped.state
    assert 1 == sum(r["kind"] == "reply" for r in records(desk, cid))


async def test_a_program_turn_is_in_the_call_log(desk: Threadline, settings: Settings, cid: str) -> None:
    """A program's turn is logged as functai logs a module's call (its schema accepts it)."""
    turn = await desk.conversation("support", id=cid).predict("shipping, please")

    found = call_records(FolderStore(desk.settings.store_folder("default")))

    assert turn.id in found
    assert (None, "module") == (schemas.problem("call", found[turn.id]), found[turn.id]["program"]["kind"])


async def until(done: Any, within: float = 30.0) -> None:
    deadline = time.monotonic() + within
    while not done():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)


async def test_a_history_with_code_turns_replays(desk: Threadline, client: Client, cid: str) -> None:
    """Turns of a program with code, a refusal and a failed turn, replayed from their history."""
    chat = desk.conversation("support", id=cid, remembers={"answer": "conversation"})
    await chat("shipping, please")
    await chat("something other")
    with pytest.raises(ThreadlineError):
        await desk.conversation("broken", id=cid)("x")

    history = await client.get_workflow_handle(workflow_id("default", cid)).fetch_history()

    await Replayer(workflows=[ConversationWorkflow], data_converter=client.data_converter).replay_workflow(history)
