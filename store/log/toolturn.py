"""A turn that calls tools, as its records tell it (docs/format-1.md 2.7, 2.8, 4.7, 4.9), exactly as functai 1.2.0
writes them: `reply` records for the model's replies, `tool` records (`started` for a tool that changes
things, `done` for every tool that ran), `approval` records for answers and a `waiting` record when a
call needs a person.

`ToolBook` reads one turn's records: which result is recorded for a call (and whether it is the same
call: name and input), which answers were given, which tools may have run. Everything is pure.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from store.programs.shape import canonical_json, hash_json
from store.programs.tools import ToolCall
from store.records import FORMAT, Record, iso

from .state import Turn

__all__ = [
    "DENIED",
    "PERSON",
    "Answer",
    "Approval",
    "ToolBook",
    "all_calls",
    "approval_item",
    "approval_record",
    "denial",
    "reply_calls",
    "reply_key",
    "reply_record",
    "site_of",
    "tool_lmcc",
    "tool_record",
    "tool_steps",
    "verdict_of",
    "waiting_record",
]

DENIED = "The person did not allow this call."
PERSON = "approval"
"""The plugin name of a question the `approve` rule asks (functai's); Threadline's own questions use
`threadline`, so the two never answer each other."""


def site_of(program: str) -> str:
    """The site of a turn's own call (`gardener#1`): where its tool calls and approvals are kept."""
    return f"{program}#1"


def denial(reason: str | None) -> str:
    """What the model is shown for a call a person refused (functai's words)."""
    return DENIED + (f" Reason: {reason}" if reason else "")


def reply_key(request: Mapping[str, Any], replicate: int = 0) -> str:
    """The key of a reply: our own document, so neither engine ever reuses the other's replies
    (functai keys its replies by its own prompt, which Threadline never sends)."""
    return hash_json({"threadline_reply": 1, "request": request, "replicate": int(replicate)})


def _head(kind: str, turn: str, at: str | None) -> Record:
    return {"functai_conversation": FORMAT, "kind": kind, "at": at or iso(), "turn": turn}


def reply_record(turn: str, *, attempt: int, key: str, response: Mapping[str, Any], at: str | None = None) -> Record:
    """A model reply of a resumable turn; `response` in lm15's canonical form, its keys sorted."""
    return {
        **_head("reply", turn, at),
        "attempt": attempt,
        "key": key,
        "response": json.loads(canonical_json(response)),
    }


def tool_record(
    turn: str,
    state: str,
    *,
    site: str,
    invocation: int,
    call: ToolCall,
    attempt: int | None = None,
    effects: str | None = None,
    output: str | None = None,
    at: str | None = None,
) -> Record:
    """A `tool` record in functai's key order: `started` (with input and effects), `done` (with the
    output), or `given`/`rerun` (written at resume, with no attempt)."""
    out = _head("tool", turn, at)
    if attempt is not None:
        out["attempt"] = attempt
    out.update(site=site, invocation=invocation, id=call.id, name=call.name)
    if state == "started":
        out.update(input=copy.deepcopy(call.input), effects=effects)
    out["state"] = state
    if output is not None:
        out["output"] = output
    return out


def approval_item(
    turn: str, *, invocation: int, call: ToolCall, effects: str | None, program: str, question: str | None = None
) -> Record:
    """One question of a `waiting` record, in functai's key order (the plugin is `threadline` when
    Threadline asks it itself, with a question)."""
    site = site_of(program)
    item: Record = {"call": turn, "invocation": invocation, "id": call.id, "name": call.name}
    item.update(input=copy.deepcopy(call.input), effects=effects, path=f"{program}/{call.name}", site=site)
    item["plugin"] = "threadline" if question else PERSON
    if question:
        item["question"] = question
    return item


def waiting_record(turn: str, *, attempt: int, approvals: Sequence[Record], saw: list[Record]) -> Record:
    """The turn stops to wait for a person: the calls it asks about, and what it was shown."""
    out: Record = {"functai_conversation": FORMAT, "at": iso(), "turn": turn, "attempt": attempt, "kind": "waiting"}
    out.update(approvals=[dict(a) for a in approvals], saw=list(saw))
    return out


def approval_record(
    turn: str, asked: Mapping[str, Any], *, yes: bool, by: str | None, reason: str | None, at: str | None = None
) -> Record:
    """A person's answer to one question `asked` (an item of a `waiting` record)."""
    out = _head("approval", turn, at)
    out.update(site=asked.get("site"), invocation=int(asked.get("invocation") or 0), path=asked.get("path"))
    out.update(plugin=asked.get("plugin") or PERSON, verdict="yes" if yes else "no", by=by, reason=reason)
    return out


def reply_calls(response: Any) -> list[ToolCall]:
    """The tool calls a `reply` record's `response` (lm15's canonical form) asks for, in order."""
    message = response.get("message") if isinstance(response, Mapping) else None
    parts = message.get("parts") if isinstance(message, Mapping) else None
    out = []
    for part in parts if isinstance(parts, list) else []:
        if isinstance(part, Mapping) and part.get("type") == "tool_call":
            given = part.get("input")
            out.append(ToolCall(str(part.get("id") or ""), str(part.get("name") or ""), dict(given or {})))
    return out


@dataclass(frozen=True, slots=True)
class Answer:
    """A recorded answer to a question: yes or no, why, and by whom."""

    yes: bool
    reason: str | None = None
    by: str | None = None


def _key(record: Mapping[str, Any]) -> tuple[Any, int]:
    return record.get("site"), int(record.get("invocation") or 0)


class ToolBook:
    """What one turn's records say of its tools, answers and replies (every attempt's)."""

    def __init__(self, turn: Turn) -> None:
        self.latest: dict[tuple[Any, int], Record] = {}
        for record in turn.tools:
            if record.get("state") in ("started", "done", "given"):
                self.latest[_key(record)] = record
            elif record.get("state") == "rerun":
                self.latest.pop(_key(record), None)
        self.answers = {(*_key(a), a.get("plugin") or PERSON): a for a in turn.answers}
        self.replies: dict[str, list[Record]] = {}
        self.asked: dict[str, ToolCall] = {}
        for reply in turn.replies:
            self.replies.setdefault(str(reply.get("key")), []).append(reply)
            self.asked.update({c.id: c for c in reply_calls(reply.get("response"))})
        self.started = {_key(t): t for t in turn.tools if t.get("state") == "started"}

    def replies_for(self, keys: Iterable[str]) -> dict[str, list[Record]]:
        """The recorded replies under `keys`, oldest first (a resumed turn takes them in order)."""
        return {k: list(self.replies.get(k, [])) for k in keys}

    def result(self, site: str, invocation: int, call: ToolCall) -> str | None:
        """The recorded output of this very call at (site, invocation): None when none is recorded or
        the one recorded was another call (another tool or another input, as when the turn was
        started by another engine whose model asked otherwise)."""
        found = self.latest.get((site, invocation))
        if found is None or found.get("state") == "started":
            return None
        if not self._same(site, invocation, found, call):
            return None
        output = found.get("output")
        return output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)

    def _same(self, site: str, invocation: int, found: Record, call: ToolCall) -> bool:
        if found.get("name") != call.name:
            return False
        started = self.started.get((site, invocation))
        if started is not None and started.get("id") == found.get("id"):
            return bool(started.get("input") == call.input)
        asked = self.asked.get(str(found.get("id") or ""))
        return asked is not None and asked.name == call.name and asked.input == call.input

    def differs(self, site: str, invocation: int, call: ToolCall) -> bool:
        """Whether a result is recorded at (site, invocation) for another call than this one."""
        found = self.latest.get((site, invocation))
        return found is not None and found.get("state") != "started" and self.result(site, invocation, call) is None

    def unfinished(self, site: str, invocation: int) -> bool:
        """Whether the tool at (site, invocation) started and has no result: it may have run."""
        found = self.latest.get((site, invocation))
        return found is not None and found.get("state") == "started"

    def answer(self, site: str, invocation: int, plugin: str = PERSON) -> Answer | None:
        """The recorded answer to the question at (site, invocation) from `plugin`, if any."""
        found = self.answers.get((site, invocation, plugin))
        if found is None:
            return None
        reason = found.get("reason")
        by = found.get("by")
        return Answer(found.get("verdict") == "yes", reason if isinstance(reason, str) else None, by)


