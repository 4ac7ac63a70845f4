"""A guided flow's progress as its conversation's record log keeps it: `entry` records of plugin `flow`.

Every prompt and answer of a flow is also an ordinary turn (program `flow_step`, see
`store.flows.manager`); the entries say what the flow made of them. Each is a format-1 entry
(`{functai_conversation, kind: "entry", at, plugin: "flow", entry: <kind>, data, [turn]}`) whose
`data` always holds `flow` (its name), `run` (the id of the turn that started this run of it) and
`request_id` (of the call that wrote it: a retry finds it and writes nothing again):

- `started` (`turn`: the turn holding the first prompt): `step`, the first step.
- `answered` (`turn`: the answer's): `step`, `value` (the answer's JSON value), `next` (the next
  step, or null when the flow is complete).
- `invalid` (`turn`: the answer's): `step`, `attempt` (invalid answers to this step in a row, this
  one included).
- `completed` (`turn`: the last answer's): `data`, everything collected by step name.
- `abandoned` (`turn`: the answer's, or none): `step`, `reason`: `attempts` (they ran out),
  `expired`, `stopped`, `replaced` (another flow started), `changed` (the flow or its step is no
  longer defined) or `failed` (its own code, a validator, extractor or `next_step`, raised: no
  turn, and `error` names the exception's type).
- `handed_off` (`turn`: the answer's): `step`, `reason` (`attempts`), `data` (what was collected).
- `reminded` (no turn): `step`, `moves` (the progress it reminded at), `prompt` (the text sent again).
- `checked` (no turn): `step`, `check` (`validator` or `extractor`), `ok`, `value`: a model's answer
  to an AI check, kept before it is used so a retry pays for it once.

A conversation's progress is its flow entries applied in file order (`progress_of`): the latest
`started` begins a run and only entries of that run move it, so a stray or repeated entry changes
nothing. The next step is recorded, never computed again, so rebuilding needs no flow definition.
functai reads these as any plugin's entries (`chat.entries("flow", "completed")`).
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from store.log.collected import PLUGIN
from store.log.state import Log
from store.records import Record

from .steps import FlowState

MOVES = frozenset({"started", "answered", "invalid"})
"""The entries that are a move of a run: its timers are keyed by the count of them."""
ENDS = {"completed": FlowState.COMPLETED, "abandoned": FlowState.ABANDONED, "handed_off": FlowState.HANDED_OFF}


@dataclass(frozen=True, slots=True)
class Progress:
    """Where a conversation's latest flow run stands (`state` None: no flow ever ran)."""

    run: str | None = None
    flow: str | None = None
    state: FlowState | None = None
    step: str | None = None
    """The step it asks now (while active), or the one it ended at."""
    data: dict[str, Any] = field(default_factory=dict)
    attempts: int = 0
    """Invalid answers to the current step in a row."""
    moves: int = 0
    """Starts, answers and invalid answers of this run: a timer set at one count is stale at another."""
    reminded: bool = False
    """Whether the prompt was sent again since the last move."""

    @property
    def active(self) -> bool:
        """Whether a flow is asking (the conversation's messages are its answers)."""
        return self.state is FlowState.ACTIVE


def apply(progress: Progress, kind: str, data: Mapping[str, Any]) -> Progress:
    """`progress` after one flow entry (`kind`, `data`); anything that does not fit changes nothing."""
    step = data.get("step")
    if kind == "started":
        flow, run = data.get("flow"), data.get("run")
        if isinstance(flow, str) and isinstance(run, str) and isinstance(step, str):
            return Progress(run=run, flow=flow, state=FlowState.ACTIVE, step=step, moves=1)
        return progress
    if not progress.active or data.get("run") != progress.run:
        return progress
    if kind == "answered" and step == progress.step:
        following = data.get("next")
        collected = {**progress.data, str(step): data.get("value")}
        moved = replace(progress, data=collected, attempts=0, moves=progress.moves + 1, reminded=False)
        return replace(moved, step=following) if isinstance(following, str) else moved
    if kind == "invalid" and step == progress.step:
        return replace(progress, attempts=progress.attempts + 1, moves=progress.moves + 1, reminded=False)
    if kind == "reminded" and data.get("moves") == progress.moves:
        return replace(progress, reminded=True)
    if kind in ENDS:
        ended = replace(progress, state=ENDS[kind])
        final = data.get("data")
        return replace(ended, data=dict(final)) if isinstance(final, dict) else ended
    return progress


