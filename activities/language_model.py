"""The model seam: what a turn asks a model, what comes back, and the built-in offline model.

A provider turns a `ModelRequest` into a `ModelReply`, calling `on_text` with each piece of
text as it arrives. Providers are chosen by the model string's prefix (`offline`,
`openai:gpt-4o-mini`, ...); keys and base URLs are the provider's own business and never
appear in a request, a reply, a record or a log line.

A program with tools offers them in every request. A reply then either answers (`stop` is
`answered`, the outputs are there) or asks for tool calls (`stop` is `tools`, `calls` holds them);
the caller runs them and asks again with the assistant's calls and a `tool` message per result
after the user's message (`build_request(..., steps=...)`).
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from core.errors import ErrorCode, ThreadlineError
from store.programs.program import Program
from store.programs.tools import ToolCall

TextSink = Callable[[str], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Message:
    """One message of the conversation as the model sees it.

    An assistant message may carry the tool `calls` it asked for (its content is then what it said
    beside them, often nothing); a `tool` message carries one call's result, `call_id` naming it.
    """

    role: Literal["user", "assistant", "tool"]
    content: str
    calls: tuple[ToolCall, ...] = ()
    call_id: str = ""


@dataclass(frozen=True, slots=True)
class ModelRequest:
    """Everything a provider needs for one turn; built from the log, never holding a secret."""

    model: str
    """The model's name within its provider (`gpt-4o-mini`, `offline`)."""
    program: str
    instruction: str
    messages: tuple[Message, ...]
    outputs: tuple[Mapping[str, Any], ...]
    """The program's output fields (`{name, direction, purpose, shape}`), for structured outputs."""
    tools: tuple[Mapping[str, Any], ...] = ()
    """The tools offered, each `{name, description, parameters}` (what functai's `tools` input holds)."""
    max_tokens: int | None = None
    """The most tokens the reply may have (None: the provider's own bound)."""


@dataclass(frozen=True, slots=True)
class ModelReply:
    """What a provider answered: the outputs by name, the model that answered, token usage.

    When the model asks for tools instead of answering, `stop` is `tools`, `calls` holds its calls
    in order and `outputs` is empty. `text` is the text the model wrote (beside its calls: what it
    said, to send back as it was); an answer given through Anthropic's `answer` tool is not in it.
    """

    outputs: dict[str, Any]
    model: str
    usage: dict[str, int] = field(default_factory=dict)
    calls: tuple[ToolCall, ...] = ()
    stop: Literal["answered", "tools"] = "answered"
    text: str = ""


class Provider(Protocol):
    """Something that answers model requests."""

    async def complete(self, request: ModelRequest, on_text: TextSink | None = None) -> ModelReply:
        """Answer `request`, streaming text pieces to `on_text`."""
        ...


def render_values(values: Mapping[str, Any]) -> str:
    """Inputs or outputs as message text: a lone string as itself, otherwise `name: value` lines."""
    if len(values) == 1:
        (only,) = values.values()
        if isinstance(only, str):
            return only
    return "\n".join(
        f"{k}: {v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)}" for k, v in values.items()
    )


def build_request(
    program: Program,
    exchanges: Sequence[Mapping[str, Any]],
    inputs: Mapping[str, Any],
    *,
    model: str,
    sections: Sequence[str] = (),
    steps: Sequence[Message] = (),
    max_tokens: int | None = None,
    renders: list[Any] | None = None,
) -> ModelRequest:
    """The request for a turn: the instruction (and its sections, such as a summary of turns not
    shown), the earlier turns shown as user/assistant pairs, then the new inputs, then `steps`
    (this turn's tool calls and their results so far). The program's tools are offered.

    `renders` (`Shown.renders`) keeps each exchange's messages for the next request that shows it."""
    messages = exchange_messages(exchanges, renders)
    messages.append(Message("user", render_values(inputs)))
    written = ("plain", "reasoning")  # the model writes its reasoning too, when the program asks for it
    outputs = tuple(f for f in program.field_records() if f["direction"] == "output" and f["purpose"] in written)
    instruction = "\n\n".join([program.instruction, *sections])
    return ModelRequest(
        model=model,
        program=program.name,
        instruction=instruction,
        messages=(*messages, *steps),
        outputs=outputs,
        tools=tuple(t.spec for t in program.tools),
        max_tokens=max_tokens,
    )


