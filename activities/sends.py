"""How a send is placed and shown: its view, context rule and summary rule (its own, else the conversation's)."""

from __future__ import annotations

from core.models import ConversationConfig, TurnSend
from store.rules import Rule, View
from store.summary import SummaryRule


def rule_of(config: ConversationConfig, send: TurnSend) -> Rule:
    """The context rule a send is shown under: its own, else the conversation's."""
    chosen = send.context or config.context
    return Rule(last=chosen.last, without=tuple(chosen.without), window=chosen.window, max_tokens=chosen.max_tokens)


def summary_of(config: ConversationConfig, send: TurnSend) -> SummaryRule | None:
    """The summary rule a send is shown under, if any."""
    chosen = (send.context or config.context).summary
    return SummaryRule(after=chosen.after, keep=chosen.keep) if chosen else None


def view_of(send: TurnSend) -> View:
    """Where a send continues: after exactly a turn, a new root, or the branch it follows."""
    if send.continue_from:
        return View(pinned=send.continue_from, exact=True)
    return View(pinned=None, exact=True) if send.root else View(pinned=send.follow)
