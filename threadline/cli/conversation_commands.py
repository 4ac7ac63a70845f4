"""The conversation commands: `send`, `render`, `ask-again`, `turns`, `show`, `history`, `stop`, `head` and `close`."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import TYPE_CHECKING, Any, cast

from core.errors import ErrorCode, ThreadlineError
from core.sends import SENDS

from . import output
from .coding import add_code_options, code_options
from .common import (
    Chat,
    Progress,
    Subcommands,
    add_conversation,
    branch_tree,
    env_settings,
    message_inputs,
    open_conversation,
    open_local,
    through_service,
)
from .output import Output

if TYPE_CHECKING:
    from core.models import TurnOutcome
    from threadline.client import Conversation

FIRST_LOOK_S = 0.1
"""How long `send` waits for its answer before it reads the log for its turn (to stream its text)."""
PLACED_POLL_S = 0.05
"""How often it reads the log for its turn after that, until the turn is there or answered."""

_SEND_EPILOG = """\
MESSAGE is the program's input: for `tutor`, its `message`. For a program whose input is not
a single text, give a JSON object of its inputs by name, e.g.
  threadline send quiz-1 '{"topic": "fractions", "level": 2}' --program quiz
(programs come from THREADLINE_PROGRAMS). Exit status 1 when the turn did not end `done` (or wait
for a person: then it lists what the turn asks; answer with `threadline approve`), and when no
worker took the send within seconds: it is kept (`server-unavailable`, its request id in the
message); the same command with `--request-id` again prints how it ended. With `--no-wait`, a kept
send prints `queued` and its request id, and exits 0."""


def add_commands(commands: Subcommands, common: argparse.ArgumentParser) -> None:
    """Add the conversation commands, in the order `--help` lists them."""
    for add in (_add_send, _add_render, _add_reading, _add_acting):
        add(commands, common)


def _add_send(commands: Subcommands, common: argparse.ArgumentParser) -> None:
    send = commands.add_parser(
        "send",
        parents=[common],
        help="send a turn and print how it ended",
        description="Send a turn to conversation ID (started if new) and print how it ended.",
        epilog=_SEND_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_conversation(send, program=True)
    send.add_argument("message", metavar="MESSAGE", help="the input, or a JSON object of inputs")
    send.add_argument("--request-id", metavar="R", help="an idempotency key: the same R is one turn")
    send.add_argument("--from", dest="from_turn", metavar="TURN", help="continue after exactly TURN (a branch)")
    send.add_argument(
        "--sends", choices=SENDS, default="queue", help="while a turn runs (steer: join it at its next step)"
    )
    send.add_argument("--lm", metavar="MODEL", help="the model for this turn (default THREADLINE_MODEL)")
    send.add_argument(
        "--approve",
        metavar="RULE",
        help="which tool calls ask first, for this turn: changes, all, a JSON list of tools, or a JSON object "
        'with a deadline: \'{"within": "PT1H", "then": "deny"}\'',
    )
    add_code_options(send)
    send.add_argument(
        "--budget",
        metavar="JSON",
        help='what the conversation may spend: \'{"tokens": 50000, "cost": 0.5}\' (refused budget-exceeded beyond)',
    )
    send.add_argument("--no-wait", action="store_true", help="print the turn id once placed; do not wait")
    send.set_defaults(run=run_send)


def _add_render(commands: Subcommands, common: argparse.ArgumentParser) -> None:
    render = commands.add_parser(
        "render",
        parents=[common],
        help="print the request the next turn would send",
        description="Print the exact request a turn with MESSAGE would send to the model now: the earlier "
        "turns it would be shown, placed by the same rules as a send. Nothing is sent or recorded.",
    )
    add_conversation(render, program=True)
    render.add_argument("message", metavar="MESSAGE", help="the input, or a JSON object of inputs")
    render.add_argument("--from", dest="from_turn", metavar="TURN", help="as if continuing after exactly TURN")
    render.add_argument("--lm", metavar="MODEL", help="the model (default THREADLINE_MODEL)")
    render.set_defaults(run=run_render)

    again = commands.add_parser(
        "ask-again",
        parents=[common],
        help="send a turn's exact request again and print the answer",
        description="Send turn TURN's exact request to its model again and print the answer; nothing is "
        "recorded unless --record (then a new turn beside it, under the same parent).",
    )
    add_conversation(again)
    again.add_argument("turn", metavar="TURN", help="the turn to ask again")
    again.add_argument("--lm", metavar="MODEL", help="another model (default: the one the turn asked)")
    again.add_argument("--record", action="store_true", help="record it as a new turn beside TURN")
    again.set_defaults(run=run_ask_again)


def _add_reading(commands: Subcommands, common: argparse.ArgumentParser) -> None:
    turns = commands.add_parser("turns", parents=[common], help="list a conversation's turns")
    add_conversation(turns)
    turns.add_argument("--all", action="store_true", help="every turn of every branch, not just root to head")
    turns.add_argument("--limit", type=int, metavar="N", help="at most N turns (a page of a long list)")
    turns.add_argument("--after", metavar="TURN", help="the turns after TURN in the list")
    turns.add_argument("--before", metavar="TURN", help="the turns before TURN in the list (with --limit: the last N)")
    turns.set_defaults(run=run_turns)

    show = commands.add_parser(
        "show",
        parents=[common],
        help="print a conversation's branch tree",
        description="Print every turn as a tree by parent links, the head marked `*`. A lone child is "
        "printed in its parent's column; where the conversation branches, each branch is indented.",
    )
    add_conversation(show)
    show.set_defaults(run=run_show)

    history = commands.add_parser(
        "history",
        parents=[common],
        help="print what the model is given of the branch",
        description="Print the compressed view of the branch to the head: the newest summary and its key "
        "facts, how many turns are on the branch, shown verbatim and summarised, and the topics.",
    )
    add_conversation(history)
    history.set_defaults(run=run_history)


def _add_acting(commands: Subcommands, common: argparse.ArgumentParser) -> None:
    stop = commands.add_parser("stop", parents=[common], help="stop a turn, or every running and queued turn")
    add_conversation(stop)
    stop.add_argument("turn", metavar="TURN", nargs="?", help="the turn to stop (default: all)")
    stop.set_defaults(run=run_stop)

    head = commands.add_parser("head", parents=[common], help="move a conversation's head to a turn")
    add_conversation(head)
    head.add_argument("turn", metavar="TURN", help="the turn that becomes the head")
    head.set_defaults(run=run_head)

    close = commands.add_parser(
        "close",
        parents=[common],
        help="close a conversation (with --purge, remove it for good)",
        description="Close conversation ID's workflow: queued sends are answered `conversation-closed`, "
        "a running turn stops, its schedules are deleted; its records stay and a new send reopens it. "
        "With --purge it is also removed from its store (records, its turns' streams and call-log "
        "lines) and the id can be used again; a turn that runs or waits refuses that "
        "(`conversation-running`) unless --force.",
    )
    add_conversation(close)
    close.add_argument("--purge", action="store_true", help="remove it from its store too")
    close.add_argument("--force", action="store_true", help="with --purge: stop a running turn first")
    close.set_defaults(run=run_close)


def approve_option(text: str | None) -> Any:
    """`--approve`: a rule's name as it is, or JSON (a list of tool names, or the object with a deadline).

    Raises:
        ThreadlineError: `invalid-request` for text that is neither.
    """
    if text is None or text in ("changes", "all"):
        return text
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        message = "--approve is changes, all, a JSON list of tool names, or a JSON object with a deadline"
        raise ThreadlineError(ErrorCode.INVALID_REQUEST, message) from None


def budget_option(text: str | None) -> Any:
    """`--budget`: a JSON object `{"tokens": N, "cost": X}` (`invalid-request` for anything else)."""
    from threadline.options import budget_of

    if text is None:
        return None
    try:
        return budget_of(json.loads(text))
    except (json.JSONDecodeError, AttributeError, TypeError):
        message = '--budget is a JSON object: {"tokens": N, "cost": X}'
        raise ThreadlineError(ErrorCode.INVALID_REQUEST, message) from None


async def run_send(args: argparse.Namespace, out: Output) -> int:
    """Send a turn; print how it ended (or, with `--no-wait`, where it was placed, or that it is queued)."""
    from threadline.delivery import Queued

    settings = env_settings()
    inputs = message_inputs(args.message, args.program, settings)
    budget = budget_option(args.budget)
    chat = await open_conversation(args, settings, sends=args.sends, budget=budget, **code_options(args))
    if args.from_turn:
        chat = chat.continue_from(args.from_turn)
    async with Progress.on_stderr() as progress:
        if not args.no_wait and not through_service():
            outcome, streamed = await _delivered(cast("Conversation", chat), args, inputs, out, progress)
        else:
            try:
                handle = await chat.send(
                    request_id=args.request_id, lm=args.lm, approve=approve_option(args.approve), **inputs
                )
            except Queued as kept:
                if not args.no_wait:
                    raise  # exit 1 `server-unavailable`: the send is kept, its answer is not here
                data = {"conversation": chat.id, "turn": None, "request_id": kept.request_id, "state": "queued"}
                out.emit(data, output.fields([("queued", kept.request_id)]))
                return 0
            if args.no_wait and handle.id is not None:
                data = {
                    "conversation": chat.id,
                    "turn": handle.id,
                    "parent": handle.parent,
                    "request_id": handle.request_id,
                }
                out.emit(data, output.fields([("turn", handle.id), ("parent", handle.parent or "-")]))
                return 0
            progress.turn = handle.id
            streamed = False
            if not out.json and handle.id is not None:
                streamed = await _print_stream(chat, handle.id, out, progress)
            outcome = await chat.outcome(handle.request_id)
    text = "\n".join(
        filter(None, [output.outcome_text(outcome, out, answer=not streamed), output.approvals_text(outcome.approvals)])
    )
    out.emit({"conversation": chat.id, **outcome.model_dump(mode="json")}, text)
    return 0 if outcome.state in ("done", "waiting") else 1


async def _delivered(
    chat: Conversation, args: argparse.Namespace, inputs: dict[str, Any], out: Output, progress: Progress
) -> tuple[TurnOutcome, bool]:
    """Send the turn and wait for how it ends in one update-with-start (`Handle.submit`; a send no worker
    took in time is `Queued` at once, exit 1, as a placed one is); return the outcome and whether its
    text was printed.

    Placing first and then asking how it ended cost a second call to Temporal and a workflow task,
    and kept the worker from placing and running the turn in one step. The turn's id comes from the
    record log instead: its text streams from there while it runs, or from its stream once the answer
    came (a turn answered in its first moments costs no read of the log at all).
    """
    from core.models import check_inputs
    from threadline.options import SendOptions

    check_inputs(inputs)
    send = chat.sent(inputs, SendOptions(args.request_id, args.lm, approve_option(args.approve)))
    answered = asyncio.ensure_future(chat.submit(send, keep_waiting=False))
    try:
        turn = None
        if not out.json or progress.noting:  # the text streams; a terminal's note names the turn
            turn = await _placed_while_running(chat, send.request_id, answered)
            progress.turn = turn
        streamed = False
        if not out.json and turn is not None:
            streamed = await _print_stream(chat, turn, out, progress)
        outcome = await answered
        if not out.json and turn is None and outcome.turn is not None:
            streamed = await _print_stream(chat, outcome.turn, out, progress)
    finally:
        if not answered.done():
            answered.cancel()
    return outcome, streamed


async def _placed_while_running(chat: Conversation, request_id: str, answered: asyncio.Future[Any]) -> str | None:
    """The turn the send `request_id` began, once the log holds it; None once the send is answered
    first. The log is first read after `FIRST_LOOK_S`: most turns the offline model answers by then."""
    await asyncio.wait({answered}, timeout=FIRST_LOOK_S)
    while not answered.done():
        turn = await chat.placed_turn(request_id)
        if turn is not None:
            return turn
        await asyncio.wait({answered}, timeout=PLACED_POLL_S)
    return None


async def _print_stream(chat: Chat, turn: str, out: Output, progress: Progress) -> bool:
    """Print the answer's text as it arrives; return whether any was printed."""
    stream = out.stream or sys.stdout
    printed = False
    async for piece in chat.watch(turn):
        progress.quiet()
        if piece.text is None:  # the model was asked again: start the text over on a new line
            stream.write("\n[asked again]\n" if printed else "")
        else:
            stream.write(piece.text)
            printed = True
        stream.flush()
    if printed:
        stream.write("\n\n")
    return printed


