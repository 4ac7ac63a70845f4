"""What a turn is shown: rules at their boundaries, summaries made once and extended, topics that
move between branches, render equal to what the provider receives, resumes that show exactly
what the turn recorded."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from temporalio.client import Client

from core.context import ContextRule, SummaryRule
from core.models import ConversationStatus
from core.settings import Settings
from core.temporal import workflow_id
from store.backends.folder import FolderStore
from store.backends.memory import MemoryStore
from store.backends.writer import Writer
from store.log.rules import shown, turn_tokens
from store.log.state import Log
from store.log.summary import due
from store.log.turns import Answer, TurnRequest
from store.programs.program import TUTOR
from store.records import entry_record
from tests.support.fakeprovider import FakeProvider, Received, Reply
from threadline.client import Conversation, Threadline
from threadline.reading import Turn
from worker import build_worker

NOW = 1_800_000_000.0


def conversation(n: int, *, usage: int | None = 10) -> tuple[Log, list[str]]:
    """A conversation of `n` done turns on one branch, each answer `usage` output tokens."""
    writer = Writer(MemoryStore(), "c", TUTOR, clock=lambda: NOW)
    ids = []
    for k in range(n):
        tokens = {"output_tokens": usage} if usage is not None else {}
        answer = Answer({"result": f"answer {k}"}, usage=tokens)
        ids.append(writer.send(TurnRequest({"message": f"m{k}"}), lambda _s, _i, a=answer: a))  # type: ignore[misc]
    return writer.read(), ids


def picked(log: Log, parent: str, rule: ContextRule) -> list[str]:
    fields, signature = TUTOR.field_records(), TUTOR.signature
    return shown(log, parent, fields=fields, signature=signature, now=NOW, rule=rule).turns


@pytest.mark.parametrize(
    ("rule", "count"),
    [
        (ContextRule(last=0), 0),
        (ContextRule(last=2), 2),
        (ContextRule(window=0), 0),
        (ContextRule(window=1), 0),
        (ContextRule(window=2), 1),
        (ContextRule(window=5), 2),
        (ContextRule(last=1, window=8), 1),
        (ContextRule(), 5),
    ],
)
def test_turn_count_rules_at_their_boundaries(rule: ContextRule, count: int) -> None:
    """last n, and a window of messages (two per turn): the most restrictive wins."""
    log, ids = conversation(5)

    expected = ids[len(ids) - count :] if count else []
    assert expected == picked(log, ids[-1], rule)


def test_a_token_budget_takes_the_most_recent_turns_that_fit() -> None:
    """Turns are counted from their recorded output usage plus their inputs; exactly full fits."""
    log, ids = conversation(4, usage=10)
    cost = turn_tokens(log.turns[ids[-1]])

    assert ids[-2:] == picked(log, ids[-1], ContextRule(max_tokens=2 * cost))
    assert ids[-1:] == picked(log, ids[-1], ContextRule(max_tokens=2 * cost - 1))
    assert [] == picked(log, ids[-1], ContextRule(max_tokens=cost - 1))


def test_a_token_budget_estimates_turns_without_usage() -> None:
    """Where usage is missing the outputs are estimated (four characters a token)."""
    log, ids = conversation(3, usage=None)

    assert 3 == turn_tokens(log.turns[ids[0]])  # "m0" and "answer 0": 1 + 2 tokens
    assert ids[-2:] == picked(log, ids[-1], ContextRule(max_tokens=8))


def test_a_rule_beyond_format_1_is_recorded_as_context() -> None:
    """A non-default rule's choice is recorded, so a resume anywhere shows exactly it."""
    log, ids = conversation(3)
    fields, signature = TUTOR.field_records(), TUTOR.signature

    chosen = shown(log, ids[-1], fields=fields, signature=signature, now=NOW, rule=ContextRule(window=2))
    again = shown(log, ids[-1], fields=fields, signature=signature, now=NOW, context=chosen.context)

    assert {"turns": ids[-1:], "without": {}, "sections": []} == chosen.context
    assert chosen.saw == again.saw
    assert None is shown(log, ids[-1], fields=fields, signature=signature, now=NOW).context


