"""One error boundary: every activity's coded failures leave it as `ApplicationError(type=code)`
and come back to a client as `ThreadlineError` with the same code and retryable flag.

Activities run in Temporal's `ActivityEnvironment` against a real folder store, the offline model
and the fake provider server; nothing of ours is replaced.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.language_model import OfflineModel, Providers
from activities.llm import LLMActivities
from activities.providers import OpenAIProvider
from activities.transcript import TranscriptActivities
from core.context import ContextRule, SummaryRule
from core.errors import ErrorCode, ThreadlineError
from core.models import (
    BeginInput,
    ConversationConfig,
    Ended,
    RunInput,
    TurnError,
    TurnRef,
    TurnSend,
    WatchInput,
)
from core.temporal import from_failure, to_failure
from store.backends.folder import FolderStore
from store.backends.reader import LogCache, Stores, Threaded
from store.backends.writer import Writer
from store.log.turns import Answer, TurnRequest
from store.programs.program import TUTOR, Program
from tests.support.fakeprovider import Failure, FakeProvider

QUIZ = Program.define("quiz", "Ask.", inputs={"message": int}, outputs={"result": str})


@dataclass
class Kit:
    """The activities of one worker over one store folder, and a conversation with one done turn."""

    transcript: TranscriptActivities
    llm: LLMActivities
    folder: Path
    conversation: str
    done: str
    fake: FakeProvider

    def config(self, **changes: Any) -> ConversationConfig:
        fields = {"store": "default", "conversation": self.conversation, "program": "tutor", **changes}
        return ConversationConfig(**fields)

    def begin(self, send: TurnSend, **changes: Any) -> BeginInput:
        return BeginInput(config=self.config(**changes), send=send)

    def ref(self, turn: str) -> TurnRef:
        return TurnRef(store="default", conversation=self.conversation, turn=turn)


@pytest.fixture(name="kit")
def _kit(tmp_path: Path, cid: str) -> Iterator[Kit]:
    store = FolderStore(tmp_path / "store")
    writer = Writer(store, cid, TUTOR)
    for text in ("hi", "again"):  # two done turns: enough for a summary to be due
        done = writer.send(TurnRequest({"message": text}), lambda _s, _i: Answer({"result": "ok"}))
    logs = LogCache(Stores({"default": lambda: Threaded(store)}))
    programs = {"tutor": TUTOR, "quiz": QUIZ}
    with FakeProvider() as fake:
        http = httpx.AsyncClient()
        openai = OpenAIProvider(http, base_url=fake.openai_url, api_key="sk-test")
        providers = Providers({"offline": OfflineModel(), "openai": openai})
        yield Kit(
            TranscriptActivities(logs, programs), LLMActivities(logs, programs, providers), tmp_path, cid, done, fake
        )


def send(**fields: Any) -> TurnSend:
    return TurnSend(**{"request_id": "r-1", "inputs": {"message": "hello"}, **fields})


Case = Callable[[Kit], Awaitable[Any]]
UNKNOWN_TURN = "01926d00-0009-7000-8000-000000000000"

CASES: list[tuple[str, ErrorCode, Case]] = [
    ("begin_turn", ErrorCode.PROGRAM_UNKNOWN, lambda k: k.transcript.begin_turn(k.begin(send(program="nope")))),
    ("begin_turn", ErrorCode.INPUTS_INVALID, lambda k: k.transcript.begin_turn(k.begin(send(inputs={"x": 1})))),
    (
        "begin_turn",
        ErrorCode.INPUT_TOO_LARGE,
        lambda k: k.transcript.begin_turn(k.begin(send(inputs={"message": "x" * (2 << 20)}))),
    ),
    (
        "begin_turn",
        ErrorCode.TURN_UNKNOWN,
        lambda k: k.transcript.begin_turn(k.begin(send(continue_from=UNKNOWN_TURN))),
    ),
    (
        "begin_turn",
        ErrorCode.CONVERSATION_SIGNATURE,
        lambda k: k.transcript.begin_turn(k.begin(send(program="quiz", inputs={"message": 3}))),
    ),
    ("begin_turn", ErrorCode.STORE_UNKNOWN, lambda k: k.transcript.begin_turn(k.begin(send(), store="elsewhere"))),
    ("follow_turn", ErrorCode.TURN_UNKNOWN, lambda k: k.transcript.follow_turn(k.ref(UNKNOWN_TURN))),
    ("stop_turn", ErrorCode.TURN_UNKNOWN, lambda k: k.transcript.stop_turn(k.ref(UNKNOWN_TURN))),
    ("move_head", ErrorCode.TURN_UNKNOWN, lambda k: k.transcript.move_head(k.ref(UNKNOWN_TURN))),
    ("end_turn", ErrorCode.TURN_UNKNOWN, lambda k: k.transcript.end_turn(k.ref(UNKNOWN_TURN))),
    (
        "watch_log",
        ErrorCode.CONVERSATION_ID,
        lambda k: k.transcript.watch_log(WatchInput(store="default", conversation="../x", after=0, timeout_s=0)),
    ),
    (
        "run_turn",
        ErrorCode.TURN_UNKNOWN,
        lambda k: k.llm.run_turn(RunInput(config=k.config(), send=send(), turn=UNKNOWN_TURN)),
    ),
    (
        "prepare_turn",
        ErrorCode.PROVIDER_UNCONFIGURED,
        lambda k: k.llm.prepare_turn(k.begin(send(), context=ContextRule(topics="track", topic_model="anthropic:x"))),
    ),
    (
        "summarise_branch",
        ErrorCode.PROVIDER_UNCONFIGURED,
        lambda k: k.llm.summarise_branch(
            RunInput(
                config=k.config(context=ContextRule(summary=SummaryRule(after=1, keep=1, model="anthropic:x"))),
                send=send(),
                turn=k.done,
            )
        ),
    ),
    ("render_turn", ErrorCode.PROGRAM_UNKNOWN, lambda k: k.llm.render_turn(k.begin(send(program="nope")))),
    ("render_turn", ErrorCode.INPUTS_INVALID, lambda k: k.llm.render_turn(k.begin(send(inputs={})))),
]


@pytest.mark.parametrize(("activity", "code", "case"), CASES, ids=[f"{a}-{c}" for a, c, _ in CASES])
async def test_an_activity_fails_with_its_code_and_a_client_reads_it_back(
    kit: Kit, activity: str, code: ErrorCode, case: Case
) -> None:
    """The failure's `type` is the code; `from_failure` gives the client the same code and flag."""
    with pytest.raises(ApplicationError) as raised:
        await ActivityEnvironment().run(case, kit)

    assert (str(code), True) == (raised.value.type, raised.value.non_retryable)
    back = from_failure(raised.value)
    assert (code, False) == (back.code, back.retryable)


