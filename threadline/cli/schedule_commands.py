"""The schedule commands: `schedule add`, `list`, `update`, `pause`, `resume` and `delete` (scheduled turns).

threadline schedule add alex "Summarise yesterday." --cron "0 9 * * *" --timezone Europe/Paris --name daily
threadline schedule add alex "Any news?" --every PT1H      # or seconds: --every 3600
threadline schedule list alex
threadline schedule update alex daily --cron "30 8 * * *"  # or --every, --timezone, --message ...
threadline schedule pause alex daily --note "on holiday"
threadline schedule delete alex daily
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from core.errors import ErrorCode, ThreadlineError
from core.sends import SENDS

from . import output
from .common import Subcommands, add_conversation, env_settings, message_inputs, open_local
from .output import Output

if TYPE_CHECKING:
    from core.schedules import ScheduleInfo


def add_commands(commands: Subcommands, common: argparse.ArgumentParser) -> None:
    """Add `schedule` with its actions."""
    schedule = commands.add_parser(
        "schedule",
        parents=[common],
        help="turns sent on a schedule (cron or interval)",
        description="Scheduled turns: at each time a schedule names, its message is sent to the conversation "
        "as a turn (on Temporal Schedules; a worker sends it). Closing the conversation deletes its schedules.",
    )
    actions = schedule.add_subparsers(dest="action", required=True, metavar="ACTION")
    _add_add(actions, common)
    listing = actions.add_parser("list", parents=[common], help="list a conversation's schedules")
    add_conversation(listing)
    listing.set_defaults(run=run_list)
    for name, helped in (("pause", "pause a schedule"), ("resume", "resume a paused schedule")):
        action = actions.add_parser(name, parents=[common], help=helped)
        add_conversation(action)
        action.add_argument("name", metavar="NAME", help="the schedule's name")
        action.add_argument("--note", help="why (kept with the schedule)")
        action.set_defaults(run=run_pause if name == "pause" else run_resume)
    _add_update(actions, common)
    delete = actions.add_parser("delete", parents=[common], help="delete a schedule")
    add_conversation(delete)
    delete.add_argument("name", metavar="NAME", help="the schedule's name")
    delete.set_defaults(run=run_delete)


def _add_add(actions: Subcommands, common: argparse.ArgumentParser) -> None:
    add = actions.add_parser(
        "add",
        parents=[common],
        help="make a schedule: MESSAGE sent as a turn at each time it names",
        description="Make a schedule of conversation ID (started at its first firing if new): MESSAGE (the "
        "program's input, or a JSON object of inputs) is sent as a turn at each time --cron or --every names.",
    )
    add_conversation(add, program=True)
    add.add_argument("message", metavar="MESSAGE", help="the input, or a JSON object of inputs")
    _add_timing(add, required=True, zone_default=" (default UTC)")
    add.add_argument("--name", metavar="NAME", help="the schedule's name (default: a new UUIDv7)")
    add.add_argument(
        "--sends", choices=SENDS, default="queue", help="while a turn runs (steer: join it at its next step)"
    )
    add.add_argument("--lm", metavar="MODEL", help="the model of its turns (default THREADLINE_MODEL)")
    add.add_argument("--paused", action="store_true", help="make it paused (`schedule resume` starts it)")
    add.set_defaults(run=run_add)


def _add_update(actions: Subcommands, common: argparse.ArgumentParser) -> None:
    update = actions.add_parser(
        "update",
        parents=[common],
        help="change when a schedule fires or what it sends",
        description="Change schedule NAME of conversation ID: what it sends (--message) or when it fires "
        "(--cron replaces --every and the other way round); what is not given stays. Paused, it stays paused.",
    )
    add_conversation(update, program=True)
    update.add_argument("name", metavar="NAME", help="the schedule's name")
    update.add_argument("--message", metavar="MESSAGE", help="the new input, or a JSON object of inputs")
    _add_timing(update, required=False)
    update.set_defaults(run=run_update)


def _add_timing(parser: argparse.ArgumentParser, *, required: bool, zone_default: str = "") -> None:
    """When a schedule fires: --cron or --every (one of them, `required` or not), --timezone, --start, --end."""
    when = parser.add_mutually_exclusive_group(required=required)
    when.add_argument("--cron", metavar="EXPR", help='a cron expression, e.g. "0 9 * * MON-FRI"')
    when.add_argument("--every", metavar="DURATION", help="an interval: seconds, or ISO 8601 (PT1H)")
    parser.add_argument("--timezone", metavar="TZ", help=f"the cron's time zone, e.g. Europe/Paris{zone_default}")
    parser.add_argument("--start", metavar="TIME", help="no firing before TIME (ISO 8601, with a zone)")
    parser.add_argument("--end", metavar="TIME", help="no firing after TIME (ISO 8601, with a zone)")


async def run_add(args: argparse.Namespace, out: Output) -> int:
    """Make a schedule; print it."""
    settings = env_settings()
    inputs = message_inputs(args.message, args.program, settings)
    chat = await open_local(args, settings, sends=args.sends)
    made = await chat.schedule(
        inputs,
        cron=args.cron,
        every=_duration(args.every),
        timezone=args.timezone,
        start=_moment(args.start, "--start"),
        end=_moment(args.end, "--end"),
        id=args.name,
        lm=args.lm,
        paused=args.paused,
    )
    out.emit(made.model_dump(mode="json"), _described(made))
    return 0


async def run_list(args: argparse.Namespace, out: Output) -> int:
    """Print a conversation's schedules."""
    chat = await open_local(args, env_settings())
    found = await chat.schedules()
    data = {"conversation": chat.id, "store": args.store, "schedules": [s.model_dump(mode="json") for s in found]}
    out.emit(data, _table(found, out) if found else f"Conversation {chat.id} has no schedules.")
    return 0


