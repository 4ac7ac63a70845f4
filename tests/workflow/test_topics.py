"""Topics as the multi-turn article tracks them: the first message is a new topic without a model
call, the classifier is shown the last three turns and the last five topics, only new topics and
refinements enter the history, each analysis names the previous topic, and the offline model's
labels are a few words."""

from __future__ import annotations

import json
from typing import Any

from core.settings import Settings
from store.backends.folder import FolderStore
from tests.support.fakeprovider import FakeProvider, Received, Reply
from threadline.client import Threadline


def is_topic(request: Received) -> bool:
    return "Decide how the new message relates" in json.dumps(request.body)


def classifier_inputs(request: Received) -> str:
    """The classifier's inputs as its request carries them (the last user message)."""
    return str([m for m in request.body["messages"] if m["role"] == "user"][-1]["content"])


def shown_topics(request: Received) -> list[str]:
    line = next(li for li in classifier_inputs(request).splitlines() if li.startswith("topics: "))
    return list(json.loads(line.removeprefix("topics: ")))


def topic_entries(settings: Settings, cid: str) -> list[dict[str, Any]]:
    records = FolderStore(settings.store_folder("default")).read(cid)
    return [r["data"] for r in records if r.get("plugin") == "threadline" and r.get("entry") == "topic"]


def classifying(fake: FakeProvider, *answers: tuple[str, str]) -> list[Received]:
    """Topic requests get the next of `answers` (shift, label); the others the scripted replies."""
    queue = list(answers)
    asked: list[Received] = []

    def answer(request: Received) -> Reply | None:
        if not is_topic(request):
            return None
        asked.append(request)
        shift, label = queue.pop(0)
        return Reply(outputs={"shift": shift, "confidence": 0.8, "result": label})

    fake.answer = answer
    return asked


async def test_the_first_message_is_a_new_topic_without_a_model_call(
    tl: Threadline, live: Settings, fake: FakeProvider, cid: str
) -> None:
    chat = tl.conversation("tutor", id=cid, lm="openai:gpt-test", context={"topics": "track"})
    fake.add(Reply("Fractions are parts of a whole."))

    await chat.predict("Can you explain fractions to me?")

    assert 1 == len(fake.requests)
    assert not is_topic(fake.requests[0])
    (entry,) = topic_entries(live, cid)
    assert ("new", 1.0, None) == (entry["shift"], entry["confidence"], entry["previous_topic"])
    assert "explain fractions" == entry["label"]


async def test_the_classifier_is_shown_the_last_three_turns_and_the_last_five_topics(
    tl: Threadline, live: Settings, fake: FakeProvider, cid: str
) -> None:
    chat = tl.conversation("tutor", id=cid, lm="openai:gpt-test", context={"topics": "track"})
    asked = classifying(fake, *[("new", f"subject {k}") for k in range(1, 8)])
    fake.add(*[Reply(f"reply {k}") for k in range(8)])

    for k in range(8):
        await chat.predict(f"question {k}")

    last = classifier_inputs(asked[-1])
    assert 7 == len(asked)
    assert all(f"user: question {k}\nassistant: reply {k}" in last for k in (4, 5, 6))
    assert not any(f"{word} 3" in last for word in ("question", "reply"))
    assert [f"subject {k}" for k in range(2, 7)] == shown_topics(asked[-1])


async def test_only_new_topics_and_refinements_enter_the_history(
    tl: Threadline, live: Settings, fake: FakeProvider, cid: str
) -> None:
    chat = tl.conversation("tutor", id=cid, lm="openai:gpt-test", context={"topics": "track"})
    asked = classifying(
        fake,
        ("continuation", "fractions"),
        ("refinement", "adding fractions"),
        ("return", "fractions"),
        ("new", "decimals"),
        ("continuation", "decimals"),
    )
    fake.add(*[Reply(f"reply {k}") for k in range(6)])

    for text in ("fractions", "and 1/3?", "how do I add them?", "back to 1/2", "what is 0.5?", "and 0.25?"):
        await chat.predict(text)

    entries = topic_entries(live, cid)
    previous = [None, "fractions", "fractions", "adding fractions", "adding fractions", "decimals"]
    assert previous == [e["previous_topic"] for e in entries]
    assert ["fractions", "adding fractions", "decimals"] == shown_topics(asked[-1])


async def test_the_offline_model_labels_a_topic_in_a_few_words(tl: Threadline, live: Settings, cid: str) -> None:
    chat = tl.conversation("tutor", id=cid, lm="offline", context={"topics": "track"})

    await chat.predict("Tell me about fractions")
    await chat.predict("What about the history of Roman numerals and their use in trade?")

    labels = [e["label"] for e in topic_entries(live, cid)]
    assert ["fractions", "history roman numerals use"] == labels
