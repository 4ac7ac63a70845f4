"""Programs, described as functai 1.2.0 describes them (format-1.md section 3).

A `Program` (name, instruction, typed inputs and outputs) builds the `program` record: the `fields` a
reader compares before it continues a conversation, the `signature` that decides whether earlier turns
are shown whole, and a `version` of our own. functai compares shapes byte for byte, so `shape_of`
follows its mapping from Python types to JSON Schema exactly.
"""

from __future__ import annotations

import copy
import dataclasses
import importlib
import inspect
import re
import typing
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from functools import cached_property
from typing import Any, Literal

import pydantic

from core.errors import ErrorCode, ThreadlineError

from .shape import UNIONS, canonical_json, full_shape, hash_json, shape_of, type_hints

__all__ = ["TUTOR", "Field", "Program", "canonical_json", "check_fields", "hash_json", "load_programs", "shape_of"]

FORMAT = 1
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ANSWER_NAMES = ("result", "output", "answer")
_ADDED_PURPOSES = frozenset({"reasoning", "tools.calls"})


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Field:
    """One field of a program's signature, as the `program` record's `fields` holds it."""

    name: str
    direction: Literal["input", "output"]
    purpose: str = "plain"
    shape: dict[str, Any] = dataclasses.field(default_factory=dict)

    def as_record(self) -> dict[str, Any]:
        """Return the field as `{name, direction, purpose, shape}`, in that order."""
        return dict(name=self.name, direction=self.direction, purpose=self.purpose, shape=copy.deepcopy(self.shape))