def apply_all(progress: Progress, made: Iterable[tuple[str, Mapping[str, Any]]]) -> Progress:
    """`progress` after each `(kind, data)` in order."""
    for kind, data in made:
        progress = apply(progress, kind, data)
    return progress


@dataclass(slots=True)
class _Seen:
    """What a `Log`'s flow entries say, applied once each: a log only ever grows, so each call
    applies the entries since the last one instead of replaying the whole conversation."""

    entries: int = 0
    flow: list[Record] = field(default_factory=list)
    by_request: dict[str, list[Record]] = field(default_factory=dict)
    progress: Progress = field(default_factory=Progress)


_SEEN: weakref.WeakKeyDictionary[Log, _Seen] = weakref.WeakKeyDictionary()


def _seen(log: Log) -> _Seen:
    seen = _SEEN.get(log)
    if seen is None or seen.entries > len(log.entries):
        seen = _SEEN[log] = _Seen()
    for entry in log.entries[seen.entries :]:
        data = entry.get("data")
        if entry.get("plugin") != PLUGIN or not isinstance(data, dict):
            continue
        seen.flow.append(entry)
        if isinstance(data.get("request_id"), str):
            seen.by_request.setdefault(data["request_id"], []).append(entry)
        seen.progress = apply(seen.progress, str(entry.get("entry")), data)
    seen.entries = len(log.entries)
    return seen


def holds_flows(log: Log) -> bool:
    """Whether the log holds any flow entry (a flow was ever started in the conversation)."""
    return bool(_seen(log).flow)


def flow_entries(log: Log) -> list[Record]:
    """The conversation's flow entries, in file order."""
    return list(_seen(log).flow)


def progress_of(log: Log, *, through: str | None = None) -> Progress:
    """The progress the log records; with `through` (a request id), as the call that wrote it left it."""
    if through is None:
        return _seen(log).progress
    found = flow_entries(log)
    last = max((i for i, e in enumerate(found) if e["data"].get("request_id") == through), default=-1)
    return apply_all(Progress(), ((str(e.get("entry")), e["data"]) for e in found[: last + 1]))


def written_by(log: Log, request_id: str) -> list[Record]:
    """The flow entries the call with `request_id` appended (one batch), in order."""
    return list(_seen(log).by_request.get(request_id, ()))


def failed_by(log: Log, request_id: str) -> Record | None:
    """The `abandoned` entry the call with `request_id` wrote because the flow's own code failed, if any."""
    for entry in written_by(log, request_id):
        if entry.get("entry") == "abandoned" and entry["data"].get("reason") == "failed":
            return entry
    return None


def checked(log: Log, request_id: str, check: str, step: str) -> Record | None:
    """The model's answer to a step's AI check already kept for `request_id`, if any."""
    for entry in written_by(log, request_id):
        data = entry["data"]
        if entry.get("entry") == "checked" and data.get("check") == check and data.get("step") == step:
            return entry
    return None


@dataclass(frozen=True, slots=True)
class FlowCount:
    """What the article asks to monitor, for one flow."""

    started: int = 0
    completed: int = 0
    abandoned: int = 0
    handed_off: int = 0
    invalid: dict[str, int] = field(default_factory=dict)
    """Invalid answers by step."""


def counts_of(log: Log) -> dict[str, FlowCount]:
    """Starts, completions, abandonments, hand-offs and invalid answers per step, by flow name."""
    counts: dict[str, dict[str, Any]] = {}
    for entry in flow_entries(log):
        kind, data = entry.get("entry"), entry["data"]
        count = counts.setdefault(str(data.get("flow")), {"invalid": {}})
        if kind == "invalid":
            step = str(data.get("step"))
            count["invalid"][step] = count["invalid"].get(step, 0) + 1
        elif kind in ("started", *ENDS):
            count[str(kind)] = count.get(str(kind), 0) + 1
    return {name: FlowCount(**count) for name, count in sorted(counts.items())}
