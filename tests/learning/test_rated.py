"""Rating turns and rows with known answers, against the real functai 1.2.0 on one shared call log:
functai rates and reads Threadline's turns, Threadline's `rated` gives functai's rows."""

from __future__ import annotations

import warnings
from pathlib import Path

import functai
import functai.calllog as functai_calls
import pytest
from functai import _ai, ai, schemas

from core.errors import ErrorCode, ThreadlineError
from store.backends.folder import FolderStore
from store.backends.writer import Writer
from store.calls.log import call_log, write_call
from store.calls.rated import rated
from store.calls.ratings import rate
from store.log.turns import Answer, TurnRequest
from store.records import lease_record, turn_record, uuid7
from tests.support.calllog_kit import (
    TUTOR,
    as_table,
    call_records,
    calls_folder,
    functai_rated,
    functai_rows,
    functai_turn,
    threadline_turn,
)
from tests.support.functai_kit import offline, reply
from tests.support.functai_kit import tutor as functai_tutor


@ai  # type: ignore[untyped-decorator]
def pick(answers: list[dict[str, str]]) -> str:
    """Pick the best answer."""
    return _ai  # type: ignore[no-any-return]


class TestFunctaiReadsThreadlineTurns:
    def test_functai_rates_a_threadline_turn_and_gets_its_row(self, tmp_path: Path) -> None:
        """functai's `rate` and `rated` on a Threadline turn give its row, with its earlier turns and
        conversation, from the call records Threadline wrote."""
        store = FolderStore(tmp_path)
        threadline_turn(store, "tl", "Hi, I'm Bob.", "Welcome, Bob!")
        second = threadline_turn(store, "tl", "What is 1/2 + 1/3?", "Two fifths.")

        functai.rate(second, "wrong", answer="Five sixths.", folder=str(calls_folder(store)), by="ana")
        rows = functai_rated(store)

        assert 1 == len(rows)
        row = rows[0]
        assert ("What is 1/2 + 1/3?", "Five sixths.", "tl") == (row["message"], row["result"], row["conversation"])
        assert [({"message": "Hi, I'm Bob."}, {"result": "Welcome, Bob!"})] == [
            (e["inputs"], e["outputs"]) for e in row["earlier"]
        ]
        assert ("wrong", "ana", second) == (row["rating"], row["rated_by"], row["call"])

    def test_a_functai_turn_shown_threadline_turns_keeps_its_rated_row(self, tmp_path: Path) -> None:
        """The regression: a functai turn shown a Threadline turn lost its rated row (`no_context`)
        while Threadline wrote no call records; with them it has its row, the Threadline turn in it."""
        before, after = FolderStore(tmp_path / "before"), FolderStore(tmp_path / "after")
        counts = {}
        for store, logged in ((before, False), (after, True)):
            functai_turn(store, "mixed", "Hi, I'm Alex.", "Welcome, Alex!")
            ours = threadline_turn(store, "mixed", "What is 1/2 + 1/3?", "First, the bottoms.", logged=logged)
            theirs = functai_turn(store, "mixed", "Is it 2/5?", "Not quite.")
            functai.rate(theirs, "right", folder=str(calls_folder(store)), by="ana")
            rows, left = functai_rows(store)
            counts[logged] = (len(rows), left["no_context"])

        assert {False: (0, 1), True: (1, 0)} == counts
        with pytest.raises(ValueError, match="cannot show again"):
            functai_rated(before)
        (row,) = functai_rated(after)
        assert ["Hi, I'm Alex.", "What is 1/2 + 1/3?"] == [e["inputs"]["message"] for e in row["earlier"]]
        assert ours in call_records(after)


