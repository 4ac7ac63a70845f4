"""Model and tool calls seen from outside: a GenAI `chat` span per model call and an `execute_tool`
span per tool call, with their metrics (calls, tokens, latencies by model or tool).

Spans are made where the call is made, so each exists once: a resumed turn asks no model whose reply
is recorded and runs no tool whose result is, and a call cut short by a crash leaves no span (its
process took the unfinished span with it). They are children of the activity's span, itself a child
of the turn's (`workflows/_observed.py`). Content (messages, tool arguments and results) goes into
spans only when `capture_content()` is on; keys never do (no request holds one).
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Mapping
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from core import telemetry
from core.errors import ThreadlineError

from .language_model import ModelReply, ModelRequest, Provider, TextSink

if TYPE_CHECKING:
    from opentelemetry.trace import Span

MODEL_CALLS = ("threadline_model_calls", "Model calls, by model, provider and outcome (`ok` or an error code).")
TOKENS = ("threadline_model_tokens", "Tokens used, by model, provider and kind (`input`, `output`).")
CALL_SECONDS = ("threadline_model_call_duration_seconds", "How long model calls took, by model and provider.")
FIRST_TOKEN_SECONDS = (
    "threadline_time_to_first_token_seconds",
    "How long streamed model calls took to their first text.",
)
TOOL_CALLS = ("threadline_tool_calls", "Tool calls run, by tool and outcome (`ok`, `stopped` or an error code).")


class ObservedProvider:
    """A provider whose calls are traced and counted (what `Providers` hands out while telemetry is on)."""

    def __init__(self, provider: Provider, system: str) -> None:
        self.provider = provider
        self.system = system

    async def complete(self, request: ModelRequest, on_text: TextSink | None = None) -> ModelReply:
        """Answer `request` through the provider inside a `chat` span; count it, its tokens, its times."""
        tracer = telemetry.tracer(__name__)
        started = time.monotonic()
        first: list[float] = []

        async def sink(piece: str) -> None:
            if not first:
                first.append(time.monotonic() - started)
            if on_text is not None:
                await on_text(piece)

        streamed = sink if on_text is not None else None  # a provider streams only when asked to
        labels = {"model": request.model, "provider": self.system}
        if tracer is None:
            return await self._counted(self.provider.complete(request, streamed), labels, started, first)
        attributes = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": self.system,
            "gen_ai.request.model": request.model,
            "threadline.program": request.program,
        }
        with tracer.start_as_current_span(
            f"chat {request.model}", attributes=attributes, record_exception=False, set_status_on_exception=False
        ) as span:
            if telemetry.capture_content():
                span.set_attribute("gen_ai.input.messages", json.dumps([asdict(m) for m in request.messages]))
                span.set_attribute("gen_ai.system_instructions", request.instruction)
            try:
                reply = await self._counted(self.provider.complete(request, streamed), labels, started, first)
            except ThreadlineError as err:
                _failed(span, err.code)
                raise
            _answered(span, reply)
            return reply

    async def _counted(
        self, call: Awaitable[ModelReply], labels: dict[str, str], started: float, first: list[float]
    ) -> ModelReply:
        try:
            reply = await call
        except ThreadlineError as err:
            _count(*MODEL_CALLS, {**labels, "outcome": err.code})
            raise
        _count(*MODEL_CALLS, {**labels, "outcome": "ok"})
        for kind in ("input", "output"):
            _count(*TOKENS, {**labels, "kind": kind}, reply.usage.get(f"{kind}_tokens", 0))
        _seconds(*CALL_SECONDS, labels, time.monotonic() - started)
        if first:
            _seconds(*FIRST_TOKEN_SECONDS, labels, first[0])
        return reply


def _answered(span: Span, reply: ModelReply) -> None:
    span.set_attribute("gen_ai.response.model", reply.model)
    span.set_attribute("gen_ai.response.finish_reasons", ["tool_call" if reply.stop == "tools" else "stop"])
    for kind in ("input", "output"):
        if f"{kind}_tokens" in reply.usage:
            span.set_attribute(f"gen_ai.usage.{kind}_tokens", reply.usage[f"{kind}_tokens"])
    if telemetry.capture_content():
        calls = [{"id": c.id, "name": c.name, "arguments": c.input} for c in reply.calls]
        message = {"text": reply.text, "outputs": reply.outputs, "calls": calls}
        span.set_attribute("gen_ai.output.messages", json.dumps([message]))


def _failed(span: Span, code: str) -> None:
    """An error's code on the span, never its message (a provider's message may quote the request)."""
    from opentelemetry.trace import Status, StatusCode

    span.set_attribute("error.type", code)
    span.set_status(Status(StatusCode.ERROR, code))


async def executed(name: str, call_id: str, arguments: Mapping[str, Any], run: Awaitable[str | None]) -> str | None:
    """Await a tool call's `run` inside an `execute_tool` span, counted by tool and outcome (None: stopped)."""
    tracer = telemetry.tracer(__name__)
    if tracer is None:
        output = await run
        _count(*TOOL_CALLS, _tool_labels(name, output))
        return output
    attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name, "gen_ai.tool.call.id": call_id}
    with tracer.start_as_current_span(
        f"execute_tool {name}", attributes=attributes, record_exception=False, set_status_on_exception=False
    ) as span:
        if telemetry.capture_content():
            span.set_attribute("gen_ai.tool.call.arguments", json.dumps(dict(arguments)))
        try:
            output = await run
        except ThreadlineError as err:
            _failed(span, err.code)
            raise
        if telemetry.capture_content() and output is not None:
            span.set_attribute("gen_ai.tool.call.result", output)
    _count(*TOOL_CALLS, _tool_labels(name, output))
    return output


def _tool_labels(name: str, output: str | None) -> dict[str, str]:
    return {"tool": name, "outcome": "stopped" if output is None else "ok"}


def _count(name: str, description: str, labels: dict[str, str], value: int = 1) -> None:
    meter = telemetry.meter()
    if meter is not None and value > 0:
        telemetry.instrument(meter, "counter", name, description).add(value, labels)


def _seconds(name: str, description: str, labels: dict[str, str], seconds: float) -> None:
    meter = telemetry.meter()
    if meter is not None:
        telemetry.instrument(meter, "histogram", name, description).record(seconds, labels)
