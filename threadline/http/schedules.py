"""The HTTP routes of a conversation's schedules (scheduled turns, `threadline.scheduling`).

    POST   /v1/conversations/{id}/schedules             {"message" | "inputs", "cron" | "every", "timezone", ...}
    GET    /v1/conversations/{id}/schedules
    GET    /v1/conversations/{id}/schedules/{schedule}
    PATCH  /v1/conversations/{id}/schedules/{schedule}  {"paused", "note", "message" | "inputs", "cron" | "every", ...}
    DELETE /v1/conversations/{id}/schedules/{schedule}

Each firing is a normal turn of the conversation; closing the conversation (`DELETE
/v1/conversations/{id}`) deletes its schedules.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from fastapi import APIRouter, Security
from fastapi.security import HTTPBearer
from pydantic import BaseModel, ConfigDict, Field, model_validator

from core.models import Sends
from core.schedules import ScheduleInfo

from . import bodies as m
from .routes import Chat

scheduling = APIRouter(
    prefix="/v1/conversations",
    tags=["schedules"],
    responses={"4XX": {"model": m.ErrorBody}},
    dependencies=[Security(HTTPBearer(auto_error=False))],
)


class ScheduleRequest(m.RequestBody):
    """A schedule: what each firing sends (`message` for a program with one text input, or `inputs`),
    and when it fires (`cron` or `every`)."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "message": "Summarise yesterday's tickets.",
                    "cron": "0 9 * * MON-FRI",
                    "timezone": "Europe/Paris",
                    "id": "daily",
                },
                {"inputs": {"message": "Any news?"}, "every": "PT1H", "end": "2027-01-01T00:00:00Z"},
                {"message": "Tick", "every": 60, "paused": True},
            ]
        }
    )

    inputs: dict[str, Any] | None = None
    message: str | None = None
    id: str | None = None
    """The schedule's name in the conversation (1-200 of `A-Za-z0-9._-`); omitted: a new UUIDv7."""
    cron: str | None = None
    """A cron expression, read in `timezone` (UTC when omitted)."""
    every: float | str | None = None
    """An interval: seconds (at least 1), or an ISO 8601 duration such as `PT1H`."""
    timezone: str | None = None
    """An IANA time zone name (`Europe/Paris`)."""
    start: datetime | None = Field(default=None, strict=False)
    """No firing before this moment (ISO 8601, with a zone)."""
    end: datetime | None = Field(default=None, strict=False)
    """No firing after this moment."""
    paused: bool = False
    """Make it paused (PATCH `{"paused": false}` starts it)."""
    program: str = "tutor"
    """The conversation's program (a new conversation starts with it at the first firing)."""
    sends: Sends = "queue"
    """What a firing does while another turn runs: wait (`queue`), be refused, or go beside it (`branch`)."""
    lm: str | None = None

    @model_validator(mode="after")
    def _one_input(self) -> ScheduleRequest:
        if (self.inputs is None) == (self.message is None):
            raise ValueError("give either `inputs` (an object) or `message` (a string), not both or neither")
        return self


class SchedulePatch(m.RequestBody):
    """Pause or resume a schedule, change what it sends or when it fires; a field left out stays as it is."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {"paused": True, "note": "on holiday"},
                {"paused": False},
                {"cron": "30 8 * * MON-FRI", "timezone": "Europe/Paris"},
                {"every": "PT2H", "message": "Anything new?"},
            ]
        }
    )

    paused: bool | None = None
    note: str | None = None
    """Why it was paused or resumed (kept with the schedule, shown in Temporal too)."""
    inputs: dict[str, Any] | None = None
    message: str | None = None
    """The new input of a program with one text input (or `inputs`, not both)."""
    cron: str | None = None
    """A new cron expression (it replaces `every`)."""
    every: float | str | None = None
    """A new interval (it replaces `cron`): seconds, or an ISO 8601 duration."""
    timezone: str | None = None
    start: datetime | None = Field(default=None, strict=False)
    end: datetime | None = Field(default=None, strict=False)

    def timed(self) -> bool:
        """Whether it changes when the schedule fires."""
        return any(value is not None for value in (self.cron, self.every, self.timezone, self.start, self.end))

    @model_validator(mode="after")
    def _something(self) -> SchedulePatch:
        if self.inputs is not None and self.message is not None:
            raise ValueError("give either `inputs` (an object) or `message` (a string), not both")
        if self.paused is None and self.inputs is None and self.message is None and not self.timed():
            raise ValueError("name what changes: paused, inputs or message, cron, every, timezone, start or end")
        return self


class ScheduleDeleted(BaseModel):
    """The schedule is deleted; a firing already started still sends its turn."""

    conversation: str
    schedule: str
    deleted: bool = True


@scheduling.post("/{conversation_id}/schedules", status_code=201)
async def create_schedule(chat: Chat, body: ScheduleRequest) -> ScheduleInfo:
    """Make a schedule of the conversation (it need not exist yet: the first firing starts it): each
    firing is a turn with `message` or `inputs`, at each time `cron` or `every` names, between `start` and `end`."""
    chat = chat.tl.conversation(body.program, chat.id, store=chat.config.store, sends=body.sends)
    return await chat.schedule(
        body.message if body.message is not None else body.inputs or {},
        cron=body.cron,
        every=body.every,
        timezone=body.timezone,
        start=body.start,
        end=body.end,
        id=body.id,
        lm=body.lm,
        paused=body.paused,
    )


@scheduling.get("/{conversation_id}/schedules")
async def list_schedules(chat: Chat) -> list[ScheduleInfo]:
    """The conversation's schedules, by name (a new one is listed within a second)."""
    return await chat.schedules()


@scheduling.get("/{conversation_id}/schedules/{schedule}")
async def get_schedule(chat: Chat, schedule: str) -> ScheduleInfo:
    """One schedule: what it sends, when, whether it is paused, how often it fired and when it fires next."""
    return await chat.get_schedule(schedule)


@scheduling.patch("/{conversation_id}/schedules/{schedule}")
async def change_schedule(chat: Chat, schedule: str, body: SchedulePatch) -> ScheduleInfo:
    """Change what a schedule sends or when it fires (`cron` replaces `every` and the other way round),
    and pause (`{"paused": true}`) or resume it; firings missed while paused are not made up."""
    inputs = body.message if body.message is not None else body.inputs
    changed = None
    if inputs is not None or body.timed():
        changed = await chat.update_schedule(
            schedule,
            inputs=inputs,
            cron=body.cron,
            every=body.every,
            timezone=body.timezone,
            start=body.start,
            end=body.end,
        )
    if body.paused is True:
        return await chat.pause_schedule(schedule, note=body.note)
    if body.paused is False:
        return await chat.resume_schedule(schedule, note=body.note)
    return changed or await chat.get_schedule(schedule)


@scheduling.delete("/{conversation_id}/schedules/{schedule}")
async def delete_schedule(chat: Chat, schedule: str) -> ScheduleDeleted:
    """Delete a schedule (404 `schedule-unknown` when there is none of that name)."""
    await chat.delete_schedule(schedule)
    return ScheduleDeleted(conversation=chat.id, schedule=schedule)