class TestRatedEqualsFunctai:
    def test_rows_of_a_mixed_log_are_functais(self, tmp_path: Path) -> None:
        """One conversation of functai and Threadline turns, a branch, corrections, a dispute, an
        account's rating and a wrong answer with no correction: Threadline's rows are functai's,
        as rows and as functai's table."""
        store = FolderStore(tmp_path)
        t1 = functai_turn(store, "mix", "one", "A1")
        t2 = threadline_turn(store, "mix", "two", "A2")
        t3 = functai_turn(store, "mix", "three", "A3")
        t4 = threadline_turn(store, "mix", "four", "A4")
        branch = _branch_turn(store, t2)
        other = threadline_turn(store, "solo", "alone", "B1")
        folder = str(calls_folder(store))
        functai.rate(t1, "right", folder=folder, by="ana")
        rate(store, t2, "wrong", answer="A2!", outputs={"note": "x"}, by="ana", reasons=["tone"], note="Shorter.")
        functai.rate(t3, "right", folder=folder, by="ana")
        rate(store, t3, "wrong", answer="A3!", by="bob")
        rate(store, t4, "wrong", by="ana")
        rate(store, branch, "right")
        rate(store, other, "right", by="cy")

        ours = rated(TUTOR, stores=[store])
        theirs, left = functai_rows(store)

        assert [t1, t2, t3, branch, other] == [r["call"] for r in ours]
        assert [_every_column(r, ours[0]) for r in theirs] == [_sorted(r) for r in ours]
        assert functai_rated(store) == as_table(ours)
        assert list(functai_rated(store)[0]) == list(ours[0])
        assert left == ours.left
        assert {"no_answer": 1, "no_context": 0} == {k: ours.left[k] for k in ("no_answer", "no_context")}
        assert [False, False, True, False, False] == [r["disputed"] for r in ours]
        assert ours == rated("tutor", calls=str(calls_folder(store))) == rated(None, stores=[store])

    def test_a_later_rating_by_the_same_person_replaces_the_earlier(self, tmp_path: Path) -> None:
        """Ana's later correction replaces her earlier "right": one row, her correction, no dispute.
        Bob's later "right" then gives the row (the latest rating that gives a value) and makes it
        disputed; `by` reads one person's ratings."""
        store = FolderStore(tmp_path)
        threadline_turn(store, "again", "one", "A1")
        turn = threadline_turn(store, "again", "two", "A2")

        rate(store, turn, "right", by="ana", clock=lambda: 1_900_000_000.0)
        rate(store, turn, "wrong", answer="A2!", by="ana", clock=lambda: 1_900_000_001.0)
        alone = rated(TUTOR, stores=[store])
        rate(store, turn, "right", by="bob", clock=lambda: 1_900_000_002.0)
        both, bobs = rated(TUTOR, stores=[store]), rated(TUTOR, stores=[store], by="bob")

        assert [("A2!", "wrong", "ana", False)] == [
            (r["result"], r["rating"], r["rated_by"], r["disputed"]) for r in alone
        ]
        assert [("A2", "right", "bob", True)] == [
            (r["result"], r["rating"], r["rated_by"], r["disputed"]) for r in both
        ]
        assert [("A2", "right", "bob", False)] == [
            (r["result"], r["rating"], r["rated_by"], r["disputed"]) for r in bobs
        ]
        assert [_sorted(r) for r in functai_rows(store)[0]] == [_sorted(r) for r in both]

    def test_a_withdrawn_rating_counts_no_more(self, tmp_path: Path) -> None:
        """A person's None verdict withdraws their rating, as functai reads it."""
        store = FolderStore(tmp_path)
        turn = threadline_turn(store, "undo", "one", "A1")

        rate(store, turn, "right", by="ana", clock=lambda: 1_900_000_000.0)
        rate(store, turn, None, by="ana", clock=lambda: 1_900_000_001.0)

        assert [] == rated(TUTOR, stores=[store]) == functai_rows(store)[0]

    def test_rated_conversation_turns_are_measured_never_worked_examples(self, tmp_path: Path) -> None:
        """functai's optimizer takes a row as a worked example only when it was shown no earlier turns."""
        store = FolderStore(tmp_path)
        first = threadline_turn(store, "ex", "one", "A1")
        second = threadline_turn(store, "ex", "two", "A2")
        rate(store, first, "right", by="ana")
        rate(store, second, "right", by="ana")

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            better = functai.labeled_few_shot(functai_tutor, list(rated(TUTOR, stores=[store])), k=5)

        assert [0, 1] == [len(r["earlier"]) for r in rated(TUTOR, stores=[store])]
        assert [{"message": "one"}] == [d["inputs"] for d in better.demos]

    def test_functai_asks_a_threadline_row_again_with_its_earlier_turns(self, tmp_path: Path) -> None:
        """functai's `evaluate` shows a Threadline row's earlier turn before its question and records
        that it saw the rated call's context (functai 1.2.0 does so only while it logs calls)."""
        store = FolderStore(tmp_path / "store")
        threadline_turn(store, "ev", "one", "A1")
        second = threadline_turn(store, "ev", "two", "A2")
        rate(store, second, "right", by="ana")
        rows = list(rated(TUTOR, stores=[store]))

        logged_calls = functai.configure(log_calls=str(tmp_path / "evaluation"))
        with offline([reply("A2")]) as lm, logged_calls, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            score = functai.evaluate(functai_tutor, rows).score

        assert 1.0 == score
        assert ["user", "assistant", "user"] == [m.role for m in lm.requests[0].messages]
        (asked,) = functai_calls.read(str(tmp_path / "evaluation"))[0]
        assert [{"saw_of": second}] == asked["saw"]