async def run_render(args: argparse.Namespace, out: Output) -> int:
    """Print the request a turn with MESSAGE would send now; send and record nothing."""
    from .remote import refuse_remote

    refuse_remote("render")
    settings = env_settings()
    inputs = message_inputs(args.message, args.program, settings)
    chat = await open_local(args, settings)
    if args.from_turn:
        # A send would be refused `turn-unknown`; without this check the preview would show a new root.
        chat = chat.continue_from(await chat.turn(args.from_turn))
    data = (await chat.render(lm=args.lm, **inputs)).model_dump(mode="json")
    out.emit({"conversation": chat.id, "store": args.store, **data}, output.render_text(data))
    return 0


async def run_ask_again(args: argparse.Namespace, out: Output) -> int:
    """Print what turn TURN's request answers when sent again (recorded beside it only with `--record`)."""
    from .remote import refuse_remote

    refuse_remote("ask-again")
    chat = await open_local(args, env_settings())
    asked = await (await chat.turn(args.turn)).ask_again(lm=args.lm, record=args.record)
    data = {"conversation": chat.id, "store": args.store, **asked.model_dump(mode="json")}
    rows = [("turn", asked.turn), ("model", asked.model), ("recorded", asked.branch or "nothing")]
    out.emit(data, output.fields(rows) + "\n\n" + output.text_of(asked.result))
    return 0


