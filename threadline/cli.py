"""The `threadline` command: a dev server with a worker, a worker alone, and conversations from the shell.

    threadline dev --demo                      # a Temporal dev server, a worker and a short demo
    threadline send alex "What is 1/2 + 1/3?"  # a turn, and how it ended
    threadline turns alex                      # the turns from the first to the head

Every command takes `--json` for JSON on stdout, one object per line. Errors print
`error: <code>: <message>` on stderr (with `--json`, `{"error": {"code", "message"}}` on stdout) and
exit 1; usage errors exit 2.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import os
import signal
import sys
import uuid
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, NoReturn, TypeAlias

from temporalio.client import Client
from temporalio.service import RPCError

import worker
from core import logs
from core.errors import ErrorCode, ThreadlineError
from core.settings import Settings
from store.base import check_id

from . import _format
from ._format import Output
from .client import Conversation, connect, from_failure, workflow_id
from .devserver import DevServer

Command = Callable[[argparse.Namespace, Output], Coroutine[Any, Any, int]]
Subcommands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"  # not subscriptable at run time

DEMO_QUESTIONS = ("Hi, I'm Alex.", "What is 1/2 + 1/3?", "Is it 2/5?")
_RESERVED_INPUTS = frozenset({"request_id", "lm"})
_SEND_EPILOG = """\
MESSAGE is the program's input: for `tutor`, its `message`. For a program whose input is not
a single text, give a JSON object of its inputs by name, e.g.
  threadline send quiz-1 '{"topic": "fractions", "level": 2}' --program quiz
