"""The conversation rules over a `Log` (docs/format-1.md 4.3, 4.4, 4.8, 4.12): where a view continues, where a
new turn goes under the `sends` policy, and what a turn is shown (its `saw` entries and rows).

Everything here is a pure function of the log, the program's fields and the clock.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from core.context import ContextRule
from core.errors import ErrorCode, ThreadlineError
from store.records import Record
from store.values import copy_value
from store.values import estimate_tokens as estimate_tokens

from .kept import paused_gc
from .memo import KEPT_FROM, ShownMemo
from .saw import compress as compress
from .saw import expand as expand
from .saw import raw_saw
from .state import Log, Turn
from .steers import taken

Sends = Literal["queue", "refuse", "branch", "interrupt", "steer"]
SENDS: tuple[Sends, ...] = ("queue", "refuse", "branch", "interrupt", "steer")


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
    newest = log.turns[view.pinned].position if view.pinned in log.turns else -1
    for tid in log.descendants(view.pinned):
        newest = max(newest, log.turns[tid].position)
    return log.order[newest] if newest >= 0 else view.pinned


# ----- where a new turn goes (4.4)


@dataclass(frozen=True, slots=True)
class Next:
    """Where a turn sent now goes: after `parent`, or it must wait for the running turn `waits`; with
    `interrupt`, the running turn `stops` is stopped first (a `stop` record in the same append); with
    `steer`, it joins the running turn `steers` instead of being a turn of its own."""

    parent: str | None = None
    waits: str | None = None
    stops: str | None = None
    steers: str | None = None

    def as_dict(self) -> dict[str, str | None]:
        """`{"waits": id}` or `{"parent": id or None}`, as the conformance cases write it."""
        return {"waits": self.waits} if self.waits else {"parent": self.parent}


def parent_for(log: Log, head: str | None, sends: Sends, now: float) -> Next:
    """Decide where a new turn after `head` goes under the `sends` policy.

    Raises:
        ThreadlineError: `conversation-busy` when the head waits for a person (unless `branch`),
            or runs and `sends` is `refuse`. `interrupt` stops a running head and continues from its
            parent's nearest done turn, as `branch` would; `steer` joins a running head.
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
        if sends == "steer":
            return Next(steers=head)
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
    return [_entry_data(e) for e in log.entries if _belongs(e, plugin, kind, on_branch)]


def newest_entry(log: Log, plugin: str, kind: str, tip: str | None) -> dict[str, Any] | None:
    """The newest entry of `plugin` and `kind` on the branch through `tip` (copying no other), or None."""
    on_branch = {t.id for t in log.branch(tip)}
    found = next((e for e in reversed(log.entries) if _belongs(e, plugin, kind, on_branch)), None)
    return None if found is None else _entry_data(found)


def _belongs(entry: Record, plugin: str, kind: str, on_branch: set[str]) -> bool:
    turn = entry.get("turn")
    return entry.get("plugin") == plugin and entry.get("entry") == kind and (turn is None or turn in on_branch)


def _entry_data(entry: Record) -> dict[str, Any]:
    return {"turn": entry.get("turn"), "data": copy_value(entry.get("data")), "at": entry.get("at")}


# ----- what a turn is shown (4.8); the rule that decides it is `core.context.ContextRule`

EVERY_TURN = ContextRule()
"""Format 1's default rule: every done turn of the branch, whole."""


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
    renders: list[Any] | None = field(default=None, compare=False)
    """Where a long branch keeps what is derived from `exchanges`, one item per exchange, for its next
    turn (`store.log.memo`; None: nothing kept). An item belongs to the exchange it was derived from."""


