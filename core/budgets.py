"""Spend limits: a conversation's budget, the price table, and the rule that refuses a turn over it.

A budget counts tokens (what the provider reported for every ended turn, plus the estimated tokens
of the request a send would make) and, with a price for the model, money. It is checked before the
model is asked, so a refused send costs nothing and records nothing.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from .errors import ErrorCode, ThreadlineError
from .models import Budget

PER_TOKENS = 1_000_000
"""Prices are given per million tokens, as providers list them."""


@dataclass(frozen=True, slots=True)
class Price:
    """What a model costs per million tokens it reads (`input`) and writes (`output`)."""

    input: float
    output: float

    def of(self, input_tokens: int, output_tokens: int = 0) -> float:
        """The cost of that many tokens read and written."""
        return (input_tokens * self.input + output_tokens * self.output) / PER_TOKENS


Prices = Mapping[str, Price]


def parse_prices(raw: str) -> dict[str, Price]:
    """`THREADLINE_PRICES`: `{"model": {"input": X, "output": Y}}`, per million tokens (`invalid-request`
    when it is not that shape)."""
    if not raw.strip():
        return {}
    try:
        data = json.loads(raw)
        if not isinstance(data, dict):
            raise ValueError("not an object")
        out: dict[str, Price] = {}
        for model, price in data.items():
            if not isinstance(price, dict) or set(price) - {"input", "output"}:
                raise ValueError(f"{model!r} is not {{'input': X, 'output': Y}}")
            values = [price.get("input", 0), price.get("output", 0)]
            if not all(isinstance(v, int | float) and not isinstance(v, bool) and v >= 0 for v in values):
                raise ValueError(f"{model!r} has a price that is not a number of 0 or more")
            out[str(model)] = Price(float(values[0]), float(values[1]))
        return out
    except ValueError as err:
        raise ThreadlineError(
            ErrorCode.INVALID_REQUEST,
            f'THREADLINE_PRICES is not {{"model": {{"input": X, "output": Y}}}} per million tokens: {err}',
        ) from None


def parse_budgets(raw: str) -> dict[str, Budget]:
    """`THREADLINE_BUDGETS`: `{"store": {"tokens": N, "cost": X}}`, the budget of every conversation of each
    store (`invalid-request` when it is not that shape)."""
    if not raw.strip():
        return {}
    try:
        data = json.loads(raw)
        if not isinstance(data, dict) or not all(isinstance(b, dict) for b in data.values()):
            raise ValueError("not an object of objects")
        for budget in data.values():
            if unknown := sorted(set(budget) - set(Budget.model_fields)):
                raise ValueError(f"a budget has no field {', '.join(map(repr, unknown))}")
        return {str(store): Budget.model_validate(budget, strict=True) for store, budget in data.items()}
    except ValueError as err:
        raise ThreadlineError(
            ErrorCode.INVALID_REQUEST, f'THREADLINE_BUDGETS is not {{"store": {{"tokens": N, "cost": X}}}}: {err}'
        ) from None


def price_for(prices: Prices, model: str | None) -> Price | None:
    """The price of `model` (`provider:name` or the name alone, as the table lists it), None if unlisted."""
    if not model:
        return None
    return prices.get(model) or prices.get(model.partition(":")[2] or model)


@dataclass(frozen=True, slots=True)
class Spend:
    """What a conversation has spent: tokens, and the cost of the turns whose model has a price."""

    tokens: int = 0
    cost: float = 0.0


def refuse_over(budget: Budget, spent: Spend, tokens: int, cost: float | None, *, model: str) -> None:
    """Refuse `budget-exceeded` when `spent` plus a request of `tokens` (costing `cost`, None when its
    model has no price) would exceed `budget`.

    Raises:
        ThreadlineError: `budget-exceeded`, or `invalid-request` for a money budget and an unpriced model.
    """
    if budget.tokens is not None and spent.tokens + tokens > budget.tokens:
        raise ThreadlineError(
            ErrorCode.BUDGET_EXCEEDED,
            f"this turn would exceed the conversation's budget of {budget.tokens} tokens: "
            f"{spent.tokens} spent and about {tokens} in its request",
            spent_tokens=spent.tokens,
            request_tokens=tokens,
            budget_tokens=budget.tokens,
        )
    if budget.cost is None:
        return
    if cost is None:
        raise ThreadlineError(
            ErrorCode.INVALID_REQUEST,
            f"the conversation has a cost budget but model {model!r} has no price; add it to THREADLINE_PRICES",
        )
    if spent.cost + cost > budget.cost:
        raise ThreadlineError(
            ErrorCode.BUDGET_EXCEEDED,
            f"this turn would exceed the conversation's budget of {budget.cost:g}: "
            f"{spent.cost:.6g} spent and about {cost:.6g} for its request",
            spent_cost=spent.cost,
            request_cost=cost,
            budget_cost=budget.cost,
        )
