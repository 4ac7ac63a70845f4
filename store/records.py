"""Building records exactly as functai 1.2.0 writes them: ids, times, key order, line bytes.

Key order matters only for byte-identical output (docs/format-1.md 1.3, 2); readers ignore it.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import threading
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import orjson

FORMAT = 1
LEASE_SECONDS = 30.0
"""How long functai's leases last (renewed every 10 s): a lease a reader saw written counts as live
for this long on the reader's own clock, whatever its `until` says."""
CLOCK_SKEW_SECONDS = 30.0
"""How far apart the clocks of hosts that share a log may be (docs/operations.md): the three
constants below keep a running turn `running` for every reader within it, with 5 s to spare."""
LEASE_HELD_SECONDS = 40.0
"""How long a lease Threadline writes lasts: renewed every `LEASE_RENEW_SECONDS`, it keeps at least
35 s, so a reader whose clock runs up to `CLOCK_SKEW_SECONDS` ahead still reads it live."""
LEASE_RENEW_SECONDS = 5.0
LEASE_GRACE_SECONDS = 15.0
"""How long after its `until` a lease still counts as live, for a lease the reader did not see
written: functai's leases keep at least 20 s, so a writer up to `CLOCK_SKEW_SECONDS` behind the
reader still reads as running."""
STOP_POLL_SECONDS = 0.25

Record = dict[str, Any]


def iso(t: float | None = None) -> str:
    """RFC 3339 UTC with six fraction digits and `Z` (sorts as text)."""
    moment = datetime.fromtimestamp(time.time() if t is None else t, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(text: object) -> float:
    """Seconds since the epoch for `text`, or 0.0 when it does not parse (a lease that reads as over)."""
    if not isinstance(text, str):
        return 0.0
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return 0.0
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


class _UUID7:
    """UUIDv7 ids, monotonic within a process (RFC 9562 method 1, as functai mints them)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ms = -1
        self._counter = 0

    def __call__(self) -> str:
        with self._lock:
            ms = time.time_ns() // 1_000_000
            if ms > self._ms:
                self._ms, self._counter = ms, secrets.randbelow(2048)
            else:
                self._counter += 1
                if self._counter > 0xFFF:
                    self._ms, self._counter = self._ms + 1, 0
            ms, counter = self._ms, self._counter
        value = (ms & ((1 << 48) - 1)) << 80
        rand = int.from_bytes(os.urandom(8)) >> 2  # 62 random bits, one system call
        value |= 0x7 << 76 | counter << 64 | 0b10 << 62 | rand
        h = f"{value:032x}"
        return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


uuid7 = _UUID7()


_holder: list[str] = []


def holder() -> str:
    """`<hostname>:<pid>:<6 hex>`: who holds a lease; made again in a forked child."""
    if not _holder:
        _holder.append(f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}")
    return _holder[0]


os.register_at_fork(after_in_child=_holder.clear)


_DIGITS = bytes(b"0"[0] if b"0"[0] <= i <= b"9"[0] else b" "[0] for i in range(256))
_LONG_NUMBER = b"0" * 19


def has_long_number(data: bytes) -> bool:
    """Whether `data` holds 19 digits in a row or more: maybe an integer orjson reads as a float."""
    return _LONG_NUMBER in data.translate(_DIGITS)  # every digit a 0, then one fast search


def loads(line: bytes, *, long_number: bool | None = None) -> Any:
    """One line parsed exactly as `json.loads` parses it (what functai reads), about three times
    as fast, with every object key held once however many records repeat it.

    orjson reads what json reads the same way, except that it refuses NaN, infinities, lone
    surrogates and a byte-order mark (json is asked then), and reads an integer beyond 64 bits
    as a float: a line that may hold one (19 digits in a row, `has_long_number`) and whose
    parse holds a float that large is read by json. `long_number` says whether the line has such
    a run, when the caller already looked (at a larger piece).

    Raises:
        ValueError: the line is not JSON. RecursionError: nested too deep for json.
    """
    try:
        value = orjson.loads(line)
    except orjson.JSONDecodeError:
        return json.loads(line)
    if (has_long_number(line) if long_number is None else long_number) and _has_huge_float(value):
        return json.loads(line)
    return value


def _has_huge_float(value: Any) -> bool:
    """Whether a float of 2**63 or more (in size) is anywhere in `value` (walked without recursion)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, float) and abs(item) >= 2.0**63:
            return True
    return False


