"""Real providers through a real worker, against the fake provider server on loopback."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterable, AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
import pytest_asyncio
from temporalio.client import Client

from core.settings import Settings
from core.temporal import workflow_id
from store.backends.folder import FolderStore
from store.log.state import Log
from tests.support.fakeprovider import Failure, FakeProvider, Reply
from tests.support.functai_kit import offline, reply, tutor
from tests.support.processes import WorkerProcess
from threadline.client import Threadline
from threadline.reading import Turn
from worker import build_worker

KEY = "sk-test-never-leak-7f3a9c"


@pytest.fixture(name="fake")
def _fake() -> Iterator[FakeProvider]:
    with FakeProvider() as fake:
        yield fake


def provider_env(fake: FakeProvider) -> dict[str, str]:
    return {
        "OPENAI_API_KEY": KEY,
        "OPENAI_BASE_URL": fake.openai_url,
        "ANTHROPIC_API_KEY": KEY,
        "ANTHROPIC_BASE_URL": fake.url,
    }


@pytest_asyncio.fixture(name="live")
async def _live(client: Client, settings: Settings, fake: FakeProvider) -> AsyncIterator[Settings]:
    """A worker whose providers call the fake server (and which knows the example programs)."""
    from activities.providers import build_providers

    settings = dataclasses.replace(settings, programs=("tests.support.example_programs",))
    async with httpx.AsyncClient() as http:
        providers = build_providers(settings, http, env=provider_env(fake))
        async with build_worker(client, settings, providers=providers):
            yield settings


async def collect(chat_stream: AsyncIterable[str | Turn | None]) -> tuple[list[str | None], Turn]:
    pieces: list[str | None] = []
    async for item in chat_stream:
        if isinstance(item, Turn):
            return pieces, item
        pieces.append(item)
    raise AssertionError("the stream ended without its turn")


@pytest.mark.parametrize("model", ["openai:gpt-test", "anthropic:claude-test"])
async def test_a_streamed_reply_arrives_in_pieces(
    tl: Threadline, live: Settings, fake: FakeProvider, cid: str, model: str
) -> None:
    """Text arrives piece by piece, then the turn with the provider's model and token usage."""
    fake.add(Reply("Fractions need a common bottom first.", chunks=4, input_tokens=21, output_tokens=9))

    pieces, turn = await collect(tl.conversation("tutor", id=cid, lm=model).stream("What is 1/2 + 1/3?"))

    assert "Fractions need a common bottom first." == "".join(p for p in pieces if p)
    assert len(pieces) >= 2
    assert ("done", "fake-model") == (turn.state, turn.model)
    assert {"input_tokens": 21, "output_tokens": 9, "total_tokens": 30} == turn.usage
    recorded = Log(FolderStore(live.store_folder("default")).read(cid)).turns[turn.id].record
    assert {"lm": model} == recorded["settings"]


@pytest.mark.parametrize("model", ["openai:gpt-test", "anthropic:claude-test"])
async def test_structured_outputs_are_validated(
    tl: Threadline, live: Settings, fake: FakeProvider, cid: str, model: str
) -> None:
    """A program with several outputs gets them as JSON and checks them with pydantic."""
    outputs = {"verdict": {"label": "wrong", "score": 0.2}, "result": "Not quite: find a common bottom."}
    fake.add(Reply(outputs=outputs))

    turn = await tl.conversation("grader", id=cid, lm=model).predict(question="1/2 + 1/3?", answer="2/5")

    assert outputs == turn.outputs
    assert "Not quite: find a common bottom." == turn.result


async def test_a_reply_that_does_not_fit_gets_one_repair(
    tl: Threadline, live: Settings, fake: FakeProvider, cid: str
) -> None:
    """One repair request; if that does not fit either, the turn fails `parse-failed`."""
    bad = {"verdict": {"label": "maybe", "score": 0.5}, "result": "?"}
    good = {"verdict": {"label": "correct", "score": 1.0}, "result": "Yes."}
    fake.add(Reply(outputs=bad), Reply(outputs=good), Reply(outputs=bad), Reply(outputs=bad))
    chat = tl.conversation("grader", id=cid, lm="openai:gpt-test")

    repaired = await chat.predict(question="q", answer="a")
    failed = await (await chat.send(question="q2", answer="a2")).result()

    assert "Yes." == repaired.result
    assert ("failed", "parse-failed") == (failed.state, (failed.error or {}).get("code"))
    assert 4 == len(fake.requests)
    assert "could not be used" in json.dumps(fake.requests[1].body)


@pytest.mark.parametrize(
    ("failure", "requests"),
    [(Failure(429, retry_after="1"), 2), (Failure(500), 2), (Reply("cut short", chunks=6, cut_after=2), 2)],
    ids=["429-retry-after", "500", "stream-cut"],
)
async def test_retryable_failures_are_retried(
    tl: Threadline, live: Settings, fake: FakeProvider, cid: str, failure: Reply | Failure, requests: int
) -> None:
    """429 (after its Retry-After), 5xx and a stream cut halfway are asked again, and the turn is done."""
    fake.add(failure, Reply("Second time lucky."))

    pieces, turn = await collect(tl.conversation("tutor", id=cid, lm="openai:gpt-test").stream("hello"))

    assert ("done", "Second time lucky.") == (turn.state, turn.result)
    assert requests == len(fake.requests)
    text = (
        "".join(p for p in pieces[pieces.index(None) + 1 :] if p)
        if None in pieces
        else "".join(p or "" for p in pieces)
    )
    assert "Second time lucky." == text


