"""Scheduled turns: when a schedule fires, what each firing sends, and how a schedule is described.

A schedule is a Temporal Schedule whose id derives from its conversation's workflow id
(`conversation/<store>/<id>/schedule/<name>`); each firing starts a `ScheduledTurn` workflow with a
`ScheduledSend`, which delivers the send as a normal turn whose request id is the schedule's name
and the firing's scheduled time (`firing_request_id`): a firing run again is the same turn.
"""

from __future__ import annotations

import hashlib
import re
import zoneinfo
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import TypeAdapter, ValidationError, field_validator, model_validator

from .errors import ErrorCode, ThreadlineError
from .limits import MAX_NAME
from .models import MAX_REQUEST_ID, ConversationConfig, Model, TurnSend
from .temporal import workflow_id

SCHEDULED_WORKFLOW = "ScheduledTurn"
"""The workflow type a schedule's firing starts (`workflows/scheduled.py`)."""
MIN_EVERY_S = 1.0
"""The shortest interval between firings, in seconds (Temporal's own floor)."""
MAX_EVERY_S = 100 * 366 * 86400.0
"""The longest interval between firings, in seconds (a century: any longer is no schedule)."""
_NAME = re.compile(rf"[A-Za-z0-9][A-Za-z0-9._-]{{0,{MAX_NAME - 1}}}")
_DURATION: TypeAdapter[timedelta] = TypeAdapter(timedelta)


def check_schedule_name(name: object) -> str:
    """Return `name` if it can name a schedule (a name, never a path: as a conversation id).

    Raises:
        ThreadlineError: `schedule-invalid` for anything else.
    """
    if isinstance(name, str) and name.isascii() and _NAME.fullmatch(name):
        return name
    raise ThreadlineError(
        ErrorCode.SCHEDULE_INVALID,
        f"{repr(name)[:60]} is not a schedule name: use 1 to {MAX_NAME} ASCII letters, digits, '.', '_' or '-', "
        "starting with a letter or digit",
    )


def schedule_id(store: str, conversation: str, name: str) -> str:
    """The Temporal Schedule id of schedule `name` of a conversation: its workflow id, `/schedule/`, the name."""
    return f"{schedule_prefix(store, conversation)}{name}"


def schedule_prefix(store: str, conversation: str) -> str:
    """What every schedule id of a conversation starts with (conversation ids hold no `/`)."""
    return f"{workflow_id(store, conversation)}/schedule/"


def firing_request_id(name: str, at: datetime) -> str:
    """The request id of schedule `name`'s firing scheduled at `at` (to the second): the same firing is
    the same turn.

    A name too long to fit beside the time is replaced by its SHA-256 (still one id per schedule).
    """
    # Whole seconds, in UTC: Temporal gives a run its scheduled time to the second (and names the
    # run by it), while a schedule's description gives it to the microsecond.
    moment = at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    request_id = f"schedule/{name}/{moment}"
    if len(request_id) <= MAX_REQUEST_ID:
        return request_id
    return f"schedule/{hashlib.sha256(name.encode()).hexdigest()}/{moment}"


def seconds_of(value: Any) -> float | None:
    """A duration given as seconds, a `timedelta` or an ISO 8601 duration (`PT1H`), in seconds."""
    if value is None:
        return None
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    try:
        return _DURATION.validate_python(value).total_seconds()
    except ValidationError:
        raise ThreadlineError(
            ErrorCode.SCHEDULE_INVALID, "`every` is seconds or an ISO 8601 duration such as PT1H"
        ) from None


