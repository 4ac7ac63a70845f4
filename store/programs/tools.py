"""Tools a program's model may call: their definitions, their input checks, their results as text.

A `Tool` is a typed Python function described as functai 1.2.0 describes it (`functai.engine.tool_spec`):
its name, its docstring, and a JSON Schema of its parameters. It says what it does to the world:
`effects="reads"` (it only looks), `"changes"` (it writes, sends or pays) or nothing, which every
approval rule treats as `"changes"`, so forgetting to declare is safe. A tool's result reaches the
model as text, made from its return value as functai makes it.
The `approve` rules that ask before a tool runs are in `store.programs.approvals`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import inspect
import json
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal, NoReturn, TypeAlias, overload

import pydantic

from core.errors import ErrorCode, ThreadlineError

from .shape import full_shape, type_hints

__all__ = [
    "CALLS_SHAPE",
    "EFFECTS",
    "TOOLS_SHAPE",
    "Effects",
    "Tool",
    "ToolCall",
    "result_text",
    "tool",
    "tool_list",
    "unknown_tool_text",
]

Effects: TypeAlias = Literal["reads", "changes"] | None

EFFECTS = ("reads", "changes")
_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")  # what OpenAI and Anthropic both accept as a tool's name

TOOLS_SHAPE: dict[str, Any] = {
    "type": "array",
    "items": {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "description": {"anyOf": [{"type": "string"}, {"type": "null"}]},
            "parameters": {"anyOf": [{"type": "object"}, {"type": "null"}]},
        },
        "required": ["name", "description", "parameters"],
    },
}
"""The shape of the `tools` input (purpose `tools`) functai adds to a program with tools (docs/format-1.md 3.2)."""

CALLS_SHAPE: dict[str, Any] = {
    "type": "array",
    "items": {
        "type": "object",
        "properties": {"id": {"type": "string"}, "name": {"type": "string"}, "input": {"type": "object"}},
        "required": ["id", "name", "input"],
    },
}
"""The shape of the `calls` output (purpose `tools.calls`): the tool calls the model asked for."""


@dataclasses.dataclass(frozen=True, slots=True)
class ToolCall:
    """One call the model asked for: the id it gave it, the tool's name and the input, as JSON."""

    id: str
    name: str
    input: dict[str, Any]

    def as_json(self) -> dict[str, Any]:
        """The call as an item of the `calls` output: `{id, name, input}`."""
        return {"id": self.id, "name": self.name, "input": self.input}


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Tool:
    """A function the model may call. Build one with `Tool.from_function` (or `@threadline.tool`).

    Args:
        fn: The function, sync or async; called with the validated input as keyword arguments.
        name: What the model calls it (1-64 of `A-Za-z0-9_-`).
        description: What the model is told it does.
        effects: `"reads"`, `"changes"`, or None (unknown: treated as `"changes"`).
        timeout: Seconds one run may take (None: the worker's default). A run that takes longer fails.
        attempts: How often a run is tried (None: 3 for a tool that reads, 1 for one that may change
            things, so it never runs twice on its own).

    Raises:
        ThreadlineError: `program-invalid` for a bad name or effects, `*args`/`**kwargs`, or a
            parameter type with no JSON shape.
    """

    fn: Callable[..., Any] = dataclasses.field(repr=False)
    name: str
    description: str = ""
    effects: Effects = None
    timeout: float | None = None
    attempts: int | None = None
    parameters: dict[str, Any] = dataclasses.field(init=False, compare=False)
    """The JSON Schema of the input, as functai's `tool_spec` gives it."""
    _adapters: dict[str, pydantic.TypeAdapter[Any]] = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.fullmatch(self.name):
            _invalid(f"tool name {self.name!r} is not 1-64 of A-Za-z0-9_-; pass name=")
        if self.effects is not None and self.effects not in EFFECTS:
            _invalid(f"tool {self.name}: effects is 'reads', 'changes' or left out, not {self.effects!r}")
        if self.timeout is not None and not self.timeout > 0:
            _invalid(f"tool {self.name}: timeout is a number of seconds above 0")
        if self.attempts is not None and (not isinstance(self.attempts, int) or self.attempts < 1):
            _invalid(f"tool {self.name}: attempts is a whole number from 1")
        parameters, adapters = _parameters(self.fn, self.name)
        object.__setattr__(self, "parameters", parameters)
        object.__setattr__(self, "_adapters", adapters)

    @classmethod
    def from_function(
        cls,
        fn: Callable[..., Any],
        *,
        effects: Effects = None,
        name: str | None = None,
        description: str | None = None,
        timeout: float | None = None,
        attempts: int | None = None,
    ) -> Tool:
        """Describe a typed function as a tool: its name, its docstring, its parameters' schema.

        A parameter without a default is required; one whose default has a JSON form carries it as
        `default`. Types are read without their `Annotated` metadata, as functai reads them.
        """
        if isinstance(fn, Tool):
            text = fn.description if description is None else description
            return dataclasses.replace(
                fn,
                name=name or fn.name,
                description=text,
                effects=effects or fn.effects,
                timeout=timeout or fn.timeout,
                attempts=attempts or fn.attempts,
            )
        if not callable(fn):
            _invalid(f"a tool is a function, not a {type(fn).__name__}")
        named = name or getattr(fn, "__name__", None)
        if not isinstance(named, str):
            _invalid("this tool's function has no __name__; pass name=")
        text = description if description is not None else inspect.cleandoc(getattr(fn, "__doc__", None) or "")
        return cls(fn=fn, name=named, description=text, effects=effects, timeout=timeout, attempts=attempts)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the function itself, as if it were not a tool."""
        return self.fn(*args, **kwargs)

    @property
    def spec(self) -> dict[str, Any]:
        """What the model is told: `{name, description, parameters}` (an item of the `tools` input)."""
        return {"name": self.name, "description": self.description, "parameters": self.parameters}

    def validate_input(self, given: Any) -> dict[str, Any]:
        """Return the keyword arguments the function is called with, or raise `tool-input-invalid`.

        The input must be a JSON object naming only parameters, every required one, each of a
        value that fits the parameter's type (its `Annotated` constraints included). Messages name
        the parameter, never the value.
        """
        if not isinstance(given, Mapping):
            _bad_input(self.name, "its input is not a JSON object", None)
        unknown = sorted(set(given) - set(self._adapters))
        if unknown:
            _bad_input(self.name, f"{unknown[0]!r} is not one of its parameters", unknown[0])
        missing = [n for n in self.parameters["required"] if n not in given]
        if missing:
            _bad_input(self.name, f"the required parameter {missing[0]!r} is missing", missing[0])
        return {n: self._check(n, given[n]) for n in self._adapters if n in given}

    def _check(self, name: str, value: Any) -> Any:
        try:
            return self._adapters[name].validate_python(value)
        except pydantic.ValidationError as exc:
            error = exc.errors(include_url=False, include_input=False)[0]
            why = "it failed a validator" if error["type"] in ("value_error", "assertion_error") else error["msg"]
            where = "".join(f"[{p!r}]" for p in error["loc"])
            _bad_input(self.name, f"{name!r}{where} does not fit its type ({why})", name)

    async def call(self, given: Any, *, errors: Literal["report", "raise"] = "report") -> str:
        """Validate `given`, run the function, and return its result as the text the model is shown.

        A sync function runs in a thread, so a slow tool never blocks the event loop. An exception
        the function raises becomes the result `error: <type>: <message>`, as functai reports it
        (`errors="raise"` lets it propagate instead).

        Raises:
            ThreadlineError: `tool-input-invalid` for an input that does not fit; nothing runs.
        """
        arguments = self.validate_input(given)
        try:
            if inspect.iscoroutinefunction(self.fn):
                out = await self.fn(**arguments)
            else:
                out = await asyncio.to_thread(self.fn, **arguments)
                if inspect.isawaitable(out):
                    out = await out
        except Exception as exc:  # the model is shown what went wrong, as functai shows it
            if errors == "raise":
                raise
            return f"error: {type(exc).__name__}: {exc}"
        return result_text(out)


def _parameters(fn: Callable[..., Any], name: str) -> tuple[dict[str, Any], dict[str, pydantic.TypeAdapter[Any]]]:
    # functai reads the hints without Annotated metadata for the schema; the checks keep the constraints
    # a callable object's types are those of its __call__
    typed = fn if inspect.isroutine(fn) or isinstance(fn, type) else getattr(fn, "__call__", fn)  # noqa: B004
    plain, full = type_hints(typed, extras=False), type_hints(typed, extras=True)
    properties: dict[str, Any] = {}
    required: list[str] = []
    adapters: dict[str, pydantic.TypeAdapter[Any]] = {}
    for pname, param in inspect.signature(fn).parameters.items():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            _invalid(f"tool {name}: *{pname} has no JSON Schema; name every parameter")
        shape = full_shape(plain.get(pname, str))
        if param.default is param.empty:
            required.append(pname)
        elif _has_json_form(param.default):
            shape = {**shape, "default": json.loads(json.dumps(param.default))}
        properties[pname] = shape
        try:
            adapters[pname] = pydantic.TypeAdapter(full.get(pname, str))
        except pydantic.PydanticUserError as exc:
            raise ThreadlineError(ErrorCode.PROGRAM_INVALID, f"tool {name}: {pname!r} cannot be checked") from exc
    # no "additionalProperties": Gemini refuses the keyword in function declarations, so functai leaves it out
    return {"type": "object", "properties": properties, "required": required}, adapters


def _has_json_form(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


def _invalid(message: str) -> NoReturn:
    raise ThreadlineError(ErrorCode.PROGRAM_INVALID, message + "; fix the tool's definition")


def _bad_input(tool_name: str, why: str, parameter: str | None) -> NoReturn:
    extra: dict[str, Any] = {} if parameter is None else {"parameter": parameter}
    message = f"tool {tool_name}: {why}; call it again with an input that fits its parameters"
    raise ThreadlineError(ErrorCode.TOOL_INPUT_INVALID, message, tool=tool_name, **extra)


@overload
def tool(fn: Callable[..., Any], /) -> Tool: ...


@overload
def tool(
    *,
    effects: Effects = None,
    name: str | None = None,
    description: str | None = None,
    timeout: float | None = None,
    attempts: int | None = None,
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    effects: Effects = None,
    name: str | None = None,
    description: str | None = None,
    timeout: float | None = None,
    attempts: int | None = None,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Make a function a tool, bare (`@tool`) or with settings (`@tool(effects="reads", timeout=30)`)."""

    def wrap(f: Callable[..., Any]) -> Tool:
        return Tool.from_function(
            f, effects=effects, name=name, description=description, timeout=timeout, attempts=attempts
        )

    return wrap if fn is None else wrap(fn)


