"""A conversation as the article's service shows it, computed from its record log: its messages
(role, content, timestamp), when it was created and last updated, its setup, its program, and
where its latest guided flow stands.

Pure functions of a `Log`; the Python API, the CLI and the HTTP service all use them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from store.flows.progress import FlowCount, counts_of, flow_entries, progress_of
from store.flows.turns import FLOW_STEP
from store.log.preamble import setup_of, times
from store.log.state import Log
from store.log.state import Turn as LoggedTurn
from store.programs.program import CHAT

from .reading import steps_of

DEFAULT_PROGRAM = CHAT.name
"""A conversation's program when nothing recorded names one (the article's general chat)."""


@dataclass(frozen=True, slots=True)
class FlowView:
    """Where a conversation's latest guided flow stands, as its record log says."""

    flow: str | None = None
    state: str | None = None
    """`active`, `completed`, `abandoned` or `handed_off` (None: no flow ever ran)."""
    step: str | None = None
    prompt: str | None = None
    """The latest thing the flow said in this run: its prompt, a re-prompt, a reminder, its closing words."""
    data: dict[str, Any] = field(default_factory=dict)
    reminded: bool = False
    """Whether the prompt was sent again (a reminder) since the last answer."""
    attempts: int = 0
    run: str | None = None
    counts: dict[str, FlowCount] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """As JSON-able data."""
        out = {name: getattr(self, name) for name in self.__dataclass_fields__ if name != "counts"}
        out["counts"] = {name: _count(count) for name, count in self.counts.items()}
        return out


def _count(count: FlowCount) -> dict[str, Any]:
    ends = {k: getattr(count, k) for k in ("started", "completed", "abandoned", "handed_off")}
    return {**ends, "invalid": dict(count.invalid)}


def flow_view(log: Log) -> FlowView:
    """The latest flow of `log`: where it stands and what it said last (pure: no Temporal, no clock)."""
    progress = progress_of(log)
    if progress.state is None:
        return FlowView(counts=counts_of(log))
    said: str | None = None
    for entry in flow_entries(log):
        data = entry["data"]
        if data.get("run") != progress.run:
            continue
        if entry.get("entry") == "reminded":
            said = str(data.get("prompt") or "")
        elif isinstance(entry.get("turn"), str) and entry["turn"] in log.turns:
            text = log.turns[entry["turn"]].outputs.get("result")
            said = text if isinstance(text, str) else said
    return FlowView(
        flow=progress.flow,
        state=progress.state.value,
        step=progress.step,
        prompt=said,
        data=dict(progress.data),
        reminded=progress.reminded,
        attempts=progress.attempts,
        run=progress.run,
        counts=counts_of(log),
    )


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


def messages_of(log: Log, tip: str | None) -> list[dict[str, Any]]:
    """The branch through `tip` as messages: each turn's input (`user`), its tool exchanges (the
    assistant's `tool_calls`, then a `tool` message per result), then its answer (`assistant`) once it
    is done; an empty message (a flow's first prompt) is left out."""
    out: list[dict[str, Any]] = []
    for turn in log.branch(tip):
        inputs = turn.inputs
        said = next(iter(inputs.values())) if len(inputs) == 1 else inputs
        if said not in ("", {}):
            user = {"role": "user", "content": _text(said), "timestamp": turn.record.get("at")}
            out.append({**user, "metadata": dict(turn.record.get("metadata") or {})})
        out += _tool_messages(turn)
        ended = turn.ended or {}
        if ended.get("state") == "done":
            answer = ended.get("value", turn.outputs.get("result"))
            if answer not in ("", None):
                out.append({"role": "assistant", "content": _text(answer), "timestamp": ended.get("at")})
    return out


def _tool_messages(turn: LoggedTurn) -> list[dict[str, Any]]:
    """A turn's tool exchanges as chat messages (timestamped with the turn: steps keep no time of their own)."""
    at = turn.record.get("at")
    out: list[dict[str, Any]] = []
    for step in steps_of(turn):
        if step["role"] == "assistant":
            out.append({"role": "assistant", "content": "", "tool_calls": step["calls"], "timestamp": at})
        else:
            message = {"role": "tool", "content": _text(step.get("output")), "tool_call_id": step.get("id")}
            out.append({**message, "name": step.get("name"), "timestamp": at})
    return out


def user_count(log: Log, tip: str | None) -> int:
    """The article's `turn_count`: the user messages on the branch through `tip` (an imported assistant
    message, a flow's start and its first prompt are none)."""
    return sum(m["role"] == "user" for m in messages_of(log, tip))


def program_of(log: Log) -> str:
    """The conversation's program: the one its setup names, else its newest turn's (flows' turns aside)."""
    found = setup_of(log)
    if found is not None and isinstance(found.get("program"), str):
        return str(found["program"])
    for tid in reversed(log.order):
        version = log.turns[tid].record.get("program")
        if version != FLOW_STEP.version and str(version) in log.programs:
            return str(log.programs[str(version)].get("name") or DEFAULT_PROGRAM)
    return DEFAULT_PROGRAM


def overview(log: Log) -> dict[str, Any]:
    """When the conversation was created and last updated, and its system prompt and metadata."""
    created, updated = times(log)
    found = setup_of(log) or {}
    return {
        "created_at": created,
        "updated_at": updated,
        "system_prompt": found.get("system_prompt"),
        "metadata": dict(found.get("metadata") or {}),
    }


def article_view(log: Log, conversation: str) -> dict[str, Any]:
    """The article's keys of a conversation: its id, turn count, times, setup, messages and flow."""
    flow = flow_view(log)
    return {
        "conversation_id": conversation,
        "turn_count": user_count(log, log.head),
        **overview(log),
        "messages": messages_of(log, log.head),
        "flow": flow.as_dict() if flow.state is not None else None,
    }