class ScheduleWhen(Model):
    """When a schedule fires: a cron expression or an interval, in a time zone, between start and end."""

    cron: str | None = None
    """A cron expression (`0 9 * * MON-FRI`), read in `timezone`."""
    every: float | None = None
    """An interval in seconds (at least 1), counted from the Unix epoch in whole intervals."""
    timezone: str | None = None
    """An IANA time zone name (`Europe/Paris`) for `cron` (None: UTC)."""
    start: datetime | None = None
    """No firing before this moment."""
    end: datetime | None = None
    """No firing after this moment."""

    @field_validator("every", mode="before")
    @classmethod
    def _seconds(cls, value: Any) -> float | None:
        return seconds_of(value)

    @model_validator(mode="after")
    def _valid(self) -> ScheduleWhen:
        if (self.cron is None) == (self.every is None):
            raise ThreadlineError(ErrorCode.SCHEDULE_INVALID, "give either `cron` or `every`, not both or neither")
        if self.every is not None and not MIN_EVERY_S <= self.every <= MAX_EVERY_S:  # NaN too
            message = f"`every` is {MIN_EVERY_S:g} second to a century"
            raise ThreadlineError(ErrorCode.SCHEDULE_INVALID, message)
        if self.start and self.end and self.end <= self.start:
            raise ThreadlineError(ErrorCode.SCHEDULE_INVALID, "`end` comes after `start`")
        if self.timezone is not None:
            _check_zone(self.timezone)
        return self

    def changed(self, **given: Any) -> ScheduleWhen:
        """This timing with the fields `given` (None: left as it is) changed: `cron` replaces `every`
        and the other way round (`schedule-invalid` when the result cannot fire)."""
        fields = {name: value for name, value in given.items() if value is not None}
        if "cron" in fields or "every" in fields:
            fields = {"cron": None, "every": None, **fields}
        return when(**{**self.model_dump(), **fields})


def _check_zone(name: str) -> None:
    try:
        zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ThreadlineError(
            ErrorCode.SCHEDULE_INVALID, f"{name[:60]!r} is no IANA time zone (such as Europe/Paris)"
        ) from None


def when(**given: Any) -> ScheduleWhen:
    """A `ScheduleWhen` from keywords; a bad one raises its `schedule-invalid` as it is."""
    try:
        return ScheduleWhen(**given)
    except ValidationError as err:
        cause = err.errors()[0].get("ctx", {}).get("error")
        if isinstance(cause, ThreadlineError):
            raise cause from None
        raise ThreadlineError(ErrorCode.SCHEDULE_INVALID, f"a schedule's {_field(err)} is not valid") from None


def _field(err: ValidationError) -> str:
    location = err.errors()[0].get("loc") or ("time",)
    return f"`{location[0]}`"


class ScheduledSend(Model):
    """The `ScheduledTurn` workflow's input: the send each firing of schedule `schedule` delivers."""

    config: ConversationConfig
    """The conversation, as its workflow starts when it is not open."""
    schedule: str
    """The schedule's name."""
    send: TurnSend
    """The send; each firing gives it the request id `firing_request_id(schedule, at)`."""
    at: datetime | None = None
    """The firing's scheduled time; None: Temporal's `TemporalScheduledStartTime` of the run (set by the
    schedule). Give it to run a firing again by hand: the same time is the same turn."""
    when: ScheduleWhen | None = None
    """The schedule's timing as given (Temporal describes a cron as calendars), kept here so a change
    of timing keeps it too; None: the schedule's memo has it (schedules made before it was kept here)."""


class Firing(Model):
    """The `ScheduledTurn` workflow's result: the request id of the turn it delivered."""

    request_id: str
    delivered: bool
    """False when the conversation was closed after the schedule was made: nothing was sent, and the
    schedule was deleted."""


class ScheduleInfo(Model):
    """A schedule of a conversation, as Temporal describes it."""

    id: str
    """The schedule's name (unique in its conversation)."""
    conversation: str
    store: str
    schedule_id: str
    """The Temporal Schedule's id."""
    inputs: dict[str, Any]
    """What each firing sends."""
    cron: str | None = None
    every: float | None = None
    timezone: str | None = None
    start: datetime | None = None
    end: datetime | None = None
    paused: bool = False
    note: str | None = None
    """Why it was paused or resumed, as given."""
    fired: int = 0
    """How many firings it made."""
    next: tuple[datetime, ...] = ()
    """Its next firing times (none while paused, or after `end`)."""
    recent: tuple[datetime, ...] = ()
    """The scheduled times of its latest firings, oldest first."""
    created_at: datetime | None = None
