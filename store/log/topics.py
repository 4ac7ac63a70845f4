"""Topic tracking over the record log: each message's topic is an `entry` (plugin `threadline`,
kind `topic`) with its request id, so a topic's turns are found through the log's request ids
and branches stay the saved contexts: nothing is copied.

As the multi-turn article's tracker does, the topic history holds a label only when it was a new
topic or a refinement (a continuation or a return adds nothing), the classifier is shown the last
three turns and the last five topics of that history, and each entry names the `previous_topic`
(the history's latest label before it).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any, Literal

from store.programs.program import Program
from store.values import copy_value

from .state import Log

PLUGIN = "threadline"
KIND = "topic"

Shift = Literal["continuation", "refinement", "new", "return"]

CLASSIFIER = Program.define(
    "classify_topic",
    "Decide how the new message relates to the conversation so far: a continuation of the current "
    "topic, a refinement of it, a new topic, or a return to one of the earlier topics listed. Give "
    "the topic a short label (reuse an earlier label exactly when the message returns to it) and "
    "your confidence from 0 to 1.",
    inputs={"message": str, "recent": str, "current": str, "topics": list[str]},
    outputs={"shift": Shift, "confidence": float, "result": str},
)


RECENT_TURNS = 3
"""How many of the latest turns the classifier is shown (the article's `messages[-3:]`)."""
SHOWN_TOPICS = 5
"""How many of the latest topics of the history the classifier is shown (the article's five)."""
HISTORY_SHIFTS = ("new", "refinement")
"""The shifts whose label enters the topic history (the article's NEW_TOPIC and REFINEMENT)."""
LABEL_WORDS = 4
_COMMON_WORDS = (
    "a about an and are as at be can could do does for from help how i i'm im in is it let's me my "
    "of on or please so tell that the this to us we what when where which who why will with would "
    "you your their them they there these those have has was were some any also just like want "
    "need know"
)
_STOPWORDS = frozenset(_COMMON_WORDS.split())


def topic_entries(log: Log) -> list[dict[str, Any]]:
    """Every topic entry's data, oldest first."""
    return [copy_value(data) for data in _topic_data(log)]


def classified(log: Log, request_id: str) -> dict[str, Any] | None:
    """The topic already recorded for `request_id` (a retry pays for no second classification)."""
    found = next((d for d in _topic_data(log) if d.get("request_id") == request_id), None)
    return None if found is None else copy_value(found)


def topic_usage(log: Log, request_id: str | None) -> dict[str, int]:
    """The tokens the topic classification of `request_id` used (it counts in its turn's usage)."""
    usage = (classified(log, request_id) or {}).get("usage") if request_id else None
    return {k: v for k, v in usage.items() if isinstance(v, int)} if isinstance(usage, dict) else {}


def topics(log: Log) -> list[dict[str, Any]]:
    """The conversation's topics in order of first appearance: label, turns, latest turn."""
    found: dict[str, dict[str, Any]] = {}
    for data in _topic_data(log):
        label = str(data.get("label") or "")
        turn = log.request_ids.get(str(data.get("request_id")))
        topic = found.setdefault(label, {"label": label, "turns": [], "latest": None})
        if turn is not None:
            topic["turns"].append(turn)
            topic["latest"] = turn
    return list(found.values())


def topic_history(log: Log) -> list[str]:
    """The labels of the topic history, oldest first: those of new topics and refinements."""
    return [str(d.get("label") or "") for d in _topic_data(log) if d.get("shift") in HISTORY_SHIFTS]


def first_topic(request_id: str, message: str) -> dict[str, Any]:
    """The first message's topic: new, with full confidence, labelled without asking a model."""
    return {
        "request_id": request_id,
        "shift": "new",
        "label": short_label(message),
        "confidence": 1.0,
        "previous_topic": None,
        "usage": {},
    }


def short_label(text: str) -> str:
    """A few words naming what `text` is about: its first words that are not common ones."""
    words = re.findall(r"[\w'-]+", text.lower())
    kept = [w for w in words if w not in _STOPWORDS and len(w) > 1] or words
    return " ".join(kept[:LABEL_WORDS])


def _topic_data(log: Log) -> Iterator[dict[str, Any]]:
    """The data of every topic entry, oldest first, as the log holds it (read, never changed)."""
    for e in log.entries:
        data = e.get("data")
        if e.get("plugin") == PLUGIN and e.get("entry") == KIND and e.get("turn") is None and isinstance(data, dict):
            yield data


def current_label(log: Log, head: str | None) -> str:
    """The topic of the head turn, if it has one."""
    for topic in topics(log):
        if head is not None and head in topic["turns"]:
            return str(topic["label"])
    return ""