def exchange_messages(exchanges: Sequence[Mapping[str, Any]], renders: list[Any] | None = None) -> list[Message]:
    """Earlier turns (`exchanges`) as the model is shown them, each kept in `renders` (`Shown.renders`)
    for the next request that shows it, or taken from there."""
    messages: list[Message] = []
    kept = renders if renders is not None else []
    for n, exchange in enumerate(exchanges):
        if n < len(kept) and kept[n][0] is exchange:
            messages.extend(kept[n][1])
            continue
        rendered = _exchange_messages(exchange, n)
        messages.extend(rendered)
        if renders is not None:
            del renders[n:]
            renders.append((exchange, rendered))
    return messages


def _exchange_messages(exchange: Mapping[str, Any], n: int) -> tuple[Message, ...]:
    """Earlier turn `n` (`{"inputs", "outputs"}`, maybe `steps` and `steers`) as the model is shown it."""
    asked = Message("user", render_values(exchange.get("inputs") or {}))
    answered = Message("assistant", render_values(exchange.get("outputs") or {}))
    if "steps" in exchange or "steers" in exchange:
        return (asked, *_steered_steps(exchange, prefix=f"t{n}_"), answered)
    return asked, answered


def _steered_steps(exchange: Mapping[str, Any], *, prefix: str) -> list[Message]:
    """An earlier turn's steps as messages, with each steer it took (`steers`: `{"inputs", "step",
    "said"}`) as the user's message just before the model step it joined, as the turn itself was shown it
    (after what a call it cut short had said)."""
    steers: list[Mapping[str, Any]] = list(exchange.get("steers") or ())
    out: list[Message] = []
    step_number = 0
    for step in exchange.get("steps") or ():
        if step.get("kind") == "model":
            out.extend(steer_messages(s for s in steers if s.get("step") == step_number))
            step_number += 1
        out.extend(step_messages([step], prefix=prefix))
    out.extend(steer_messages(s for s in steers if not isinstance(s.get("step"), int) or s["step"] >= step_number))
    return out


def steer_messages(steers: Iterable[Mapping[str, Any]]) -> list[Message]:
    """Steers (`{"inputs", "said"}`) as messages: what a call a steer cut short had said, then the steer."""
    out: list[Message] = []
    for steer in steers:
        if steer.get("said"):
            out.append(Message("assistant", str(steer["said"])))
        out.append(Message("user", render_values(steer.get("inputs") or {})))
    return out


def step_messages(steps: Sequence[Mapping[str, Any]], *, prefix: str = "") -> list[Message]:
    """An earlier turn's tool calls and results (its lmcc steps) as messages: each model step that called
    tools as the assistant's calls, each result as a `tool` message. Ids get `prefix`, so calls of
    different turns never share one."""
    out: list[Message] = []
    for step in steps:
        if step.get("kind") == "model":
            asked = (step.get("outputs") or {}).get(step.get("calls_field") or "calls") or []
            calls = tuple(
                ToolCall(prefix + str(c.get("id")), str(c.get("name")), dict(c.get("input") or {})) for c in asked
            )
            if calls:
                out.append(Message("assistant", "", calls=calls))
        elif step.get("kind") == "tool":
            out.append(Message("tool", output_text(step.get("output")), call_id=prefix + str(step.get("id"))))
    return out


def output_text(output: Any) -> str:
    """A tool step's output as text: itself, or its text parts joined (lm15's list form)."""
    if isinstance(output, str):
        return output
    if isinstance(output, list):
        return "".join(str(p.get("text") or "") for p in output if isinstance(p, Mapping))
    return json.dumps(output, ensure_ascii=False)


def split_model(model: str) -> tuple[str, str]:
    """`"openai:gpt-4o-mini"` -> `("openai", "gpt-4o-mini")`; `"offline"` -> `("offline", "offline")`."""
    provider, sep, name = model.partition(":")
    return (provider, name) if sep else (provider, provider)


class Providers:
    """The providers a worker can call, by the prefix of the model string."""

    def __init__(self, providers: Mapping[str, Provider]) -> None:
        self._providers = dict(providers)

    def resolve(self, model: str) -> tuple[Provider, str]:
        """The provider for `model` and the model's name within it.

        Raises:
            ThreadlineError: `provider-unconfigured` for a provider this worker does not have.
        """
        prefix, name = split_model(model)
        provider = self._providers.get(prefix)
        if provider is None:
            known = ", ".join(sorted(self._providers)) or "none"
            raise ThreadlineError(
                ErrorCode.PROVIDER_UNCONFIGURED,
                f"no provider {prefix!r} is configured on this worker (configured: {known})",
            )
        return provider, name