async def run_pause(args: argparse.Namespace, out: Output) -> int:
    """Pause a schedule; print it."""
    chat = await open_local(args, env_settings())
    paused = await chat.pause_schedule(args.name, note=args.note)
    out.emit(paused.model_dump(mode="json"), _described(paused))
    return 0


async def run_resume(args: argparse.Namespace, out: Output) -> int:
    """Resume a schedule; print it."""
    chat = await open_local(args, env_settings())
    resumed = await chat.resume_schedule(args.name, note=args.note)
    out.emit(resumed.model_dump(mode="json"), _described(resumed))
    return 0


async def run_update(args: argparse.Namespace, out: Output) -> int:
    """Change a schedule's timing or inputs; print it."""
    settings = env_settings()
    inputs = None if args.message is None else message_inputs(args.message, args.program, settings)
    chat = await open_local(args, settings)
    changed = await chat.update_schedule(
        args.name,
        inputs=inputs,
        cron=args.cron,
        every=_duration(args.every),
        timezone=args.timezone,
        start=_moment(args.start, "--start"),
        end=_moment(args.end, "--end"),
    )
    out.emit(changed.model_dump(mode="json"), _described(changed))
    return 0


async def run_delete(args: argparse.Namespace, out: Output) -> int:
    """Delete a schedule."""
    chat = await open_local(args, env_settings())
    await chat.delete_schedule(args.name)
    data = {"conversation": chat.id, "store": args.store, "schedule": args.name, "deleted": True}
    out.emit(data, f"Deleted schedule {args.name} of {chat.id}.")
    return 0


def _duration(text: str | None) -> float | str | None:
    """--every as seconds when it is a number, else as given (an ISO 8601 duration)."""
    if text is None:
        return None
    try:
        return float(text)
    except ValueError:
        return text


def _moment(text: str | None, option: str) -> datetime | None:
    if text is None:
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        moment = None
    if moment is None or moment.tzinfo is None:
        raise ThreadlineError(ErrorCode.SCHEDULE_INVALID, f"{option} is a time in ISO 8601 with a zone (…Z, +01:00)")
    return moment


def _timing(info: ScheduleInfo) -> str:
    if info.cron is not None:
        return f"cron {info.cron} ({info.timezone or 'UTC'})"
    return f"every {info.every:g} s"


def _described(info: ScheduleInfo) -> str:
    rows: list[tuple[str, str]] = [
        ("schedule", info.id),
        ("conversation", info.conversation),
        ("when", _timing(info)),
        ("inputs", output.input_text(info.inputs)),
        ("state", "paused" if info.paused else "active"),
        ("fired", str(info.fired)),
        ("next", info.next[0].isoformat() if info.next else "-"),
    ]
    return output.fields(rows)


def _table(found: Sequence[ScheduleInfo], out: Output) -> str:
    rows: list[Sequence[Any]] = [
        [s.id, _timing(s), "paused" if s.paused else "active", str(s.fired), s.next[0].isoformat() if s.next else "-"]
        for s in found
    ]
    return output.table(["schedule", "when", "state", "fired", "next"], rows, out)