@dataclasses.dataclass(frozen=True)
class Program:
    """An AI program: what the model is told, what it takes and what it gives.

    Args:
        name: The program's name (`tutor`).
        instruction: What the model is told to do (a function's docstring).
        inputs: `(name, Python type)` pairs, in order.
        outputs: `(name, Python type)` pairs, in order; the last is the answer.
        module: The code module the `program` record names.
        defaults: `(name, value)` pairs for the inputs that may be left out.

    Raises:
        ThreadlineError: `program-invalid` for a bad name, type or default.
    """

    name: str
    instruction: str
    inputs: tuple[tuple[str, Any], ...]
    outputs: tuple[tuple[str, Any], ...]
    module: str = "threadline"
    defaults: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self) -> None:
        problem = _definition_problem(self)
        if problem:
            raise ThreadlineError(ErrorCode.PROGRAM_INVALID, f"program {self.name!r}: {problem}; fix its definition")
        _ = self._fields, self._adapters, self._json_defaults  # a bad type or default fails where it is defined

    @classmethod
    def define(cls, name: str, instruction: str, *, inputs: Mapping[str, Any], outputs: Mapping[str, Any]) -> Program:
        """Build a program from mappings of field names to Python types (the answer last)."""
        return cls(name, instruction, tuple(inputs.items()), tuple(outputs.items()))

    @classmethod
    def from_function(cls, fn: Callable[..., Any], *, module: str = "threadline") -> Program:
        """Build a program from a typed function, reading it as functai's `@ai` does.

        The docstring is the instruction and the parameters are the inputs (`x: T = None` is
        `T | None`). The return type is one output named `result` (`output`, then `answer`, when an
        input has that name), whatever it is: a pydantic model or dataclass is one object output.
        """
        hints = type_hints(fn, extras=True)
        params = inspect.signature(fn).parameters
        inputs = tuple((name, _input_type(p, hints.get(name, str))) for name, p in params.items())
        defaults = tuple((name, p.default) for name, p in params.items() if p.default is not p.empty)
        answer = next((n for n in _ANSWER_NAMES if n not in params), _ANSWER_NAMES[0])
        output = hints["return"] if _is_type_hint(hints.get("return")) else str
        doc = inspect.cleandoc(fn.__doc__ or "")
        return cls(fn.__name__, doc, inputs, ((answer, output),), module=module, defaults=defaults)

    @cached_property
    def _fields(self) -> tuple[Field, ...]:
        ins = [Field(name=n, direction="input", shape=shape_of(tp)) for n, tp in self.inputs]
        return (*ins, *(Field(name=n, direction="output", shape=shape_of(tp)) for n, tp in self.outputs))

    @cached_property
    def _adapters(self) -> dict[str, pydantic.TypeAdapter[Any]]:
        try:
            return {n: pydantic.TypeAdapter(tp) for n, tp in self.inputs + self.outputs}
        except pydantic.PydanticUserError as exc:
            message = f"program {self.name!r}: a field's type cannot be checked; use JSON types"
            raise ThreadlineError(ErrorCode.PROGRAM_INVALID, message) from exc

    @cached_property
    def _json_defaults(self) -> dict[str, Any]:
        return {n: self._bind_one(n, v, ErrorCode.PROGRAM_INVALID) for n, v in self.defaults}

    @property
    def fields(self) -> list[Field]:
        """The signature's fields: the inputs, then the outputs, each in order."""
        return list(self._fields)

    def field_records(self) -> list[dict[str, Any]]:
        """Return the `fields` of the `program` record."""
        return [f.as_record() for f in self._fields]

    @cached_property
    def signature(self) -> str:
        """The type-name-free signature fingerprint (format-1.md 3.2): functai's for the same fields."""
        return hash_json([{**f.as_record(), "type": ""} for f in self._fields])

    @property
    def answer(self) -> str:
        """The name of the answer: the last output."""
        return self.outputs[-1][0]

    @cached_property
    def version(self) -> str:
        """Threadline's own key for this program; it never tries to equal functai's."""
        return hash_json(
            {
                "threadline_program": 1,
                "name": self.name,
                "fields": self.field_records(),
                "instruction": self.instruction,
            }
        )

    @property
    def interface(self) -> dict[str, Any]:
        """The whole interface, as functai writes it less the host type names."""
        inputs: list[dict[str, Any]] = [{"name": n, "shape": full_shape(tp)} for n, tp in self.inputs]
        for field in inputs:
            if field["name"] in self._json_defaults:
                field["shape"]["default"] = copy.deepcopy(self._json_defaults[field["name"]])
                field["optional"] = True
        outputs = [{"name": n, "shape": full_shape(tp)} for n, tp in self.outputs]
        return {"description": self.instruction, "inputs": inputs, "outputs": outputs}

    def record(self, at: str) -> dict[str, Any]:
        """Return the `program` record written at time `at`, its keys in functai's order."""
        head = {"functai_conversation": FORMAT, "kind": "program", "at": at, "version": self.version, "name": self.name}
        body = {"program_kind": "ai", "module": self.module, "interface": self.interface}
        return {**head, **body, "fields": self.field_records(), "answer": self.answer, "signature": self.signature}

    def validate_inputs(self, inputs: Mapping[str, Any]) -> dict[str, Any]:
        """Return `inputs` bound (defaults filled in) as JSON, or raise `inputs-invalid` naming the field."""
        return self._bind(inputs, self.inputs, dict(self.defaults), ErrorCode.INPUTS_INVALID)

    def validate_outputs(self, outputs: Mapping[str, Any]) -> dict[str, Any]:
        """Return `outputs` checked and as JSON, or raise `parse-failed` naming the field."""
        return self._bind(outputs, self.outputs, {}, ErrorCode.PARSE_FAILED)

    def _bind(
        self, given: Mapping[str, Any], fields: tuple[tuple[str, Any], ...], defaults: dict[str, Any], code: ErrorCode
    ) -> dict[str, Any]:
        what = "input" if code is ErrorCode.INPUTS_INVALID else "output"
        names = [n for n, _ in fields]
        unknown = sorted(set(given) - set(names))
        if unknown:
            message = f"{self.name}: {unknown[0]!r} is not one of its {what}s; send only {', '.join(names)}"
            raise ThreadlineError(code, message, field=unknown[0])
        missing = [n for n in names if n not in given and n not in defaults]
        if missing:
            message = f"{self.name}: {what} {missing[0]!r} is missing; give every {what} it declares"
            raise ThreadlineError(code, message, field=missing[0])
        return {n: self._bind_one(n, given[n] if n in given else defaults[n], code) for n in names}

    def _bind_one(self, name: str, value: Any, code: ErrorCode) -> Any:
        adapter = self._adapters[name]
        try:
            data = adapter.dump_python(adapter.validate_python(value), mode="json")
            canonical_json(data)
        except pydantic.ValidationError as exc:
            error = exc.errors(include_url=False, include_input=False)[0]
            # a custom validator's message may quote the value, and values stay out of errors and logs
            why = "it failed a validator" if error["type"] in ("value_error", "assertion_error") else error["msg"]
            where = "".join(f"[{p!r}]" for p in error["loc"])
            message = f"{self.name}: {name!r}{where} does not fit its type ({why})"
            raise ThreadlineError(code, message, field=name) from exc
        except (ValueError, TypeError) as exc:
            message = f"{self.name}: {name!r} has no JSON form (NaN or infinity); send a finite value"
            raise ThreadlineError(code, message, field=name) from exc
        return data