(programs come from THREADLINE_PROGRAMS). Exit status 1 when the turn did not end `done`."""


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """Run the `threadline` command with `argv` (default: the process's arguments) and exit with its status."""
    status = run(argv)
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown: the Temporal client's Rust threads can call into a finalizing interpreter
    # and abort a command that already succeeded (temporalio/sdk-python#300, seen here in ~5% of runs).
    os._exit(status)


def run(argv: Sequence[str] | None = None) -> int:
    """Run the `threadline` command with `argv`; return its exit status (usage errors raise SystemExit)."""
    args = build_parser().parse_args(argv)
    out = Output.for_stdout(json=getattr(args, "json", False))
    logs.configure("info" if args.command in {"dev", "worker"} else "warning")
    command: Command = args.run
    try:
        return asyncio.run(command(args, out))
    except ThreadlineError as err:
        out.error(err)
    except RPCError as err:
        out.error(from_failure(err))
    except KeyboardInterrupt:
        return 130
    return 1


def build_parser() -> argparse.ArgumentParser:
    """The argument parser: one subcommand per command, each taking `--json`."""
    common = argparse.ArgumentParser(add_help=False)
    # SUPPRESS on both levels: otherwise the subcommand's default would undo `threadline --json send ...`.
    common.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print JSON on stdout")
    parser = argparse.ArgumentParser(
        prog="threadline", description="Durable multi-turn LLM conversations on Temporal.", parents=[common]
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in (_add_dev, _add_worker, _add_send, _add_turns, _add_stop, _add_head):
        add(commands, common)
    return parser


def _add_dev(commands: Subcommands, common: argparse.ArgumentParser) -> None:
    dev = commands.add_parser(
        "dev",
        parents=[common],
        help="run a Temporal dev server and a worker",
        description="Run a Temporal dev server (state in $THREADLINE_DATA/temporal) and a worker until "
        "Ctrl-C or SIGTERM. With --json, one JSON object per line: ready, each demo turn, the demo's link.",
    )
    dev.add_argument("--port", type=int, default=7233, help="the Temporal frontend's port (default 7233)")
    dev.add_argument("--ui-port", type=int, default=8233, help="the web UI's port; 0 for none (default 8233)")
    dev.add_argument("--server-only", action="store_true", help="run the server without a worker")
    dev.add_argument("--demo", action="store_true", help="hold a short conversation with the offline model")
    dev.set_defaults(run=run_dev)


def _add_worker(commands: Subcommands, common: argparse.ArgumentParser) -> None:
    summary = "run a worker for the server at THREADLINE_TEMPORAL_ADDRESS"
    commands.add_parser("worker", parents=[common], help=summary, description=summary).set_defaults(run=run_worker)


def _add_send(commands: Subcommands, common: argparse.ArgumentParser) -> None:
    send = commands.add_parser(
        "send",
        parents=[common],
        help="send a turn and print how it ended",
        description="Send a turn to conversation ID (started if new) and print how it ended.",
        epilog=_SEND_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    send.add_argument("id", metavar="ID", help="the conversation id")
    send.add_argument("message", metavar="MESSAGE", help="the input, or a JSON object of inputs")
    send.add_argument("--program", default="tutor", help="the conversation's program (default tutor)")
    _add_store(send)
    send.add_argument("--request-id", metavar="R", help="an idempotency key: the same R is one turn")
    send.add_argument("--from", dest="from_turn", metavar="TURN", help="continue after exactly TURN (a branch)")
    send.add_argument("--sends", choices=("queue", "refuse", "branch"), default="queue", help="while a turn runs")
    send.add_argument("--lm", metavar="MODEL", help="the model for this turn (default THREADLINE_MODEL)")
    send.add_argument("--no-wait", action="store_true", help="print the turn id once placed; do not wait")
    send.set_defaults(run=run_send)


def _add_turns(commands: Subcommands, common: argparse.ArgumentParser) -> None:
    turns = commands.add_parser("turns", parents=[common], help="list a conversation's turns")
    turns.add_argument("id", metavar="ID", help="the conversation id")
    turns.add_argument("--all", action="store_true", help="every turn of every branch, not just root to head")
    _add_store(turns)
    turns.set_defaults(run=run_turns)


def _add_stop(commands: Subcommands, common: argparse.ArgumentParser) -> None:
    stop = commands.add_parser("stop", parents=[common], help="stop a turn, or every running and queued turn")
    stop.add_argument("id", metavar="ID", help="the conversation id")
    stop.add_argument("turn", metavar="TURN", nargs="?", help="the turn to stop (default: all)")
    _add_store(stop)
    stop.set_defaults(run=run_stop)


def _add_head(commands: Subcommands, common: argparse.ArgumentParser) -> None:
    head = commands.add_parser("head", parents=[common], help="move a conversation's head to a turn")
    head.add_argument("id", metavar="ID", help="the conversation id")
    head.add_argument("turn", metavar="TURN", help="the turn that becomes the head")
    _add_store(head)
    head.set_defaults(run=run_head)


def _add_store(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--store", default="default", help="the store (default; others from THREADLINE_STORES)")


# ----- serving


async def run_dev(args: argparse.Namespace, out: Output) -> int:
    """Run a dev server and, unless `--server-only`, a worker (and the demo) until SIGINT or SIGTERM."""
    settings = Settings.from_env()
    stop = asyncio.Event()
    _trap_signals(stop)
    async with DevServer(settings.data / "temporal", port=args.port, ui_port=args.ui_port) as server:
        settings = dataclasses.replace(settings, address=server.address)
        out.emit(*_ready(server, settings, serving=not args.server_only))
        if args.server_only:
            await stop.wait()
            return 0
        client = await worker.connect(settings)
        demo = asyncio.create_task(_demo(client, settings, ui_url=server.ui_url, out=out)) if args.demo else None
        try:
            await worker.run(settings, client=client, stop=stop)
        finally:
            # worker.run removes its signal handlers: a second Ctrl-C must still let the server stop in order.
            _trap_signals(stop)
            await _cancel(demo)
    return 0


async def run_worker(args: argparse.Namespace, out: Output) -> int:
    """Run a worker for the server at THREADLINE_TEMPORAL_ADDRESS until SIGINT or SIGTERM."""
    settings = Settings.from_env()
    client = await worker.connect(settings)
    data = {"address": settings.address, "task_queue": settings.task_queue}
    out.emit(data, f"Worker on task queue {settings.task_queue!r} at {settings.address}; press Ctrl-C to stop.")
    await worker.run(settings, client=client)
    return 0


def _ready(server: DevServer, settings: Settings, *, serving: bool) -> tuple[dict[str, Any], str]:
    queue = settings.task_queue if serving else None
    data = {"address": server.address, "ui_url": server.ui_url, "task_queue": queue, "data": str(settings.data)}
    rows = [("Temporal:", server.address), ("Temporal UI:", server.ui_url or "off")]
    rows += [("Worker:", f"task queue {queue}" if queue else "off (--server-only)"), ("Data:", str(settings.data))]
    return data, _format.fields(rows, gap=1) + "\nPress Ctrl-C to stop."


async def _demo(client: Client, settings: Settings, *, ui_url: str | None, out: Output) -> None:
    """Hold a three-turn conversation with the offline model, then say where the UI shows it."""
    chat = (await connect(settings, client=client)).conversation("tutor", f"demo-{uuid.uuid4().hex[:8]}", lm="offline")
    out.emit({"demo": chat.id}, f"\nDemo conversation {chat.id} (tutor, offline model):")
    try:
        for question in DEMO_QUESTIONS:
            turn = await chat.predict(question)
            data = {"demo": chat.id, "turn": turn.id, "question": question, "answer": turn.result}
            out.emit(data, f"  you:   {question}\n  tutor: {_format.text_of(turn.result)}")
    except ThreadlineError as err:
        out.error(err)
        return
    url = _format.workflow_url(ui_url, settings.namespace, workflow_id("default", chat.id)) if ui_url else None
    out.emit(
        {"demo": chat.id, "ui": url}, f"See it in the Temporal UI: {url}" if url else "The UI is off (--ui-port 0)."
    )


def _trap_signals(stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)


async def _cancel(task: asyncio.Task[None] | None) -> None:
    if task is not None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


# ----- conversations


async def run_send(args: argparse.Namespace, out: Output) -> int:
    """Send a turn; print how it ended (or, with `--no-wait`, where it was placed)."""
    settings = Settings.from_env()
    inputs = _inputs(args.message, args.program, settings)
    chat = await _conversation(args, settings, sends=args.sends)
    if args.from_turn:
        chat = chat.continue_from(args.from_turn)
    handle = await chat.send(request_id=args.request_id, lm=args.lm, **inputs)
    if args.no_wait and handle.id is not None:
        data = {"conversation": chat.id, "turn": handle.id, "parent": handle.parent, "request_id": handle.request_id}
        out.emit(data, _format.fields([("turn", handle.id), ("parent", handle.parent or "-")]))
        return 0
    streamed = False
    if not out.json and handle.id is not None:
        streamed = await _print_stream(chat, handle.id, out)
    outcome = await chat.outcome(handle.request_id)
    text = _format.outcome_text(outcome, out, answer=not streamed)
    out.emit({"conversation": chat.id, **outcome.model_dump(mode="json")}, text)
    return 0 if outcome.state == "done" else 1


async def _print_stream(chat: Conversation, turn: str, out: Output) -> bool:
    """Print the answer's text as it arrives; return whether any was printed."""
    stream = out.stream or sys.stdout
    printed = False
    async for piece in chat.watch(turn):
        if piece.text is None:  # the model was asked again: start the text over on a new line
            stream.write("\n[asked again]\n" if printed else "")
        else:
            stream.write(piece.text)
            printed = True
        stream.flush()
    if printed:
        stream.write("\n\n")
    return printed


async def run_turns(args: argparse.Namespace, out: Output) -> int:
    """Print the turns from the first to the head (`--all`: every turn)."""
    chat = await _conversation(args, Settings.from_env())
    turns = await chat.turns(all=args.all)
    data = {"conversation": chat.id, "store": args.store, "turns": [turn.as_dict() for turn in turns]}
    out.emit(data, _format.turns_table(turns, out) if turns else f"Conversation {chat.id} has no turns.")
    return 0


async def run_stop(args: argparse.Namespace, out: Output) -> int:
    """Ask a conversation to stop one turn, or everything running and queued."""
    chat = await _conversation(args, Settings.from_env())
    await chat.stop(args.turn)
    what = f"turn {args.turn}" if args.turn else "every running and queued turn"
    out.emit({"conversation": chat.id, "store": args.store, "stop": args.turn}, f"Asked {chat.id} to stop {what}.")
    return 0


async def run_head(args: argparse.Namespace, out: Output) -> int:
    """Move a conversation's head to a turn."""
    chat = await _conversation(args, Settings.from_env())
    await chat.head(args.turn)
    out.emit({"conversation": chat.id, "store": args.store, "head": args.turn}, f"Head of {chat.id}: {args.turn}")
    return 0


async def _conversation(args: argparse.Namespace, settings: Settings, **options: Any) -> Conversation:
    """A handle on conversation `args.id`; a bad id or store fails before Temporal is asked anything."""
    check_id(args.id)
    settings.store_folder(args.store)
    threadline = await connect(settings)
    return threadline.conversation(getattr(args, "program", "tutor"), args.id, store=args.store, **options)


def _inputs(message: str, program: str, settings: Settings) -> dict[str, Any]:
    """MESSAGE as the inputs of `program`: its one input, or a JSON object of several."""
    known = worker.load_programs(settings.programs).get(program)
    if known is not None and len(known.inputs) == 1:
        return {known.inputs[0][0]: message}
    inputs = _json_object(message)
    if inputs is None:
        wanted = ", ".join(name for name, _ in known.inputs) if known else "its inputs"
        raise ThreadlineError(ErrorCode.INPUTS_INVALID, f"{program} takes {wanted}: give MESSAGE as a JSON object")
    if clash := sorted(_RESERVED_INPUTS & inputs.keys()):
        raise ThreadlineError(ErrorCode.INPUTS_INVALID, f"inputs named {', '.join(clash)} cannot be sent from here")
    return inputs


def _json_object(text: str) -> dict[str, Any] | None:
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