# ----- the offline model


def _sample(shape: Mapping[str, Any], text: str, count: int, asked: str = "") -> Any:
    """A deterministic value of `shape`: the reply text for strings, the turn count for numbers, the
    choice the user's message names (else the first)."""
    if "enum" in shape:
        words = set(re.findall(r"\w+", asked.lower()))
        return next((o for o in shape["enum"] if isinstance(o, str) and o.lower() in words), shape["enum"][0])
    if "anyOf" in shape:
        options = [o for o in shape["anyOf"] if o.get("type") != "null"]
        return _sample(options[0], text, count, asked) if options else None
    kind = shape.get("type")
    if kind == "object":
        return {k: _sample(v, text, count, asked) for k, v in (shape.get("properties") or {}).items()}
    samples: dict[Any, Any] = {"string": text, "integer": count, "number": float(count), "boolean": True, "array": []}
    return samples.get(kind, text)


class OfflineModel:
    """A deterministic model that needs no key and no network: it answers any program.

    Its text says what it was asked and how many earlier turns it was shown, so a conversation
    visibly remembers. `delay` seconds per reply are spent streaming the text in pieces; with
    `hold`, each reply waits after its first word until the event is set (a turn that runs exactly
    as long as its caller wants, for demonstrations and tests).

    With tools it makes one round of calls, so tool turns run with no network too. If tools are
    offered and no `tool` message follows the last user message, it asks for each offered tool
    once, in order (ids `offline_1`, `offline_2`, ...), each input holding the tool's required
    parameters sampled from their shapes: text takes the user's message, numbers the count of
    earlier turns, a choice its first option. Once results follow the last user message, it
    answers, quoting each result (`Tools said: read_note: ...`). An output that is a choice (a
    `Literal`) is the first option the user's message names as a word, else the first option.
    """

    def __init__(self, *, delay: float = 0.0, hold: asyncio.Event | None = None) -> None:
        self.delay = delay
        self.hold = hold

    async def complete(self, request: ModelRequest, on_text: TextSink | None = None) -> ModelReply:
        """Answer `request` (or ask for its tools) after `delay` seconds, streaming word by word."""
        last = max((i for i, m in enumerate(request.messages) if m.role == "user"), default=-1)
        asked = request.messages[last].content if last >= 0 else ""
        earlier = sum(m.role == "user" for m in request.messages[: max(last, 0)])  # tool messages are no turns
        results = [m for m in request.messages[last + 1 :] if m.role == "tool"]
        if request.tools and not results:
            return await self._ask_tools(request, asked, earlier)
        said = asked.strip()[:200].rstrip(".")
        text = f"(offline) You said: {said}. I was shown {earlier} earlier turn(s)."
        if results:
            text += " Tools said: " + "; ".join(_quote(request.messages, m) for m in results) + "."
        words = text.split(" ")
        pause = self.delay / len(words)
        for i, word in enumerate(words):
            if pause:
                await asyncio.sleep(pause)
            if on_text is not None:
                await on_text(word if i == 0 else " " + word)
            if i == 0 and self.hold is not None:
                await self.hold.wait()
        outputs = {f["name"]: _sample(f["shape"], text, earlier, asked) for f in request.outputs}
        return ModelReply(outputs=outputs, model="offline", usage=_usage(request, len(words)), text=text)

    async def _ask_tools(self, request: ModelRequest, asked: str, earlier: int) -> ModelReply:
        if self.delay:
            await asyncio.sleep(self.delay)
        calls = tuple(
            ToolCall(f"offline_{i}", str(t["name"]), _tool_input(t.get("parameters") or {}, asked, earlier))
            for i, t in enumerate(request.tools, start=1)
        )
        return ModelReply(outputs={}, model="offline", usage=_usage(request, len(calls)), calls=calls, stop="tools")


def _tool_input(parameters: Mapping[str, Any], text: str, count: int) -> dict[str, Any]:
    properties = parameters.get("properties") or {}
    return {name: _sample(properties[name], text, count) for name in parameters.get("required") or ()}


def _quote(messages: Sequence[Message], result: Message) -> str:
    names = {c.id: c.name for m in messages for c in m.calls}
    return f"{names.get(result.call_id, result.call_id)}: {result.content.strip()[:200]}"


def _usage(request: ModelRequest, written: int) -> dict[str, int]:
    prompt = sum(len(m.content.split()) for m in request.messages) + len(request.instruction.split())
    return {"input_tokens": prompt, "output_tokens": written, "total_tokens": prompt + written}
