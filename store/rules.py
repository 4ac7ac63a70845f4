"""The conversation rules over a `Log` (format-1.md 4.3-4.11): where a view continues, where a
new turn goes under the `sends` policy, and what a turn is shown (its `saw` entries and rows).

Everything here is a pure function of the log, the program's fields and the clock.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from core.errors import ErrorCode, ThreadlineError

from .log import Log, Turn
from .records import Record

Sends = Literal["queue", "refuse", "branch", "interrupt"]
SENDS: tuple[Sends, ...] = ("queue", "refuse", "branch", "interrupt")
_ENTRY_KEYS = frozenset({"call", "steps", "without", "slot"})


# ----- where a view continues (4.3)


@dataclass(frozen=True, slots=True)
class View:
    """Where one client continues a conversation.

    `pinned=None` follows the conversation head. `exact=True` (from `continue_from`) continues
    after exactly `pinned`; otherwise the view follows the branch through `pinned`: the newest
    turn that is `pinned` or descends from it.
    """

    pinned: str | None = None
    exact: bool = False


def view_head(log: Log, view: View = View()) -> str | None:
    """The turn `view` continues from next, or None."""
    if view.exact:
        return view.pinned  # None: a new root
    if view.pinned is None:
        return log.head
    for tid in reversed(log.order):
        t: str | None = tid
        seen: set[str] = set()
        while t is not None and t not in seen:
            if t == view.pinned:
                return tid
            seen.add(t)
            turn = log.turns.get(t)
            t = turn.parent if turn is not None else None
    return view.pinned


# ----- where a new turn goes (4.4)


@dataclass(frozen=True, slots=True)
class Next:
    """Where a turn sent now goes: after `parent`, or it must wait for the running turn `waits`; with
    `interrupt`, the running turn `stops` is stopped first (a `stop` record in the same append)."""

    parent: str | None = None
    waits: str | None = None
    stops: str | None = None

    def as_dict(self) -> dict[str, str | None]:
        """`{"waits": id}` or `{"parent": id or None}`, as the conformance cases write it."""
        return {"waits": self.waits} if self.waits else {"parent": self.parent}


def parent_for(log: Log, head: str | None, sends: Sends, now: float) -> Next:
    """Decide where a new turn after `head` goes under the `sends` policy.

    Raises:
        ThreadlineError: `conversation-busy` when the head waits for a person (unless `branch`),
            or runs and `sends` is `refuse`. `interrupt` stops a running head and continues from its
            parent's nearest done turn, as `branch` would.
    """
    turn = log.turns.get(head) if head is not None else None
    if turn is None:
        return Next(parent=None)
    state = turn.state(now)
    if state == "waiting" and sends != "branch":
        raise ThreadlineError(
            ErrorCode.CONVERSATION_BUSY,
            f"turn {head} waits for a person's answer: answer it, or continue from another turn",
            turn=head,
        )
    if state in ("running", "waiting"):
        if sends == "queue":
            return Next(waits=head)
        if sends == "interrupt":  # only running here: a waiting head was refused above
            return Next(parent=log.nearest_done(turn.parent, now), stops=head)
        if sends == "refuse":
            raise ThreadlineError(
                ErrorCode.CONVERSATION_BUSY,
                f"turn {head} is {state}: retry when it ends, or send with sends='branch'",
                turn=head,
            )
        return Next(parent=log.nearest_done(turn.parent, now))
    return Next(parent=log.nearest_done(head, now))


# ----- reading helpers (4.2, 4.11)


def waiting(log: Log) -> dict[str, list[int]]:
    """For each turn with unanswered approvals, their invocations."""
    out: dict[str, list[int]] = {}
    for tid in log.order:
        asked = log.turns[tid].unanswered()
        if asked:
            out[tid] = [int(a.get("invocation") or 0) for a in asked]
    return out


def unfinished(log: Log) -> dict[str, list[int]]:
    """For each turn with tools that may have run, their invocations."""
    out: dict[str, list[int]] = {}
    for tid in log.order:
        tools = log.turns[tid].unfinished()
        if tools:
            out[tid] = [int(t.get("invocation") or 0) for t in tools]
    return out


def branches(log: Log) -> list[str]:
    """The tips of the conversation's branches (turns nothing continues), oldest first."""
    return [tid for tid in log.order if not log.turns[tid].children]


def entries(log: Log, plugin: str, kind: str, tip: str | None) -> list[dict[str, Any]]:
    """The entries of `plugin` and `kind` that belong to the branch through `tip`, oldest first."""
    on_branch = {t.id for t in log.branch(tip)}
    out = []
    for e in log.entries:
        turn = e.get("turn")
        if e.get("plugin") == plugin and e.get("entry") == kind and (turn is None or turn in on_branch):
            out.append({"turn": turn, "data": copy.deepcopy(e.get("data")), "at": e.get("at")})
    return out


