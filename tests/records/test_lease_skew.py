"""The lease rule that tolerates skewed clocks: a grace after `until`, and a lease the reader saw
appended counting as live on the reader's own clock (docs/operations.md, Clocks)."""

from __future__ import annotations

from store.log.state import Log
from store.records import (
    CLOCK_SKEW_SECONDS,
    LEASE_GRACE_SECONDS,
    LEASE_HELD_SECONDS,
    LEASE_RENEW_SECONDS,
    LEASE_SECONDS,
    Record,
    lease_record,
    parse_time,
    turn_record,
)

NOW = 1_800_000_000.0


def functai_lease(written: float) -> Record:
    """A lease as functai writes it at `written` (its clock): valid for 30 s."""
    lease = lease_record("t", attempt=1, now=written)
    lease["until"] = lease_record("t", attempt=1, now=written + LEASE_SECONDS - LEASE_HELD_SECONDS)["until"]
    return lease


def state_after(lease: Record, *, unseen_at: float | None = None) -> str:
    """The turn's state at `NOW` once its `turn` record and then `lease` are applied."""
    log = Log([turn_record("t", parent=None, program="tutor", inputs={})])
    log.apply([lease], unseen_at=unseen_at)
    return log.turns["t"].state(NOW)


def test_the_constants_cover_the_bound_with_room_to_spare() -> None:
    """A Threadline lease keeps more than the bound left between renewals, and functai's (renewed
    every 10 s) plus the grace do too."""
    assert LEASE_HELD_SECONDS - LEASE_RENEW_SECONDS > CLOCK_SKEW_SECONDS
    assert LEASE_SECONDS - 10.0 + LEASE_GRACE_SECONDS > CLOCK_SKEW_SECONDS


def test_a_lease_runs_out_only_after_its_grace() -> None:
    """A writer's lease whose `until` passed 10 s ago (its clock behind) still runs; 20 s ago, not."""
    assert "running" == state_after(functai_lease(NOW - LEASE_SECONDS - 10))
    assert "interrupted" == state_after(functai_lease(NOW - LEASE_SECONDS - 20))


def test_a_lease_seen_appended_is_live_whatever_its_until_says() -> None:
    """A lease written by a clock 60 s behind, appended after the reader's read of 5 s ago, runs; one
    the reader missed for longer than a lease lasts does not."""
    behind = functai_lease(NOW - 60)

    assert "interrupted" == state_after(behind)
    assert "running" == state_after(behind, unseen_at=NOW - 5)
    assert "interrupted" == state_after(behind, unseen_at=NOW - LEASE_SECONDS - 1)


def test_threadline_leases_last_longer_than_functais() -> None:
    """What Threadline writes lasts `LEASE_HELD_SECONDS` from its `at`."""
    lease = lease_record("t", attempt=1, now=NOW)

    assert LEASE_HELD_SECONDS == round(parse_time(lease["until"]) - parse_time(lease["at"]), 3)
