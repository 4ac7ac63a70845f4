"""Train and test rows that share no conversation, split as functai's `split` splits them.

Turns of one conversation depend on each other: a test row whose conversation is also among the
training rows measures memory, not the program. So groups of rows are split, never rows: every
row of one conversation is on one side, and a row with no conversation is a group of its own.
The same rows, share and seed give the same sides as `functai.split(rows, test=..., seed=...)`.
"""

from __future__ import annotations

import random
from collections.abc import Hashable, Mapping, Sequence
from typing import Any, TypeVar

from core.errors import ErrorCode, ThreadlineError
from store.programs.shape import canonical_json

Row = TypeVar("Row", bound=Mapping[str, Any])


def train_test(
    rows: Sequence[Row], test: float = 0.34, seed: int = 0, *, by: str = "conversation"
) -> tuple[list[Row], list[Row]]:
    """Split `rows` into (train, test) with every group of rows on one side, each in the rows' order.

    Args:
        rows: Rows with a `by` column (`store.calls.rated` gives `conversation` when rows were shown
            earlier turns).
        test: The share of groups on the test side: `round(groups * test)`, at least one group on
            each side when there are two or more.
        seed: The shuffle's seed: the same seed gives the same sides.
        by: The column naming each row's group; None there makes the row a group of its own.

    Raises:
        ThreadlineError: `invalid-request` when `test` is not strictly between 0 and 1 or a row
            has no `by` column.
    """
    if not 0 < test < 1:
        raise ThreadlineError(ErrorCode.INVALID_REQUEST, f"test is a share between 0 and 1, not {test!r}")
    keys = [_group(row, i, by) for i, row in enumerate(rows)]
    groups = list(dict.fromkeys(keys))
    random.Random(seed).shuffle(groups)
    held = set(groups[: held_groups(len(groups), test)])
    return [r for r, k in zip(rows, keys, strict=True) if k not in held], [
        r for r, k in zip(rows, keys, strict=True) if k in held
    ]


def held_groups(groups: int, test: float) -> int:
    """How many of `groups` groups go to the test side."""
    if groups < 2:
        return 0
    return min(max(1, round(groups * test)), groups - 1)


def _group(row: Mapping[str, Any], index: int, by: str) -> Hashable:
    if by not in row:
        raise ThreadlineError(ErrorCode.INVALID_REQUEST, f"row {index} has no {by!r} column to split by")
    value = row[by]
    if value is None:
        return ("row", index)
    try:
        hash(value)
    except TypeError:
        return ("json", canonical_json(value))
    return value  # type: ignore[no-any-return]
