"""What a new turn is shown of the earlier turns: the context rule and its summary rule.

Each is defined here once and used as it is by every layer: the workflow payloads and HTTP bodies
carry it, the log's rules (`store.log.rules`, `store.log.summary`) apply it, and the plan of a
turn (`activities.plan`) chooses it. A new field is one change here; its JSON is the same on the
wire and in the conformance cases (`{"last": 1, "without": ["message"]}`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, SerializationInfo, SerializerFunctionWrapHandler, model_serializer

T = TypeVar("T")
ONCE = "answer-once"
"""The serialization context of every payload crossing Temporal (core/temporal.py sets it): an outcome
carries its answer once there, and a compact model leaves out its fields that hold their defaults."""


def compacted(model: BaseModel, data: Any, info: SerializationInfo, *, kept: frozenset[str] = frozenset()) -> Any:
    """`data` (`model`'s JSON) under the `ONCE` context without the fields that hold their defaults:
    what crosses Temporal many times per turn (the send, the config) costs history only what it sets,
    and reads back the same (a missing field takes its default). A field named in `kept` stays when
    it was given, even at its default: its reader tells a given value from one left out."""
    if not (isinstance(info.context, dict) and info.context.get(ONCE) and isinstance(data, dict)):
        return data
    defaults, given = _defaults(type(model)), model.model_fields_set
    return {
        name: value
        for name, value in data.items()
        if (name in kept and name in given) or name not in defaults or getattr(model, name) != defaults[name]
    }


@functools.cache
def _defaults(model: type[BaseModel]) -> dict[str, Any]:
    """The defaults of `model`'s fields that may be left out (not required, not a union's tag), made
    once per class: asking pydantic for each field's default on every payload (a factory's made anew)
    cost a send 330 us to serialize where pydantic alone takes 8 us. A factory's default is only
    compared with, never handed out, so one made once stands for all."""
    return {
        name: field.get_default(call_default_factory=True)
        for name, field in model.model_fields.items()
        if not field.is_required() and name != "kind"
    }


class SummaryRule(BaseModel):
    """Summarise a branch's older turns once it holds more than `after`, keeping the last `keep` verbatim."""

    # Tolerant of unknown fields, as every wire model is: a rolling deploy may add some.
    model_config = ConfigDict(frozen=True, extra="ignore")

    after: int = Field(default=20, ge=1)
    keep: int = Field(default=6, ge=1)
    model: str | None = None
    """The model that writes summaries (default: the conversation's)."""
    max_summary_tokens: int = Field(default=500, ge=1)
    """The most tokens a summary call may answer with (the provider's max tokens)."""


class ContextRule(BaseModel):
    """What a turn is shown of the earlier turns, and how the conversation keeps track of topics.

    Format 1's rules are `last` (None: every done turn) and `without` (fields left out). Threadline
    adds `window` (the last messages, two per turn) and `max_tokens` (the most recent turns that
    fit, counted from the usage each `ended` record holds, estimated only where it is missing): all
    that are set apply together, the most restrictive wins. `summary` replaces older turns with a
    summary and key facts. `topics` classifies each message: `track` records it, `branch` also
    moves a new topic onto its own branch and continues a returning topic from its latest turn.
    """

    model_config = ConfigDict(frozen=True, extra="ignore")

    last: int | None = Field(default=None, ge=0)
    without: tuple[str, ...] = ()
    window: int | None = Field(default=None, ge=0)
    max_tokens: int | None = Field(default=None, ge=0)
    summary: SummaryRule | None = None
    topics: Literal["off", "track", "branch"] = "off"
    topic_model: str | None = None

    @model_serializer(mode="wrap")
    def _compact(self, handler: SerializerFunctionWrapHandler, info: SerializationInfo):  # type: ignore[no-untyped-def]
        """Only what differs from the defaults, across Temporal (`compacted`). Without a return
        annotation, so the JSON Schemas still describe the fields."""
        return compacted(self, handler(self), info)

    @property
    def shows_everything(self) -> bool:
        """Whether the rule shows every done turn whole (format 1's default rule, which needs no record)."""
        return self.last is None and not self.without and self.window is None and self.max_tokens is None

    def pick(self, done: Sequence[T], cost: Callable[[T], int]) -> list[T]:
        """The done turns (oldest first) this rule shows; `cost` is what showing one costs in tokens."""
        picked = list(done)
        for keep in (self.last, None if self.window is None else self.window // 2):
            if keep is not None:
                picked = picked[-keep:] if keep > 0 else []
        if self.max_tokens is not None:
            total, start = 0, len(picked)
            while start > 0 and total + cost(picked[start - 1]) <= self.max_tokens:
                start -= 1
                total += cost(picked[start])
            picked = picked[start:]
        return picked
