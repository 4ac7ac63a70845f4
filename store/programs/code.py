"""Programs with code (functai 1.2.0's modules) and the AI functions their code calls (helpers).

A program with code is a Python function whose body is the turn: it calls helpers (typed AI
functions, `AIFunction`) and ordinary code. Its `program` record is a module's (docs/format-1.md 2.2:
`program_kind` `module`, no `signature`), its fields its interface's, all `plain`, exactly as functai
derives them, so either engine continues the other's conversation. What runs a turn's body sets the
turn it runs in (`TurnCalls`): a helper called in that body asks its model there, and `earlier()`
reads the conversation so far there. Nothing here runs a model.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import inspect
import textwrap
import types
from collections.abc import Callable, Iterator, Mapping
from contextvars import ContextVar
from functools import cached_property
from typing import Any, Generic, ParamSpec, Protocol, TypeVar, cast

from core.errors import ErrorCode, ThreadlineError
from core.models import ConversationConfig, HelperMemory
from store.records import FORMAT, Record

from .alone import Alone, alone
from .program import Program, _input_type, kept_fields
from .shape import hash_json, type_hints

__all__ = [
    "AIFunction",
    "CodeProgram",
    "TurnCalls",
    "earlier",
    "refuse",
    "remember",
    "running",
]

P = ParamSpec("P")
R = TypeVar("R")


def remember(mode: str = "conversation", *, steps: bool = False) -> HelperMemory:
    """What a helper of a program with code remembers: `"conversation"` (its own earlier calls on the
    branch, in earlier turns and this one) or `"turn"` (its earlier calls in this turn); `steps`: with
    their tool calls and results. For `remembers={helper: ...}`."""
    if mode not in ("conversation", "turn"):
        raise ThreadlineError(ErrorCode.INVALID_REQUEST, f"a helper remembers 'conversation' or 'turn', not {mode!r}")
    return HelperMemory(mode=mode, steps=steps)


class TurnCalls(Protocol):
    """The turn a program's body runs in, as its code reaches it."""

    def ask(self, helper: Program, inputs: dict[str, Any]) -> Any:
        """Ask `helper` with `inputs`: its answer (awaitable on the turn's event loop: an async body)."""
        ...

    def rows(self) -> list[dict[str, Any]]:
        """The conversation so far, one row per earlier turn shown."""
        ...

    def nested(self, program: str, store: str, conversation: str) -> None:
        """Refuse `conversation-nested` unless the turn may use that conversation inside it."""
        ...


_RUNNING: ContextVar[TurnCalls | None] = ContextVar("threadline_code_turn", default=None)


class _AloneTurn:
    """The turn a program's body runs in when it is called on its own: its helpers answer through `Alone`
    (awaitable on the event loop of an async body), nothing earlier, nothing recorded."""

    def __init__(self, alone: Alone, loop: asyncio.AbstractEventLoop | None) -> None:
        self.alone, self.loop = alone, loop

    def ask(self, helper: Program, inputs: dict[str, Any]) -> Any:
        try:
            on_loop = asyncio.get_running_loop() is self.loop
        except RuntimeError:
            on_loop = False
        return self.alone.answer(helper, inputs) if on_loop else self.alone.ask(helper, inputs)

    def rows(self) -> list[dict[str, Any]]:
        return []

    def nested(self, program: str, store: str, conversation: str) -> None:
        """Called on its own, a program is in no conversation: any other one is its to use."""


def running() -> TurnCalls | None:
    """The turn a program's body runs in now, or None."""
    return _RUNNING.get()


@contextlib.contextmanager
def running_in(calls: TurnCalls) -> Iterator[None]:
    """Run the code inside as the body of `calls`' turn (a thread started inside inherits it)."""
    token = _RUNNING.set(calls)
    try:
        yield
    finally:
        _RUNNING.reset(token)


def earlier() -> list[dict[str, Any]]:
    """The conversation so far, as data: inside a program's turn, one row per earlier turn it is shown
    (its inputs and outputs by name, without the fields the context rule leaves out); `[]` outside."""
    calls = _RUNNING.get()
    return calls.rows() if calls is not None else []


@dataclasses.dataclass(frozen=True)
class AIFunction(Program, Generic[P, R]):
    """A typed AI function: the model answers for it. Called inside a program's turn, it asks the turn's
    model (through the worker's providers, recorded in the conversation) and returns its typed answer;
    in an async program, `await helper.acall(...)` (or `await helper(...)`).
    """

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        calls = _RUNNING.get()
        if calls is None:  # on its own: the model answers, nothing is recorded
            return cast(R, alone(self.name).ask(self, self.given(args, kwargs)))
        return cast(R, calls.ask(self, self.given(args, kwargs)))

    async def acall(self, *args: P.args, **kwargs: P.kwargs) -> R:
        """The answer, in an async program's code (or on any event loop, on its own)."""
        calls = _RUNNING.get()
        if calls is None:
            return cast(R, await alone(self.name).answer(self, self.given(args, kwargs)))
        return cast(R, await calls.ask(self, self.given(args, kwargs)))


