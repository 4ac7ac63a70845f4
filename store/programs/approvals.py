"""The `approve` setting: which tool calls ask first, exactly as functai 1.2.0's rules read.

`approve` is a rule (`"changes"`, `"all"`, a list of tool names and approval paths) or a function
that answers in place of a person. A tool that says nothing of its effects counts as `"changes"`.
Threadline's object form adds a deadline to a rule (`core.deadlines.ApprovalDeadline`); what it asks
is its `calls` (`"changes"` when left out), and the conversation's workflow keeps its clock.
`decide` says, purely, what a given call needs before it runs.
"""

from __future__ import annotations

import typing
from collections.abc import Callable
from typing import Any, Literal, TypeAlias

from core.deadlines import ApprovalDeadline, calls_of, parse_approve
from core.errors import ErrorCode, ThreadlineError

from .tools import Effects

__all__ = ["RULES", "Approve", "Decision", "asks", "check_approve", "decide", "tool_path"]

Approve: TypeAlias = Literal["changes", "all"] | tuple[str, ...] | ApprovalDeadline | Callable[[Any], Any] | None
Decision: TypeAlias = Literal["run", "person", "function"]
"""What a tool call needs before it runs: nothing, a person's answer, or the `approve` function's."""

RULES = ("changes", "all")


def check_approve(value: Any) -> Approve:
    """Return an `approve` setting in its kept form, or raise `program-invalid`.

    functai accepts None (no approval), a function (asked in place of a person), `"changes"`,
    `"all"`, or a list, tuple or set of non-empty tool names and approval paths (kept as a tuple;
    a set sorted).
    """
    if value is None or callable(value):
        return value  # type: ignore[no-any-return]
    if isinstance(value, dict | ApprovalDeadline):
        return _with_deadline(value)
    if isinstance(value, str):
        if value in RULES:
            return typing.cast(Approve, value)
    elif isinstance(value, list | tuple | set | frozenset) and all(isinstance(v, str) and v for v in value):
        return tuple(sorted(value)) if isinstance(value, set | frozenset) else tuple(value)
    message = f"approve is a function, 'changes', 'all', or a list of tool names and paths, not {value!r}"
    raise ThreadlineError(ErrorCode.PROGRAM_INVALID, message + "; fix the program's definition")


def _with_deadline(value: dict[str, Any] | ApprovalDeadline) -> ApprovalDeadline:
    """The object form, its `calls` checked as a rule (`"changes"` when left out)."""
    try:
        rule = parse_approve(value)
    except ThreadlineError as err:
        raise ThreadlineError(ErrorCode.PROGRAM_INVALID, err.message + "; fix the program's definition") from None
    calls = "changes" if rule.calls is None else check_approve(rule.calls)
    return typing.cast(ApprovalDeadline, rule).model_copy(update={"calls": calls})


def tool_path(program: str, tool_name: str) -> str:
    """A call's approval path: the program's name, then the tool's (`gardener/write_note`)."""
    return f"{program}/{tool_name}"


def asks(approve: Approve, *, name: str, effects: Effects, path: str) -> bool:
    """Whether `approve` asks about a call, exactly as functai's rule reads.

    `"changes"` (and a function, which is asked what `"changes"` asks) asks about a tool that
    changes things or says nothing; `"all"` about every call; a list about a tool it names, or
    whose path it holds or ends with `/<entry>`. None asks about nothing.
    """
    rule = approve if callable(approve) else calls_of(approve)
    if rule is None:
        return False
    if callable(rule) or rule == "changes":
        return effects != "reads"
    if rule == "all":
        return True
    return any(entry in (name, path) or path.endswith("/" + entry) for entry in typing.cast(tuple[str, ...], rule))


def decide(approve: Approve, *, name: str, effects: Effects, path: str) -> Decision:
    """What a call needs before it runs: `run` at once, a `person`'s answer, or the `function`'s.

    Pass the effects of the tool called; a call of a tool the program does not have runs nothing,
    so it counts as `"reads"` (functai's rule).
    """
    if not asks(approve, name=name, effects=effects, path=path):
        return "run"
    return "function" if callable(approve) else "person"