def shown(
    log: Log,
    parent: str | None,
    *,
    fields: Sequence[Mapping[str, Any]],
    signature: str | None,
    now: float,
    rule: ContextRule = EVERY_TURN,
    context: Mapping[str, Any] | None = None,
    covered: Collection[str] = (),
    sections: Sequence[str] = (),
    module: bool = False,
) -> Shown:
    """What a turn after `parent` is shown, for an AI program with these `fields` and `signature`, or
    (`module`) for a program with code: its rows, and an entry `{"call": t}` per turn (docs/format-1.md 4.8).

    `context` is a turn's recorded `context` (`{"turns", "without", "sections"}`): resuming that
    turn shows exactly it instead of applying the rule again. Otherwise the rule picks among the
    done turns of the branch that a summary has not `covered`, and `sections` (the summary) are
    added to the instruction.
    """
    with paused_gc():  # thousands of acyclic rows: a collection would only walk the whole log again
        kept = None
        if context is None and not covered and rule.shows_everything:
            kept = _every_turn(log, parent, fields=fields, signature=signature, now=now, module=module)
        if kept is not None:
            turns, rows, exchanges, without = list(kept.turns), list(kept.rows), list(kept.exchanges), {}
            saw = [{"saw_of": parent}, kept.saw[-1]] if kept.compresses else list(kept.saw)
        else:
            done = [t for t in log.branch(parent) if t.state(now) == "done"]
            if context is not None:
                by_id = {t.id: t for t in done}
                picked = [by_id[tid] for tid in context.get("turns") or [] if tid in by_id]
                without = {k: sorted(v) for k, v in (context.get("without") or {}).items()}
                sections = [str(text) for text in context.get("sections") or []]
            else:
                picked = rule.pick([t for t in done if t.id not in covered] if covered else done, turn_tokens)
                without = _without(picked, rule.without)
            parts = _shown_turns(log, picked, without, fields=fields, signature=signature, module=module)
            turns, (saw, rows, exchanges) = [t.id for t in picked], parts
            saw = compress(saw, parent, log)
        record = None
        if context is None and (sections or covered or not rule.shows_everything):
            record = {"turns": list(turns), "without": without, "sections": list(sections)}
        return Shown(
            turns=turns,
            saw=saw,
            rows=rows,
            exchanges=exchanges,
            without=without,
            sections=list(sections),
            context=record,
            renders=kept.renders if kept is not None else None,
        )


def _every_turn(
    log: Log,
    parent: str | None,
    *,
    fields: Sequence[Mapping[str, Any]],
    signature: str | None,
    now: float,
    module: bool,
) -> ShownMemo | None:
    """What a turn after `parent` is shown under format 1's default rule (every done turn of the
    branch, whole), kept in the log (`log.shown_memo`) for a branch of at least `KEPT_FROM` turns.

    When the kept branch ends at `parent`'s parent, only `parent` is worked out. None: not kept (a
    short branch, a turn on it not done, a first turn that continues one not recorded); the caller
    works it out from the log.
    """
    key = (*_kept_fields(fields), signature, module)
    memo = log.shown_memo
    if memo is not None and (memo.key != key or memo.generation != log.generation):
        memo = None
    if memo is not None and memo.tip == parent:
        return memo
    turn = log.turns.get(parent) if parent is not None else None
    if turn is None:
        return None
    if memo is not None and memo.tip == turn.parent and turn.state(now) == "done":
        _then(log, memo, turn, fields=fields, signature=signature, module=module)
    else:
        branch = log.branch(parent)
        if len(branch) < KEPT_FROM or branch[0].parent is not None or any(t.state(now) != "done" for t in branch):
            return None  # a branch that may still change: worked out each time
        saw, rows, exchanges = _shown_turns(log, branch, {}, fields=fields, signature=signature, module=module)
        memo = ShownMemo(
            key=key,
            generation=log.generation,
            tip=turn.id,
            turns=[t.id for t in branch],
            saw=saw,
            rows=rows,
            exchanges=exchanges,
            versions={str(t.record.get("program")) for t in branch},
            compresses=compress(saw, turn.id, log) is not saw,
        )
        log.shown_memo = memo
    return memo


def _then(
    log: Log, memo: ShownMemo, turn: Turn, *, fields: Sequence[Mapping[str, Any]], signature: str | None, module: bool
) -> None:
    """Make `memo` one turn longer, in place: `turn`, a done child of its tip, added (the `Shown`
    results made from it hold copies of its lists)."""
    saw, rows, exchanges = _shown_turns(log, [turn], {}, fields=fields, signature=signature, module=module)
    try:
        own = raw_saw(turn)
    except ValueError:
        own = ()
    # It saw what its parent saw, then its parent, as the kept branch shows: it compresses as its parent did.
    saw_as_kept = bool(memo.saw) and len(own) == 2 and own[0] == {"saw_of": memo.tip} and own[1] == memo.saw[-1]
    compresses = memo.compresses and saw_as_kept
    memo.saw.extend(saw)
    memo.rows.extend(rows)
    memo.exchanges.extend(exchanges)
    memo.turns.append(turn.id)
    memo.versions.add(str(turn.record.get("program")))
    memo.tip = turn.id
    if not memo.saw or memo.saw[-1].get("call") != turn.id:
        memo.compresses = False  # a turn not shown by its values: nothing to compress to
    else:
        memo.compresses = compresses or compress(memo.saw, turn.id, log) is not memo.saw


def branch_versions(log: Log, turn: str | None) -> set[str]:
    """The program versions of the turns of the branch through `turn` (from what the log keeps of
    the branch's showing, when it ends at `turn` or its parent)."""
    memo = log.shown_memo
    at = log.turns.get(turn) if turn is not None else None
    if memo is not None and at is not None:
        if memo.tip == turn:
            return set(memo.versions)
        if memo.tip == at.parent:
            return {*memo.versions, str(at.record.get("program"))}
    return {str(t.record.get("program")) for t in log.branch(turn)}


