"""A conversation turn's call record, built exactly as functai 1.2.0 writes one for its own turns.

functai logs every call of a program as one line of JSON (call log format 2, functai's
`contract/calls.md`); a conversation's turn is a call whose id is the turn's id. A functai turn
that was shown a Threadline turn needs that turn's call record to be rated (`store.calls.rated`), so
Threadline writes one per ended turn. Everything it holds comes from the conversation log: the
`program` record, the `turn` record and the `ended` record. Pure: nothing here reads a clock.
"""

from __future__ import annotations

import getpass
import json
import os
import platform
import socket
from collections.abc import Mapping
from functools import lru_cache
from importlib import metadata
from typing import Any

from store.programs.shape import canonical_json, data_shape, hash_json
from store.records import Record, dumps, iso, parse_time

CALL_FORMAT = 2
"""The call records this writes (functai's call log format 2)."""
CALL_FORMATS = (1, 2)
"""The call record formats a reader reads."""
RATING_FORMAT = 1
MAX_LINE = 8 * 1024 * 1024
"""Bytes: a longer record loses its exchanges' messages and steps, then its values (`truncated`)."""
FUNCTAI_FORMAT_VERSION = "1.2.0"
"""The functai release whose call log this writes, named in `process.functai` (the schema requires it)."""
CALLED_STATES = frozenset({"done", "failed", "stopped"})
"""How a turn whose call ran to an end ended: only these have a call record (an abandoned turn ran nothing)."""


def interface_id(interface: Mapping[str, Any]) -> str:
    """`program.interface` of a call record: the fingerprint of the interface's data alone.

    Each declared input and output, plain and untyped, its shape without any `default`: calls with
    the same one record the same data, whatever the instruction or the model.
    """
    fields = [
        {"direction": d[:-1], "name": f["name"], "purpose": "plain", "shape": data_shape(f["shape"]), "type": ""}
        for d in ("inputs", "outputs")
        for f in interface.get(d) or []
    ]
    return hash_json(fields)


def program_info(program: Mapping[str, Any]) -> dict[str, Any]:
    """The `program` object of a call record, from a conversation's `program` record."""
    kind = program.get("program_kind") or "ai"
    info: dict[str, Any] = {"name": program.get("name"), "kind": kind, "module": program.get("module")}
    info["version"] = program.get("version")
    if kind == "ai":
        info["signature"] = program.get("signature")
    info["interface"] = _interface_id(json.dumps(program.get("interface") or {}, sort_keys=True))
    info["answer"] = program.get("answer") or _last_output(program)
    return info


@lru_cache(maxsize=256)
def _interface_id(interface: str) -> str:
    """`interface_id`, worked out once per interface: every turn of a program names the same one."""
    return interface_id(json.loads(interface))


def _last_output(program: Mapping[str, Any]) -> str:
    outputs = (program.get("interface") or {}).get("outputs") or []
    return str(outputs[-1]["name"]) if outputs else "result"


def sizes(values: Mapping[str, Any] | None) -> dict[str, int]:
    """Each value's length in code points of its canonical JSON (the record's `sizes`)."""
    return {name: len(canonical_json(value)) for name, value in (values or {}).items()}


def has_call(turn: Record, ended: Record | None) -> bool:
    """Whether a turn has a call record of its own: it ended after its call ran, and it is no merge.

    A merge's answer comes from its merging function's call (`made_by.call`), which functai logs as
    that function's call; the merge turn itself is no call.
    """
    return ended is not None and ended.get("state") in CALLED_STATES and "made_by" not in turn


def started(turn: Record, ended: Record) -> str:
    """When the turn's call began: its end less its duration, never before the turn was sent."""
    end, sent = parse_time(ended.get("at")), parse_time(turn.get("at"))
    if not end:
        return str(turn.get("at") or "")
    return iso(max(end - _seconds(ended), sent))


