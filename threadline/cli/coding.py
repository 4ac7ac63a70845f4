"""The `send` options of programs with code and changed programs: `--earlier-without` and `--remember`."""

from __future__ import annotations

import argparse
from typing import Any

from core.errors import ErrorCode, ThreadlineError

_MODES = ("conversation", "turn", "own")


def add_code_options(parser: argparse.ArgumentParser) -> None:
    """Add `--earlier-without NAME` and `--remember HELPER=MODE[:steps]` (each may be given again)."""
    parser.add_argument(
        "--earlier-without",
        action="append",
        metavar="NAME",
        help="an output the program now writes that earlier turns lack (reasoning); they are shown without it",
    )
    parser.add_argument(
        "--remember",
        action="append",
        metavar="HELPER=MODE",
        help="what a helper of a program with code remembers: conversation, turn (`:steps` adds its tool "
        "calls) or own (a conversation its code uses)",
    )


def code_options(args: argparse.Namespace) -> dict[str, Any]:
    """The options as `Threadline.conversation` takes them."""
    remembers: dict[str, Any] = {}
    for given in args.remember or ():
        helper, _, mode = given.partition("=")
        mode, _, steps = mode.partition(":")
        if not helper or mode not in _MODES or steps not in ("", "steps"):
            message = (
                f"--remember takes HELPER=MODE with MODE conversation, turn or own (`:steps` after it), not {given!r}"
            )
            raise ThreadlineError(ErrorCode.INVALID_REQUEST, message)
        remembers[helper] = {"mode": mode, "steps": bool(steps)}
    return {"earlier_without": tuple(args.earlier_without or ()), "remembers": remembers}