async def test_a_rejected_request_fails_at_once(tl: Threadline, live: Settings, fake: FakeProvider, cid: str) -> None:
    """A 400 is not retried: the turn fails `provider-rejected` after one request."""
    fake.add(Failure(400))

    turn = await (await tl.conversation("tutor", id=cid, lm="openai:gpt-test").send("hello")).result()

    assert ("failed", "provider-rejected") == (turn.state, (turn.error or {}).get("code"))
    assert 1 == len(fake.requests)


async def test_a_provider_without_a_key_fails_before_any_call(
    tl: Threadline, client: Client, settings: Settings, fake: FakeProvider, cid: str
) -> None:
    """A model whose provider is not configured: `provider-unconfigured`, and no request is made."""
    async with build_worker(client, settings):
        turn = await (await tl.conversation("tutor", id=cid, lm="openai:gpt-test").send("hello")).result()

    assert ("failed", "provider-unconfigured") == (turn.state, (turn.error or {}).get("code"))
    assert [] == fake.requests


async def test_the_model_can_change_per_turn(tl: Threadline, live: Settings, fake: FakeProvider, cid: str) -> None:
    """Each turn records the model it asked for (`settings.lm`) and the one that answered."""
    fake.add(Reply("from the provider", model="gpt-test-2025"))
    chat = tl.conversation("tutor", id=cid)

    first = await chat.predict("offline first")
    second = await (await chat.send("then the provider", lm="openai:gpt-test")).result()

    log = Log(FolderStore(live.store_folder("default")).read(cid))
    assert [None, {"lm": "openai:gpt-test"}] == [log.turns[t].record.get("settings") for t in log.order]
    assert ["offline", "gpt-test-2025"] == [first.model, second.model]


async def test_a_reader_reconnects_from_an_offset(tl: Threadline, live: Settings, fake: FakeProvider, cid: str) -> None:
    """A reader that stops after some pieces resumes from its offset and gets exactly the rest."""
    fake.add(Reply("one two three four five six", chunks=6))
    chat = tl.conversation("tutor", id=cid, lm="openai:gpt-test")
    turn = await (await chat.send("count")).result()

    head, offset = [], 0
    async for piece in chat.watch(turn.id):
        head.append(piece.text or "")
        offset = piece.offset
        if len(head) == 2:
            break
    rest = [piece.text or "" async for piece in chat.watch(turn.id, offset=offset)]

    assert "one two three four five six" == "".join(head + rest)


async def test_the_key_never_leaves_the_worker(
    tl: Threadline, client: Client, settings: Settings, fake: FakeProvider, cid: str, tmp_path: Path
) -> None:
    """The API key is in no workflow history, record, stream or log line, even when the provider's
    error bodies quote it, or its error code and model name are the key itself."""
    fake.add(Failure(500, code=KEY), Failure(400, code=KEY), Reply("fine", model=KEY))
    worker = WorkerProcess(settings, tmp_path / "worker.log", env=provider_env(fake))
    try:
        worker.wait_ready()
        turn = await (await tl.conversation("tutor", id=cid, lm="openai:gpt-test").send("hello")).result()
        answered = await tl.conversation("tutor", id=f"{cid}-2", lm="openai:gpt-test").predict("hello")
    finally:
        worker.stop()

    history = (await client.get_workflow_handle(workflow_id("default", cid)).fetch_history()).to_json()
    history += (await client.get_workflow_handle(workflow_id("default", f"{cid}-2")).fetch_history()).to_json()
    assert ("done", "(withheld: it held the key)") == (answered.state, answered.model)
    folder = settings.store_folder("default")
    files = [p.read_text() for p in folder.rglob("*.jsonl")]
    assert "failed" == turn.state
    assert all(KEY in r.headers.get("authorization", "") for r in fake.requests)
    assert KEY not in history
    assert not any(KEY in text for text in files)
    assert KEY not in (tmp_path / "worker.log").read_text()


async def test_functai_continues_a_conversation_made_with_a_provider(
    tl: Threadline, live: Settings, fake: FakeProvider, cid: str
) -> None:
    """functai shows a provider-made turn with its steps and compresses its saw with saw_of."""
    fake.add(Reply("Welcome, Alex!"), Reply("First, the bottoms."))
    chat = tl.conversation("tutor", id=cid, lm="anthropic:claude-test")
    await chat.predict("Hi, I'm Alex.")
    second = await chat.predict("What is 1/2 + 1/3?")

    folder = live.store_folder("default")
    with offline([reply("Not quite.")]) as model:
        view = tutor.conversation(cid, store=str(folder))
        assert "Not quite." == view("Is it 2/5?")
        new = view.head

    assert second.id == new.parent
    ended = [r for r in FolderStore(folder).read(cid) if r.get("kind") == "ended"][-1]
    assert [{"saw_of": second.id}, {"call": second.id, "steps": True}] == ended["saw"]
    assert 5 == len(model.requests[0].messages)


async def test_a_decorated_function_is_a_program(tl: Threadline, live: Settings, fake: FakeProvider, cid: str) -> None:
    """`@threadline.program` functions in THREADLINE_PROGRAMS modules are registered, defaults filled in."""
    fake.add(Reply("Short."))

    turn = await tl.conversation("summarise", id=cid, lm="openai:gpt-test").predict(text="A long text.")

    assert ("Short.", {"text": "A long text.", "words": 30}) == (turn.result, turn.inputs)
    assert "Summarise the text" in json.dumps(fake.requests[0].body)
