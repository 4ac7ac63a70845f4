"""What a `Log` keeps of a record: an equal record that repeats nothing the log already holds.

A long conversation's records repeat the same text over and over: the turn ids (a turn's id is
in its `turn`, `lease` and `ended` records, and in the next turn's `parent` and `saw`), the
program version, and in an `ended` record the turn's inputs and outputs again (in `value` and
`lmcc`). Parsed one line at a time, each copy is its own string. Here each is held once: ids
are the turn's own, short repeated values are interned, and equal values are the same object.
(Keys are shared by the parser: `store.records.loads`.) The kept record is equal to the one
read, and costs about half as much memory.

Reading a long log makes a great many objects that cannot form cycles, so the garbage collector
is paused while a batch is parsed and kept, and while a branch is shown or a chain expanded
(`paused_gc`): its passes would walk the whole log again and find nothing to free.
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from store.records import Record

LEASE_KEYS = tuple(sys.intern(k) for k in ("kind", "turn", "holder", "until", "attempt", "seq"))
"""What a lease says that the rules read: the turn is `running` until `until` unless a later record says otherwise."""

Canonical = Callable[[Any], Any]
"""The log's own object for a turn id (the id itself when the turn is not known)."""


@contextmanager
def paused_gc() -> Iterator[None]:
    """Keep the garbage collector off meanwhile (if it was on): parsed records hold no cycles."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


def kept_turn(record: Record, canonical: Canonical) -> Record:
    """A `turn` record as kept."""
    kept = dict(record)
    if isinstance(kept.get("parent"), str):
        kept["parent"] = canonical(kept["parent"])
    _intern(kept, "program", "kind")
    return kept


def kept_lease(record: Record, turn: str) -> Record:
    """The part of a `lease` record the rules read."""
    kept = {k: record[k] for k in LEASE_KEYS if k in record}
    kept["turn"] = turn
    _intern(kept, "kind", "holder")
    return kept


def kept_ended(record: Record, turn: Record, canonical: Canonical) -> Record:
    """An `ended` record as kept, sharing what its `turn` record already holds."""
    kept = dict(record)
    kept["turn"] = turn["turn"]
    if type(kept.get("saw")) is list:
        kept["saw"] = [_kept_entry(entry, canonical) for entry in kept["saw"]]
    _intern(kept, "kind", "state", "model")
    outputs = kept.get("outputs")
    if type(outputs) is dict and "value" in kept:
        kept["value"] = same(kept["value"], outputs.values())
    if type(kept.get("lmcc")) is dict:
        kept["lmcc"] = _kept_lmcc(kept["lmcc"], turn.get("inputs"), outputs)
    return kept


def _intern(record: Record, *keys: str) -> None:
    """Intern the short texts under `keys` that many records repeat (kinds, states, versions)."""
    for key in keys:
        value = record.get(key)
        if type(value) is str:
            record[key] = sys.intern(value)


def same(value: Any, held: Iterable[Any]) -> Any:
    """The object among `held` equal to `value` (and of its type), or `value` itself."""
    for candidate in held:
        if type(candidate) is type(value) and candidate == value:
            return candidate
    return value


def _kept_entry(entry: Any, canonical: Canonical) -> Any:
    if type(entry) is not dict:
        return entry
    kept = dict(entry)
    for key in ("call", "saw_of"):
        if type(kept.get(key)) is str:
            kept[key] = canonical(kept[key])
    return kept


def _kept_lmcc(lmcc: Record, inputs: Any, outputs: Any) -> Record:
    """An `lmcc` as kept: its inputs and outputs, and each step's outputs, are the turn's own when equal."""
    kept = dict(lmcc)
    for key, held in (("inputs", inputs), ("outputs", outputs)):
        if key in kept and held is not None:
            kept[key] = same(kept[key], (held,))
    _intern(kept, "signature")
    steps = kept.get("steps")
    if type(steps) is list:
        kept["steps"] = [_kept_step(step, outputs) for step in steps]
    return kept


def _kept_step(step: Any, outputs: Any) -> Any:
    if type(step) is not dict:
        return step
    kept = dict(step)
    _intern(kept, "kind")
    if "outputs" in kept and outputs is not None:
        kept["outputs"] = same(kept["outputs"], (outputs,))
    return kept
