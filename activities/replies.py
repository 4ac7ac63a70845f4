"""A model reply as a `reply` record keeps it: lm15's canonical response form, and back.

A `reply` record's key is made from the request Threadline sent (`request_document`), so only
Threadline's own resumes reuse it; functai keys its replies by its own prompt.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Literal

from store.log.toolturn import reply_calls

from .language_model import ModelReply, ModelRequest


def request_document(request: ModelRequest) -> dict[str, Any]:
    """A request as JSON (what its reply is keyed by)."""
    return dataclasses.asdict(request)


def response_of(reply: ModelReply) -> dict[str, Any]:
    """A reply in lm15's canonical response form (what a `reply` record holds); an answer's outputs
    ride along under `outputs`, which only Threadline reads."""
    parts: list[dict[str, Any]] = [{"text": reply.text, "type": "text"}] if reply.text else []
    parts += [{"id": c.id, "input": c.input, "name": c.name, "type": "tool_call"} for c in reply.calls]
    out: dict[str, Any] = {
        "finish_reason": "tool_call" if reply.stop == "tools" else "stop",
        "id": None,
        "message": {"parts": parts, "role": "assistant"},
        "model": reply.model,
        "usage": dict(reply.usage),
    }
    if reply.stop == "answered":
        out["outputs"] = dict(reply.outputs)
    return out


def reply_of(response: Any) -> ModelReply:
    """The reply a recorded `response` holds."""
    given: Mapping[str, Any] = response if isinstance(response, Mapping) else {}
    calls = tuple(reply_calls(given))
    parts = (given.get("message") or {}).get("parts") or []
    text = "".join(str(p.get("text") or "") for p in parts if isinstance(p, Mapping) and p.get("type") == "text")
    usage = {k: v for k, v in (given.get("usage") or {}).items() if isinstance(v, int)}
    stop: Literal["answered", "tools"] = "tools" if calls and given.get("finish_reason") == "tool_call" else "answered"
    outputs = dict(given.get("outputs") or {}) if stop == "answered" else {}
    return ModelReply(
        outputs=outputs, model=str(given.get("model") or ""), usage=usage, calls=calls, stop=stop, text=text
    )