def tool_list(tools: Iterable[Tool | Callable[..., Any]]) -> tuple[Tool, ...]:
    """`tools` as `Tool`s (a plain function has unknown effects), refusing two of one name."""
    out = tuple(t if isinstance(t, Tool) else Tool.from_function(t) for t in tools)
    names = [t.name for t in out]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        _invalid(f"two tools are named {twice[0]!r}; the model could not tell them apart")
    return out


# ------------------------------------------------------------------ results


def result_text(value: Any) -> str:
    """A tool's return value as the text the model is shown, as functai makes it.

    Text is itself; anything else is JSON (`json.dumps` spacing, raw UTF-8): a dataclass as its
    fields, a pydantic model as its `model_dump`, an enum as its value; a value with no JSON
    form is dumped as it is, with `str` for what JSON cannot hold.
    """
    if isinstance(value, str):
        return value
    try:
        data = _json_form(value)
    except (TypeError, ValueError):
        data = value
    return json.dumps(data, default=str, ensure_ascii=False)


def _json_form(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _json_form(getattr(value, f.name)) for f in dataclasses.fields(value)}
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(mode="json")
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise TypeError("a JSON object's keys are text")
        return {k: _json_form(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_form(v) for v in value]
    if value is None or isinstance(value, str | bool | int):
        return value
    if isinstance(value, float) and value == value and value not in (float("inf"), float("-inf")):
        return value
    raise TypeError(f"a {type(value).__name__} has no JSON form")


def unknown_tool_text(name: str) -> str:
    """What the model is shown when it calls a tool the program does not have (functai's words)."""
    return f"error: there is no tool named {name!r}"
