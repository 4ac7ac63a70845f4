"""What a turn saw, and where a view continues, over trees of thousands of turns: the iterative
rules against the recursive definitions they replaced (kept here as oracles) and against a direct
computation of what each turn was shown."""

from __future__ import annotations

import copy
import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from store.log.rules import View, expand, view_head
from store.log.state import Log
from store.records import Record, ended_record, turn_record

_ENTRY_KEYS = frozenset({"call", "steps", "without", "slot"})


def recursive_expand(log: Log, turn: str, following: tuple[str, ...] = ()) -> list[Record]:
    """The definition `expand` had before it was made iterative (docs/format-1.md 4.8), without its cache."""
    t = log.turns.get(turn)
    if t is None:
        raise ValueError(f"turn {turn} is not recorded")
    out: list[Record] = []
    for i, entry in enumerate(t.saw):
        if isinstance(entry, Mapping) and "saw_of" in entry:
            target = entry["saw_of"]
            if i != 0 or set(entry) != {"saw_of"} or target == turn or target in following:
                raise ValueError(f"turn {turn}: a saw_of that cannot be followed")
            out += recursive_expand(log, target, (*following, turn))
        elif isinstance(entry, Mapping) and "call" in entry and set(entry) <= _ENTRY_KEYS:
            out.append(copy.deepcopy(dict(entry)))
        else:
            raise ValueError(f"turn {turn} was shown something this reader does not know")
    return out


def recursive_view_head(log: Log, view: View) -> str | None:
    """The definition `view_head` had before: every turn, newest first, walking its ancestors."""
    if view.exact:
        return view.pinned
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


def tid(i: int) -> str:
    return f"t{i:05d}"


@dataclass(slots=True)
class Plan:
    """A tree of turns, what each saw, and the records that say so (in a shuffled-enough order)."""

    parents: list[int | None]
    bases: list[int | None]
    """The turn each turn's `saw_of` names (None: no saw_of)."""
    own: list[list[Record]]
    broken: list[bool]
    """Turns whose own saw a reader cannot follow (an unknown key, a misplaced saw_of, ...)."""
    ended: list[bool]
    records: list[Record]


_BREAKAGES = (
    lambda base: [{"call": "t00000", "secret": 1}],  # an unknown key
    lambda base: [{"call": "t00000"}, {"saw_of": base}],  # a saw_of that is not first
    lambda base: [{"saw_of": base, "steps": True}],  # a saw_of with another key
    lambda base: ["not an entry"],
    lambda base: [{"saw_of": "nobody"}],  # a turn that is not recorded
)


def entry(rng: random.Random, i: int) -> Record:
    """A saw entry of turn `i`: an earlier turn, sometimes with steps or fields left out."""
    out: Record = {"call": tid(rng.randrange(i)) if i else "t00000"}
    if rng.random() < 0.3:
        out["steps"] = True
    if rng.random() < 0.1:
        out["without"] = sorted(rng.sample(["a", "b", "c"], 2))
    return out


def plan(rng: random.Random, n: int, *, chain: float, broken: float, running: float) -> Plan:
    """`n` turns; each continues the previous one with probability `chain` (long chains: saw_of at
    every depth), else a random earlier turn or none; each saw_of names the parent or another
    earlier turn; a few saws are `broken`; a few turns are still `running` (saw on the turn record)."""
    p = Plan([], [], [], [], [], [])
    for i in range(n):
        if i == 0 or rng.random() > 0.98:
            parent = None
        elif rng.random() < chain:
            parent = i - 1
        else:
            parent = rng.randrange(i)
        base = parent if parent is not None and rng.random() < 0.9 else (rng.randrange(i) if i else None)
        own = [entry(rng, i) for _ in range(rng.randrange(3))]
        saw: list[Any] = ([{"saw_of": tid(base)}] if base is not None else []) + own
        is_broken = rng.random() < broken
        if is_broken:
            saw = rng.choice(_BREAKAGES)(tid(base) if base is not None else "t00000")
        is_ended = rng.random() >= running
        parent_id = tid(parent) if parent is not None else None
        p.parents.append(parent)
        p.bases.append(base)
        p.own.append(own)
        p.broken.append(is_broken)
        p.ended.append(is_ended)
        inputs = {"message": f"m{i}"}
        if is_ended:
            p.records.append(turn_record(tid(i), parent=parent_id, program="p", inputs=inputs, at="t"))
            p.records.append(ended_record(tid(i), attempt=1, state="done", saw=saw, outputs={"result": "r"}, at="t"))
        else:
            record = turn_record(tid(i), parent=parent_id, program="p", inputs=inputs, at="t")
            p.records.append({**record, "saw": saw})
    return p


