"""Scheduled turns on the Python API (methods of `Conversation`), on Temporal Schedules.

    chat = tl.conversation("tutor", id="alex")
    daily = await chat.schedule("Summarise yesterday.", cron="0 9 * * *", timezone="Europe/Paris", id="daily")
    await chat.pause_schedule("daily", note="on holiday")
    await chat.update_schedule("daily", cron="30 8 * * *")      # its timing or inputs changed
    print([s.id for s in await chat.schedules()])
    await chat.delete_schedule("daily")

Each firing is a normal turn of the conversation (`workflows/scheduled.py`), sent where this handle's
view continues, with a request id made of the schedule's name and the firing's time. Closing the
conversation deletes its schedules.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from temporalio.client import (
    Client,
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleDescription,
    ScheduleHandle,
    ScheduleIntervalSpec,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleSpec,
    ScheduleState,
    ScheduleUpdate,
    ScheduleUpdateInput,
)

from core.errors import ErrorCode, ThreadlineError
from core.limits import MAX_NOTE, check_text
from core.models import ConversationConfig
from core.temporal import SCHEDULED_TURN_WORKFLOW
from store.records import uuid7

from .crossing import Refusal, crossing
from .delivery import Delivery
from .handle import Handle
from .options import SendOptions

# Imported where used (`from core import schedules`): a send (`threadline send`) needs none of it.
if TYPE_CHECKING:
    from core.schedules import ScheduledSend, ScheduleInfo, ScheduleWhen

CATCHUP_WINDOW = timedelta(hours=1)
"""Firings missed while Temporal was down are made up when they are at most this late."""
_WHEN = "threadline.when"
"""The memo key of a schedule's `ScheduleWhen` (Temporal describes a cron as calendars, not as given)."""