def _rows(picked: list[Turn], without: dict[str, list[str]]) -> list[dict[str, Any]]:
    """Each picked turn's inputs and outputs by name, without the fields left out of it."""
    rows = []
    for t in picked:
        gone = set(without.get(t.id, ()))
        rows.append({k: v for k, v in {**t.inputs, **t.outputs}.items() if k not in gone})
    return rows


def _without(picked: list[Turn], names: Collection[str]) -> dict[str, list[str]]:
    """The fields the rule leaves out of each picked turn that has them."""
    if not names:
        return {}
    out = {}
    for t in picked:
        gone = sorted((set(t.inputs) | set(t.outputs)) & set(names))
        if gone:
            out[t.id] = gone
    return out


def _shown_turns(
    log: Log,
    picked: list[Turn],
    without: dict[str, list[str]],
    *,
    fields: Sequence[Mapping[str, Any]],
    signature: str | None,
    module: bool = False,
) -> tuple[list[Record], list[dict[str, Any]], list[dict[str, Any]]]:
    """The saw entries (uncompressed), rows and exchanges of the picked turns (for a program with
    code, `module`: an entry `{"call": t}` each, and no exchanges: its code asks its own requests)."""
    if module:
        return [{"call": t.id} for t in picked], _rows(picked, without), []
    kept_fields = _kept_fields(fields)
    saw: list[Record] = []
    rows: list[dict[str, Any]] = []
    exchanges: list[dict[str, Any]] = []
    same_signature: dict[Any, bool] = {}  # by program version: whole turns may be shown with their steps
    for t in picked:
        version = t.record.get("program")
        if version not in same_signature:
            program = log.programs.get(str(version)) or {}
            same_signature[version] = signature is not None and program.get("signature") == signature
        inputs, outputs, gone = t.inputs, t.outputs, without.get(t.id, [])
        row = {**inputs, **outputs}
        rows.append({k: v for k, v in row.items() if k not in gone} if gone else row)
        entry, exchange = _entry(t, inputs, outputs, gone, same_signature[version], kept_fields)
        if entry is not None:
            saw.append(entry)
            exchanges.append(exchange)
    return saw, rows, exchanges


def _kept_fields(fields: Sequence[Mapping[str, Any]]) -> tuple[set[str], set[str]]:
    """The inputs and outputs a turn shown by its values keeps: the program's plain ones (and reasoning)."""
    inputs = {f["name"] for f in fields if f.get("direction") == "input" and f.get("purpose") == "plain"}
    outputs = {
        f["name"]
        for f in fields
        if f.get("direction") == "output" and f.get("purpose", "plain") in ("plain", "reasoning")
    }
    return inputs, outputs


def _entry(
    t: Turn,
    inputs: dict[str, Any],
    outputs: dict[str, Any],
    gone: list[str],
    same_signature: bool,
    kept_fields: tuple[set[str], set[str]],
) -> tuple[Record | None, dict[str, Any]]:
    """One shown turn's saw entry (None: not shown) and the exchange a prompt shows of it."""
    ended = t.ended or {}
    if gone:
        inputs = {k: v for k, v in inputs.items() if k not in gone}
        outputs = {k: v for k, v in outputs.items() if k not in gone}
    exchange: dict[str, Any] = {"inputs": inputs, "outputs": outputs}
    kept_inputs, kept_outputs = kept_fields
    if same_signature and not gone and isinstance(ended.get("lmcc"), dict):
        steps = ended["lmcc"].get("steps")
        if isinstance(steps, list) and any(isinstance(s, Mapping) and s.get("kind") == "tool" for s in steps):
            # a turn that called tools is shown with its calls and their results, as functai shows it
            answer = {k: v for k, v in outputs.items() if k in kept_outputs}
            exchange = {"inputs": inputs, "outputs": answer, "steps": [dict(s) for s in steps]}
        return ({"call": t.id, "steps": True} if steps else {"call": t.id}), _steered(t, exchange, None)
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
    return entry, _steered(t, {"inputs": kept, "outputs": kept_out}, kept_inputs - set(gone))


def _steered(t: Turn, exchange: dict[str, Any], kept: set[str] | None) -> dict[str, Any]:
    """`exchange` with the steers `t` took (docs/format-1.md 5.6), as `{"inputs", "step", "said"}` in the
    order it took them, their inputs cut to `kept` (None: all), so a prompt shows them where they joined."""
    if not t.steers:
        return exchange
    steers = [
        {"inputs": {k: v for k, v in s.inputs.items() if kept is None or k in kept}, "step": s.step, "said": s.said}
        for s in taken(t)
    ]
    return {**exchange, "steers": steers} if steers else exchange
