"""A try at a turn that Temporal gave up on, or that finds the turn ended, writes nothing more: no
stream run, no model call, no record. Tries run in Temporal's `ActivityEnvironment` (which sets the
activity's attempt and heartbeat details, as a retry's) against a real folder store and the fake
provider server; nothing of ours is replaced.

The fault (a frozen worker): a try is frozen mid-turn, Temporal retries the turn, and the retry's
task goes to the frozen worker's pending poll; that times out too, a healthy worker's retry runs,
and when the frozen worker wakes up it starts the stale task: a third stream run, a third model
call, and the stream's readers shown that run's few words instead of the answer.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.testing import ActivityEnvironment

from activities.language_model import Providers
from activities.llm import LLMActivities
from activities.providers import OpenAIProvider
from activities.transcript import TranscriptActivities
from core.models import BeginInput, ConversationConfig, Ended, RunInput, RunResult, TurnSend, Yielded
from store.backends.folder import FolderStore
from store.backends.reader import LogCache, Stores, Threaded
from store.backends.streams import StreamLog, StreamReader
from store.log.state import Log
from store.programs.program import TUTOR, Program
from store.records import ended_record
from tests.support.fakeprovider import FakeProvider, Received, Reply

LM = "openai:gpt-test"
GRADE = Program.define("grade", "Grade the answer.", inputs={"message": str}, outputs={"label": str, "score": int})


@dataclass
class Kit:
    """One worker's activities over one store folder with its streams, and the fake provider."""

    transcript: TranscriptActivities
    llm: LLMActivities
    store: Path
    conversation: str
    fake: FakeProvider

    def config(self, program: str) -> ConversationConfig:
        return ConversationConfig(store="default", conversation=self.conversation, program=program, lm=LM)

    async def begin(self, program: str = "tutor") -> RunInput:
        """Place a turn; the input its `run_turn` gets."""
        send = TurnSend(request_id="r-1", inputs={"message": "hello"})
        begun = await ActivityEnvironment().run(
            self.transcript.begin_turn, BeginInput(config=self.config(program), send=send)
        )
        return RunInput(config=self.config(program), send=send, turn=begun.turn)

    def events(self, turn: str) -> list[dict[str, Any]]:
        return [event for _, event in StreamLog(self.store).read(turn)]

    def records(self, turn: str) -> list[dict[str, Any]]:
        return [r for r in FolderStore(self.store).read(self.conversation) if r.get("turn") == turn]


@pytest.fixture(name="kit")
def _kit(tmp_path: Path, cid: str) -> Iterator[Kit]:
    store = tmp_path / "store"
    logs = LogCache(Stores({"default": lambda: Threaded(FolderStore(store))}))
    programs = {"tutor": TUTOR, "grade": GRADE}
    with FakeProvider() as fake:
        openai = OpenAIProvider(httpx.AsyncClient(), base_url=fake.openai_url, api_key="sk-test")
        llm = LLMActivities(logs, programs, Providers({"openai": openai}), streams={"default": StreamLog(store)})
        yield Kit(TranscriptActivities(logs, programs), llm, store, cid, fake)


def retry(attempt: int, *, claimed: int = 1) -> ActivityEnvironment:
    """The environment of Temporal's `attempt`-th try, whose earlier tries' heartbeats said they held `claimed`."""
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, attempt=attempt, heartbeat_details=[{"attempt": claimed}])
    return env


async def until_asked(fake: FakeProvider) -> None:
    """Wait until the fake provider got a request."""
    deadline = time.monotonic() + 10
    while not fake.requests:
        assert time.monotonic() < deadline, "the model was never asked"
        await asyncio.sleep(0.005)


@pytest.mark.parametrize("stale_starts", ["while the retry asks", "after the retry ended"])
async def test_a_stale_try_writes_no_stream_run_and_asks_no_model(kit: Kit, stale_starts: str) -> None:
    """A healthy retry (Temporal's third try) runs the turn; the stale second try, handed to a frozen
    worker, starts late: it finds the turn taken (or ended), starts no stream run and asks nothing. The
    stream then holds one run, whose text is the answer."""
    run = await kit.begin()
    kit.fake.add(Reply("The whole answer, in four pieces.", chunks=4, delay=0.15), Reply("A stale answer."))
    healthy: asyncio.Task[RunResult] = asyncio.ensure_future(retry(3).run(kit.llm.run_turn, run))
    await until_asked(kit.fake)
    if stale_starts == "after the retry ended":
        await healthy

    stale: RunResult = await retry(2).run(kit.llm.run_turn, run)
    result = await healthy

    assert isinstance(result, Ended)
    assert isinstance(stale, Yielded | Ended)
    assert 1 == len(kit.fake.requests)
    events = kit.events(run.turn)
    assert 1 == sum(1 for e in events if e.get("start"))
    reader = StreamReader()
    reader.feed(events)
    assert ("done", result.outcome.result) == (reader.ended, reader.text)
    assert 1 == sum(1 for r in kit.records(run.turn) if r["kind"] == "ended")


async def test_a_turn_ended_before_a_model_call_asks_nothing_more(kit: Kit) -> None:
    """The turn ends elsewhere (another try, a functai process) while this try's reply arrives; the reply
    does not fit, and the try would ask again: it finds the turn ended and asks nothing, writes no
    `restart` to the stream and appends nothing after the end."""
    run = await kit.begin("grade")
    kit.fake.add(Reply("not json at all"), Reply(outputs={"label": "late", "score": 2}))

    def end_elsewhere(received: Received) -> None:  # when the first request arrives
        if len(kit.fake.requests) == 1:
            done = ended_record(run.turn, attempt=1, state="done", outputs={"label": "a", "score": 1})
            FolderStore(kit.store).append(kit.conversation, [done])

    kit.fake.answer = end_elsewhere

    result = await retry(1).run(kit.llm.run_turn, run)

    assert isinstance(result, Ended)
    assert ("done", {"label": "a", "score": 1}) == (result.outcome.state, result.outcome.outputs)
    assert 1 == len(kit.fake.requests)
    assert [] == [e for e in kit.events(run.turn) if e.get("restart")]
    kinds = [r["kind"] for r in kit.records(run.turn)]
    assert "ended" == kinds[-1]


async def test_a_retry_takes_the_turn_over_from_the_try_temporal_gave_up_on(kit: Kit) -> None:
    """A retry that finds the turn running under its own attempt (the earlier try may be frozen, not dead)
    appends the next attempt's lease first; the earlier try, waking up, finds itself taken over."""
    run = await kit.begin()
    kit.fake.add(Reply("Answered by the retry."))

    result = await retry(2).run(kit.llm.run_turn, run)

    woken: RunResult = await retry(1).run(kit.llm.run_turn, run)

    turn = Log(FolderStore(kit.store).read(kit.conversation)).turns[run.turn]
    assert isinstance(result, Ended)
    assert isinstance(woken, Ended)
    assert (2, 2) == (turn.attempt, (turn.ended or {}).get("attempt"))
    assert ["turn", "lease", "lease", "ended"] == [r["kind"] for r in kit.records(run.turn)]
    assert 1 == len(kit.fake.requests)