class ScheduleMethods(Handle):
    """What `Conversation` adds for scheduled turns."""

    async def schedule(
        self,
        inputs: str | Mapping[str, Any],
        *,
        cron: str | None = None,
        every: float | timedelta | str | None = None,
        timezone: str | None = None,
        start: datetime | None = None,
        end: datetime | None = None,
        id: str | None = None,
        lm: str | None = None,
        paused: bool = False,
    ) -> ScheduleInfo:
        """Send `inputs` (the program's single input as text, or its inputs by name) as a turn of this
        conversation at each time `cron` (in `timezone`, UTC by default) or `every` (seconds, a
        `timedelta` or an ISO 8601 duration) names, between `start` and `end`.

        `id` names the schedule in the conversation (a new UUIDv7 when None); `paused` makes it paused
        (`resume_schedule` starts it).

        Raises:
            ThreadlineError: `schedule-invalid` (neither or both of `cron` and `every`, a cron expression
                or time zone Temporal does not know, an interval under a second), `schedule-exists`,
                `inputs-invalid`.
        """
        from core.schedules import ScheduledSend, check_schedule_name, schedule_id, when

        name = check_schedule_name(uuid7() if id is None else id)
        timing = when(cron=cron, every=every, timezone=timezone, start=start, end=end)
        given = self._inputs((inputs,), {}) if isinstance(inputs, str) else self._inputs((), dict(inputs))
        send = self.sent(given, SendOptions(lm=lm))
        await self.delivery.workflow()  # connects, and settles the store identity and attributes in the config
        firing = ScheduledSend(config=self.config, schedule=name, send=send, when=timing)
        made = _made(firing, timing, self.tl.settings.task_queue, paused=paused)
        with crossing(_refusal(name, exists=f"conversation {self.id} has a schedule {name!r} already")):
            await self.tl.client.create_schedule(
                schedule_id(self.config.store, self.id, name), made, memo={_WHEN: timing}
            )
        return await self.get_schedule(name)

    async def schedules(self) -> list[ScheduleInfo]:
        """This conversation's schedules, by name (as Temporal lists them: a new one within a second)."""
        client = await self.tl.temporal()
        names = await scheduled_names(client, self.config)
        found = await asyncio.gather(*(_listed(client, self.config, name) for name in names))
        return [info for info in found if info is not None]

    async def get_schedule(self, schedule: str) -> ScheduleInfo:
        """The schedule named `schedule` (`schedule-unknown` when this conversation has none)."""
        from core.schedules import check_schedule_name

        return await _describe(await self.tl.temporal(), self.config, check_schedule_name(schedule))

    async def pause_schedule(self, schedule: str, note: str | None = None) -> ScheduleInfo:
        """Pause `schedule`: it fires nothing until resumed (`note` says why, in Temporal too)."""
        check_text(note, "a note", limit=MAX_NOTE)
        await _call(schedule, (await self._handle(schedule)).pause(note=note or "paused"))
        return await self.get_schedule(schedule)

    async def resume_schedule(self, schedule: str, note: str | None = None) -> ScheduleInfo:
        """Resume a paused `schedule` (firings missed while paused are not made up)."""
        check_text(note, "a note", limit=MAX_NOTE)
        await _call(schedule, (await self._handle(schedule)).unpause(note=note or "resumed"))
        return await self.get_schedule(schedule)

    async def update_schedule(
        self,
        schedule: str,
        *,
        inputs: str | Mapping[str, Any] | None = None,
        cron: str | None = None,
        every: float | timedelta | str | None = None,
        timezone: str | None = None,
        start: datetime | None = None,
        end: datetime | None = None,
    ) -> ScheduleInfo:
        """Change what `schedule` sends or when it fires (None: left as it is); `cron` replaces `every`
        and the other way round. Its next firings follow the new timing; paused, it stays paused.

        Raises:
            ThreadlineError: `schedule-unknown`, `schedule-invalid` (nothing given, or a timing that
                cannot fire: nothing changes), `inputs-invalid`.
        """
        from core.schedules import ScheduledSend, ScheduleWhen, check_schedule_name

        given = {"cron": cron, "every": every, "timezone": timezone, "start": start, "end": end}
        if inputs is None and all(value is None for value in given.values()):
            raise ThreadlineError(
                ErrorCode.SCHEDULE_INVALID, "name what changes: inputs, cron, every, timezone, start or end"
            )
        client, name = await self.tl.temporal(), check_schedule_name(schedule)
        now = await _describe(client, self.config, name)
        timing = ScheduleWhen.model_validate(now.model_dump(include=set(ScheduleWhen.model_fields))).changed(**given)
        new_inputs = None if inputs is None else self._scheduled_inputs(inputs)

        async def changed(current: ScheduleUpdateInput) -> ScheduleUpdate:
            described = current.description.schedule
            action = described.action
            assert isinstance(action, ScheduleActionStartWorkflow), "a Threadline schedule (described above)"
            [firing] = await client.data_converter.decode(action.args, [ScheduledSend])
            send = firing.send if new_inputs is None else firing.send.model_copy(update={"inputs": new_inputs})
            action.args = [firing.model_copy(update={"send": send, "when": timing})]
            described.spec = _spec(timing)
            return ScheduleUpdate(schedule=described)

        await _call(name, (await self._handle(name)).update(changed))
        return await self.get_schedule(name)

    def _scheduled_inputs(self, inputs: str | Mapping[str, Any]) -> dict[str, Any]:
        """A schedule's new inputs, checked as a send's (a text is the program's single input)."""
        return self._inputs((inputs,), {}) if isinstance(inputs, str) else self._inputs((), dict(inputs))

    async def delete_schedule(self, schedule: str) -> None:
        """Delete `schedule`; a firing already started still sends its turn."""
        await _call(schedule, (await self._handle(schedule)).delete())

    async def _handle(self, schedule: str) -> ScheduleHandle:
        from core.schedules import check_schedule_name, schedule_id

        client = await self.tl.temporal()
        return client.get_schedule_handle(schedule_id(self.config.store, self.id, check_schedule_name(schedule)))


async def scheduled_names(client: Client, config: ConversationConfig) -> list[str]:
    """The names of a conversation's schedules, sorted (Temporal's list, by id prefix)."""
    from core.schedules import schedule_prefix

    prefix = schedule_prefix(config.store, config.conversation)
    query = f'ScheduleId STARTS_WITH "{prefix}"'  # ids and store names hold no quote
    with crossing():
        found = [entry.id async for entry in await client.list_schedules(query=query)]
    return sorted(sid.removeprefix(prefix) for sid in found if sid.startswith(prefix))


async def end_schedules(delivery: Delivery) -> int:
    """Delete every schedule of the conversation `delivery` reaches (it was closed); return how many."""
    from core.schedules import schedule_id

    client = await delivery.tl.temporal()
    names = await scheduled_names(client, delivery.config)
    for name in names:
        handle = client.get_schedule_handle(schedule_id(delivery.config.store, delivery.id, name))
        with contextlib.suppress(_GoneError), crossing(_gone):  # a firing that found it closed deleted it first
            await handle.delete()
    return len(names)


