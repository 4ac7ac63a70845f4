"""What a turn saw (docs/format-1.md 4.8): its `saw` entries with `saw_of` expanded, and the
compression of a new turn's entries into `[{"saw_of": parent}, <parent's entry>]`.

A conversation of a thousand turns is a chain of a thousand `saw_of`, so nothing here recurses:
a chain is walked with a loop, and what ended turns saw is kept in the log as links, so the next
turn pays only for its own entries.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from store.records import Record
from store.values import copy_value

from .kept import paused_gc
from .state import Log, Turn

_ENTRY_KEYS = frozenset({"call", "steps", "without", "slot"})


def compress(saw: list[Record], parent: str | None, log: Log) -> list[Record]:
    """`[{"saw_of": parent}, <parent's entry>]` when the parent saw exactly the entries before it."""
    if len(saw) < 2 or parent is None or saw[-1].get("call") != parent or parent not in log.turns:
        return saw
    try:
        before = _expanded(log, parent)
    except ValueError:
        return saw
    return [{"saw_of": parent}, saw[-1]] if before == saw[:-1] else saw


def expand(log: Log, turn: str, following: tuple[str, ...] = ()) -> list[Record]:
    """What `turn` saw, with a leading `saw_of` replaced by what that turn saw (all the way down).

    Iterative and linear in what it returns, however long the chain of `saw_of`; ended turns'
    expansions are kept in `log.expanded`, so the next turn pays only for its own entries.
    `following` names turns whose expansion this one is part of (a `saw_of` back to one is a cycle).

    Raises:
        ValueError: an unknown turn, an unknown key, a `saw_of` that is not first, or a cycle.
    """
    with paused_gc():
        return [_copied(entry) for entry in _expanded(log, turn, following)]


def _expanded(log: Log, turn: str, following: tuple[str, ...] = ()) -> list[Record]:
    """`expand` without copies: the entries the log holds (never to be changed by the caller)."""
    with paused_gc():  # a long chain makes thousands of links and entries, none in a cycle
        return _expanded_now(log, turn, following)


def _expanded_now(log: Log, turn: str, following: tuple[str, ...]) -> list[Record]:
    kept = log.expanded
    chain: list[tuple[str, str | None, tuple[Record, ...]]] = []
    seen = set(following)
    at: str | None = turn
    while at is not None and at not in kept:
        t = log.turns.get(at)
        if t is None:
            raise ValueError(f"turn {at} is not recorded")
        seen.add(at)
        base, own = _own_entries(at, raw_saw(t))
        if base is not None and base in seen:
            raise ValueError(f"turn {at}: a saw_of that cannot be followed")
        chain.append((at, base, own))
        at = base
    # An ended turn's saw never changes (the first `ended` wins): keep the links of those whose
    # whole chain is ended, from the bottom up.
    for tid, base, own in reversed(chain):
        if log.turns[tid].ended is None or (base is not None and base not in kept):
            break
        kept.link(tid, base, own)
    out = kept.entries(at) if at is not None else []
    for _, _, own in reversed(chain):
        out.extend(own)
    return out


def _own_entries(turn: str, saw: Sequence[Any]) -> tuple[str | None, tuple[Record, ...]]:
    """A saw's leading `saw_of` target (or None) and its other entries, checked."""
    base: str | None = None
    own: list[Record] = []
    for i, entry in enumerate(saw):
        if not isinstance(entry, Mapping):
            raise ValueError(f"turn {turn} was shown something this reader does not know")
        if "saw_of" in entry:
            target = entry["saw_of"]
            if i != 0 or len(entry) != 1 or not isinstance(target, str) or target == turn:
                raise ValueError(f"turn {turn}: a saw_of that cannot be followed")
            base = target
        elif "call" in entry and entry.keys() <= _ENTRY_KEYS:
            own.append(entry)  # type: ignore[arg-type]
        else:
            raise ValueError(f"turn {turn} was shown something this reader does not know")
    return base, tuple(own)


def raw_saw(t: Turn) -> Sequence[Any]:
    """`t.saw` without the copy.

    Raises:
        ValueError: a saw that is not a list (which `Turn.saw` would fail on or split up).
    """
    saw = (t.ended or {}).get("saw") or t.record.get("saw") or ()
    if not isinstance(saw, list | tuple):
        raise ValueError(f"turn {t.id} was shown something this reader does not know")
    return saw


def _copied(entry: Record) -> Record:
    """A copy of a saw entry the caller may change (its `without` list too)."""
    out = dict(entry)
    for key, value in entry.items():
        if isinstance(value, dict | list | tuple):  # a `without` list: the caller may change it
            out[key] = copy_value(value)
    return out
