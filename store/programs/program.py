"""Programs, described as functai 1.2.0 describes them (docs/format-1.md 3).

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
from collections.abc import Callable, Iterable, Iterator, Mapping
from functools import cached_property
from typing import Any, Literal, overload

import pydantic

from core.errors import ErrorCode, ThreadlineError

from .alone import alone
from .approvals import Approve, Decision, check_approve, decide, tool_path
from .fields import check_fields
from .shape import UNIONS, canonical_json, full_shape, hash_json, shape_of, type_hints
from .tools import CALLS_SHAPE, TOOLS_SHAPE, Tool, ToolCall, tool_list

__all__ = [
    "CHAT",
    "TUTOR",
    "Field",
    "Program",
    "canonical_json",
    "check_fields",
    "hash_json",
    "load_programs",
    "shape_of",
]

FORMAT = 1
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ANSWER_NAMES = ("result", "output", "answer")
_TOOLS_INPUT = ("tools", "calls")  # with tools, functai keeps these names for the tool definitions and calls
REASONING = "reasoning"


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
        tools: The tools the model may call (plain functions are tools of unknown effects). With
            tools, functai's signature gains the `tools` input and the `calls` output.
        approve: Which tool calls ask first (`store.programs.approvals.check_approve`): None, `"changes"`,
            `"all"`, names and paths, or a function answering in place of a person.
        reasoning: The model writes its reasoning first: functai's `reasoning` output (purpose
            `reasoning`), which a conversation made without it takes with `earlier_without`.
        log_content: `(field, kept)` pairs: a field not kept may enter no record, so a conversation
            (which must remember it) refuses the program (`conversation-content`).

    Raises:
        ThreadlineError: `program-invalid` for a bad name, type, default, tool or approve rule.
    """

    name: str
    instruction: str
    inputs: tuple[tuple[str, Any], ...]
    outputs: tuple[tuple[str, Any], ...]
    module: str = "threadline"
    defaults: tuple[tuple[str, Any], ...] = ()
    tools: tuple[Tool, ...] = ()
    approve: Approve = None
    reasoning: bool = False
    log_content: tuple[tuple[str, bool], ...] = ()

    kind = "ai"
    """`program_kind` in the `program` record: `ai` (the model answers), `module` (a program with code)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "tools", tool_list(self.tools))
        object.__setattr__(self, "approve", check_approve(self.approve))
        problem = _definition_problem(self)
        if problem:
            raise ThreadlineError(ErrorCode.PROGRAM_INVALID, f"program {self.name!r}: {problem}; fix its definition")
        _ = self._fields, self._adapters, self._json_defaults  # a bad type or default fails where it is defined

    @classmethod
    def define(
        cls,
        name: str,
        instruction: str,
        *,
        inputs: Mapping[str, Any],
        outputs: Mapping[str, Any],
        reasoning: bool = False,
        module: str = "threadline",
    ) -> Program:
        """Build a program from mappings of field names to Python types (the answer last)."""
        return cls(name, instruction, tuple(inputs.items()), tuple(outputs.items()), module, reasoning=reasoning)

    @overload
    @classmethod
    def from_function(
        cls,
        fn: Callable[..., Any],
        *,
        module: str = ...,
        tools: Iterable[Tool | Callable[..., Any]] = ...,
        approve: Any = ...,
        reasoning: bool = ...,
        log_content: Mapping[str, bool] | None = ...,
    ) -> Program: ...

    @overload
    @classmethod
    def from_function(
        cls,
        fn: None = None,
        *,
        module: str = ...,
        tools: Iterable[Tool | Callable[..., Any]] = ...,
        approve: Any = ...,
        reasoning: bool = ...,
        log_content: Mapping[str, bool] | None = ...,
    ) -> Callable[[Callable[..., Any]], Program]: ...

    @classmethod
    def from_function(
        cls,
        fn: Callable[..., Any] | None = None,
        *,
        module: str = "threadline",
        tools: Iterable[Tool | Callable[..., Any]] = (),
        approve: Any = None,
        reasoning: bool = False,
        log_content: Mapping[str, bool] | None = None,
    ) -> Program | Callable[[Callable[..., Any]], Program]:
        """Build a program from a typed function, reading it as functai's `@ai` does.

        The docstring is the instruction and the parameters are the inputs (`x: T = None` is
        `T | None`). The return type is one output named `result` (`output`, then `answer`, when an
        input has that name), whatever it is: a pydantic model or dataclass is one object output.
        Without `fn` it is a decorator with those settings (`@threadline.program(tools=[...])`).
        """
        if fn is None:
            settings = {"module": module, "approve": approve, "reasoning": reasoning, "log_content": log_content}
            return lambda f: cls.from_function(f, tools=tools, **settings)
        hints = type_hints(fn, extras=True)
        params = inspect.signature(fn).parameters
        inputs = tuple((name, _input_type(p, hints.get(name, str))) for name, p in params.items())
        defaults = tuple((name, p.default) for name, p in params.items() if p.default is not p.empty)
        answer = next((n for n in _ANSWER_NAMES if n not in params), _ANSWER_NAMES[0])
        output = hints["return"] if _is_type_hint(hints.get("return")) else str
        doc = inspect.cleandoc(fn.__doc__ or "")
        return cls(
            fn.__name__,
            doc,
            inputs,
            ((answer, output),),
            module,
            defaults,
            tool_list(tools),
            approve,
            reasoning=reasoning,
            log_content=kept_fields(log_content),
        )

    @cached_property
    def _fields(self) -> tuple[Field, ...]:
        ins = [Field(name=n, direction="input", shape=shape_of(tp)) for n, tp in self.inputs]
        thinks = [Field(name=REASONING, direction="output", purpose="reasoning", shape={"type": "string"})]
        calls = [Field(name="calls", direction="output", purpose="tools.calls", shape=CALLS_SHAPE)] * bool(self.tools)
        outs = (Field(name=n, direction="output", shape=shape_of(tp)) for n, tp in self.outputs)
        return (*ins, *thinks * self.reasoning, *calls, *outs)

    @property
    def written(self) -> tuple[tuple[str, Any], ...]:
        """The outputs the model writes, by name and type: `reasoning` first when it is on, then the outputs."""
        return (((REASONING, str),) if self.reasoning else ()) + self.outputs

    @property
    def dropped(self) -> list[str]:
        """The fields its `log_content` setting keeps out of every record."""
        return [name for name, kept in self.log_content if not kept]

    @cached_property
    def _adapters(self) -> dict[str, pydantic.TypeAdapter[Any]]:
        try:
            return {n: pydantic.TypeAdapter(tp) for n, tp in self.inputs + self.written}
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
        """The type-name-free signature fingerprint (docs/format-1.md 3.2): functai's for the same fields.

        With tools it counts the `tools` input, which `fields` leave out, after the other inputs.
        """
        fields = list(self._fields)
        if self.tools:
            fields.insert(len(self.inputs), Field(name="tools", direction="input", purpose="tools", shape=TOOLS_SHAPE))
        return hash_json([{**f.as_record(), "type": ""} for f in fields])

    @property
    def answer(self) -> str:
        """The name of the answer: the last output."""
        return self.outputs[-1][0]

    @cached_property
    def version(self) -> str:
        """Threadline's own key for this program; it never tries to equal functai's.

        The tools the model is told of count in it, as they count in functai's.
        """
        described = {"name": self.name, "fields": self.field_records(), "instruction": self.instruction}
        tools = {"tools": [t.spec for t in self.tools]} if self.tools else {}
        return hash_json({"threadline_program": 1, **described, **tools})

    def tool(self, name: str) -> Tool | None:
        """The tool the model calls `name`, or None when the program has no such tool."""
        return next((t for t in self.tools if t.name == name), None)

    def decide(self, call: ToolCall) -> Decision:
        """What `call` needs before it runs under the program's `approve` rule (`store.programs.approvals.decide`)."""
        known = self.tool(call.name)
        effects = known.effects if known is not None else "reads"  # an unknown tool runs nothing
        return decide(self.approve, name=call.name, effects=effects, path=tool_path(self.name, call.name))

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

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Called on its own, outside any conversation: the model answers (functai's call); nothing is
        recorded. Positional inputs take the input names in order."""
        return alone(self.name).ask(self, self.given(args, kwargs))

    async def acall(self, *args: Any, **kwargs: Any) -> Any:
        """`__call__` on an event loop."""
        return await alone(self.name).answer(self, self.given(args, kwargs))

    def given(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        """The inputs of a call by name (positional ones in the order of the inputs)."""
        names = [name for name, _ in self.inputs]
        if len(args) > len(names):
            raise ThreadlineError(ErrorCode.INPUTS_INVALID, f"{self.name} takes {len(names)} input(s)")
        twice = sorted(set(names[: len(args)]) & set(kwargs))
        if twice:
            raise ThreadlineError(ErrorCode.INPUTS_INVALID, f"{self.name}: two values for {twice[0]!r}")
        return {**dict(zip(names, args, strict=False)), **kwargs}

    def validate_inputs(self, inputs: Mapping[str, Any]) -> dict[str, Any]:
        """Return `inputs` bound (defaults filled in) as JSON, or raise `inputs-invalid` naming the field."""
        return self._bind(inputs, self.inputs, dict(self.defaults), ErrorCode.INPUTS_INVALID)

    def validate_outputs(self, outputs: Mapping[str, Any]) -> dict[str, Any]:
        """Return `outputs` checked and as JSON, or raise `parse-failed` naming the field."""
        return self._bind(outputs, self.written, {}, ErrorCode.PARSE_FAILED)

    def typed(self, name: str, value: Any) -> Any:
        """A field's JSON value as its Python type (a pydantic model, a dataclass, ...)."""
        return self._adapters[name].validate_python(value)

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
    names = [n for n, _ in program.inputs + program.written] + (["calls"] if program.tools else [])
    bad = [n for n in names if not _NAME.fullmatch(n)]
    outside = [f.name for f in program.fields if not set(_refs(f.shape)) <= set(f.shape.get("$defs", {}))]
    reserved = [n for n, _ in program.inputs if n in _TOOLS_INPUT] if program.tools else []
    checks = [
        (not program.name, "its name is empty"),
        (bool(reserved), f"with tools, the input name {(reserved or [''])[0]!r} is reserved for them"),
        (bool(bad), f"{(bad or [''])[0]!r} is not a field name"),
        (not program.outputs, "it has no output"),
        (len(set(names)) != len(names), "two of its fields have one name"),
        (not {n for n, _ in program.defaults} <= {n for n, _ in program.inputs}, "a default names no input"),
        (not {n for n, _ in program.log_content} <= set(names), "its log_content names a field it lacks"),
        # functai refuses a `$ref` its own shape cannot resolve (a list of models that nest models)
        (bool(outside), f"the shape of {(outside or [''])[0]!r} refers to $defs it does not hold"),
    ]
    return next((why for failed, why in checks if failed), None)


def kept_fields(log_content: Mapping[str, bool] | None) -> tuple[tuple[str, bool], ...]:
    """A `log_content` setting (`{"transcript": False}`) as the program keeps it."""
    return tuple((str(name), bool(kept)) for name, kept in (log_content or {}).items())


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


def load_programs(modules: Iterable[str]) -> dict[str, Program]:
    """The built-in programs plus every `Program` defined at the top level of `modules`."""
    programs = {TUTOR.name: TUTOR, CHAT.name: CHAT}
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


def chat(message: str) -> str:
    """Reply to the user's message."""
    raise NotImplementedError("a program's body never runs: the model answers for it")


CHAT = Program.from_function(chat)
"""The built-in general chat program: `tutor`'s fields, and the conversation's system prompt (recorded
in the log by `store.log.preamble`) as a section of its instruction."""