def dumps(record: Mapping[str, Any]) -> str:
    """One record as functai writes a line (without the newline)."""
    return json.dumps(record, ensure_ascii=False, separators=(",", ":"), default=str, allow_nan=False)


def with_seq(record: Mapping[str, Any], seq: int) -> Record:
    """`record` numbered: an existing `seq` keeps its place, otherwise it comes last."""
    out = dict(record)
    out["seq"] = seq
    return out


def _base(kind: str, turn: str, at: str | None) -> Record:
    return {"functai_conversation": FORMAT, "kind": kind, "at": at or iso(), "turn": turn}


def turn_record(
    turn: str,
    *,
    parent: str | None,
    program: str,
    inputs: Mapping[str, Any],
    request_id: str | None = None,
    settings: Mapping[str, Any] | None = None,
    context: Mapping[str, Any] | None = None,
    metadata: Mapping[str, Any] | None = None,
    at: str | None = None,
    placed_by: str | None = None,
) -> Record:
    """A `turn` record: a turn is sent (written with its first `lease`). Threadline's own keys, which
    functai ignores: `metadata`, the message's own; `placed_by`, the conversation's workflow that placed
    it: that workflow owns the turn, and runs it even when it lost the task that placed it."""
    out = _base("turn", turn, at)
    out.update(parent=parent, program=program, inputs=dict(inputs))
    if request_id:
        out["request_id"] = request_id
    if settings:
        out["settings"] = dict(settings)
    if context is not None:
        out["context"] = dict(context)
    if placed_by:
        out["placed_by"] = placed_by
    if metadata:
        out["metadata"] = dict(metadata)
    return out


def lease_record(turn: str, *, attempt: int, now: float | None = None, owner: str | None = None) -> Record:
    """A `lease`: the turn is `running` for every reader until now + `LEASE_HELD_SECONDS` (functai's
    30 s and the skew between hosts' clocks that leases allow)."""
    t = time.time() if now is None else now
    out = _base("lease", turn, iso(t))
    out.update(holder=owner or holder(), until=iso(t + LEASE_HELD_SECONDS), attempt=attempt)
    return out


def ended_record(
    turn: str,
    *,
    attempt: int,
    state: str,
    saw: list[Record] | None = None,
    seconds: float = 0.0,
    usage: Mapping[str, int] | None = None,
    outputs: Mapping[str, Any] | None = None,
    value: Any = None,
    lmcc: Mapping[str, Any] | None = None,
    model: str | None = None,
    error: Mapping[str, Any] | None = None,
    at: str | None = None,
) -> Record:
    """An `ended` record in functai's key order: done (outputs, value, lmcc, model) or not (error)."""
    out: Record = {"functai_conversation": FORMAT, "at": at or iso(), "turn": turn, "attempt": attempt}
    out.update(kind="ended", saw=list(saw or []), seconds=round(seconds, 6), usage=dict(usage or {}))
    out["state"] = state
    if state == "done":
        out.update(outputs=dict(outputs or {}), value=value)
        if lmcc is not None:
            out["lmcc"] = dict(lmcc)
        out["model"] = model
    else:
        out["error"] = dict(error or {"type": "Error"})
    return out


def stopped_record(turn: str, *, attempt: int, saw: list[Record] | None = None, seconds: float = 0.0) -> Record:
    """The `ended` record of a cancelled turn, with functai's `Cancelled` error."""
    error = {"type": "Cancelled", "message": "the stream was closed"}
    return ended_record(turn, attempt=attempt, state="stopped", saw=saw, seconds=seconds, error=error)


def abandoned_record(turn: str, *, attempt: int, at: str | None = None) -> Record:
    """What `abandon` writes for a waiting or interrupted turn that nothing runs."""
    out = _base("ended", turn, at)
    out.update(state="abandoned", attempt=attempt)
    return out


def stop_record(turn: str, *, at: str | None = None) -> Record:
    """Someone asked a running turn to stop."""
    return _base("stop", turn, at)


def head_record(turn: str, *, at: str | None = None) -> Record:
    """The conversation's head moves to `turn`."""
    return _base("head", turn, at)


def entry_record(plugin: str, entry: str, data: Any, *, turn: str | None = None, at: str | None = None) -> Record:
    """A plugin's (or the host's) data; with `turn`, it belongs to the branches through that turn."""
    out: Record = {"functai_conversation": FORMAT, "kind": "entry", "at": at or iso()}
    out.update(plugin=plugin, entry=entry, data=data)
    if turn is not None:
        out["turn"] = turn
    return out