async def run_turns(args: argparse.Namespace, out: Output) -> int:
    """Print the turns from the first to the head (`--all`: every turn)."""
    chat = await open_conversation(args, env_settings())
    turns = await chat.turns(args.all, limit=args.limit, after=args.after, before=args.before)
    data = {"conversation": chat.id, "store": args.store, "turns": [turn.as_dict() for turn in turns]}
    out.emit(data, output.turns_table(turns, out) if turns else f"Conversation {chat.id} has no turns.")
    return 0


async def run_show(args: argparse.Namespace, out: Output) -> int:
    """Print every turn as a tree by parent links, the head marked."""
    chat = await open_conversation(args, env_settings())
    data = await branch_tree(chat)
    text = output.tree_text(data["turns"], data["head"], out) or f"Conversation {chat.id} has no turns."
    with output.nesting(output.tree_depth(data["turns"])):
        out.emit(data, text)
    return 0


async def run_history(args: argparse.Namespace, out: Output) -> int:
    """Print the compressed view of the branch to the head: summary, key facts, counts, topics."""
    chat = await open_conversation(args, env_settings())
    data = await chat.history()
    out.emit({"store": args.store, **data}, output.history_text(data))
    return 0


async def run_stop(args: argparse.Namespace, out: Output) -> int:
    """Ask a conversation to stop one turn, or everything running and queued."""
    chat = await open_conversation(args, env_settings())
    await chat.stop(args.turn)
    what = f"turn {args.turn}" if args.turn else "every running and queued turn"
    out.emit({"conversation": chat.id, "store": args.store, "stop": args.turn}, f"Asked {chat.id} to stop {what}.")
    return 0


async def run_head(args: argparse.Namespace, out: Output) -> int:
    """Move a conversation's head to a turn."""
    chat = await open_conversation(args, env_settings())
    await chat.head(args.turn)
    out.emit({"conversation": chat.id, "store": args.store, "head": args.turn}, f"Head of {chat.id}: {args.turn}")
    return 0


async def run_close(args: argparse.Namespace, out: Output) -> int:
    """Close a conversation, or purge it."""
    chat = await open_conversation(args, env_settings())
    if not args.purge:
        closing = await chat.close()
        shown = {"conversation": chat.id, "store": args.store, "was_open": closing.was_open, "records_kept": True}
        out.emit(shown, f"Closed {chat.id}; its records are kept.")
        return 0
    purged = await chat.purge(force=args.force)
    removed = {"records": purged.records, "streams": purged.streams, "calls": purged.calls}
    shown = {"conversation": chat.id, "store": args.store, "records_kept": False, "removed": removed}
    out.emit(shown, f"Removed {chat.id}: {purged.records} records, {purged.calls} call-log lines.")
    return 0
