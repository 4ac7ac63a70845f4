"""A helper's memory inside a program's conversation, as functai 1.2.0 keeps it (docs/format-1.md 2.9,
4.11): the `call` record a remembered helper's call leaves, which earlier calls a later call of that
helper is shown, and the `saw` entries that say so. Pure over the log and the calls made so far.

A call is shown whole (its lmcc turn) when its `program.signature` is the helper's, else by its values
(the fields the helper still has, `without` the others; not at all when no output is left). Its steps
are kept only when the helper remembers `steps`. Helper saw entries are never compressed (`saw_of`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from core.models import HelperMemory
from store.programs.program import Program
from store.programs.shape import canonical_json
from store.records import FORMAT, Record, iso

from .state import Log

__all__ = ["CallBook", "call_record", "helper_site", "remembered_calls", "shown_calls"]


def helper_site(program: str, helper: str, count: int) -> str:
    """Where the `count`-th call of `helper` sits in a turn of `program` (`support#1/answer#2`)."""
    return f"{program}#1/{helper}#{count}"


def call_record(
    turn: str,
    *,
    attempt: int,
    call: str,
    site: str,
    program: Mapping[str, Any],
    lmcc: Mapping[str, Any],
    saw: Sequence[Record],
    at: str | None = None,
) -> Record:
    """A remembered helper's call, in functai's key order; its lmcc's keys sorted as functai writes them."""
    out: Record = {"functai_conversation": FORMAT, "kind": "call", "at": at or iso(), "turn": turn}
    out.update(attempt=attempt, call=call, site=site, program=dict(program))
    out.update(lmcc=json.loads(canonical_json(lmcc)), saw=[dict(e) for e in saw])
    return out


def remembered_calls(log: Log, parent: str | None, now: float) -> list[Record]:
    """The `call` records of the done turns on the branch through `parent`, oldest first: of each turn
    only those its final attempt made (an earlier attempt's calls were made again, or not at all)."""
    found: list[Record] = []
    for turn in log.branch(parent):
        if turn.state(now) != "done":
            continue
        final = int((turn.ended or {}).get("attempt") or turn.attempt)
        found += [c for c in turn.calls if int(c.get("attempt") or 1) == final]
    return found


def _mine(call: Mapping[str, Any], helper: Program) -> bool:
    who = call.get("program") or {}
    return bool(who.get("name") == helper.name and who.get("module") == helper.module)


def shown_calls(
    calls: Sequence[Mapping[str, Any]], helper: Program, memory: HelperMemory | None
) -> tuple[list[Record], list[dict[str, Any]]]:
    """The saw entries and prompt exchanges of `helper`'s own calls among `calls` (nothing without memory)."""
    if memory is None:
        return [], []
    inputs, outputs = _plain(helper)
    saw: list[Record] = []
    exchanges: list[dict[str, Any]] = []
    for call in calls:
        lmcc = call.get("lmcc")
        if not _mine(call, helper) or not isinstance(lmcc, Mapping) or not isinstance(call.get("call"), str):
            continue
        had_in, had_out = dict(lmcc.get("inputs") or {}), dict(lmcc.get("outputs") or {})
        if (call.get("program") or {}).get("signature") == helper.signature:
            steps = list(lmcc.get("steps") or []) if memory.steps else []
            saw.append({"call": call["call"], "steps": True} if steps else {"call": call["call"]})
            exchanges.append(_whole(had_in, had_out, steps, outputs))
            continue
        kept_in = {k: v for k, v in had_in.items() if k in inputs}
        kept_out = {k: v for k, v in had_out.items() if k in outputs}
        if not kept_out:
            continue  # nothing of it fits the helper now: not shown
        dropped = sorted((set(had_in) | set(had_out)) - (set(kept_in) | set(kept_out)))
        saw.append({"call": call["call"], "without": dropped} if dropped else {"call": call["call"]})
        exchanges.append({"inputs": kept_in, "outputs": kept_out})
    return saw, exchanges


def _plain(helper: Program) -> tuple[set[str], set[str]]:
    fields = helper.field_records()
    inputs = {f["name"] for f in fields if f["direction"] == "input" and f["purpose"] == "plain"}
    outputs = {f["name"] for f in fields if f["direction"] == "output" and f["purpose"] in ("plain", "reasoning")}
    return inputs, outputs


def _whole(inputs: dict[str, Any], outputs: dict[str, Any], steps: list[Any], kept: set[str]) -> dict[str, Any]:
    """A call shown whole: with its tool calls and results when it remembers steps and had some."""
    answer = {k: v for k, v in outputs.items() if k in kept}
    shown_inputs = {k: v for k, v in inputs.items() if k != "tools"}
    if any(isinstance(s, Mapping) and s.get("kind") == "tool" for s in steps):
        return {"inputs": shown_inputs, "outputs": answer, "steps": [dict(s) for s in steps]}
    return {"inputs": shown_inputs, "outputs": answer}


class CallBook:
    """The `call` records one turn holds (every attempt's), to replay a helper call instead of asking.

    A recorded call is the helper's answer to exactly one question: the same helper (name, module,
    signature) at the same site, given the same inputs and shown the same earlier calls. Only such a
    call is taken again; anything else is asked anew. `renamed` maps the ids of an earlier attempt's
    calls to those of this attempt's, so what this attempt's calls were shown compares as it should.
    """

    def __init__(self, calls: Sequence[Record]) -> None:
        self.by_site: dict[str, list[Record]] = {}
        for call in calls:
            self.by_site.setdefault(str(call.get("site")), []).append(call)
        self.renamed: dict[str, str] = {}

    def found(
        self, site: str, identity: Mapping[str, Any], inputs: Mapping[str, Any], saw: Sequence[Record]
    ) -> Record | None:
        """The newest recorded call of that very question at `site`, or None."""
        for call in reversed(self.by_site.get(site, [])):
            lmcc = call.get("lmcc")
            if not isinstance(lmcc, Mapping) or call.get("program") != dict(identity):
                continue
            if lmcc.get("inputs") == dict(inputs) and self._saw(call.get("saw")) == list(saw):
                return call
        return None

    def _saw(self, saw: Any) -> list[Any]:
        if not isinstance(saw, list):
            return []
        out = []
        for entry in saw:
            if isinstance(entry, Mapping) and entry.get("call") in self.renamed:
                entry = {**entry, "call": self.renamed[str(entry["call"])]}
            out.append(dict(entry) if isinstance(entry, Mapping) else entry)
        return out
