"""Approval deadlines: how long a question an `approve` rule asks may wait, and what answers it then.

An `approve` rule is today's value (`"changes"`, `"all"`, tool names and paths) or an object that
adds a deadline to it:

    {"calls": "changes", "within": "PT1H", "then": "deny", "remind_every": 600}

`within` and `remind_every` are seconds or ISO-8601 durations (`PT10M`, `P1DT2H`); `then` is `deny`,
`approve`, or `{"escalate": [approvers...]}` (which may carry its own `within`, `then` and
`remind_every`: the next deadline, counted from the escalation). `calls` left out keeps the
program's rule. What a waiting turn's clock stands at (`DeadlineClock`) is workflow state, carried
through continue-as-new with its absolute times.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Any, Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from .docstrings import describe_fields
from .errors import ErrorCode, ThreadlineError

Calls: TypeAlias = Literal["changes", "all"] | tuple[str, ...]
"""Which tool calls ask first: `changes`, `all`, or tool names and approval paths."""
LONGEST = 366 * 24 * 3600.0
"""The longest deadline or reminder interval, in seconds (a year)."""
DEADLINE = "deadline"
"""Who answered, in the log, when a deadline answered (`by` of the `approval` record)."""
_KEYS = frozenset({"calls", "within", "then", "remind_every"})
_ESCALATION_KEYS = frozenset({"escalate", "within", "then", "remind_every"})
_ISO = re.compile(r"P(?:(?P<w>\d+)W)?(?:(?P<d>\d+)D)?(?:T(?:(?P<h>\d+)H)?(?:(?P<m>\d+)M)?(?:(?P<s>\d+(?:\.\d+)?)S)?)?")


def seconds_of(value: Any) -> float:
    """A duration in seconds: a number, or an ISO-8601 duration in weeks, days, hours, minutes, seconds.

    Raises:
        ValueError: for anything else, a duration that is not positive, or one over a year.
    """
    if isinstance(value, bool):
        raise ValueError(f"a duration is seconds or an ISO-8601 duration like 'PT10M', not {value!r}")
    if isinstance(value, int | float):
        seconds = float(max(min(value, LONGEST + 1), -1))  # an int past a float's range is out of bounds, not an error
    elif (
        isinstance(value, str) and (found := _ISO.fullmatch(value.strip().upper())) and value.strip() not in ("P", "PT")
    ):
        parts = {k: float(v) for k, v in found.groupdict().items() if v}
        units = {"w": 604800, "d": 86400, "h": 3600, "m": 60, "s": 1}
        seconds = sum(parts.get(k, 0.0) * n for k, n in units.items())
    else:
        raise ValueError(f"a duration is seconds or an ISO-8601 duration like 'PT10M', not {value!r}")
    if not 0 < seconds <= LONGEST:
        raise ValueError(f"a duration is more than 0 seconds and at most a year, not {value!r}")
    return seconds


class _Part(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore", json_schema_extra=describe_fields)

    @field_validator("within", "remind_every", mode="before", check_fields=False)
    @classmethod
    def _duration(cls, value: Any) -> Any:
        return None if value is None else seconds_of(value)


class Escalation(_Part):
    """`then: {"escalate": [...]}`: only these approvers may answer from then on; with `within`, a
    next deadline counted from the escalation."""

    escalate: tuple[str, ...]
    within: float | None = None
    then: Literal["deny", "approve"] | Escalation = "deny"
    """What answers when the next deadline passes (only with `within`)."""
    remind_every: float | None = None

    @field_validator("escalate")
    @classmethod
    def _approvers(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if not value or not all(name.strip() for name in value):
            raise ValueError("escalate names at least one approver, each a non-empty name")
        return value


Then: TypeAlias = Literal["deny", "approve"] | Escalation


class ApprovalDeadline(_Part):
    """An `approve` rule with a deadline: the questions `calls` asks are answered by `then` once
    `within` passes with nobody answering; the turn's status counts reminders every `remind_every`."""

    calls: Calls | None = None
    """Today's `approve` value (None: the conversation's, else the program's rule)."""
    within: float
    """Seconds a question waits for a person before `then` answers it."""
    then: Then = "deny"
    remind_every: float | None = None
    """Seconds between reminders while the question waits (None: no reminders)."""


