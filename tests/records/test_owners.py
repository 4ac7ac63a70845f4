"""Who owns a turn: `placed_by` on the `turn` record names the workflow that placed it, and
`unowned` lists the open turns an owner placed and does not hold (the rules of `store.log.turns`)."""

from __future__ import annotations

import time

from store.log.state import Log
from store.log.turns import Begin, TurnRequest, begin_turn, failed_record, unowned
from store.programs.program import TUTOR
from store.records import Record

OWNER = "conversation/default/owners"


def placed(records: list[Record], message: str, *, by: str | None) -> str:
    """Place a turn as its owner would (`by`), beside any running one, appending its records; its id."""
    request = TurnRequest({"message": message}, request_id=message, placed_by=by, sends="branch")
    decided = begin_turn(Log(records), TUTOR, request, now=time.time())
    assert isinstance(decided, Begin)
    records.extend({**r, "seq": len(records) + 1 + i} for i, r in enumerate(decided.records))
    return decided.turn


def test_a_turn_names_who_placed_it_and_only_then() -> None:
    records: list[Record] = []
    mine, theirs = placed(records, "a", by=OWNER), placed(records, "b", by=None)
    log = Log(records)
    assert OWNER == log.turns[mine].record["placed_by"]
    assert "placed_by" not in log.turns[theirs].record


def test_unowned_lists_the_owners_open_turns_it_does_not_hold() -> None:
    records: list[Record] = []
    ended, held, lost = (placed(records, m, by=OWNER) for m in ("ended", "held", "lost"))
    other = placed(records, "other", by="conversation/default/else")
    placed(records, "functai", by=None)  # a functai writer's turn: nobody's to adopt
    records.append({**failed_record(ended, {"type": "X"}, attempt=1, saw=[]), "seq": len(records) + 1})
    log = Log(records)
    assert [lost] == [turn.id for turn in unowned(log, OWNER, holding=[held])]
    assert [held, lost] == [turn.id for turn in unowned(log, OWNER)]
    assert [other] == [turn.id for turn in unowned(log, "conversation/default/else")]