@pytest.mark.parametrize(
    "rule",
    [ContextRule(summary=SummaryRule()), ContextRule(topics="branch", topic_model="x")],
    ids=["summary", "topics"],
)
def test_a_rule_that_picks_every_turn_records_no_context(rule: ContextRule) -> None:
    """A summary rule with no summary yet, or topic tracking, shows every turn as format 1 does: the
    turn records no `context`, so functai resumes it by its own rule."""
    log, ids = conversation(3)

    chosen = shown(log, ids[-1], fields=TUTOR.field_records(), signature=TUTOR.signature, now=NOW, rule=rule)

    assert (ids, None) == (chosen.turns, chosen.context)


def test_summaries_start_past_the_threshold_and_extend_in_steps() -> None:
    """Nothing until `after` turns are passed; then all but `keep`; then again once 2*keep are left."""
    rule = SummaryRule(after=3, keep=2)
    log, ids = conversation(6)
    turns = [log.turns[t] for t in ids]

    assert ([], []) == (due(log, turns[:3], rule, ids[2])[1], [])
    first = [t.id for t in due(log, turns[:4], rule, ids[3])[1]]
    assert ids[:2] == first
    log.apply([entry_record("threadline", "summary", {"turns": first, "summary": "s"}, turn=ids[1]) | {"seq": 99}])
    assert [] == due(log, turns[:5], rule, ids[4])[1]
    assert ids[2:4] == [t.id for t in due(log, turns[:6], rule, ids[5])[1]]


# ----- end to end, against the fake provider


def summary_reply(summary: str, *facts: str) -> Reply:
    return Reply(outputs={"facts": list(facts), "result": summary})


def is_summary(request: Received) -> bool:
    return "Summarise the earlier part" in json.dumps(request.body)


def user_texts(request: Received) -> list[str]:
    return [str(m["content"]) for m in request.body["messages"] if m["role"] == "user"]


async def settled(client: Client, conversation: str) -> None:
    """Wait until no summary is being made in the background (so the next turn finds it)."""
    handle = client.get_workflow_handle(workflow_id("default", conversation))
    for _ in range(500):
        status = await handle.query("status", result_type=ConversationStatus)
        if not status.summarising and not status.running:
            return
        await asyncio.sleep(0.01)
    raise TimeoutError("a summary never finished")


async def predict_settled(client: Client, chat: Conversation, text: str) -> Turn:
    turn = await chat.predict(text)
    await settled(client, chat.id)
    return turn


def answering(fake: FakeProvider, *summaries: Reply) -> None:
    """Summary requests get the next of `summaries`; other requests the scripted replies."""
    queue = list(summaries)
    fake.answer = lambda request: queue.pop(0) if is_summary(request) and queue else None


def main_requests(fake: FakeProvider) -> list[Received]:
    return [r for r in fake.requests if not is_summary(r)]


async def test_a_summary_is_made_once_reused_and_extended(
    tl: Threadline, client: Client, live: Settings, fake: FakeProvider, cid: str
) -> None:
    """Past three turns the oldest are folded into a summary with key facts, after the turn that
    made it due; later turns reuse it, and the next summary folds in only the turns newly left out."""
    chat = tl.conversation("tutor", id=cid, lm="openai:gpt-test", context={"summary": {"after": 3, "keep": 2}})
    answering(
        fake,
        summary_reply("Alex is learning fractions.", "The learner is Alex"),
        summary_reply("Alex added 1/2 and 1/3.", "The learner is Alex", "1/2+1/3=5/6"),
    )
    fake.add(*(Reply(f"answer {k}") for k in range(7)))

    turns = [await predict_settled(client, chat, f"message {k}") for k in range(7)]

    summaries = [r for r in fake.requests if is_summary(r)]
    assert 2 == len(summaries)
    assert [500, 500] == [s.body.get("max_tokens") for s in summaries]  # max_summary_tokens' default
    assert not any("max_tokens" in r.body for r in main_requests(fake))
    first = json.dumps(summaries[0].body)
    assert ("message 1" in first, "message 2" in first) == (True, False)
    second = json.dumps(summaries[1].body)
    assert "Alex is learning fractions." in second  # extended from the previous summary ...
    assert "message 0" not in second  # ... and only the turns newly left out
    assert "message 2" in second
    assert "message 3" in second
    fifth = main_requests(fake)[4]
    assert "Alex is learning fractions." in json.dumps(fifth.body["messages"][0])
    assert ["message 2", "message 3", "message 4"] == user_texts(fifth)
    assert [turns[2].id, turns[3].id] == turns[4].saw
    history = await chat.history()
    assert (4, 3, ["The learner is Alex", "1/2+1/3=5/6"]) == (
        history["summarised_turns"],
        history["verbatim_turns"],
        history["facts"],
    )


