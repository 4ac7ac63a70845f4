"""What a logged call was shown before its own inputs, rebuilt from the call log as functai rebuilds it.

A call record's `saw` lists the earlier calls it was given (a conversation's earlier turns, a
helper's own earlier calls), the first entry possibly `{"saw_of": id}`: everything that call saw.
A rated call's row carries those turns as data (`earlier`), its conversation and, for a module's
call, what each helper inside it was shown (`helpers`). When the log cannot show every one of them
again (a record missing or cut, a value not kept, an entry no reader knows), the row is not made:
never a row with part of its turns. Every function here answers None for that.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from store.records import Record

ENTRY_KEYS = frozenset({"call", "steps", "without", "slot"})
"""The keys of a saw entry a reader knows (besides a first `{"saw_of"}`)."""

Calls = Mapping[str, Record]
"""Call records by id."""


def by_id(records: Sequence[Record]) -> dict[str, Record]:
    """Call records by id."""
    return {str(rec.get("id")): rec for rec in records if "functai_call" in rec}


def expand(call: str, calls: Calls) -> list[Record] | None:
    """The entries `call` saw, in order, each `saw_of` replaced by what that call saw.

    Followed link by link rather than recursively: each turn of a long conversation points at the
    one before it, so the chain is as long as the conversation.
    """
    parts: list[list[Record]] = []
    followed: set[str] = set()
    current: str | None = call
    while current is not None:
        rec = calls.get(current)
        if rec is None or not isinstance(rec.get("saw"), list):
            return None  # not recorded, or a saw_of naming a call the log lacks
        followed.add(current)
        entries: list[Any] = rec["saw"]
        current = None
        if entries and isinstance(entries[0], Mapping) and "saw_of" in entries[0]:
            if set(entries[0]) != {"saw_of"} or entries[0]["saw_of"] in followed:
                return None  # a saw_of with other keys, or one that comes back (a cycle)
            current, entries = str(entries[0]["saw_of"]), entries[1:]
        known = [e for e in entries if isinstance(e, Mapping) and "call" in e and set(e) <= ENTRY_KEYS]
        if len(known) != len(entries):
            return None  # an entry this reader does not know: what was shown cannot be known
        parts.append([copy.deepcopy(dict(e)) for e in known])
    return [entry for part in reversed(parts) for entry in part]


def kept(call: str, calls: Calls) -> list[Record] | None:
    """What `call` saw, when the log keeps every value showing it again needs; else None."""
    entries = expand(call, calls)
    if entries is None:
        return None
    for entry in entries:
        if entry.get("steps") and "calls" in (entry.get("without") or []):
            return None  # shown with its steps but not its tool calls: its tool steps would answer nothing
        rec = calls.get(str(entry["call"]))
        if rec is None or not _shows_again(rec, entry):
            return None
    return entries


def _shows_again(rec: Record, entry: Record) -> bool:
    if rec.get("truncated"):
        return False
    left_out = set(entry.get("without") or [])
    sizes = rec.get("sizes") or {}
    shown = (set(sizes.get("inputs") or {}) | set(sizes.get("outputs") or {})) - left_out
    described = rec.get("described") or {}
    if shown & (set(described.get("inputs") or []) | set(described.get("outputs") or [])):
        return False
    if entry.get("steps"):
        exchanges = rec.get("exchanges") or []
        whole = all("request_hash" in ex and ("response" in ex or ex.get("finish") is None) for ex in exchanges)
        return rec.get("content") is True and whole
    if rec.get("content") is True:
        return True
    omitted = rec.get("omitted")
    if rec.get("functai_call") == 1 or not isinstance(omitted, Mapping):
        return False
    return not ((set(omitted.get("inputs") or []) | set(omitted.get("outputs") or [])) - left_out)


def turn_of(rec: Record, entry: Record) -> Record | None:
    """The turn an entry stands for, as data: the record's values less the entry's `without`;
    with `steps`, the record's steps and its `program.signature` (None when it keeps no steps)."""
    left_out = set(entry.get("without") or [])
    out: Record = {
        "inputs": {k: v for k, v in (rec.get("inputs") or {}).items() if k not in left_out},
        "outputs": {k: v for k, v in (rec.get("outputs") or {}).items() if k not in left_out},
    }
    if entry.get("steps"):
        if not isinstance(rec.get("steps"), list):
            return None
        out["steps"] = copy.deepcopy(rec["steps"])
        out["signature"] = (rec.get("program") or {}).get("signature")
    return out


def _turns(call: str, calls: Calls) -> list[Record] | None:
    entries = kept(call, calls)
    if entries is None:
        return None
    turns = [turn_of(calls[str(e["call"])], e) for e in entries]
    return None if any(t is None for t in turns) else [t for t in turns if t is not None]


def earlier_of(call: str, calls: Calls) -> Record | None:
    """What a rated call was shown, as the keys its row carries: `earlier`, `conversation`, and
    `sections` when it was given any, `helpers` for a module's call. None when the log cannot
    show it all again."""
    rec = calls.get(call)
    if rec is None:
        return None
    earlier = _turns(call, calls) if rec.get("saw") else []
    if earlier is None:
        return None
    out: Record = {"earlier": earlier, "conversation": (rec.get("conversation") or {}).get("id")}
    if rec.get("sections"):
        out["sections"] = list(rec["sections"])
    if (rec.get("program") or {}).get("kind") == "module":
        helpers = _helpers(rec, calls)
        if helpers is None:
            return None
        out["helpers"] = helpers
    return out


def _helpers(rec: Record, calls: Calls) -> list[Record] | None:
    """Each call inside a module's call that was shown earlier turns, in the order they started."""
    inside = [c for c in _inside(rec, calls) if c.get("saw") or c.get("sections")]
    out: list[Record] = []
    for c in sorted(inside, key=lambda c: (c.get("started") or "", c.get("id") or "")):
        turns = _turns(str(c["id"]), calls)
        if turns is None:
            return None
        helper: Record = {"program": (c.get("program") or {}).get("name"), "call": c["id"], "earlier": turns}
        if c.get("sections"):
            helper["sections"] = list(c["sections"])
        out.append(helper)
    return out


def _inside(rec: Record, calls: Calls) -> list[Record]:
    """The calls of `rec`'s tree made inside it."""
    return [
        c
        for c in calls.values()
        if c.get("root") == rec.get("root") and c.get("id") != rec.get("id") and _under(c, str(rec.get("id")), calls)
    ]


def _under(rec: Record, ancestor: str, calls: Calls) -> bool:
    seen: set[str] = set()
    parent = rec.get("parent")
    while isinstance(parent, str) and parent not in seen:
        if parent == ancestor:
            return True
        seen.add(parent)
        parent = (calls.get(parent) or {}).get("parent")
    return False


def needs_context(rec: Record | None, calls: Calls) -> bool:
    """Whether a rated call was shown anything before its inputs: itself, or for a module, a call inside it."""
    if rec is None:
        return False
    if rec.get("saw") or rec.get("conversation") or rec.get("sections"):
        return True
    if (rec.get("program") or {}).get("kind") != "module":
        return False
    return any(c.get("saw") or c.get("sections") for c in _inside(rec, calls))