def _definition_problem(program: Program) -> str | None:
    names = [n for n, _ in program.inputs + program.outputs]
    bad = [n for n in names if not _NAME.fullmatch(n)]
    outside = [f.name for f in program.fields if not set(_refs(f.shape)) <= set(f.shape.get("$defs", {}))]
    checks = [
        (not program.name, "its name is empty"),
        (bool(bad), f"{(bad or [''])[0]!r} is not a field name"),
        (not program.outputs, "it has no output"),
        (len(set(names)) != len(names), "two of its fields have one name"),
        (not {n for n, _ in program.defaults} <= {n for n, _ in program.inputs}, "a default names no input"),
        # functai refuses a `$ref` its own shape cannot resolve (a list of models that nest models)
        (bool(outside), f"the shape of {(outside or [''])[0]!r} refers to $defs it does not hold"),
    ]
    return next((why for failed, why in checks if failed), None)


def _refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str):
            yield ref.removeprefix("#/$defs/")
        node = list(node.values())
    for item in node if isinstance(node, list) else ():
        yield from _refs(item)


def _is_type_hint(tp: Any) -> bool:
    if isinstance(tp, type) or typing.get_origin(tp) is not None:
        return True
    return tp is not None and str(getattr(tp, "__module__", "")).startswith("typing")


def _input_type(param: inspect.Parameter, tp: Any) -> Any:
    # functai reads an annotation that is not a type as `str`, and `x: T = None` as Optional[T]
    base = tp.__origin__ if typing.get_origin(tp) is typing.Annotated else tp
    if not _is_type_hint(base):
        tp = base = str
    takes_none = base in (type(None), Any, object) or (
        typing.get_origin(base) in UNIONS and type(None) in base.__args__
    )
    if param.default is None and not takes_none:
        tp = tp | None
    if param.kind is inspect.Parameter.VAR_POSITIONAL:
        return list[tp]
    return dict[str, tp] if param.kind is inspect.Parameter.VAR_KEYWORD else tp


# ------------------------------------------------------------------ the conversation-signature check


def check_fields(
    current: list[dict[str, Any]],
    recorded_programs: Iterable[Mapping[str, Any]],
    *,
    earlier_without: Sequence[str] = (),
    program_name: str = "",
) -> None:
    """Raise `conversation-signature` if the `current` fields differ from a recorded program's.

    Fields are compared by name, as canonical JSON of the whole field object (format-1.md 3.4 item 2,
    4.9); the caller picks the `program` records of the earlier turns that apply. A new field is
    allowed only when its purpose is `reasoning` or `tools.calls` and `earlier_without` names it.
    """
    now = _by_name(current)
    for program in recorded_programs:
        was = _by_name(program.get("fields") or [])
        changed = sorted(n for n in was.keys() & now.keys() if canonical_json(was[n]) != canonical_json(now[n]))
        gone = sorted(was.keys() - now.keys())
        new = sorted(
            n
            for n in now.keys() - was.keys()
            if now[n].get("purpose") not in _ADDED_PURPOSES or n not in earlier_without
        )
        if changed or gone or new:
            parts = [f"{', '.join(changed)} changed"] if changed else []
            parts += [f"{', '.join(gone)} is no longer one of its fields"] if gone else []
            parts += [f"{', '.join(new)} is new"] if new else []
            who = program_name or "the program"
            message = f"{who}: earlier turns had other fields ({'; '.join(parts)}); start a new conversation"
            raise ThreadlineError(ErrorCode.CONVERSATION_SIGNATURE, message, changed=changed, gone=gone, new=new)


def _by_name(fields: Iterable[Any]) -> dict[str, Mapping[str, Any]]:
    out: dict[str, Mapping[str, Any]] = {}
    for field in fields:
        if not (isinstance(field, Mapping) and isinstance(field.get("name"), str)):
            raise ThreadlineError(ErrorCode.RECORD_INVALID, "a program record's field has no name; repair the log")
        out[field["name"]] = field
    return out


def load_programs(modules: Iterable[str]) -> dict[str, Program]:
    """The built-in programs plus every `Program` defined at the top level of `modules`."""
    programs = {TUTOR.name: TUTOR}
    for name in modules:
        try:
            module = importlib.import_module(name)
        except ImportError as err:
            raise ThreadlineError(ErrorCode.PROGRAM_INVALID, f"cannot import program module {name!r}: {err}") from None
        programs.update({p.name: p for p in vars(module).values() if isinstance(p, Program)})
    return programs


def tutor(message: str) -> str:
    """Tutor."""
    raise NotImplementedError("a program's body never runs: the model answers for it")


TUTOR = Program.from_function(tutor)
"""The built-in tutor: one text input `message`, one text answer `result` (functai's `tutor`)."""
