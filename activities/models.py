"""The model seam: what a turn asks a model, what comes back, and the built-in offline model.

A provider turns a `ModelRequest` into a `ModelReply`, calling `on_text` with each piece of
text as it arrives. Providers are chosen by the model string's prefix (`offline`,
`openai:gpt-4o-mini`, ...); keys and base URLs are the provider's own business and never
appear in a request, a reply, a record or a log line.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from core.errors import ErrorCode, ThreadlineError
from store.program import Program

TextSink = Callable[[str], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Message:
    """One earlier message of the conversation as the model sees it."""

    role: Literal["user", "assistant"]
    content: str


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


@dataclass(frozen=True, slots=True)
class ModelReply:
    """What a provider answered: the outputs by name, the model that answered, token usage."""

    outputs: dict[str, Any]
    model: str
    usage: dict[str, int] = field(default_factory=dict)


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
) -> ModelRequest:
    """The request for a turn: the instruction (and its sections, such as a summary of turns not
    shown), the earlier turns shown as user/assistant pairs, then the new inputs."""
    messages: list[Message] = []
    for exchange in exchanges:
        messages.append(Message("user", render_values(exchange.get("inputs") or {})))
        messages.append(Message("assistant", render_values(exchange.get("outputs") or {})))
    messages.append(Message("user", render_values(inputs)))
    outputs = tuple(f for f in program.field_records() if f["direction"] == "output")
    instruction = "\n\n".join([program.instruction, *sections])
    return ModelRequest(
        model=model, program=program.name, instruction=instruction, messages=tuple(messages), outputs=outputs
    )


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


def _sample(shape: Mapping[str, Any], text: str, count: int) -> Any:
    """A deterministic value of `shape`: the reply text for strings, the turn count for numbers."""
    if "enum" in shape:
        return shape["enum"][0]
    if "anyOf" in shape:
        options = [o for o in shape["anyOf"] if o.get("type") != "null"]
        return _sample(options[0], text, count) if options else None
    kind = shape.get("type")
    if kind == "object":
        return {k: _sample(v, text, count) for k, v in (shape.get("properties") or {}).items()}
    samples: dict[Any, Any] = {"string": text, "integer": count, "number": float(count), "boolean": True, "array": []}
    return samples.get(kind, text)


class OfflineModel:
    """A deterministic model that needs no key and no network: it answers any program.

    Its text says what it was asked and how many earlier turns it was shown, so a conversation
    visibly remembers. `delay` seconds per reply are spent streaming the text in pieces.
    """

    def __init__(self, *, delay: float = 0.0) -> None:
        self.delay = delay

    async def complete(self, request: ModelRequest, on_text: TextSink | None = None) -> ModelReply:
        """Answer `request` after `delay` seconds, streaming word by word."""
        earlier = (len(request.messages) - 1) // 2
        asked = request.messages[-1].content if request.messages else ""
        said = asked.strip()[:200].rstrip(".")
        text = f"(offline) You said: {said}. I was shown {earlier} earlier turn(s)."
        words = text.split(" ")
        pause = self.delay / len(words)
        for i, word in enumerate(words):
            if pause:
                await asyncio.sleep(pause)
            if on_text is not None:
                await on_text(word if i == 0 else " " + word)
        outputs = {f["name"]: _sample(f["shape"], text, earlier) for f in request.outputs}
        prompt = sum(len(m.content.split()) for m in request.messages) + len(request.instruction.split())
        usage = {"input_tokens": prompt, "output_tokens": len(words), "total_tokens": prompt + len(words)}
        return ModelReply(outputs=outputs, model="offline", usage=usage)