class DeadlineClock(_Part):
    """Where a waiting turn's deadline stands: absolute times, so a run continued as new (or replayed
    by another worker) keeps counting from when the wait began."""

    due: datetime | None
    """When `then` answers (None: escalated with no further deadline)."""
    then: Then = "deny"
    remind_every: float | None = None
    next_reminder: datetime | None = None
    reminders: int = 0
    """Reminders given so far."""
    approvers: tuple[str, ...] | None = None
    """Who may answer (None: anyone; set by an escalation)."""
    escalations: int = 0

    @classmethod
    def begin(
        cls, rule: ApprovalDeadline | Escalation, now: datetime, *, approvers: tuple[str, ...] | None
    ) -> DeadlineClock:
        """The clock of a wait that begins `now` under `rule`."""
        every = rule.remind_every
        return cls(
            due=now + timedelta(seconds=rule.within) if rule.within else None,
            then=rule.then,
            remind_every=every,
            next_reminder=now + timedelta(seconds=every) if every else None,
            approvers=approvers,
        )

    def next_at(self) -> datetime | None:
        """When the clock next does something (a reminder or the deadline), if ever."""
        times = [t for t in (self.due, self.next_reminder) if t is not None]
        return min(times) if times else None

    def reminded(self, now: datetime) -> DeadlineClock:
        """The clock after a reminder given `now`."""
        every = timedelta(seconds=self.remind_every or 0)
        return self.model_copy(update={"reminders": self.reminders + 1, "next_reminder": now + every})

    def escalated(self, escalation: Escalation, now: datetime) -> DeadlineClock:
        """The clock after `escalation`: its approvers, its own deadline and reminders (else none)."""
        after = DeadlineClock.begin(escalation, now, approvers=escalation.escalate)
        if escalation.remind_every is None and self.remind_every:
            after = after.model_copy(update={"remind_every": self.remind_every, "next_reminder": self.next_reminder})
        return after.model_copy(update={"reminders": self.reminders, "escalations": self.escalations + 1})

    def may_answer(self, by: str | None) -> bool:
        """Whether `by` may answer the turn's questions now."""
        return self.approvers is None or by in self.approvers


def parse_approve(value: Any) -> Any:
    """An `approve` value as given (a rule, a list, or the object form), the object checked and made an
    `ApprovalDeadline`; anything else is returned for the rule's own checks.

    Raises:
        ThreadlineError: `invalid-request` for an object with unknown keys or bad values.
    """
    if isinstance(value, ApprovalDeadline) or not isinstance(value, dict):
        return value
    try:
        _check_keys(value, _KEYS, "an approve rule")
        return ApprovalDeadline.model_validate(value)
    except ValidationError as err:
        problem = err.errors()[0]
        where = ".".join(str(p) for p in problem["loc"])
        raise ThreadlineError(ErrorCode.INVALID_REQUEST, f"approve: {where}: {problem['msg']}") from None


def _check_keys(value: dict[str, Any], known: frozenset[str], what: str) -> None:
    unknown = sorted(set(value) - known)
    if unknown:
        raise ThreadlineError(
            ErrorCode.INVALID_REQUEST, f"{what} takes {', '.join(sorted(known))}; not {', '.join(unknown)}"
        )
    then = value.get("then")
    if isinstance(then, dict):
        _check_keys(then, _ESCALATION_KEYS, "then")


def calls_of(rule: Any) -> Any:
    """The tool calls a rule asks about: the rule itself, or an `ApprovalDeadline`'s `calls`."""
    return rule.calls if isinstance(rule, ApprovalDeadline) else rule


def first_calls(*rules: Any) -> Any:
    """The first of `rules` (the send's, then the conversation's) that names tool calls (None: the program's)."""
    for rule in rules:
        if (calls := calls_of(rule)) is not None:
            return calls
    return None


def first_deadline(*rules: Any) -> ApprovalDeadline | None:
    """The first of `rules` (the send's, then the conversation's) that carries a deadline."""
    return next((rule for rule in rules if isinstance(rule, ApprovalDeadline)), None)