@dataclasses.dataclass(frozen=True)
class CodeProgram(Program):
    """A program whose body runs as the turn (functai's module): its code calls helpers and returns the
    answer. `opaque` names the fields with no type (a conversation refuses them: `conversation-opaque`)."""

    body: Callable[..., Any] | None = None
    opaque: tuple[str, ...] = ()

    kind = "module"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run the body on its own (outside any conversation): its helpers answer, nothing is recorded;
        an async body gives a coroutine. Inside a turn, the body runs in that turn."""
        if self.body is None:
            raise ThreadlineError(ErrorCode.PROGRAM_INVALID, f"{self.name} has no code to run")
        body = self.body
        if _RUNNING.get() is not None:
            return body(*args, **kwargs)
        if inspect.iscoroutinefunction(body):
            return self._async_alone(body, args, kwargs)
        with running_in(_AloneTurn(alone(self.name), None)):
            return body(*args, **kwargs)

    async def acall(self, *args: Any, **kwargs: Any) -> Any:
        """`__call__` on an event loop: an async body awaited, a sync one run on a thread of its own."""
        if inspect.iscoroutinefunction(self.body):
            return await self(*args, **kwargs)
        return await asyncio.to_thread(contextvars.copy_context().run, self, *args, **kwargs)

    async def _async_alone(self, body: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        with running_in(_AloneTurn(alone(self.name), asyncio.get_running_loop())):
            return await body(*args, **kwargs)

    @classmethod
    def from_code(
        cls, fn: Callable[..., Any], *, module: str | None = None, log_content: Mapping[str, bool] | None = None
    ) -> CodeProgram:
        """Read a function with a body as functai's `@module` reads it: its parameters the inputs (no
        annotation, `Any` or `object`: opaque), its return type the `result` output."""
        hints = type_hints(fn, extras=True)
        params = inspect.signature(fn).parameters
        odd = [n for n, p in params.items() if p.kind not in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
        if odd:
            message = f"program {fn.__name__!r}: its inputs are given by name; {odd[0]!r} cannot be"
            raise ThreadlineError(ErrorCode.PROGRAM_INVALID, message)
        opaque = [n for n in params if _untyped(hints.get(n))] + ["result"] * _untyped(hints.get("return"))
        inputs = tuple((n, Any if n in opaque else _input_type(p, hints[n])) for n, p in params.items())
        output = Any if "result" in opaque else hints["return"]
        defaults = tuple((n, p.default) for n, p in params.items() if p.default is not p.empty)
        doc = inspect.cleandoc(fn.__doc__ or "")
        where = module or fn.__module__
        return cls(
            fn.__name__,
            doc,
            inputs,
            (("result", output),),
            where,
            defaults,
            log_content=kept_fields(log_content),
            body=fn,
            opaque=tuple(opaque),
        )

    @cached_property
    def version(self) -> str:
        """Threadline's own key for this program: its fields and its code."""
        code = hash_json(_source(self.body)) if self.body is not None else None
        return hash_json({"threadline_program": 1, "kind": "module", "name": self.name, "code": code, **self._facts})

    @property
    def _facts(self) -> dict[str, Any]:
        return {"fields": self.field_records(), "helpers": {n: h.version for n, h in sorted(self.helpers.items())}}

    @cached_property
    def helpers(self) -> dict[str, Program]:
        """The AI functions its code reaches by name (in its globals or closure), by their names."""
        if self.body is None:
            return {}
        found: dict[str, Program] = {}
        space = {**getattr(self.body, "__globals__", {}), **_closure(self.body)}
        for name in _names(getattr(self.body, "__code__", None)):
            value = space.get(name)
            if isinstance(value, AIFunction):
                found[value.name] = value
        return found

    def conversations(self) -> list[ConversationConfig]:
        """The conversation handles its code reaches by name (in its globals or closure, or one level
        inside a list, tuple, set or dict held there), read now: a handle may be put there after the
        program is defined."""
        if self.body is None:
            return []
        space = {**getattr(self.body, "__globals__", {}), **_closure(self.body)}
        found: list[ConversationConfig] = []
        for name in set(_names(getattr(self.body, "__code__", None))):
            value = space.get(name)
            held = list(value.values()) if isinstance(value, dict) else value
            held = held if isinstance(held, list | tuple | set | frozenset) else [value]
            for item in list(held)[:_REACHED]:
                config = getattr(item, "config", None)
                if isinstance(config, ConversationConfig):
                    found.append(config)
        return found

    def record(self, at: str) -> dict[str, Any]:
        """The `program` record of a module: no `signature` (docs/format-1.md 2.2)."""
        head = {"functai_conversation": FORMAT, "kind": "program", "at": at, "version": self.version, "name": self.name}
        body = {"program_kind": "module", "module": self.module, "interface": self.interface}
        return {**head, **body, "fields": self.field_records(), "answer": self.answer}


