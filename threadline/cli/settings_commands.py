"""The `settings` command: a conversation's settings that may change while it runs (its budget).

threadline settings alex                              # what its next turns run with
threadline settings alex --budget '{"tokens": 80000}'  # from its next turn on ('{}': no limit)
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from core.errors import ErrorCode, ThreadlineError

from .common import Subcommands, add_conversation, env_settings, open_conversation
from .output import Output, fields

if TYPE_CHECKING:
    from core.models import ConversationSettings


def add_commands(commands: Subcommands, common: argparse.ArgumentParser) -> None:
    """Add `settings`."""
    settings = commands.add_parser(
        "settings",
        parents=[common],
        help="print or change what a conversation's next turns run with (its budget)",
        description="Print the settings conversation ID's next turns run with, as its workflow holds them; "
        "with --budget, change them first (from its next turn on, over the budget each send carries; a "
        "turn running now keeps its own). Its workflow starts if it was not running.",
    )
    add_conversation(settings)
    settings.add_argument(
        "--budget",
        metavar="JSON",
        help="what it may spend in all from now on: '{\"tokens\": 80000, \"cost\": 0.5}' ('{}' or null: no limit)",
    )
    settings.set_defaults(run=run_settings)


def budget_change(text: str) -> Any:
    """`--budget`: a JSON object `{"tokens": N, "cost": X}`, `{}` or `null` for no limit (`invalid-request`
    for anything else)."""
    from threadline.options import budget_of

    try:
        given = json.loads(text)
        return budget_of({} if given is None else given)
    except (json.JSONDecodeError, AttributeError, TypeError):
        message = '--budget is a JSON object: {"tokens": N, "cost": X}, or {} for no limit'
        raise ThreadlineError(ErrorCode.INVALID_REQUEST, message) from None


async def run_settings(args: argparse.Namespace, out: Output) -> int:
    """Change the settings when asked; print them."""
    chat = await open_conversation(args, env_settings())
    if args.budget is not None:
        found: ConversationSettings | None = await chat.configure(budget=budget_change(args.budget))
    else:
        found = await chat.settings()
    data = {"conversation": chat.id, "store": args.store, "open": found is not None}
    if found is None:
        text = f"Conversation {chat.id} has no running workflow: its next send starts it with that send's settings."
        out.emit(data, text)
        return 0
    out.emit({**data, **found.model_dump(mode="json")}, _text(found))
    return 0


def _text(found: ConversationSettings) -> str:
    budget = found.budget
    limits = [f"{budget.tokens} tokens" if budget and budget.tokens is not None else ""]
    limits.append(f"{budget.cost:g} cost" if budget and budget.cost is not None else "")
    rows = [("budget", ", ".join(filter(None, limits)) or "no limit")]
    rows.append(("configured", ", ".join(found.configured) or "-"))
    return fields(rows)