def call_record(
    conversation: str,
    turn: Record,
    ended: Record,
    program: Mapping[str, Any],
    *,
    caller: Mapping[str, Any] | None = None,
    process: Mapping[str, Any] | None = None,
) -> Record:
    """The call record of one ended turn, its keys in functai's order.

    Args:
        conversation: The conversation's id.
        turn: The turn's `turn` record.
        ended: Its `ended` record (`done`, `failed` or `stopped`).
        program: The `program` record its `turn` record names.
        caller: Who called (`{"kind": "api", "user": ...}`); `{}` when nothing says.
        process: The writing process (`process_info()` when not given).
    """
    done = ended.get("state") == "done"
    inputs = dict(turn.get("inputs") or {})
    outputs = dict(ended.get("outputs") or {}) if done else None
    info = program_info(program)
    tid = turn.get("turn")
    rec: Record = {"functai_call": CALL_FORMAT, "id": tid, "parent": None, "root": tid, "program": info}
    rec.update(started=started(turn, ended), seconds=_seconds(ended), content=True, inputs=inputs, outputs=outputs)
    if done and "value" in ended and ended["value"] != (outputs or {}).get(info["answer"]):
        rec["returned"] = ended["value"]
    rec["sizes"] = {"inputs": sizes(inputs), "outputs": sizes(outputs)}
    rec["error"] = None if done else dict(ended.get("error") or {"type": "Error"})
    rec.update(model=_model(turn, ended), usage=dict(ended.get("usage") or {}), confidence=None, exchanges=[])
    steps = (ended.get("lmcc") or {}).get("steps") if done else None
    if steps:
        rec["steps"] = json.loads(canonical_json(steps))
    rec["saw"] = list(ended.get("saw") or [])
    rec["conversation"] = {"id": conversation, "turn": tid, "parent": turn.get("parent")}
    attempt = ended.get("attempt")
    if isinstance(attempt, int) and attempt > 1:
        rec["writer"] = attempt
    rec.update(_shown(turn))
    rec["caller"] = dict(caller or {})
    rec["process"] = dict(process or process_info())
    return rec


def _seconds(ended: Record) -> float:
    seconds = ended.get("seconds")
    return round(float(seconds), 6) if isinstance(seconds, int | float) else 0.0


def _model(turn: Record, ended: Record) -> str | None:
    """The model asked for the answer: the turn's own `lm` setting, else the one that answered."""
    model = (turn.get("settings") or {}).get("lm") or ended.get("model")
    return model if isinstance(model, str) else None


def _shown(turn: Record) -> Record:
    """What the turn's instruction was given beyond its own (`sections`) and what plugins changed."""
    out: Record = {}
    sections = (turn.get("context") or {}).get("sections")
    if sections:
        out["sections"] = list(sections)
    if turn.get("changes"):
        out["changes"] = list(turn["changes"])
    return out


def call_line(record: Mapping[str, Any]) -> bytes:
    """One record as the line functai writes (newline included), cut to fit `MAX_LINE` as functai cuts it."""
    data = (dumps(record) + "\n").encode("utf-8")
    if len(data) <= MAX_LINE or "functai_call" not in record:
        return data
    exchanges = [{k: v for k, v in ex.items() if k not in ("request", "response")} for ex in record["exchanges"]]
    cut = {**record, "truncated": True, "exchanges": exchanges}
    cut.pop("steps", None)
    data = (dumps(cut) + "\n").encode("utf-8")
    if len(data) <= MAX_LINE:
        return data
    for key in ("inputs", "outputs", "returned", "probabilities"):
        cut.pop(key, None)
    return (dumps(cut) + "\n").encode("utf-8")


_process: dict[str, Any] = {}


def process_info() -> dict[str, Any]:
    """The writing process, as functai describes it, plus the Threadline release that wrote the line."""
    if _process.get("pid") != os.getpid():
        try:
            user: str | None = getpass.getuser()
        except (KeyError, OSError):
            user = None
        try:
            threadline = metadata.version("threadline")
        except metadata.PackageNotFoundError:
            threadline = "unknown"
        _process.clear()
        _process.update(host=socket.gethostname(), pid=os.getpid(), user=user, language="python")
        _process.update(runtime=platform.python_version(), functai=FUNCTAI_FORMAT_VERSION, threadline=threadline)
    return dict(_process)
