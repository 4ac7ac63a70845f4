"""Steers in the log (docs/format-1.md 4.4, 5.6): a `steer` send joins only a running head, as a `steer`
entry; a turn's steers are its `steered` entries, in the order it took them, each request id once."""

from __future__ import annotations

import time

import pytest

from core.errors import ErrorCode, ThreadlineError
from store.log.state import Log
from store.log.steers import arrived, steered_record, taken
from store.log.turns import Begin, Steered, TurnRequest, begin_turn, failed_record
from store.programs.program import TUTOR
from store.records import Record
from store.records import iso as iso_time

NOW = time.time()


def append(records: list[Record], *new: Record) -> None:
    base = len(records)
    records.extend([{**r, "seq": base + 1 + i} for i, r in enumerate(new)])


def running(records: list[Record]) -> str:
    """A turn whose lease is live: the head runs."""
    decided = begin_turn(Log(records), TUTOR, TurnRequest({"message": "a story"}, request_id="r-0"), now=NOW)
    assert isinstance(decided, Begin)
    append(records, *decided.records)
    return decided.turn


def steer(records: list[Record], text: str, request_id: str) -> Steered | Begin:
    request = TurnRequest({"message": text}, request_id=request_id, sends="steer", metadata={"m": 1})
    decided = begin_turn(Log(records), TUTOR, request, now=NOW)
    assert isinstance(decided, Steered | Begin)
    append(records, *decided.records)
    return decided


def test_a_steer_joins_the_running_head_as_an_entry() -> None:
    """No turn record: one `threadline` entry `steer` about the running turn, with the send's inputs."""
    records: list[Record] = []
    head = running(records)

    decided = steer(records, "shorter", "s-1")

    assert isinstance(decided, Steered)
    assert (head, None, len(records) - 1) == (decided.turn, decided.parent, decided.expect)
    entry = records[-1]
    assert ("entry", "threadline", "steer", head) == (entry["kind"], entry["plugin"], entry["entry"], entry["turn"])
    assert {"request_id": "s-1", "inputs": {"message": "shorter"}, "metadata": {"m": 1}} == entry["data"]
    assert ["s-1"] == [e["data"]["request_id"] for e in arrived(Log(records).turns[head])]


def test_a_steer_after_the_head_ended_is_a_turn_after_it() -> None:
    records: list[Record] = []
    head = running(records)
    append(records, failed_record(head, {"type": "X"}, attempt=1, saw=[]))

    assert isinstance(steer(records, "late", "s-2"), Begin)


def test_a_steer_to_a_waiting_head_is_refused() -> None:
    records: list[Record] = []
    head = running(records)
    append(records, {"functai_conversation": 1, "kind": "waiting", "at": iso_time(NOW), "turn": head, "attempt": 1})

    with pytest.raises(ThreadlineError) as refused:
        steer(records, "now", "s-3")

    assert ErrorCode.CONVERSATION_BUSY == refused.value.code


def test_taken_steers_are_the_steered_entries_in_order_each_once() -> None:
    """A `steered` entry without its `steer` counts for nothing; a request id taken twice counts once."""
    records: list[Record] = []
    head = running(records)
    steer(records, "one", "s-1")
    steer(records, "two", "s-2")
    append(
        records,
        steered_record(head, "s-2", step=0, said="Once upon", now=NOW),
        steered_record(head, "s-1", step=1, now=NOW),
        steered_record(head, "s-2", step=2, now=NOW),
        steered_record(head, "nobody", step=2, now=NOW),
    )
    turn = Log(records).turns[head]

    assert [("s-2", "two", 0, "Once upon"), ("s-1", "one", 1, "")] == [
        (s.request_id, s.inputs["message"], s.step, s.said) for s in taken(turn)
    ]
    assert [] == arrived(turn)
