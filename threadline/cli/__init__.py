"""The `threadline` command: a dev server with a worker, a worker alone, the HTTP service, and
conversations from the shell.

    threadline dev --demo                      # a Temporal dev server, a worker and a short demo
    threadline send alex "What is 1/2 + 1/3?"  # a turn, and how it ended
    threadline chat alex                       # one turn a line, answers as they arrive; /help
    threadline turns alex                      # the turns from the first to the head
    threadline show alex                       # every turn as a branch tree, the head marked *
    threadline history alex                    # the summary, key facts and counts the model is given
    threadline render alex "And 1/4?"          # the request the next turn would send; nothing sent
    threadline rate alex TURN right            # rate a turn, as functai rates a call
    threadline evaluate tutor --metric exact_match   # ask the rated rows again and score them
    threadline flow start alex order           # a guided flow: its first prompt; messages then answer it
    threadline list --state idle               # conversations from Temporal visibility
    threadline approve shop-1 TURN [--deny]    # answer what a waiting turn asks; it goes on by itself
    threadline schedule add alex "Any news?" --every PT1H   # a turn sent on a schedule
    threadline settings alex --budget '{"tokens": 80000}'  # change what its next turns may spend
    threadline serve --port 8000               # the HTTP service
    threadline store copy default postgresql://db/threadline   # a folder store into PostgreSQL

Every command takes `--json` for JSON on stdout, one object per line. Errors print
`error: <code>: <message>` on stderr (with `--json`, `{"error": {"code", "message"}}` on stdout) and
exit 1; usage errors exit 2.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Coroutine, Sequence
from typing import Any, NoReturn

from core.errors import ThreadlineError

# Only what parsing needs is imported here, and by the command modules at their top: `--help` and a
# usage error print at once, and a command loads Temporal, pydantic and the stores (imported where
# they are used) only when it runs. tests/surfaces/test_cli_imports.py holds this.
from . import (
    acting_commands,
    chat,
    conversation_commands,
    flow_commands,
    learning_commands,
    schedule_commands,
    serving,
    settings_commands,
    store_commands,
)
from .common import Command, close_opened
from .output import Output


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
    import asyncio

    from core import logs
    from threadline.crossing import SDK_ERROR, error_of

    out = Output.for_stdout(json=getattr(args, "json", False))
    # The demo's conversation is what `make run` shows: its workers' info lines would interleave with it.
    serving = args.command in {"dev", "worker", "serve"} and not getattr(args, "demo", False)
    # A command that only asks a service imports structlog when it first logs (most never do); one that
    # runs a worker or an HTTP server has modules that log through structlog directly.
    asks_only = args.command not in {"dev", "worker", "serve", "codec"}
    logs.configure("info" if serving else "warning", lazy=asks_only)
    _core_logs_to_stderr()
    command: Command = args.run
    try:
        return asyncio.run(_closing(command(args, out)))
    except ThreadlineError as err:
        out.error(err)
    except SDK_ERROR as err:  # a call that missed `crossing` (none should): still a coded error
        out.error(error_of(err))
    except KeyboardInterrupt:
        return 130
    return 1


def _core_logs_to_stderr() -> None:
    """Send the Temporal SDK core's own log lines (its retries while a server is down) through the
    logging `core.logs` set up, to stderr: printed on stdout they broke `--json` output."""
    import logging

    from temporalio.runtime import LogForwardingConfig, LoggingConfig, Runtime, TelemetryConfig

    forwarded = LoggingConfig(LoggingConfig.default.filter, LogForwardingConfig(logging.getLogger("temporalio.core")))
    Runtime.set_default(Runtime(telemetry=TelemetryConfig(logging=forwarded)), error_if_already_set=False)


async def _closing(running: Coroutine[Any, Any, int]) -> int:
    try:
        return await running
    finally:
        await close_opened()


def build_parser() -> argparse.ArgumentParser:
    """The argument parser: one subcommand per command, each taking `--json`."""
    common = argparse.ArgumentParser(add_help=False)
    # SUPPRESS on both levels: otherwise the subcommand's default would undo `threadline --json send ...`.
    common.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print JSON on stdout")
    parser = argparse.ArgumentParser(
        prog="threadline", description="Durable multi-turn LLM conversations on Temporal.", parents=[common]
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    serving.add_commands(commands, common)
    chat.add_command(commands, common)
    conversation_commands.add_commands(commands, common)
    store_commands.add_commands(commands, common)
    learning_commands.add_commands(commands, common)
    flow_commands.add_commands(commands, common)
    acting_commands.add_commands(commands, common)
    schedule_commands.add_commands(commands, common)
    settings_commands.add_commands(commands, common)
    return parser