_REACHED = 1000
"""How many items of a container the code reaches are looked at for handles: a module's large data list
would otherwise be walked on every send."""


def _untyped(hint: Any) -> bool:
    return hint is None or hint is Any or hint is object


def _closure(fn: Callable[..., Any]) -> dict[str, Any]:
    code, cells = getattr(fn, "__code__", None), getattr(fn, "__closure__", None) or ()
    names = code.co_freevars if code is not None else ()
    out = {}
    for name, cell in zip(names, cells, strict=False):
        with contextlib.suppress(ValueError):  # an empty cell: a name not bound yet
            out[name] = cell.cell_contents
    return out


def _names(code: types.CodeType | None) -> Iterator[str]:
    """Every global and free name a code object (and the code nested in it) uses."""
    stack = [code] if code is not None else []
    while stack:
        at = stack.pop()
        yield from at.co_names
        yield from at.co_freevars
        stack.extend(c for c in at.co_consts if isinstance(c, types.CodeType))


def _source(fn: Callable[..., Any]) -> str:
    try:
        return textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError):
        return fn.__qualname__  # defined where no source is kept (exec)


def refuse(
    program: Program,
    *,
    remembers: Mapping[str, HelperMemory],
    persistent: bool = True,
    within: ConversationConfig | None = None,
) -> None:
    """Refuse a conversation that cannot keep `program`'s turns, before anything is recorded.

    Raises:
        ThreadlineError: `conversation-opaque` (a field with no type), `conversation-content` (its
            `log_content` keeps a field out of every record, and the store keeps records),
            `invalid-request` (`remembers` names a helper its code does not call, or it has no code), or
            `conversation-nested` (its code reaches another conversation than `within` that `remembers`
            does not declare `own`).
    """
    opaque = getattr(program, "opaque", ())
    if opaque:
        message = f"{program.name}: {', '.join(opaque)} may hold values with no JSON form; give it a type"
        raise ThreadlineError(ErrorCode.CONVERSATION_OPAQUE, message, fields=list(opaque))
    if program.dropped and persistent:
        message = f"{program.name}: log_content keeps {', '.join(program.dropped)} out of every record, which a"
        message += " conversation must keep; let the record log keep those fields"
        raise ThreadlineError(ErrorCode.CONVERSATION_CONTENT, message, fields=program.dropped)
    helpers = program.helpers if isinstance(program, CodeProgram) else {}
    for name, memory in remembers.items():
        if memory.mode != "own" and name not in helpers:
            known = ", ".join(sorted(helpers)) or "none"
            message = f"remembers names {name!r}, which {program.name} does not call (its AI functions: {known})"
            raise ThreadlineError(ErrorCode.INVALID_REQUEST, message)
    if within is not None and isinstance(program, CodeProgram):
        _refuse_nested(program, remembers, within)


def _refuse_nested(program: CodeProgram, remembers: Mapping[str, HelperMemory], within: ConversationConfig) -> None:
    """The check a turn's code makes when it sends, made before the turn is placed for the conversations
    the code reaches by name, so a refused turn records nothing."""
    for inner in program.conversations():
        refuse_nested(remembers, within, inner.program, inner.store, inner.conversation)


def refuse_nested(
    remembers: Mapping[str, HelperMemory], within: ConversationConfig, program: str, store: str, conversation: str
) -> None:
    """Refuse a send to `conversation` (of `program`) from a turn of `within`, unless it is that same
    conversation or `remembers` declares its program `own`.

    Raises:
        ThreadlineError: `conversation-nested`.
    """
    if (store, conversation) == (within.store, within.conversation):
        return
    declared = remembers.get(program)
    if declared is None or declared.mode != "own":
        message = f"conversation {conversation} ({program}) is used inside a turn of {within.conversation};"
        message += f" declare it with remembers={{{program!r}: 'own'}}"
        raise ThreadlineError(ErrorCode.CONVERSATION_NESTED, message, conversation=conversation)


def remembered(remembers: Mapping[str, HelperMemory], helper: str) -> HelperMemory | None:
    """The memory `remembers` gives the helper named `helper` (None: it remembers nothing)."""
    found = remembers.get(helper)
    return found if found is not None and found.mode != "own" else None


def call_identity(helper: Program) -> Record:
    """The `program` of a helper's `call` record: how later calls find it (name and module) and show it
    (whole with the same `signature`)."""
    return {"name": helper.name, "module": helper.module, "signature": helper.signature}
