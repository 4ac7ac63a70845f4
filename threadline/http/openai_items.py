"""A conversation's record log as the OpenAI protocol shows it: items, responses, conversations.

Pure functions of a `Log`. A turn is a response (its id is `<turn>~<conversation>`: the turn, and the
conversation that holds it, so any process reads it back from the store with no index); its input
is the item `msg-in-<turn>` and its answer the item `msg-out-<turn>`, its n-th tool call
`fc-<turn>-<n>` and that call's output `fco-<turn>-<n>`, so item ids are stable and each names its
turn. The protocol's own facts (conversation metadata, a response's metadata, a deletion) are
`entry` records of plugin `openai`, which functai reads as any plugin's entries.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from core.errors import ErrorCode, ThreadlineError
from store.log.preamble import setup_of
from store.log.state import Log
from store.records import Record, entry_record
from threadline.reading import Turn

from .openai_errors import bad_request

PLUGIN = "openai"
SEPARATOR = "~"
"""Between a response id's turn and conversation: no conversation id or turn id holds it."""
STATUS = {
    "done": "completed",
    "failed": "failed",
    "stopped": "cancelled",
    "abandoned": "cancelled",
    "running": "in_progress",
    "interrupted": "in_progress",
    "waiting": "incomplete",
}
"""A turn's state as the protocol's response status."""


def response_id(conversation: str, turn: str) -> str:
    """The response id of `turn` of `conversation`."""
    return f"{turn}{SEPARATOR}{conversation}"


def parse_response_id(value: str, param: str = "response_id") -> tuple[str, str]:
    """`(conversation, turn)` of a response id.

    Raises:
        ThreadlineError: `turn-unknown` (404) for an id this service did not give.
    """
    turn, sep, conversation = value.partition(SEPARATOR)
    if not (sep and turn and conversation):
        raise ThreadlineError(ErrorCode.TURN_UNKNOWN, f"no response has id {value[:80]!r}", param=param)
    return conversation, turn


def protocol_entry(log: Log, kind: str, turn: str | None = None) -> dict[str, Any]:
    """The newest `openai` entry of `kind` (about `turn`, when given): its data, or {} when none."""
    for entry in reversed(log.entries):
        if entry.get("plugin") == PLUGIN and entry.get("entry") == kind and entry.get("turn") == turn:
            data = entry.get("data")
            return dict(data) if isinstance(data, dict) else {}
    return {}


def conversation_record(metadata: dict[str, str], sends: str | None, *, deleted: bool = False) -> Record:
    """The entry that holds a conversation's protocol metadata, its send policy, and whether it was deleted."""
    return entry_record(PLUGIN, "conversation", {"metadata": metadata, "sends": sends, "deleted": deleted})


def response_record(turn: str, metadata: dict[str, str], background: bool) -> Record:
    """The entry that holds a response's metadata and whether it was sent in the background."""
    return entry_record(PLUGIN, "response", {"metadata": metadata, "background": background}, turn=turn)


def epoch(stamp: str | None) -> int:
    """RFC 3339 text as whole seconds since the epoch (0 when there is none)."""
    return int(datetime.fromisoformat(stamp).timestamp()) if stamp else 0


def created_at(log: Log) -> int:
    """When the conversation's first record was written."""
    stamps = [str(e["at"]) for e in log.entries if isinstance(e.get("at"), str)]
    stamps += [str(log.turns[t].record.get("at")) for t in log.order[:1]]
    return epoch(min(stamps)) if stamps else 0