async def test_a_summary_belongs_to_its_branch(
    tl: Threadline, client: Client, live: Settings, fake: FakeProvider, cid: str
) -> None:
    """A branch from before the summarised turns does not see the summary; a head move onto the
    summarised branch sees the newest summary on it."""
    context = {"summary": {"after": 2, "keep": 1}}
    chat = tl.conversation("tutor", id=cid, lm="openai:gpt-test", context=context)
    answering(fake, summary_reply("Early talk.", "fact"), summary_reply("More talk.", "fact"))
    fake.add(Reply("a0"), Reply("a1"), Reply("a2"), Reply("a3"))
    turns = [await predict_settled(client, chat, f"message {k}") for k in range(4)]
    fake.add(Reply("from the first"), Reply("after the head move"))

    branch = await chat.continue_from(turns[0].id).predict("beside")
    await chat.head(turns[2].id)
    moved = await tl.conversation("tutor", id=cid, lm="openai:gpt-test", context=context).predict("after the head")

    beside_request, moved_request = main_requests(fake)[-2:]
    assert "Early talk." not in json.dumps(beside_request.body)
    assert ["message 0", "beside"] == user_texts(beside_request)
    assert [turns[0].id] == branch.saw
    assert "More talk." in json.dumps(moved_request.body)  # the newest summary on that branch
    assert ["after the head"] == user_texts(moved_request)  # it covers every turn up to the head
    assert turns[2].id == moved.parent


async def test_render_is_the_request_the_provider_then_receives(
    tl: Threadline, live: Settings, fake: FakeProvider, cid: str
) -> None:
    """render shows the exact body, records nothing; the real send then sends exactly it."""
    chat = tl.conversation("tutor", id=cid, lm="openai:gpt-test", context={"window": 2})
    fake.add(Reply("one"), Reply("two"), Reply("three"))
    await chat.predict("first")
    await chat.predict("second")
    records = len(FolderStore(live.store_folder("default")).read(cid))

    rendered = await chat.render("third")

    assert records == len(FolderStore(live.store_folder("default")).read(cid))
    await chat.predict("third")
    assert rendered.request == fake.requests[-1].body
    assert ["second", "third"] == user_texts(fake.requests[-1])


async def test_topics_move_onto_their_own_branches_and_back(
    tl: Threadline, live: Settings, fake: FakeProvider, cid: str
) -> None:
    """A new topic starts its own branch; returning to a topic continues from its latest turn (the
    first message is a new topic without a model call)."""

    def topic(shift: str, label: str) -> Reply:
        return Reply(outputs={"shift": shift, "confidence": 0.9, "result": label})

    chat = tl.conversation("tutor", id=cid, lm="openai:gpt-test", context={"topics": "branch"})
    fake.add(Reply("f1"), topic("continuation", "fractions"), Reply("f2"))
    fake.add(topic("new", "decimals"), Reply("d1"), topic("return", "fractions"), Reply("f3"))

    f1, f2, d1, f3 = [await chat.predict(m) for m in ("fractions: 1/2?", "and 1/3?", "what is 0.5?", "back to 1/3")]

    assert [None, f1.id, None, f2.id] == [f1.parent, f2.parent, d1.parent, f3.parent]
    assert [f1.id, f2.id] == f3.saw
    history = await chat.history()
    assert [("fractions", 3), ("decimals", 1)] == [(t["label"], t["turns"]) for t in history["topics"]]


