"""What every form of the call log shares: its contract, and how its lines are read.

A call log holds two kinds of records, one per line as functai writes them (functai's
`contract/calls.md`): call records (`functai_call`) and ratings (`functai_rating`). A reader skips
a line that does not parse (a writer may be in the middle of it) and a record of a format it does
not know; it keeps one record per call id, the one of the highest `writer` (a resumed turn).
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Protocol, runtime_checkable

from store.records import Record

from .record import CALL_FORMATS, RATING_FORMAT

_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


@dataclass(slots=True)
class Logged:
    """What a call log holds: its calls (one record per id) and its ratings, as parsed dicts."""

    calls: list[Record] = field(default_factory=list)
    ratings: list[Record] = field(default_factory=list)

    def extend(self, other: Logged) -> None:
        """Add another log's records (several stores' call logs read as one)."""
        self.calls = latest_writers([*self.calls, *other.calls])
        self.ratings.extend(other.ratings)


@runtime_checkable
class CallLog(Protocol):
    """Where a store's calls and ratings are logged: a folder functai reads, or a PostgreSQL table."""

    where: str
    """Where the log is (a folder, or a database schema), never a secret."""
    local: bool
    """Whether it is this machine's files: an unfsynced `write` is then a call into the page cache,
    which a caller on an event loop makes there rather than in a thread."""

    def write(self, lines: Sequence[bytes], *, durable: bool = False) -> None:
        """Append whole lines (each ending in a newline); `durable` waits until they are on disk."""
        ...

    def read(self, *, since: str = "") -> Logged:
        """Every call and rating, leaving out those from before `since` (an RFC 3339 UTC time)."""
        ...

    def find(self, call: str) -> Record | None:
        """The record of call `call` (of its highest writer), or None when the log has none."""
        ...

    def remove(self, calls: Collection[str]) -> int:
        """Remove the lines about `calls` (call records of those ids or trees, their ratings): the
        turns of a conversation removed. Return how many lines went."""
        ...


def parse(lines: Iterable[bytes | str], *, since: str = "") -> Logged:
    """The records of `lines` a reader knows, skipping the rest; calls and ratings before `since` too."""
    out = Logged()
    for line in lines:
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if not isinstance(rec, dict):
            continue
        if rec.get("functai_call") in CALL_FORMATS and str(rec.get("started", "")) >= since:
            out.calls.append(rec)
        elif rec.get("functai_rating") == RATING_FORMAT and str(rec.get("at", "")) >= since:
            out.ratings.append(rec)
    out.calls = latest_writers(out.calls)
    return out


def is_about(line: bytes | str, calls: Collection[str]) -> bool:
    """Whether `line` is a call record of one of `calls` (or of a call in their trees), or a rating of one."""
    try:
        rec = json.loads(line)
    except ValueError:
        return False
    if not isinstance(rec, dict):
        return False
    if "functai_call" in rec:
        return rec.get("id") in calls or rec.get("root") in calls
    return "functai_rating" in rec and rec.get("call") in calls


def latest_writers(calls: Sequence[Record]) -> list[Record]:
    """One record per call id, in first-seen order: the one of the highest `writer` (later on ties)."""
    best: dict[object, Record] = {}
    for rec in calls:
        cid = rec.get("id")
        if cid not in best or _writer(rec) >= _writer(best[cid]):
            best[cid] = rec
    return list(best.values())


def _writer(rec: Record) -> int:
    value = rec.get("writer")
    return value if isinstance(value, int) and value > 1 else 1


def is_call_id(value: object) -> bool:
    """Whether `value` is a call id as functai spells one (lower-case 8-4-4-4-12 hex)."""
    return isinstance(value, str) and _UUID.fullmatch(value) is not None


def first_day(call: str) -> str:
    """The earliest UTC day folder a call's record can be in: the day before its UUIDv7 was minted.

    A call's record is written when it ends, after its id was made; a day of margin covers the
    clocks of two hosts (one minted the id, another wrote the end). `""` (every day) for an id
    that is not a UUIDv7.
    """
    value = uuid.UUID(call)
    if value.version != 7:
        return ""
    millis = value.int >> 80
    minted = datetime.fromtimestamp(millis / 1000, UTC) - timedelta(days=1)
    return minted.strftime("%Y-%m-%d")
