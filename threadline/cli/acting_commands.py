"""The commands that act on a turn that waits or was interrupted: `approve`, `resume` and `abandon`.

threadline approve shop-1 TURN                        # yes to every approval the turn waits for
threadline approve shop-1 TURN --deny --reason "no receipt"
threadline approve shop-1 TURN --invocation 2         # only that call (with --site when it is ambiguous)
threadline resume shop-1 TURN --result 2="refunded"   # a tool that may have run returned this
threadline abandon shop-1 TURN
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from core.errors import ErrorCode, ThreadlineError

from . import output
from .common import Subcommands, add_conversation, env_settings, open_local
from .output import Output

if TYPE_CHECKING:
    from threadline.acting import LiveTurn


def add_commands(commands: Subcommands, common: argparse.ArgumentParser) -> None:
    """Add `approve`, `resume` and `abandon`."""
    _add_approve(commands, common)
    resume = commands.add_parser(
        "resume",
        parents=[common],
        help="go on with a waiting or interrupted turn (functai's too)",
        description="Resume turn TURN. A tool that started and has no result may have run: say what it "
        "returned (--result N=OUTPUT) or run it again (--rerun N).",
    )
    _add_turn(resume)
    resume.add_argument("--result", action="append", default=[], metavar="N=OUTPUT", help="tool N returned OUTPUT")
    resume.add_argument("--rerun", action="append", default=[], metavar="N", help="run tool N again")
    resume.add_argument("--no-wait", action="store_true", help="do not wait for the turn to end")
    resume.set_defaults(run=run_resume)

    abandon = commands.add_parser("abandon", parents=[common], help="end a waiting or interrupted turn")
    _add_turn(abandon)
    abandon.set_defaults(run=run_abandon)


def _add_approve(commands: Subcommands, common: argparse.ArgumentParser) -> None:
    approve = commands.add_parser(
        "approve",
        parents=[common],
        help="answer the approvals a waiting turn asks for",
        description="Say yes (or, with --deny, no) to what turn TURN waits for: every pending approval, or the "
        "one at --invocation (and --site). Once nothing is left unanswered the turn goes on by itself.",
    )
    _add_turn(approve)
    approve.add_argument("--deny", action="store_true", help="say no: the model is told the person refused")
    approve.add_argument("--reason", metavar="R", help="why (the model is shown it with a refusal)")
    approve.add_argument("--by", metavar="WHO", help="who answers (kept with the answer)")
    approve.add_argument("--site", metavar="S", help="the asking call's site (as `show` and `turns` list it)")
    approve.add_argument("--invocation", metavar="N", type=int, help="the tool call's number in the turn")
    approve.add_argument("--no-wait", action="store_true", help="do not wait for the turn to end")
    approve.set_defaults(run=run_approve)


def _add_turn(parser: argparse.ArgumentParser) -> None:
    add_conversation(parser)
    parser.add_argument("turn", metavar="TURN", help="the turn")


async def run_approve(args: argparse.Namespace, out: Output) -> int:
    """Answer the turn's approvals; print the turn as it is then."""
    from threadline.acting import answer

    chat = await open_local(args, env_settings())
    given = {"site": args.site, "invocation": args.invocation, "by": args.by, "reason": args.reason}
    turn = await answer(chat, args.turn, "deny" if args.deny else "approve", wait=not args.no_wait, **given)
    return _print(turn, out)


async def run_resume(args: argparse.Namespace, out: Output) -> int:
    """Resume the turn; print it once it ended (or waits again)."""
    chat = await open_local(args, env_settings())
    turn = await chat.turn(args.turn)
    turn = await turn.resume(results=_results(args.result), rerun=args.rerun, wait=not args.no_wait)
    return _print(turn, out)


async def run_abandon(args: argparse.Namespace, out: Output) -> int:
    """End the turn `abandoned`."""
    from threadline.acting import act

    chat = await open_local(args, env_settings())
    await act(chat, args.turn, "abandon")
    return _print(await chat.turn(args.turn), out, ok=("abandoned",))


def _results(given: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in given:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise ThreadlineError(ErrorCode.INVALID_REQUEST, f"--result takes N=OUTPUT, not {item!r}")
        out[name] = value
    return out


def _print(turn: LiveTurn, out: Output, *, ok: tuple[str, ...] = ("done", "waiting")) -> int:
    """Print the turn; exit 0 when it is in one of the `ok` states."""
    rows = [("turn", turn.id), ("state", out.state(turn.state)), ("attempt", str(turn.attempt))]
    if turn.state == "done":
        rows.append(("result", output.text_of(turn.result)))
    text = "\n".join(filter(None, [output.fields(rows), output.approvals_text(turn.approvals)]))
    out.emit(turn.as_dict(), text)
    return 0 if turn.state in ok else 1