async def test_a_retried_turn_is_shown_exactly_what_it_recorded(
    tl: Threadline, client: Client, settings: Settings, fake: FakeProvider, cid: str
) -> None:
    """Between two tries of a turn a newer summary lands on its branch: the retry still shows the
    context the turn recorded (the older summary), so both requests are the same."""
    from activities.providers import build_providers
    from tests.support.fakeprovider import Failure

    env = {"OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": fake.openai_url}
    chat = tl.conversation("tutor", id=cid, lm="openai:gpt-test", context={"summary": {"after": 2, "keep": 1}})
    answering(fake, summary_reply("early"))
    fake.add(Reply("a0"), Reply("a1"), Reply("a2"), Failure(500), Reply("a3"))
    async with (
        httpx.AsyncClient() as http,
        build_worker(client, settings, providers=build_providers(settings, http, env=env)),
    ):
        turns = [await predict_settled(client, chat, f"message {k}") for k in range(3)]
        placed = await chat.send("message 3")
        for _ in range(500):
            if len(main_requests(fake)) == 4:
                break  # the first try failed: the retry comes in half a second
            await asyncio.sleep(0.01)
        data: dict[str, Any] = {"turns": [t.id for t in turns], "through": turns[-1].id, "summary": "late"}
        store = FolderStore(settings.store_folder("default"))
        store.append(cid, [entry_record("threadline", "summary", data, turn=turns[-1].id)])
        done = await placed.result()

    retried, first_try = main_requests(fake)[-1], main_requests(fake)[-2]
    assert "done" == done.state
    assert first_try.body == retried.body
    assert "early" in json.dumps(retried.body)
    assert "late" not in json.dumps(retried.body)


def is_topic(request: Received) -> bool:
    return "Decide how the new message relates" in json.dumps(request.body)


RENDER_RULES: list[dict[str, Any]] = [
    {},
    {"last": 1},
    {"without": ["message"]},
    {"window": 2},
    {"max_tokens": 30},
    {"topics": "track"},
    {"topics": "branch"},
    {"summary": {"after": 2, "keep": 1}},
    {"summary": {"after": 2, "keep": 1}, "topics": "branch", "window": 4},
]


@pytest.mark.parametrize("rule", RENDER_RULES, ids=lambda rule: json.dumps(rule, separators=(",", ":")))
async def test_render_equals_the_body_the_provider_then_receives(
    tl: Threadline, live: Settings, fake: FakeProvider, cid: str, rule: dict[str, Any]
) -> None:
    """With every context rule, topics on and a summary still being made, render shows exactly the
    body the next turn's model call sends, and records nothing."""
    chat = tl.conversation("tutor", id=cid, lm="openai:gpt-test", context=rule)
    same = Reply(outputs={"shift": "continuation", "confidence": 0.9, "result": "fractions"})
    new = Reply(outputs={"shift": "new", "confidence": 0.9, "result": "decimals"})  # under `branch`: a new root
    slow_summary = Reply(outputs={"facts": ["Alex"], "result": "About fractions."}, delay=0.1)

    def answer(request: Received) -> Reply | None:
        if is_topic(request):
            return new if "fourth" in json.dumps(request.body) else same
        return slow_summary if is_summary(request) else None

    fake.answer = answer
    fake.add(Reply("one"), Reply("two"), Reply("three"), Reply("four"))
    for text in ("first", "second", "third"):
        await chat.predict(text)  # no settling: with a summary rule one is still being made now
    store = FolderStore(live.store_folder("default"))

    def turn_records() -> list[dict[str, Any]]:  # the summary being made lands meanwhile: not render's
        return [r for r in store.read(cid) if r.get("entry") != "summary"]

    records = turn_records()

    rendered = await chat.render("fourth")

    assert records == turn_records()
    await chat.predict("fourth")
    sent = [r for r in fake.requests if not is_summary(r) and not is_topic(r)][-1]
    assert rendered.request == sent.body
