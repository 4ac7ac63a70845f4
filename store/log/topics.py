"""Topic tracking over the record log: each message's topic is an `entry` (plugin `threadline`,
kind `topic`) with its request id, so a topic's turns are found through the log's request ids
and branches stay the saved contexts: nothing is copied.
"""

from __future__ import annotations

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
    inputs={"message": str, "current": str, "topics": list[str]},
    outputs={"shift": Shift, "confidence": float, "result": str},
)


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
