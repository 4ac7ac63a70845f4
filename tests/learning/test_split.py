"""Train and test rows with no conversation on both sides, split as functai's `split` splits them."""

from __future__ import annotations

from typing import Any

import functai
import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.errors import ErrorCode, ThreadlineError
from store.calls.split import held_groups, train_test

SEED_EXAMPLE: list[dict[str, Any]] = [
    {"x": 1, "conversation": "a"},
    {"x": 2, "conversation": "a"},
    {"x": 3, "conversation": "b"},
    {"x": 4, "conversation": None},
]
"""functai's own example of `train_test(rows; test=0.34)`: two rows of one conversation, one of another,
one in none. Its documented result: no conversation on both sides, every row on one of them."""


def conversations(rows: list[dict[str, Any]]) -> set[Any]:
    return {r["conversation"] for r in rows if r["conversation"] is not None}


class TestTheExamples:
    def test_the_seed_example_gives_its_documented_result(self) -> None:
        """Every row once, no conversation on both sides, one group of three tested, as functai splits it."""
        train, test = train_test(SEED_EXAMPLE, test=0.34)

        assert not conversations(train) & conversations(test)
        assert sorted(r["x"] for r in SEED_EXAMPLE) == sorted(r["x"] for r in train + test)
        assert 1 == held_groups(3, 0.34)
        assert 1 == len({r["conversation"] if r["conversation"] else id(r) for r in test})
        assert functai.split(SEED_EXAMPLE, test=0.34, seed=0) == (train, test)

    def test_functais_own_split_example_splits_alike(self) -> None:
        """functai's test of `split` (20 rows in 4 conversations, one row in none, a quarter tested, seed 1)."""
        rows = [{"x": i, "conversation": f"c{i % 4}"} for i in range(20)] + [{"x": 99, "conversation": None}]

        train, test = train_test(rows, test=0.25, seed=1)

        assert functai.split(rows, test=0.25, seed=1) == (train, test)
        assert 21 == len(train) + len(test)
        assert test
        assert not conversations(train) & conversations(test)

    def test_a_share_out_of_range_or_a_row_without_the_column_is_refused(self) -> None:
        """`invalid-request` for a test share of 0 or 1, and for a row with no conversation column."""
        rows: list[dict[str, Any]] = [{"x": 1}]
        with pytest.raises(ThreadlineError) as share:
            train_test(SEED_EXAMPLE, test=1.0)
        with pytest.raises(ThreadlineError) as column:
            train_test(rows)

        assert [ErrorCode.INVALID_REQUEST] * 2 == [share.value.code, column.value.code]


row_lists = st.lists(
    st.fixed_dictionaries({"x": st.integers(), "conversation": st.one_of(st.none(), st.sampled_from("abcdefgh"))}),
    max_size=40,
)


@given(rows=row_lists, test=st.floats(0.01, 0.99), seed=st.integers(0, 2**32))
def test_no_conversation_is_on_both_sides_and_the_share_is_within_one_group(
    rows: list[dict[str, Any]], test: float, seed: int
) -> None:
    """Any rows, share and seed: each row once in its order, no conversation on both sides, the test
    side within one group of `test` of the groups, and the very sides functai's `split` gives."""
    train, tested = train_test(rows, test=test, seed=seed)

    assert not conversations(train) & conversations(tested)
    assert sorted(map(id, rows)) == sorted(map(id, train + tested))
    assert [r for r in rows if any(r is t for t in train)] == train
    groups = len(conversations(rows)) + sum(1 for r in rows if r["conversation"] is None)
    held = len(conversations(tested)) + sum(1 for r in tested if r["conversation"] is None)
    assert abs(held - test * groups) <= 1
    assert (held == 0) == (groups < 2)
    assert functai.split(rows, test=test, seed=seed) == (train, tested)
