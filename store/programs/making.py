"""Making programs from typed functions: `@threadline.program` (an AI program, or a program with code
when the body is code of its own) and `@threadline.ai` (an AI function a program's code calls).

Which one a function is, is read from its body, as functai reads `@ai` bodies: a docstring, `...`,
`pass` or `raise NotImplementedError(...)` stands in for the model; anything else is code.
"""

from __future__ import annotations

import ast
import dis
import inspect
import textwrap
from collections.abc import Callable, Mapping
from typing import Any, cast, overload

from core.errors import ErrorCode, ThreadlineError

from .approvals import Approve
from .code import AIFunction, CodeProgram, P, R
from .program import Program
from .tools import Tool

__all__ = ["ai", "model_writes_body", "program"]

Tools = tuple[Tool | Callable[..., Any], ...] | list[Tool | Callable[..., Any]]
_MODEL_BODY_NAMES = frozenset({"NotImplementedError"})
_QUIET_OPS = frozenset(
    {"RESUME", "NOP", "CACHE", "LOAD_CONST", "RETURN_VALUE", "RETURN_CONST", "POP_TOP", "PUSH_NULL", "PRECALL"}
    | {"CALL", "LOAD_GLOBAL", "RAISE_VARARGS", "COPY_FREE_VARS", "MAKE_CELL", "RETURN_GENERATOR"}
)


def model_writes_body(fn: Callable[..., Any]) -> bool:
    """Whether `fn`'s body is only a stand-in for the model: a docstring, `...`, `pass` or
    `raise NotImplementedError(...)`. Anything else is code of its own (a program with code)."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        return _quiet_bytecode(fn)
    defined = next((n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)), None)
    if defined is None:
        return _quiet_bytecode(fn)
    body = list(defined.body)
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # the docstring (or a lone `...`)
    return all(_stands_in(statement) for statement in body)


def _stands_in(node: ast.stmt) -> bool:
    if isinstance(node, ast.Pass):
        return True
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and node.value.value is Ellipsis:
        return True
    if isinstance(node, ast.Raise) and node.exc is not None:
        raised = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
        return isinstance(raised, ast.Name) and raised.id in _MODEL_BODY_NAMES
    return False


def _quiet_bytecode(fn: Callable[..., Any]) -> bool:
    """With no source to read: a body that loads nothing but constants and `NotImplementedError`."""
    code = getattr(fn, "__code__", None)
    if code is None or set(code.co_names) - _MODEL_BODY_NAMES:
        return False
    return all(instruction.opname in _QUIET_OPS for instruction in dis.get_instructions(code))


@overload
def program(
    fn: Callable[..., Any],
    /,
    *,
    module: str | None = ...,
    tools: Tools = ...,
    approve: Any = ...,
    reasoning: bool = ...,
    log_content: Mapping[str, bool] | None = ...,
) -> Program: ...


@overload
def program(
    fn: None = None,
    /,
    *,
    module: str | None = ...,
    tools: Tools = ...,
    approve: Any = ...,
    reasoning: bool = ...,
    log_content: Mapping[str, bool] | None = ...,
) -> Callable[[Callable[..., Any]], Program]: ...


def program(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    module: str | None = None,
    tools: Tools = (),
    approve: Approve | str | list[str] = None,
    reasoning: bool = False,
    log_content: Mapping[str, bool] | None = None,
) -> Program | Callable[[Callable[..., Any]], Program]:
    """Make a typed function a program: the model answers for a body that only stands in for it (a
    docstring, `...`, `raise NotImplementedError`), which may have `tools`, an `approve` rule and
    `reasoning`; any other body is a program with code, run as the turn on the worker.

    Raises:
        ThreadlineError: `program-invalid` for a program with code given tools, approve or reasoning
            (give them to its helpers), or for a definition that cannot be used.
    """
    if fn is None:
        return lambda f: program(
            f, module=module, tools=tools, approve=approve, reasoning=reasoning, log_content=log_content
        )
    if model_writes_body(fn):
        where = module or "threadline"  # an AI program's record names no code module (as before)
        return AIFunction.from_function(
            fn, module=where, tools=tools, approve=approve, reasoning=reasoning, log_content=log_content
        )
    if tools or approve is not None or reasoning:
        message = f"program {fn.__name__!r} runs code: give tools, approve and reasoning to the AI functions it calls"
        raise ThreadlineError(ErrorCode.PROGRAM_INVALID, message)
    return CodeProgram.from_code(fn, module=module, log_content=log_content)


@overload
def ai(
    fn: Callable[P, R],
    /,
    *,
    module: str | None = ...,
    tools: Tools = ...,
    approve: Any = ...,
    reasoning: bool = ...,
) -> AIFunction[P, R]: ...


@overload
def ai(
    fn: None = None,
    /,
    *,
    module: str | None = ...,
    tools: Tools = ...,
    approve: Any = ...,
    reasoning: bool = ...,
) -> Callable[[Callable[P, R]], AIFunction[P, R]]: ...


def ai(
    fn: Callable[P, R] | None = None,
    /,
    *,
    module: str | None = None,
    tools: Tools = (),
    approve: Approve | str | list[str] = None,
    reasoning: bool = False,
) -> AIFunction[P, R] | Callable[[Callable[P, R]], AIFunction[P, R]]:
    """Make a typed function an AI function (a helper a program's code calls; a program too). Its
    `module` is the function's, as functai names it: a helper's memory is matched by name and module.

    Raises:
        ThreadlineError: `program-invalid` when its body runs code of its own (that is a program).
    """
    if fn is None:
        return lambda f: ai(f, module=module, tools=tools, approve=approve, reasoning=reasoning)
    if not model_writes_body(fn):
        message = f"{fn.__name__}: an AI function's body is the model's (a docstring); use @threadline.program"
        raise ThreadlineError(ErrorCode.PROGRAM_INVALID, message)
    made = AIFunction.from_function(
        fn, module=module or fn.__module__, tools=tools, approve=approve, reasoning=reasoning
    )
    return cast("AIFunction[P, R]", made)