class TestRate:
    def test_a_rating_is_functais_record_next_to_the_call(self, tmp_path: Path) -> None:
        """`rate` writes functai's rating record in this process's file of the day, beside the calls."""
        store = FolderStore(tmp_path)
        turn = threadline_turn(store, "r", "one", "A1")

        written = rate(store, turn, "wrong", answer="B", reasons=["wrong"], note="It is B.", by="ana")
        unnamed = rate(store, turn, "right")

        assert schemas.problem("rating", written) is None
        assert schemas.problem("rating", unnamed) is None
        keys = ["functai_rating", "id", "call", "at", "by", "verdict", "answer", "reasons", "note"]
        assert keys == list(written)
        assert "account" in unnamed
        assert "by" not in unnamed
        (file,) = calls_folder(store).glob("*/*.jsonl")
        assert 3 == len(file.read_bytes().splitlines())

    def test_a_merged_turn_is_rated_through_its_merging_call(self, tmp_path: Path) -> None:
        """A merge is no call: rating the merged turn rates the call of the function that merged it,
        which functai's `rated` gives as that function's row."""
        store = FolderStore(tmp_path)
        folder = str(calls_folder(store))
        with offline([reply("root"), reply("A"), reply("B"), reply("B")]), functai.configure(log_calls=folder):
            chat = functai_tutor.conversation("merge", store=str(tmp_path))
            chat("start")
            root = chat.head
            chat.continue_from(root)("left")
            b = functai_tutor.conversation("merge", store=str(tmp_path)).continue_from(root)
            b("right")
            branches = [t for t in chat.all_turns() if t.parent == root.id]
            merged = functai_tutor.conversation("merge", store=str(tmp_path)).continue_from(root).merge(branches, pick)

        written = rate(store, merged.id, "right", by="ana")

        assert merged.made_by is not None
        assert merged.made_by["call"] == written["call"] != merged.id
        (row,) = functai_rated(store, pick)
        assert (merged.made_by["call"], "B") == (row["call"], row["result"])

    def test_a_bad_verdict_or_an_unknown_turn_writes_nothing(self, tmp_path: Path) -> None:
        """A verdict that is not one, a correction of a right answer, a value with no JSON form, an
        unknown turn and a turn still running are refused with their codes; the log is unchanged."""
        store = FolderStore(tmp_path)
        turn = threadline_turn(store, "bad", "one", "A1")
        running = uuid7()
        store.append(
            "bad",
            [turn_record(running, parent=turn, program=TUTOR.version, inputs={}), lease_record(running, attempt=1)],
        )
        before = _log_bytes(store)

        refused = [
            _code(lambda: rate(store, turn, "meh")),
            _code(lambda: rate(store, turn, "right", answer="x")),
            _code(lambda: rate(store, turn, "wrong", answer=float("nan"))),
            _code(lambda: rate(store, turn, "wrong", by="  ")),
            _code(lambda: rate(store, uuid7(), "right")),
            _code(lambda: rate(store, "not-a-turn", "right")),
            _code(lambda: rate(calls_folder(store), uuid7(), "right")),
            _code(lambda: rate(store, running, "right")),
        ]

        assert [ErrorCode.RATING_INVALID] * 4 + [ErrorCode.TURN_UNKNOWN] * 3 + [ErrorCode.TURN_STATE] == refused
        assert before == _log_bytes(store)

    def test_a_turn_ended_before_calls_were_logged_is_logged_then_rated(self, tmp_path: Path) -> None:
        """Rating a turn whose call record is missing writes its record from the conversation first."""
        store = FolderStore(tmp_path)
        turn = threadline_turn(store, "old", "one", "A1", logged=False)

        rate(store, turn, "right", by="ana")

        assert turn in call_records(store)
        assert [turn] == [r["call"] for r in rated(TUTOR, calls=str(calls_folder(store)))]


def _branch_turn(store: FolderStore, parent: str) -> str:
    writer = Writer(store, "mix", TUTOR)
    writer.continue_from(parent)
    turn = writer.send(TurnRequest({"message": "branch"}), lambda _s, _i: Answer({"result": "AB"}, model="offline"))
    write_call(call_log(store), "mix", writer.read(), turn)
    return turn


def _sorted(row: dict[str, object]) -> dict[str, object]:
    return {k: row[k] for k in sorted(row)}


def _every_column(row: dict[str, object], columns: dict[str, object]) -> dict[str, object]:
    """functai's row with every column of the table (a value no rating gave is null), keys sorted."""
    assert set(row) <= set(columns)
    return _sorted({k: row.get(k) for k in columns})


def _code(action: object) -> ErrorCode:
    try:
        action()  # type: ignore[operator]
    except ThreadlineError as err:
        return err.code
    raise AssertionError("nothing was refused")


def _log_bytes(store: FolderStore) -> list[bytes]:
    return [p.read_bytes() for p in sorted(calls_folder(store).glob("*/*.jsonl"))]