@dataclass(frozen=True, slots=True)
class Approval:
    """One tool call a rule asks about, as an `approve` function is given it (functai's `Approval`)."""

    call: str
    invocation: int
    id: str
    name: str
    input: Any
    effects: str | None
    path: str
    site: str = ""
    plugin: str = PERSON
    question: str | None = None

    @classmethod
    def of(cls, item: Mapping[str, Any]) -> Approval:
        """The approval an item of a `waiting` record describes."""
        return cls(
            str(item.get("call") or ""),
            int(item.get("invocation") or 0),
            str(item.get("id") or ""),
            str(item.get("name") or ""),
            copy.deepcopy(item.get("input")),
            item.get("effects"),
            str(item.get("path") or item.get("name") or ""),
            str(item.get("site") or ""),
            str(item.get("plugin") or PERSON),
            item.get("question"),
        )


def verdict_of(answer: Any) -> Answer:
    """What an `approve` function answered: True (yes), False or None (no), or a reason to refuse."""
    if answer is True:
        return Answer(True)
    if answer is False or answer is None:
        return Answer(False)
    if isinstance(answer, str):
        return Answer(False, answer)
    raise TypeError(f"an approve function answers True, False, or a reason to refuse (a text); not {answer!r}")


def tool_steps(calls: Sequence[ToolCall], outputs: Sequence[str]) -> list[Record]:
    """One model step that called tools and its results, as lmcc steps (docs/format-1.md 2.11)."""
    model: Record = {"calls_field": "calls", "kind": "model", "outputs": {"calls": [_call_json(c) for c in calls]}}
    results = [
        {"id": c.id, "kind": "tool", "name": c.name, "output": [{"text": out, "type": "text"}]}
        for c, out in zip(calls, outputs, strict=True)
    ]
    return [model, *results]


def _call_json(call: ToolCall) -> Record:
    return {"id": call.id, "input": copy.deepcopy(call.input), "name": call.name}


def tool_lmcc(
    *,
    signature: str,
    inputs: Mapping[str, Any],
    tools: Sequence[Mapping[str, Any]],
    steps: Sequence[Record],
    outputs: Mapping[str, Any],
) -> Record:
    """The lmcc turn of a program with tools: its `tools` input, every step, and the last step's
    outputs (`calls` empty) as its outputs, keys sorted as functai writes them."""
    final = {"calls": [], **outputs}
    last: Record = {"calls_field": "calls", "kind": "model", "outputs": final}
    turn = {"inputs": {**inputs, "tools": list(tools)}, "outputs": final, "signature": signature}
    return dict(json.loads(canonical_json({**turn, "steps": [*steps, last]})))


def all_calls(calls: Iterable[ToolCall]) -> list[Record]:
    """Every call of a turn as its `calls` output holds them: `{id, name, input}`."""
    return [c.as_json() for c in calls]
