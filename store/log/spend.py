"""What a conversation has spent, from its log: the usage every `ended` record reports (docs/format-1.md 4.6)."""

from __future__ import annotations

from typing import Any

from core.budgets import Prices, Spend, price_for

from .state import Log, Turn


def spent(log: Log, prices: Prices, *, default_model: str | None = None) -> Spend:
    """The tokens every ended turn of every branch read and wrote, and what they cost where the turn's model
    (its `lm` setting, else `default_model`) has a price."""
    tokens, cost = 0, 0.0
    for turn in log.turns.values():
        usage = (turn.ended or {}).get("usage") or {}
        read, written = _count(usage, "input_tokens"), _count(usage, "output_tokens")
        tokens += read + written
        price = price_for(prices, _model(turn) or default_model)
        if price is not None:
            cost += price.of(read, written)
    return Spend(tokens=tokens, cost=cost)


def _count(usage: dict[str, Any], name: str) -> int:
    value = usage.get(name)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _model(turn: Turn) -> str | None:
    lm = (turn.record.get("settings") or {}).get("lm")
    return lm if isinstance(lm, str) else None
