"""A send's price before it is sent: the tokens of the request it would make, their cost, and the
conversation's budget checked against them (`core.budgets`). Placing a turn (`begin_turn`) refuses a
send over budget before anything is recorded; `render` reports the same figures."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from core.budgets import Prices, price_for, refuse_over
from core.models import Budget
from store.log.spend import spent
from store.log.state import Log
from store.values import estimate_tokens

from .language_model import ModelRequest


@dataclass(frozen=True, slots=True)
class Quote:
    """What a request would read: `tokens` (estimated) and their `cost` (None: the model has no price)."""

    tokens: int
    cost: float | None


def request_tokens(request: ModelRequest | None, inputs: Mapping[str, Any]) -> int:
    """The tokens a model reads of `request` (instruction, messages, tools), four characters a token; a
    program with code makes its own requests as it runs, so its turn counts its `inputs`."""
    if request is None:
        return estimate_tokens(dict(inputs))
    parts: list[Any] = [request.instruction, list(request.tools), list(request.outputs)]
    for message in request.messages:
        parts.append(message.content)
        parts.extend({"name": call.name, "input": call.input} for call in message.calls)
    return sum(estimate_tokens(part) for part in parts)


def quote(request: ModelRequest | None, inputs: Mapping[str, Any], prices: Prices, model: str) -> Quote:
    """The price of sending `request` to `model` (`provider:name`)."""
    tokens = request_tokens(request, inputs)
    price = price_for(prices, model)
    return Quote(tokens, price.of(tokens) if price is not None else None)


def check_budget(budget: Budget | None, log: Log, asked: Quote, prices: Prices, *, model: str, default: str) -> None:
    """Refuse `budget-exceeded` when what `log` spent plus `asked` would exceed `budget` (None: no limit)."""
    if budget is not None:
        refuse_over(budget, spent(log, prices, default_model=default), asked.tokens, asked.cost, model=model)
