"""The steps of a guided flow, and how a step checks an answer (its validator and extractor).

A step asks its `prompt` and checks the answer with an optional validator (may this answer stand?)
and an optional extractor (what value does it give?). Each may be given as:

- a plain callable, as in the article: a validator returns something truthy for an answer that
  stands, an extractor returns the value. Raising `ValueError` (pydantic's `ValidationError` among
  them), `TypeError`, `ArithmeticError`, `LookupError` or `AssertionError` makes the answer invalid;
  any other exception is a fault of the flow (`flow-invalid`);
- a pydantic type (`int`, `EmailStr`, a `BaseModel`, `list[int]`, ...): applied with a
  `TypeAdapter` to the answer's stripped text and, when that fails, to the text read as JSON (so a
  model can be answered with a JSON object). As a validator it accepts what the type accepts;
- an AI function: a `store.programs.program.Program` with one input, answered by the model from the
  answer's text (`"two dozen"` -> `24`); a validator's answer is a bool. That is a model call, so
  `judge` does not make it: it returns an `Ask`, and whoever can call the model judges again with
  the model's answer in `asked`.

Without an extractor the value is the answer's text. Values are JSON (they go into the log).
"""

from __future__ import annotations

import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import Any, Literal

import pydantic
import pydantic_core

from core.errors import ErrorCode, ThreadlineError
from store.programs.program import Program
from store.programs.shape import canonical_json

Role = Literal["validator", "extractor"]
Exhausted = Literal["abandon", "person"]
NextStep = str | Callable[[Mapping[str, Any]], str | None] | None
"""A step's name, a function of the data collected so far (None: the flow is complete), or None."""

ANSWER_ERRORS = (ValueError, TypeError, ArithmeticError, LookupError, AssertionError)
"""What a plain validator or extractor raises to say the answer does not do."""


class FlowState(StrEnum):
    """Where a flow stands: asking (active), or finished one of three ways."""

    ACTIVE = "active"
    COMPLETED = "completed"
    ABANDONED = "abandoned"
    HANDED_OFF = "handed_off"
    """Its attempts ran out on a step that hands the conversation to a person."""


@dataclass(frozen=True, slots=True)
class Judgement:
    """Whether an answer stands, and the value it gives (JSON)."""

    valid: bool
    value: Any = None


@dataclass(frozen=True, slots=True)
class Asked:
    """What the model answered for an AI check: `ok` is False when it gave nothing that fits."""

    ok: bool
    value: Any = None


@dataclass(frozen=True, slots=True)
class Ask:
    """`judge` needs the model's answer to `program` (the step's `role`) before it can decide."""

    role: Role
    program: Program


class Check:
    """One validator or extractor, however it was given (see the module docstring).

    Raises:
        ThreadlineError: `flow-invalid` for something that is neither a callable, a type nor a
            program with one input (a validator program must answer a bool).
    """

    def __init__(self, given: Any, role: Role, where: str) -> None:
        self.given = given
        self.role = role
        self.where = where
        self.program = given if isinstance(given, Program) else None
        self.adapter = None if self.program is not None else _adapter(given, where)
        problem = self._problem()
        if problem:
            raise ThreadlineError(ErrorCode.FLOW_INVALID, f"{where}: its {role} {problem}; fix the flow")

    def __repr__(self) -> str:
        return f"Check({self.role}, {getattr(self.given, '__name__', self.given)!r})"

    def _problem(self) -> str | None:
        if self.program is None:
            return None if self.adapter is not None or callable(self.given) else "is not a callable, type or program"
        if len(self.program.inputs) != 1 or self.program.fields[0].shape != {"type": "string"}:
            return "program must take exactly one input, a str (the answer's text)"
        answer = self.program.fields[-1].shape
        if self.role == "validator" and answer.get("type") != "boolean":
            return "program must answer a bool"
        return None

    def apply(self, text: str, asked: Asked | None = None) -> Judgement:
        """Check `text`: for a validator, whether it stands; for an extractor, also its value."""
        if self.program is not None:
            if asked is None:
                message = f"{self.where}: its {self.role} asks a model; run the flow on a worker"
                raise ThreadlineError(ErrorCode.INVALID_REQUEST, message)
            if self.role == "validator":
                return Judgement(asked.ok and asked.value is True)
            return Judgement(asked.ok, asked.value if asked.ok else None)
        if self.adapter is not None:
            return _typed(self.adapter, text)
        try:
            out = self.given(text)
        except ANSWER_ERRORS:
            return Judgement(valid=False)
        except Exception as exc:
            message = f"{self.where}: its {self.role} failed ({type(exc).__name__}); fix the flow"
            raise ThreadlineError(ErrorCode.FLOW_INVALID, message) from exc
        if self.role == "validator":
            return Judgement(bool(out))
        return Judgement(True, _json(out, self.where))


