"""Steers (docs/format-1.md 5.6): sends that join a running turn at its next step instead of being turns.

Two `threadline` entries about the running turn say it all. `steer` is written when the send
arrives: `{request_id, inputs}` (and `metadata` when it has some), appended only while that turn is
the running head. `steered` is written by the try that runs the turn when it takes the steer, just
before the model call it joins: `{request_id, step, said}`, where `step` counts the turn's model
calls before it and `said` is the text a model call that the steer cut short had streamed (the model
is asked again, shown that text as what it said). A `steered` entry is appended only while the turn
has not ended, so the steers a turn took are exactly its `steered` entries; a `steer` without one
became a turn of its own, with its request id, once the running turn ended.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from store.records import Record, entry_record, iso
from store.values import copy_value

from .state import Turn

PLUGIN = "threadline"


@dataclass(frozen=True, slots=True)
class Steer:
    """A steer a turn took: its send's request id and inputs, the model step it joined, what was cut short."""

    request_id: str
    inputs: dict[str, Any] = field(default_factory=dict)
    step: int = 0
    said: str = ""


def steer_record(
    turn: str, request_id: str, inputs: Mapping[str, Any], *, metadata: Mapping[str, Any] | None = None, now: float
) -> Record:
    """The `steer` entry of a send that joins the running `turn`."""
    data: dict[str, Any] = {"request_id": request_id, "inputs": dict(inputs)}
    if metadata:
        data["metadata"] = dict(metadata)
    return entry_record(PLUGIN, "steer", data, turn=turn, at=iso(now))


def steered_record(turn: str, request_id: str, *, step: int, said: str = "", now: float) -> Record:
    """The `steered` entry of the try that takes a steer before model step `step`."""
    data = {"request_id": request_id, "step": step, "said": said}
    return entry_record(PLUGIN, "steered", data, turn=turn, at=iso(now))


def arrived(turn: Turn) -> list[Record]:
    """The `steer` entries of `turn` no `steered` entry took yet, oldest first."""
    taken = {_request_id(e) for e in turn.steers if e.get("entry") == "steered"}
    seen: set[str] = set()
    out = []
    for e in turn.steers:
        rid = _request_id(e)
        if e.get("entry") == "steer" and rid not in taken and rid not in seen:
            seen.add(rid)
            out.append(e)
    return out


def taken(turn: Turn) -> list[Steer]:
    """The steers `turn` took, in the order it took them (a request id once)."""
    sent = {_request_id(e): e for e in turn.steers if e.get("entry") == "steer"}
    out: list[Steer] = []
    seen: set[str] = set()
    for e in turn.steers:
        rid = _request_id(e)
        if e.get("entry") != "steered" or rid in seen or rid not in sent:
            continue
        seen.add(rid)
        data, inputs = e.get("data") or {}, (sent[rid].get("data") or {}).get("inputs")
        step, said = data.get("step"), data.get("said")
        out.append(
            Steer(
                request_id=rid,
                inputs=copy_value(inputs) if isinstance(inputs, dict) else {},
                step=step if isinstance(step, int) else 0,
                said=said if isinstance(said, str) else "",
            )
        )
    return out


def _request_id(entry: Record) -> str:
    data = entry.get("data")
    return str(data.get("request_id") or "") if isinstance(data, dict) else ""
