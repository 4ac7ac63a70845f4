"""Rows with known answers from rated calls, the rows functai's `rated` gives for the same call log.

Each row is one rated call: its inputs under their names, the right answer under the answer's
name (the answer it gave, when rated right; the correction, when rated wrong and corrected), then
what it was shown when some row of the program was shown anything (`earlier`: its earlier turns
as data, `conversation`: its id, `helpers` for a module's call, `sections`), then the rating's
columns. The rules are functai's `contract/calls.md`, "Rows with known answers" and "Rows that
keep their context"; every row has every column, in the order functai's table has them.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from store.programs.program import Program
from store.programs.shape import canonical_json
from store.records import Record

from .lines import CallLog, Logged
from .log import call_log
from .record import CALL_FORMATS, RATING_FORMAT, interface_id
from .saw import by_id, earlier_of, needs_context

CONTEXT = ("earlier", "conversation", "helpers", "sections")
META = ("rating", "rated_by", "origin", "disputed", "sample", "version", "call")
LEFT_OUT = ("other_signature", "no_content", "no_answer", "no_context")


class RatedRows(list[dict[str, Any]]):
    """The rows, and how many rated calls were left out and why (`left`, by the reasons of `LEFT_OUT`)."""

    def __init__(self, rows: Iterable[dict[str, Any]], left: Mapping[str, int]) -> None:
        super().__init__(rows)
        self.left = dict(left)


def rated(
    program: Program | str | None = None,
    *,
    calls: CallLog | str | os.PathLike[str] | Sequence[CallLog | str | os.PathLike[str]] = (),
    stores: Iterable[object] = (),
    by: str | None = None,
    since: str = "",
) -> RatedRows:
    """The rated calls of `program` as rows with known answers.

    Args:
        program: A program (its calls by name and module, made with its current fields), a
            program's name (every call of that name), or None (every program's).
        calls: Call logs (or their folders) to read.
        stores: Stores whose call logs (`store.calls.log.call_log`) are read too.
        by: Only this person's ratings.
        since: Only calls and ratings from this RFC 3339 UTC time on.
    """
    logs = [calls] if isinstance(calls, str) or not isinstance(calls, Sequence) else list(calls)
    logged = Logged()
    for where in [*logs, *stores]:
        logged.extend(call_log(where).read(since=since))
    return rows_of(logged, program, by=by)


def rows_of(logged: Logged, program: Program | str | None, *, by: str | None = None) -> RatedRows:
    """The rows of `program`'s rated calls among `logged`'s records."""
    name, module, signature, interface = _key(program)
    counting = current_ratings(logged.ratings, by=by)
    left = dict.fromkeys(LEFT_OUT, 0)
    rows: list[tuple[Record, Record]] = []
    mine = (c for c in logged.calls if c.get("functai_call") in CALL_FORMATS and _matches(c, name, module))
    for call in sorted(mine, key=lambda c: (c.get("started") or "", c.get("id") or "")):
        ratings = counting.get(str(call.get("id")))
        if not ratings:
            continue
        why, row = _row(call, ratings, signature, interface)
        if why:
            left[why] += 1
        else:
            rows.append((call, row))
    calls = by_id(logged.calls)
    context = any(needs_context(calls.get(str(c.get("id"))), calls) for c, _ in rows)
    shown = [(row, earlier_of(str(call.get("id")), calls) if context else {}) for call, row in rows]
    left["no_context"] = sum(1 for _, ctx in shown if ctx is None)
    return RatedRows(_table([_ordered(row, ctx) for row, ctx in shown if ctx is not None]), left)


def _key(program: Program | str | None) -> tuple[str | None, str | None, str | None, str | None]:
    """(name, module, signature, interface) a program's calls are found by."""
    if program is None or isinstance(program, str):
        return program, None, None, None
    return program.name, program.module, program.signature, interface_id(program.interface)


def _matches(call: Record, name: str | None, module: str | None) -> bool:
    info = call.get("program") or {}
    return (name is None or info.get("name") == name) and (module is None or info.get("module") == module)


def _same_data(info: Mapping[str, Any], signature: str | None, interface: str | None) -> bool:
    """Whether a call records the data asked for: its `program.interface` (a format-1 record: its
    `program.signature`) is the interface, or its `program.signature` the signature."""
    if signature is None and interface is None:
        return True
    mine = info.get("interface") if "interface" in info else info.get("signature")
    if interface is not None and mine == interface:
        return True
    return signature is not None and info.get("signature") == signature