@dataclass(frozen=True, slots=True)
class Step:
    """One question of a flow: what it asks, how the answer is checked, where the flow goes next.

    Args:
        name: The step's name; the collected data holds its value under it.
        prompt: What the step asks.
        validator: Whether an answer stands (see the module docstring).
        extractor: The value an answer gives (default: its text).
        next_step: The next step's name, a function of the collected data giving it (None: the
            flow is complete), or None: the flow is complete after this step.
        on_invalid: What to say when an answer does not stand (default: a sorry and the prompt).
        max_attempts: Invalid answers allowed before the step gives up (None: no limit).
        on_exhausted: Then `abandon` the flow, or hand the conversation to a `person`.
        remind_after: Seconds of silence after which the prompt is sent again, once.
    """

    name: str
    prompt: str
    validator: Check | None = None
    extractor: Check | None = None
    next_step: NextStep = None
    on_invalid: str | None = None
    max_attempts: int | None = None
    on_exhausted: Exhausted = "abandon"
    remind_after: float | None = None

    def invalid_text(self) -> str:
        """What the step says to an answer that does not stand."""
        return self.on_invalid or f"Sorry, that answer does not fit. {self.prompt}"

    def next_of(self, data: Mapping[str, Any], flow: str) -> str | None:
        """The step after this one for the `data` collected so far (None: the flow is complete)."""
        if not callable(self.next_step):
            return self.next_step
        try:
            chosen = self.next_step(MappingProxyType(dict(data)))
        except Exception as exc:
            message = f"flow {flow!r}, step {self.name!r}: its next_step failed ({type(exc).__name__}); fix the flow"
            raise ThreadlineError(ErrorCode.FLOW_INVALID, message) from exc
        if chosen is not None and not isinstance(chosen, str):
            message = f"flow {flow!r}, step {self.name!r}: its next_step gave no step name; return a name or None"
            raise ThreadlineError(ErrorCode.FLOW_INVALID, message)
        return chosen


def judge(step: Step, text: str, asked: Mapping[Role, Asked] | None = None) -> Judgement | Ask:
    """Whether `text` answers `step`, and its value; or the model's answer it needs first (`Ask`).

    `asked` holds the model's answers to the step's AI checks, by role. The validator is applied
    first, so an answer it rejects costs no extractor call.
    """
    asked = asked or {}
    for check in (step.validator, step.extractor):
        if check is None:
            continue
        if check.program is not None and check.role not in asked:
            return Ask(check.role, check.program)
        judged = check.apply(text, asked.get(check.role))
        if not judged.valid or check.role == "extractor":
            return judged
    return Judgement(True, text)


def _adapter(given: Any, where: str) -> pydantic.TypeAdapter[Any] | None:
    if not (isinstance(given, type) or typing.get_origin(given) is not None):
        return None
    try:
        return pydantic.TypeAdapter(given)
    except ImportError as exc:
        message = f"{where}: its check needs a package that is not installed ({exc.name}); install threadline[flows]"
        raise ThreadlineError(ErrorCode.FLOW_INVALID, message) from None
    except pydantic.PydanticUserError:
        return None  # a class pydantic cannot check: called as a plain function


def _typed(adapter: pydantic.TypeAdapter[Any], text: str) -> Judgement:
    stripped = text.strip()
    try:
        value = adapter.validate_python(stripped)
    except pydantic.ValidationError:
        try:
            value = adapter.validate_json(stripped)
        except pydantic.ValidationError:
            return Judgement(valid=False)
    try:
        data = adapter.dump_python(value, mode="json")
        canonical_json(data)
    except (ValueError, TypeError, pydantic_core.PydanticSerializationError):
        return Judgement(valid=False)
    return Judgement(True, data)


def _json(value: Any, where: str) -> Any:
    try:
        data = pydantic_core.to_jsonable_python(value)
        canonical_json(data)
    except (ValueError, TypeError, pydantic_core.PydanticSerializationError) as exc:
        message = f"{where}: its extractor gave a value with no JSON form; return JSON-able values"
        raise ThreadlineError(ErrorCode.FLOW_INVALID, message) from exc
    return data