def _text(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


def input_text(turn: Turn) -> str:
    """What the turn was asked, as text (its single input, else its inputs as JSON)."""
    inputs = turn.inputs
    return _text(next(iter(inputs.values())) if len(inputs) == 1 else inputs or None)


def user_item(turn: Turn) -> dict[str, Any]:
    """The turn's input as a user message item."""
    content = [{"type": "input_text", "text": input_text(turn)}]
    return {"id": f"msg-in-{turn.id}", "type": "message", "role": "user", "status": "completed", "content": content}


def answer_item(turn: Turn, text: str | None = None, status: str = "completed") -> dict[str, Any]:
    """The turn's answer (or `text` so far) as an assistant message item."""
    said = _text(turn.result) if text is None else text
    content = [{"type": "output_text", "text": said, "annotations": [], "logprobs": []}]
    return {"id": f"msg-out-{turn.id}", "type": "message", "role": "assistant", "status": status, "content": content}


def turn_items(turn: Turn) -> list[dict[str, Any]]:
    """A turn's items: its input (unless empty: an imported assistant message), its tool calls and their
    outputs in order, then its answer once done."""
    items = [user_item(turn)] if input_text(turn) else []
    items += call_items(turn)
    if turn.state == "done" and _text(turn.result):
        items.append(answer_item(turn))
    return items


def call_items(turn: Turn, *, outputs: bool = True) -> list[dict[str, Any]]:
    """The turn's tool calls as `function_call` items (`fc-<turn>-<n>` for its n-th call), each followed
    by its `function_call_output` (`fco-<turn>-<n>`) once one is recorded (with `outputs`)."""
    out: list[dict[str, Any]] = []
    number = 0
    for step in turn.steps:
        if step.get("role") == "assistant":
            for call in step.get("calls") or []:
                number += 1
                out.append(function_call(turn.id, number, call))
        elif outputs:
            n = int(step.get("invocation") or 0)
            body = {"type": "function_call_output", "call_id": step.get("id"), "output": _text(step.get("output"))}
            out.append({"id": f"fco-{turn.id}-{n}", **body, "status": "completed"})
    return out


def function_call(turn: str, number: int, call: dict[str, Any]) -> dict[str, Any]:
    """A call the model asked for as a `function_call` item."""
    arguments = json.dumps(call.get("input") or {}, ensure_ascii=False, sort_keys=True)
    body = {"type": "function_call", "call_id": call.get("id"), "name": call.get("name"), "arguments": arguments}
    return {"id": f"fc-{turn}-{number}", **body, "status": "completed"}


def awaited_calls(turn: Turn) -> list[dict[str, Any]]:
    """The `function_call` items a turn waits for the caller's outputs of (none unless it waits so)."""
    if turn.state != "waiting" or turn.approvals or not turn.unfinished:
        return []
    open_ids = {str(t.get("id")) for t in turn.unfinished}
    return [item for item in call_items(turn, outputs=False) if item["call_id"] in open_ids]


def page(items: list[dict[str, Any]], after: str | None, limit: int, order: str) -> tuple[list[dict[str, Any]], bool]:
    """The page of `items` (oldest first) after item `after` in `order`, and whether more follow.

    Raises:
        ThreadlineError: 400 for an `after` that is no item of the list.
    """
    ordered = items if order == "asc" else items[::-1]
    start = 0
    if after is not None:
        ids = [item["id"] for item in ordered]
        if after not in ids:
            raise bad_request(f"no item {after[:80]!r} is in this conversation's list", "after")
        start = ids.index(after) + 1
    chosen = ordered[start : start + limit]
    return chosen, start + limit < len(ordered)


def usage(turn: Turn) -> dict[str, Any] | None:
    """The turn's usage as recorded, in the protocol's shape (None when none was recorded)."""
    if not turn.usage:
        return None
    given, written = turn.usage.get("input_tokens", 0), turn.usage.get("output_tokens", 0)
    return {
        "input_tokens": given,
        "input_tokens_details": {"cached_tokens": turn.usage.get("cached_tokens", 0)},
        "output_tokens": written,
        "output_tokens_details": {"reasoning_tokens": turn.usage.get("reasoning_tokens", 0)},
        "total_tokens": turn.usage.get("total_tokens", given + written),
    }


def response_of(log: Log, conversation: str, turn: Turn, *, model: str | None = None) -> dict[str, Any]:
    """`turn` as a response object: its status, its answer, its usage, its place in the conversation."""
    status = STATUS.get(turn.state, "in_progress")
    awaited = awaited_calls(turn)
    if awaited:  # the caller's move, as the protocol has it: the response is complete, its output the calls
        status = "completed"
    extra = protocol_entry(log, "response", turn.id)
    setup = _setup(log)
    out: dict[str, Any] = {
        "id": response_id(conversation, turn.id),
        "object": "response",
        "created_at": epoch(turn.started_at),
        "status": status,
        "model": turn.model or model or "",
        "output": awaited or ([answer_item(turn)] if status == "completed" else []),
        "conversation": {"id": conversation},
        "previous_response_id": response_id(conversation, turn.parent) if turn.parent else None,
        "instructions": setup.get("system_prompt"),
        "metadata": dict(extra.get("metadata") or {}),
        "background": bool(extra.get("background")),
        "usage": usage(turn),
        "error": _error(turn) if status == "failed" else None,
        "incomplete_details": None,
        "completed_at": epoch(turn.ended_at) if turn.ended_at else None,
        "parallel_tool_calls": False,
        "tool_choice": "auto",
        "tools": [{"type": "function", "strict": False, **t} for t in caller_tools(log, turn.id)],
        "store": True,
    }
    return out


def caller_tools(log: Log, turn: str) -> list[dict[str, Any]]:
    """The caller's functions the turn was offered, as its `turn` record keeps them."""
    found = log.turns.get(turn)
    given = (found.record.get("settings") or {}).get("tools") if found is not None else None
    return [dict(t) for t in given if isinstance(t, dict)] if isinstance(given, list) else []


def _setup(log: Log) -> dict[str, Any]:
    return setup_of(log) or {}


def _error(turn: Turn) -> dict[str, Any]:
    error = turn.error or {}
    code = str(error.get("code") or "internal").replace("-", "_")
    return {"code": code, "message": str(error.get("message") or f"the turn ended {turn.state}")}