# ----- what a turn is shown (4.8)


@dataclass(frozen=True, slots=True)
class Rule:
    """A context rule: which done turns of the branch a new turn is shown, and without which fields.

    Format 1's rules are `last` (None: every turn) and `without`. Threadline adds `window` (the
    last messages, two per turn) and `max_tokens` (the most recent turns that fit, counted from
    the usage each `ended` record holds, estimated only where it is missing). All that are set
    apply together: the most restrictive wins.
    """

    last: int | None = None
    without: tuple[str, ...] = ()
    window: int | None = None
    max_tokens: int | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Rule:
        """`{"last": n or None, "without": [names], "window": m, "max_tokens": t}`."""

        def number(key: str) -> int | None:
            value = data.get(key)
            return None if value is None else int(value)

        without = tuple(data.get("without") or ())
        return cls(last=number("last"), without=without, window=number("window"), max_tokens=number("max_tokens"))

    @property
    def is_format_1(self) -> bool:
        """Whether functai's own rules say it all (a resume by functai then shows the same)."""
        return self.window is None and self.max_tokens is None

    def pick(self, done: list[Turn]) -> list[Turn]:
        """The done turns this rule shows."""
        picked = done
        for keep in (self.last, None if self.window is None else self.window // 2):
            if keep is not None:
                picked = picked[-keep:] if keep > 0 else []
        if self.max_tokens is not None:
            total, start = 0, len(picked)
            while start > 0 and total + turn_tokens(picked[start - 1]) <= self.max_tokens:
                start -= 1
                total += turn_tokens(picked[start])
            picked = picked[start:]
        return picked


def estimate_tokens(value: Any) -> int:
    """A rough token count of what a model is shown of a value: four characters a token (the
    values of a mapping, as messages show them, not its keys)."""
    if isinstance(value, Mapping):
        return sum(estimate_tokens(v) for v in value.values())
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return (len(text) + 3) // 4


def turn_tokens(turn: Turn) -> int:
    """What showing `turn` costs: its outputs as the provider counted them, plus its inputs (estimated)."""
    usage = (turn.ended or {}).get("usage") or {}
    output = usage.get("output_tokens")
    return estimate_tokens(turn.inputs) + (output if isinstance(output, int) else estimate_tokens(turn.outputs))


@dataclass(frozen=True, slots=True)
class Shown:
    """What a new turn is shown of the earlier turns."""

    turns: list[str]
    """The earlier turns shown, oldest first."""
    saw: list[Record]
    """The `saw` entries the new turn records (compressed with `saw_of` where possible)."""
    rows: list[dict[str, Any]]
    """One row per shown turn: its inputs and outputs by name, without the rule's fields."""
    exchanges: list[dict[str, Any]] = field(default_factory=list)
    """The shown turns as `{"inputs", "outputs"}` for building a prompt (fields left out removed)."""
    without: dict[str, list[str]] = field(default_factory=dict)
    sections: list[str] = field(default_factory=list)
    """Text added to the instruction (a summary of the turns not shown)."""
    context: dict[str, Any] | None = None
    """The `context` the turn records, so a resume (here or in functai) shows exactly this; None
    when format 1's default rule says it all."""


def shown(
    log: Log,
    parent: str | None,
    *,
    fields: Sequence[Mapping[str, Any]],
    signature: str | None,
    now: float,
    rule: Rule = Rule(),
    context: Mapping[str, Any] | None = None,
    covered: Collection[str] = (),
    sections: Sequence[str] = (),
) -> Shown:
    """What a turn after `parent` is shown, for an AI program with these `fields` and `signature`.

    `context` is a turn's recorded `context` (`{"turns", "without", "sections"}`): resuming that
    turn shows exactly it instead of applying the rule again. Otherwise the rule picks among the
    done turns of the branch that a summary has not `covered`, and `sections` (the summary) are
    added to the instruction.
    """
    done = [t for t in log.branch(parent) if t.state(now) == "done"]
    if context is not None:
        by_id = {t.id: t for t in done}
        picked = [by_id[tid] for tid in context.get("turns") or [] if tid in by_id]
        without = {k: sorted(v) for k, v in (context.get("without") or {}).items()}
        sections = [str(text) for text in context.get("sections") or []]
    else:
        picked = rule.pick([t for t in done if t.id not in covered] if covered else done)
        without = {}
        for t in picked:
            gone = sorted((set(t.inputs) | set(t.outputs)) & set(rule.without))
            if gone:
                without[t.id] = gone
    kept_inputs = {f["name"] for f in fields if f.get("direction") == "input" and f.get("purpose") == "plain"}
    kept_outputs = {
        f["name"]
        for f in fields
        if f.get("direction") == "output" and f.get("purpose", "plain") in ("plain", "reasoning")
    }
    saw: list[Record] = []
    rows: list[dict[str, Any]] = []
    exchanges: list[dict[str, Any]] = []
    for t in picked:
        gone = without.get(t.id, [])
        rows.append({k: v for k, v in {**t.inputs, **t.outputs}.items() if k not in gone})
        entry, exchange = _entry(log, t, gone, signature, kept_inputs, kept_outputs)
        if entry is not None:
            saw.append(entry)
            exchanges.append(exchange)
    without = {k: v for k, v in without.items() if v}
    record = None
    if context is None and (sections or covered or rule != Rule()):
        record = {"turns": [t.id for t in picked], "without": without, "sections": list(sections)}
    return Shown(
        turns=[t.id for t in picked],
        saw=compress(saw, parent, log),
        rows=rows,
        exchanges=exchanges,
        without=without,
        sections=list(sections),
        context=record,
    )


def _entry(
    log: Log,
    t: Turn,
    gone: list[str],
    signature: str | None,
    kept_inputs: set[str],
    kept_outputs: set[str],
) -> tuple[Record | None, dict[str, Any]]:
    """One shown turn's saw entry (None: not shown) and the exchange a prompt shows of it."""
    ended = t.ended or {}
    program = log.programs.get(str(t.record.get("program"))) or {}
    whole = isinstance(ended.get("lmcc"), dict) and signature is not None and program.get("signature") == signature
    inputs = {k: v for k, v in t.inputs.items() if k not in gone}
    outputs = {k: v for k, v in t.outputs.items() if k not in gone}
    exchange: dict[str, Any] = {"inputs": inputs, "outputs": outputs}
    if whole and not gone:
        steps = ended["lmcc"].get("steps")
        if isinstance(steps, list) and any(isinstance(s, Mapping) and s.get("kind") == "tool" for s in steps):
            # a turn that called tools is shown with its calls and their results, as functai shows it
            answer = {k: v for k, v in outputs.items() if k in kept_outputs}
            exchange = {"inputs": inputs, "outputs": answer, "steps": [dict(s) for s in steps]}
        return ({"call": t.id, "steps": True} if steps else {"call": t.id}), exchange
    # Shown by its values: only the fields the current program has.
    kept = {k: v for k, v in inputs.items() if k in kept_inputs}
    kept_out = {k: v for k, v in outputs.items() if k in kept_outputs}
    if not kept_out:
        return None, exchange
    entry: Record = {"call": t.id}
    dropped = (set(inputs) | set(outputs)) - (set(kept) | set(kept_out))
    names = sorted(dropped | set(gone))
    if names:
        entry["without"] = names
    return entry, {"inputs": kept, "outputs": kept_out}


def compress(saw: list[Record], parent: str | None, log: Log) -> list[Record]:
    """`[{"saw_of": parent}, <parent's entry>]` when the parent saw exactly the entries before it."""
    if len(saw) < 2 or parent is None or saw[-1].get("call") != parent or parent not in log.turns:
        return saw
    try:
        before = expand(log, parent)
    except ValueError:
        return saw
    return [{"saw_of": parent}, saw[-1]] if before == saw[:-1] else saw


def expand(log: Log, turn: str, following: tuple[str, ...] = ()) -> list[Record]:
    """What `turn` saw, with a leading `saw_of` replaced by what that turn saw (recursively).

    Raises:
        ValueError: an unknown turn, an unknown key, a `saw_of` that is not first, or a cycle.
    """
    t = log.turns.get(turn)
    if t is None:
        raise ValueError(f"turn {turn} is not recorded")
    if turn in log.expanded:
        return [dict(e) for e in log.expanded[turn]]
    out: list[Record] = []
    for i, entry in enumerate(t.saw):
        if isinstance(entry, Mapping) and "saw_of" in entry:
            target = entry["saw_of"]
            if i != 0 or set(entry) != {"saw_of"} or target == turn or target in following:
                raise ValueError(f"turn {turn}: a saw_of that cannot be followed")
            out += expand(log, target, (*following, turn))
        elif isinstance(entry, Mapping) and "call" in entry and set(entry) <= _ENTRY_KEYS:
            out.append(copy.deepcopy(dict(entry)))
        else:
            raise ValueError(f"turn {turn} was shown something this reader does not know")
    if t.ended is not None:  # an ended turn's saw never changes (the first `ended` wins): keep it
        log.expanded[turn] = [dict(e) for e in out]
    return out