async def test_a_retryable_provider_failure_leaves_run_turn_retryable_with_its_delay(kit: Kit) -> None:
    """A 429 with Retry-After: `provider-unavailable`, retryable, with the delay and details kept."""
    begun = await ActivityEnvironment().run(kit.transcript.begin_turn, kit.begin(send(), lm="openai:gpt-test"))
    kit.fake.add(Failure(429, retry_after="3"))
    run = RunInput(config=kit.config(lm="openai:gpt-test"), send=send(), turn=begun.turn)

    with pytest.raises(ApplicationError) as raised:
        await ActivityEnvironment().run(kit.llm.run_turn, run)

    assert ("provider-unavailable", False) == (raised.value.type, raised.value.non_retryable)
    assert 3.0 == (raised.value.next_retry_delay.total_seconds() if raised.value.next_retry_delay else None)
    back = from_failure(raised.value)
    assert (ErrorCode.PROVIDER_UNAVAILABLE, True, 3.0) == (back.code, back.retryable, back.details["retry_after"])


@pytest.mark.parametrize(
    ("lm", "code", "failure"),
    [
        ("anthropic:claude-x", ErrorCode.PROVIDER_UNCONFIGURED, None),
        ("openai:gpt-test", ErrorCode.PROVIDER_REJECTED, Failure(400)),
    ],
)
async def test_a_refusal_no_retry_can_fix_ends_the_turn_failed_with_its_code(
    kit: Kit, lm: str, code: ErrorCode, failure: Failure | None
) -> None:
    """run_turn answers a lasting refusal by ending the turn `failed`, its code in the outcome and the log."""
    if failure is not None:
        kit.fake.add(failure)
    begun = await ActivityEnvironment().run(kit.transcript.begin_turn, kit.begin(send(), lm=lm))
    run = RunInput(config=kit.config(lm=lm), send=send(), turn=begun.turn)

    result = await ActivityEnvironment().run(kit.llm.run_turn, run)

    assert isinstance(result, Ended)
    assert ("failed", str(code)) == (result.outcome.state, result.outcome.error.code if result.outcome.error else None)
    ended = [r for r in FolderStore(kit.folder / "store").read(kit.conversation) if r["kind"] == "ended"][-1]
    assert str(code) == ended["error"]["code"]


def test_an_error_round_trips_with_its_details() -> None:
    """to_failure then from_failure keeps code, message, retryable and details; TurnError keeps the code."""
    err = ThreadlineError(ErrorCode.CONVERSATION_BUSY, "turn t is running", retryable=True, turn="t")

    back = from_failure(to_failure(err))

    assert (err.code, err.message, True, {"turn": "t"}) == (back.code, back.message, back.retryable, back.details)
    assert ErrorCode.CONVERSATION_BUSY == TurnError.of(err).to_error().code
    assert ErrorCode.INTERNAL == TurnError(code="no-such-code", message="m").to_error().code