def _made(firing: ScheduledSend, timing: ScheduleWhen, task_queue: str, *, paused: bool) -> Schedule:
    """The Temporal Schedule: its spec, and a `ScheduledTurn` start as its action."""
    from core.schedules import schedule_id

    config = firing.config
    sid = schedule_id(config.store, config.conversation, firing.schedule)
    spec = _spec(timing)
    action = ScheduleActionStartWorkflow(
        SCHEDULED_TURN_WORKFLOW,
        firing,
        id=sid,
        task_queue=task_queue,
        static_summary=f"schedule {firing.schedule} of conversation {config.conversation}",
    )
    # Firings never wait for each other: each only delivers a send, and the conversation's `sends` rule
    # decides what one that meets a running turn does.
    policy = SchedulePolicy(overlap=ScheduleOverlapPolicy.ALLOW_ALL, catchup_window=CATCHUP_WINDOW)
    state = ScheduleState(paused=paused, note="made paused" if paused else None)
    return Schedule(action=action, spec=spec, policy=policy, state=state)


def _spec(timing: ScheduleWhen) -> ScheduleSpec:
    return ScheduleSpec(
        cron_expressions=[timing.cron] if timing.cron else [],
        intervals=[ScheduleIntervalSpec(every=timedelta(seconds=timing.every))] if timing.every else [],
        start_at=timing.start,
        end_at=timing.end,
        time_zone_name=timing.timezone,
    )


async def _listed(client: Client, config: ConversationConfig, name: str) -> ScheduleInfo | None:
    """A listed schedule, or None when it is gone since (listing lags) or is not Threadline's."""
    try:
        return await _describe(client, config, name)
    except ThreadlineError as err:
        if err.code != ErrorCode.SCHEDULE_UNKNOWN:
            raise
        return None


async def _describe(client: Client, config: ConversationConfig, name: str) -> ScheduleInfo:
    from core.schedules import schedule_id

    handle = client.get_schedule_handle(schedule_id(config.store, config.conversation, name))
    with crossing(_refusal(name)):
        described = await handle.describe()
    return await _info(client, described, config, name)


async def _info(client: Client, described: ScheduleDescription, config: ConversationConfig, name: str) -> ScheduleInfo:
    """A described schedule as `ScheduleInfo`: what it sends comes from its action's input, the timing
    as given from its memo."""
    from core.schedules import SCHEDULED_WORKFLOW, ScheduledSend, ScheduleInfo, ScheduleWhen

    action = described.schedule.action
    memo = await described.memo()
    if (
        not isinstance(action, ScheduleActionStartWorkflow)
        or action.workflow != SCHEDULED_WORKFLOW
        or _WHEN not in memo
    ):
        message = f"schedule {name!r} was not made by Threadline (it starts no {SCHEDULED_WORKFLOW} firing)"
        raise ThreadlineError(ErrorCode.SCHEDULE_UNKNOWN, message)
    [firing] = await client.data_converter.decode(action.args, [ScheduledSend])
    timing = firing.when or ScheduleWhen.model_validate(memo[_WHEN])
    state, info = described.schedule.state, described.info
    return ScheduleInfo(
        id=name,
        conversation=config.conversation,
        store=config.store,
        schedule_id=described.id,
        inputs=firing.send.inputs,
        **timing.model_dump(),
        paused=state.paused,
        note=state.note or None,
        fired=info.num_actions,
        next=() if state.paused else tuple(info.next_action_times[:3]),
        recent=tuple(action.scheduled_at for action in info.recent_actions),
        created_at=info.created_at,
    )


async def _call(name: str, call: Awaitable[None]) -> None:
    with crossing(_refusal(name)):
        await call


def _refusal(name: str, *, exists: str = "") -> Refusal:
    """Temporal's refusal of a call on the schedule `name`, as a coded error."""

    def worded(status: str, message: str) -> ThreadlineError | None:
        if status == "NOT_FOUND":
            return ThreadlineError(ErrorCode.SCHEDULE_UNKNOWN, f"there is no schedule {name!r} of this conversation")
        if status == "INVALID_ARGUMENT":
            return ThreadlineError(ErrorCode.SCHEDULE_INVALID, f"Temporal refused the schedule: {message[:300]}")
        if status == "ALREADY_EXISTS" and exists:
            return ThreadlineError(ErrorCode.SCHEDULE_EXISTS, f"{exists}: delete it first, or choose another id")
        return None

    return worded


class _GoneError(ThreadlineError):
    """A schedule deleted meanwhile (only `end_schedules` meets it, and lets it pass)."""


def _gone(status: str, message: str) -> ThreadlineError | None:
    return _GoneError(ErrorCode.SCHEDULE_UNKNOWN, "the schedule is gone") if status == "NOT_FOUND" else None
