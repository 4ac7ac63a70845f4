"""What a conversation tells every turn before its own turns: its system prompt and metadata.

Kept as an `entry` record (plugin `threadline`, kind `setup`, no `turn`: it belongs to every
branch) whose `data` is `{"system_prompt", "metadata", "program", "request_id"}`. The newest one
counts. Every turn placed after it is shown the system prompt, and the metadata as JSON, as
sections of its instruction, and records them in its `context`, so a resume (here or in functai)
shows exactly what it was shown. functai reads it as any plugin's entry
(`chat.entries("threadline", "setup")`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from store.records import Record, entry_record, iso

from .state import Log

PLUGIN = "threadline"
KIND = "setup"


def setup_of(log: Log) -> dict[str, Any] | None:
    """The newest setup entry's data, with its time as `at` (None: the conversation has none)."""
    for entry in reversed(log.entries):
        if entry.get("plugin") == PLUGIN and entry.get("entry") == KIND and isinstance(entry.get("data"), dict):
            return {**entry["data"], "at": entry.get("at")}
    return None


def setup_record(
    log: Log,
    *,
    system_prompt: str | None,
    metadata: Mapping[str, Any],
    program: str,
    request_id: str,
    now: float,
) -> Record | None:
    """The setup entry to append, or None when the call with `request_id` already recorded one."""
    if any(_request_of(entry) == request_id for entry in log.entries):
        return None
    data = {"system_prompt": system_prompt, "metadata": dict(metadata), "program": program, "request_id": request_id}
    return entry_record(PLUGIN, KIND, data, at=iso(now))


def recorded_at(log: Log, request_id: str) -> str | None:
    """When the setup entry of the call with `request_id` was written (None: it was not)."""
    found = [e.get("at") for e in log.entries if _request_of(e) == request_id]
    return str(found[0]) if found else None


def _request_of(entry: Record) -> Any:
    data = entry.get("data")
    same = entry.get("plugin") == PLUGIN and entry.get("entry") == KIND
    return data.get("request_id") if same and isinstance(data, dict) else None


def sections(log: Log) -> list[str]:
    """What every new turn is told of the conversation's setup: its system prompt, then its metadata."""
    found = setup_of(log)
    if found is None:
        return []
    out = [str(found["system_prompt"])] if found.get("system_prompt") else []
    metadata = found.get("metadata")
    if isinstance(metadata, dict) and metadata:
        text = json.dumps(metadata, ensure_ascii=False, sort_keys=True, default=str)
        out.append(f"Metadata of this conversation: {text}")
    return out


def times(log: Log) -> tuple[str | None, str | None]:
    """When the conversation's first and latest records were written (RFC 3339 text, which sorts)."""
    stamps = [str(e["at"]) for e in log.entries if isinstance(e.get("at"), str)]
    for turn in log.turns.values():
        for record in (turn.record, turn.lease, turn.ended):
            if record is not None and isinstance(record.get("at"), str):
                stamps.append(str(record["at"]))
    return (min(stamps), max(stamps)) if stamps else (None, None)
