"""A response's server-sent events, made from its turn's durable stream.

The events are a pure function of the turn's stream and its end, so every reader numbers them alike:
`response.created`, `response.in_progress`, `response.output_item.added`,
`response.content_part.added`, one `response.output_text.delta` per piece of text, then the `done`
events and `response.completed` (`response.failed`, or `response.incomplete` for a stopped turn). A
reader that resumes with `starting_after=N` is given the events after number N, with no gap.

A try that was retried (its worker died) starts its text over: deltas go on after the text already
sent when the new try's text begins with it (the same model asked the same); the `done` events and
the response carry the answer the log holds.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from store.log.state import Log
from threadline.client import Conversation
from threadline.reading import Turn

from . import openai_items as items

_ENDS = {"completed": "response.completed", "failed": "response.failed", "cancelled": "response.incomplete"}


class Numbered:
    """Numbers events in order and renders those after `after` as server-sent events."""

    def __init__(self, after: int) -> None:
        self.after, self.next = after, 0

    def event(self, kind: str, **data: Any) -> str | None:
        """The event `kind` as SSE text, or None when the reader already has it."""
        number, self.next = self.next, self.next + 1
        if number <= self.after:
            return None
        body = json.dumps({"type": kind, "sequence_number": number, **data}, ensure_ascii=False, default=str)
        return f"event: {kind}\ndata: {body}\n\n"


async def response_events(chat: Conversation, turn: str, *, after: int = -1) -> AsyncIterator[str]:
    """The events of `turn`'s response after number `after` (-1: all), until the turn ends."""
    numbered, log = Numbered(after), await _log(chat)
    begun = await chat.turn(turn)
    ids = {"item_id": f"msg-out-{turn}", "output_index": 0, "content_index": 0}
    start = {**items.response_of(log, chat.id, begun), "status": "in_progress", "output": []}
    opening = [
        numbered.event("response.created", response=start),
        numbered.event("response.in_progress", response=start),
        numbered.event("response.output_item.added", output_index=0, item=items.answer_item(begun, "", "in_progress")),
        numbered.event("response.content_part.added", **ids, part=_part("")),
    ]
    for event in opening:
        if event is not None:
            yield event
    sent, current = "", ""
    async for piece in chat.watch(turn):
        current = "" if piece.text is None else current + piece.text
        if len(current) > len(sent) and current.startswith(sent):
            delta, sent = current[len(sent) :], current
            if (event := numbered.event("response.output_text.delta", **ids, delta=delta, logprobs=[])) is not None:
                yield event
    for event in _closing(numbered, await _log(chat), chat.id, await chat.turn(turn), sent):
        if event is not None:
            yield event


def _closing(numbered: Numbered, log: Log, conversation: str, ended: Turn, sent: str) -> list[str | None]:
    response = items.response_of(log, conversation, ended)
    final = _end_text(ended)
    ids = {"item_id": f"msg-out-{ended.id}", "output_index": 0, "content_index": 0}
    events: list[str | None] = []
    if response["status"] == "completed" and final.startswith(sent) and len(final) > len(sent):
        events.append(numbered.event("response.output_text.delta", **ids, delta=final[len(sent) :], logprobs=[]))
    events += [
        numbered.event("response.output_text.done", **ids, text=final, logprobs=[]),
        numbered.event("response.content_part.done", **ids, part=_part(final)),
        numbered.event("response.output_item.done", output_index=0, item=items.answer_item(ended, final)),
        numbered.event(_ENDS.get(response["status"], "response.incomplete"), response=response),
    ]
    return events


def _end_text(turn: Turn) -> str:
    return items.answer_item(turn)["content"][0]["text"] if turn.state == "done" else ""


def _part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


async def _log(chat: Conversation) -> Log:
    return await chat.tl.log(chat.config.store, chat.id).read()