def shown_directly(p: Plan, i: int) -> list[Record] | None:
    """What turn `i` was shown, from the plan (None: it cannot be known), walking its bases."""
    parts: list[list[Record]] = []
    at: int | None = i
    while at is not None:
        if p.broken[at]:
            return None
        parts.append(p.own[at])
        at = p.bases[at]
    return [entry for own in reversed(parts) for entry in own]


def expanded_or_none(log: Log, turn: str, oracle: bool = False) -> list[Record] | None:
    try:
        return recursive_expand(log, turn) if oracle else expand(log, turn)
    except ValueError:
        return None


sizes = st.integers(1, 200)
shapes = st.tuples(st.floats(0.0, 1.0), st.floats(0.0, 0.2), st.floats(0.0, 0.3))


@settings(max_examples=60, deadline=None)
@given(st.randoms(use_true_random=False), sizes, shapes, st.integers(0, 400))
def test_expand_equals_the_recursive_definition(
    rng: random.Random, n: int, shape: tuple[float, float, float], cut: int
) -> None:
    """For every turn of a tree (broken saws, running turns, records read in two pieces, turns
    expanded in any order so the kept links are reused), expand equals the recursive definition."""
    chain, broken, running = shape
    p = plan(rng, n, chain=chain, broken=broken, running=running)
    log = Log(p.records[:cut])
    early = [t for t in log.order if rng.random() < 0.5]
    before = {t: expanded_or_none(log, t) for t in early}
    log.apply(p.records[cut:])
    order = list(log.order)
    rng.shuffle(order)

    assert {t: expanded_or_none(Log(p.records[:cut]), t, oracle=True) for t in early} == before
    for t in order:
        assert expanded_or_none(log, t, oracle=True) == expanded_or_none(log, t)


@settings(max_examples=10, deadline=None)
@given(st.integers(0, 2**32), st.integers(1000, 5000), st.floats(0.95, 1.0))
def test_expand_over_thousands_of_turns_equals_what_each_was_shown(seed: int, n: int, chain: float) -> None:
    """Trees of up to 5,000 turns, mostly one chain (saw_of thousands deep): expand never raises
    RecursionError and gives what each turn was shown, for the deepest turns and a sample."""
    rng = random.Random(seed)  # thousands of draws: a seed, not hypothesis's own data
    p = plan(rng, n, chain=chain, broken=0.001, running=0.01)
    log = Log(p.records)
    sample = sorted({n - 1, n - 2, *rng.sample(range(n), 40)})

    for i in rng.sample(sample, len(sample)):
        assert shown_directly(p, i) == expanded_or_none(log, tid(i))


def test_expand_reports_a_cycle_instead_of_following_it() -> None:
    """Two turns whose saw_of name each other cannot be expanded (ValueError), like the definition."""
    records = [
        turn_record("a", parent=None, program="p", inputs={}, at="t"),
        turn_record("b", parent="a", program="p", inputs={}, at="t"),
        ended_record("a", attempt=1, state="done", saw=[{"saw_of": "b"}], at="t"),
        ended_record("b", attempt=1, state="done", saw=[{"saw_of": "a"}, {"call": "a"}], at="t"),
    ]
    log = Log(records)

    assert [None, None] == [expanded_or_none(log, t) for t in ("a", "b")]
    assert [None, None] == [expanded_or_none(log, t, oracle=True) for t in ("a", "b")]


def test_an_expansion_is_the_callers_to_change() -> None:
    """Changing what expand returned (a `without` list too) changes nothing the log keeps."""
    records = [
        turn_record("a", parent=None, program="p", inputs={}, at="t"),
        ended_record("a", attempt=1, state="done", saw=[{"call": "x", "without": ["m"]}], at="t"),
    ]
    log = Log(records)
    first = expand(log, "a")
    first[0]["without"].append("n")
    first[0]["call"] = "y"

    assert [{"call": "x", "without": ["m"]}] == expand(log, "a")


@settings(max_examples=100, deadline=None)
@given(st.randoms(use_true_random=False), st.integers(1, 120), st.floats(0.0, 1.0), st.integers(0, 130))
def test_view_head_equals_the_ancestor_walk(rng: random.Random, n: int, chain: float, pin: int) -> None:
    """The newest turn that is the pinned one or descends from it, for any tree: also when a turn
    was recorded before the turn it continues, and when the pinned turn is not recorded at all."""
    p = plan(rng, n, chain=chain, broken=0.0, running=0.0)
    records = list(p.records)
    if n > 3 and rng.random() < 0.5:  # a child recorded before its parent
        k = rng.randrange(1, n // 2) * 2
        records[k - 2 : k + 2] = records[k : k + 2] + records[k - 2 : k]
    if rng.random() < 0.2:
        records.append(turn_record("late", parent="unrecorded", program="p", inputs={}, at="t"))
    log = Log(records)
    pinned = rng.choice([tid(pin), "unrecorded", "nobody"]) if pin < n else tid(pin)

    assert recursive_view_head(log, View(pinned=pinned)) == view_head(log, View(pinned=pinned))