def _inputs_are_data(call: Record) -> bool:
    """Every input recorded, as data (no description of a value with no JSON form)."""
    if call.get("content") is not True:
        omitted = call.get("omitted")
        if call.get("functai_call") == 1 or not isinstance(omitted, Mapping) or omitted.get("inputs"):
            return False
    if (call.get("described") or {}).get("inputs"):
        return False
    return not ("inputs" not in call and (call.get("sizes") or {}).get("inputs") and call.get("content") is True)


def _row(call: Record, ratings: list[Record], signature: str | None, interface: str | None) -> tuple[str, Record]:
    """Why the rated call is left out (`""` when it is not), and its row of data and rating."""
    info = call.get("program") or {}
    if not _same_data(info, signature, interface):
        return "other_signature", {}
    if not _inputs_are_data(call):
        return "no_content", {}
    usable = [(r, v) for r in ratings if (v := says(r, call)) is not None]
    if not usable:
        return "no_answer", {}
    rating, values = usable[-1]
    verdicts = {r.get("verdict") for r in ratings}
    disputed = len(verdicts) > 1 or len({canonical_json(v) for _, v in usable}) > 1
    answer = info.get("answer") or "result"
    row = dict(call.get("inputs") or {})
    row[answer] = values.get(answer)
    row.update({k: v for k, v in values.items() if k != answer})
    if answer not in values:
        del row[answer]
    origin = rating.get("origin") or "review"
    meta = {"call": call.get("id"), "version": info.get("version"), "rating": rating.get("verdict")}
    meta |= {"rated_by": rating.get("by"), "origin": origin, "sample": rating.get("sample"), "disputed": disputed}
    return "", {"data": row, "meta": meta}


def says(rating: Record, call: Record) -> Record | None:
    """The right values a rating gives, by output name, or None when it gives none."""
    answer = (call.get("program") or {}).get("answer") or "result"
    if rating.get("verdict") == "right":
        outputs = call.get("outputs") or {}
        described = (call.get("described") or {}).get("outputs") or []
        return {answer: outputs[answer]} if answer in outputs and answer not in described else None
    values: Record = {answer: rating["answer"]} if "answer" in rating else {}
    values.update({k: v for k, v in (rating.get("outputs") or {}).items() if k not in values})
    return values or None


def current_ratings(ratings: Iterable[Record], *, by: str | None = None) -> dict[str, list[Record]]:
    """The ratings that count, by call: each person's latest (a withdrawn one: none), each
    account rating on its own, oldest first; only `by`'s when given."""
    latest: dict[tuple[Any, ...], Record] = {}
    for r in ratings:
        if r.get("functai_rating") != RATING_FORMAT or (by is not None and r.get("by") != by):
            continue
        person = r.get("by")
        key = (r.get("call"), "by", person) if person else (r.get("call"), "rating", r.get("id"))
        if key not in latest or _when(r) > _when(latest[key]):
            latest[key] = r
    out: dict[str, list[Record]] = {}
    for (call, *_), r in latest.items():
        if r.get("verdict") in ("right", "wrong"):
            out.setdefault(str(call), []).append(r)
    for rs in out.values():
        rs.sort(key=_when)
    return out


def _when(r: Record) -> tuple[str, str]:
    return (str(r.get("at") or ""), str(r.get("id") or ""))


def _ordered(row: Record, context: Record) -> tuple[dict[str, Any], list[str]]:
    """A row's keys in the table's order (data, context, rating) and the keys added to the data:
    a name the data holds already gets underscores in front until it is free."""
    out = dict(row["data"])
    added: list[str] = []
    for key, value in [*context.items(), *row["meta"].items()]:
        while key in out:
            key = "_" + key
        out[key] = value
        added.append(key)
    return out, added


def _table(rows: list[tuple[dict[str, Any], list[str]]]) -> list[dict[str, Any]]:
    """Every row with every column: the data's, then the context and rating columns in functai's order."""
    added = list(dict.fromkeys(k for _, keys in rows for k in keys))
    added.sort(key=lambda k: (CONTEXT + META).index(k.lstrip("_")))
    data = [k for k in dict.fromkeys(k for row, _ in rows for k in row) if k not in added]
    return [{k: row.get(k) for k in data + added} for row, _ in rows]
