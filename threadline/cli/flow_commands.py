"""The guided-flow commands and the listing: `flow start`, `flow show`, `flow stop`, and `list`.

threadline flow start order-7 order     # the flow's first prompt
threadline send order-7 3               # while a flow is active, a message is its answer
threadline flow show order-7            # its step, what it said last, what it collected
threadline list --state idle --max-age-hours 24
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from core.errors import ErrorCode, ThreadlineError

from . import output
from .common import Subcommands, add_conversation, add_store, close_at_end, env_settings, open_local
from .output import Output

if TYPE_CHECKING:
    from threadline.transcript import FlowView

STATES = ("running", "idle", "closed")
"""`threadline.listing.STATES`, spelled out: the parser is built without importing the listing (and
Temporal's client with it). tests/surfaces/test_cli_imports.py checks that the two agree."""


def add_commands(commands: Subcommands, common: argparse.ArgumentParser) -> None:
    """Add `flow` (with `start`, `show` and `stop`) and `list`."""
    flow = commands.add_parser(
        "flow",
        parents=[common],
        help="start, show or stop a conversation's guided flow",
        description="Guided flows: a flow asks its steps' prompts in turn; while it is active, each "
        "message to the conversation is its answer. Flows are registered on the worker "
        "(the built-in `order`, and THREADLINE_FLOWS).",
    )
    actions = flow.add_subparsers(dest="action", required=True, metavar="ACTION")
    start = actions.add_parser("start", parents=[common], help="start a flow; print its first prompt")
    add_conversation(start, program=True)
    start.add_argument("flow", metavar="FLOW", help="the flow's name (e.g. order)")
    start.add_argument("--message", default="", help="what started it (recorded as the turn's input)")
    start.add_argument("--request-id", metavar="R", help="an idempotency key: the same R starts it once")
    start.set_defaults(run=run_start)
    show = actions.add_parser("show", parents=[common], help="where the latest flow stands, and its counts")
    add_conversation(show)
    show.set_defaults(run=run_show)
    stop = actions.add_parser("stop", parents=[common], help="stop the active flow (abandoned: stopped)")
    add_conversation(stop)
    stop.set_defaults(run=run_stop)
    _add_list(commands, common)


def _add_list(commands: Subcommands, common: argparse.ArgumentParser) -> None:
    listing = commands.add_parser(
        "list",
        parents=[common],
        help="list conversations (from Temporal visibility)",
        description="List a store's conversations, newest first, a page at a time: by program, state "
        "and last update. Needs Temporal with Threadline's search attributes (`threadline dev` registers them).",
    )
    add_store(listing)
    listing.add_argument("--program", help="only conversations of this program")
    listing.add_argument("--state", choices=STATES, help="running, idle (open and waiting) or closed")
    listing.add_argument(
        "--updated-after", metavar="TIME", help="only those updated after TIME (ISO 8601, with a zone)"
    )
    listing.add_argument("--max-age-hours", type=float, metavar="H", help="only those updated in the last H hours")
    listing.add_argument("--limit", type=int, default=100, help="at most this many (1-1000, default 100)")
    listing.add_argument("--cursor", help="the next page: the cursor the previous page printed")
    listing.set_defaults(run=run_list)


async def run_start(args: argparse.Namespace, out: Output) -> int:
    """Start a flow and print its first prompt."""
    chat = await open_local(args, env_settings())
    reply = await chat.start_flow(args.flow, args.message, request_id=args.request_id)
    data = {"conversation": chat.id, "flow": args.flow, "prompt": reply.response, "turn": reply.turn}
    out.emit(data, str(reply.response))
    return 0


async def run_show(args: argparse.Namespace, out: Output) -> int:
    """Print where the latest flow stands (read from the store: works while Temporal is down)."""
    chat = await open_local(args, env_settings())
    view = await chat.flow()
    out.emit({"conversation": chat.id, **view.as_dict()}, flow_text(view) or f"Conversation {chat.id} had no flow.")
    return 0


async def run_stop(args: argparse.Namespace, out: Output) -> int:
    """Ask the conversation to stop its active flow."""
    chat = await open_local(args, env_settings())
    await chat.stop_flow()
    out.emit({"conversation": chat.id, "stop": "flow"}, f"Asked {chat.id} to stop its flow.")
    return 0


async def run_list(args: argparse.Namespace, out: Output) -> int:
    """Print a page of conversations, and the cursor of the next one."""
    from threadline.client import connect

    settings = env_settings()
    settings.store_folder(args.store)
    tl = await connect(settings)
    close_at_end(tl.close)
    page = await tl.conversations(
        store=args.store,
        program=args.program,
        state=args.state,
        updated_after=_since(args),
        limit=args.limit,
        cursor=args.cursor,
    )
    rows = [c.as_dict() for c in page.conversations]
    out.emit({"conversations": rows, "cursor": page.cursor}, listing_text(rows, page.cursor, out))
    return 0


def _since(args: argparse.Namespace) -> datetime | None:
    if args.max_age_hours is not None:
        return datetime.now(UTC) - timedelta(hours=args.max_age_hours)
    if args.updated_after is None:
        return None
    try:
        return datetime.fromisoformat(args.updated_after.replace("Z", "+00:00"))
    except ValueError:
        raise ThreadlineError(
            ErrorCode.INVALID_REQUEST, "--updated-after is an ISO 8601 time, e.g. 2026-01-31T12:00Z"
        ) from None


def flow_text(view: FlowView) -> str:
    """A flow's state as `name  value` lines (empty when no flow ever ran)."""
    if view.state is None:
        return ""
    rows = [("flow", view.flow or "-"), ("state", view.state), ("step", view.step or "-")]
    rows.append(("prompt", (view.prompt or "-") + (" (sent again: a reminder)" if view.reminded else "")))
    rows.append(("data", output.dumps(view.data)))
    rows += [("counts", f"{name}: {_counted(count)}") for name, count in view.as_dict()["counts"].items()]
    return output.fields(rows)


def _counted(count: Mapping[str, Any]) -> str:
    ends = ", ".join(f"{count[k]} {k.replace('_', ' ')}" for k in ("started", "completed", "abandoned", "handed_off"))
    invalid = ", ".join(f"{step} {n}" for step, n in count["invalid"].items()) or "none"
    return f"{ends}; invalid answers: {invalid}"


def listing_text(rows: list[dict[str, Any]], cursor: str | None, out: Output) -> str:
    """The conversations as `CONVERSATION PROGRAM STATE TURNS UPDATED FLOW` rows, then the next cursor."""
    if not rows:
        return "No conversations."
    cells = [
        (r["conversation"], r["program"] or "-", r["state"], str(r["turns"] or 0), r["updated_at"] or "-", _flow(r))
        for r in rows
    ]
    text = output.table(("CONVERSATION", "PROGRAM", "STATE", "TURNS", "UPDATED", "FLOW"), cells, out, state_column=2)
    return text + (f"\nnext page: --cursor {cursor}" if cursor else "")


def _flow(row: Mapping[str, Any]) -> str:
    return f"{row['flow']} ({row['flow_state']})" if row.get("flow") else "-"
