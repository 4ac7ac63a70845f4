"""The pure rules of a helper's memory (store/log/helper_memory.py): which recorded calls a helper is shown, with
which saw entries, and which recorded call answers a question again."""

from __future__ import annotations

from typing import Any

from core.models import HelperMemory
from store.log.helper_memory import CallBook, call_record, remembered_calls, shown_calls
from store.log.state import Log
from store.programs.program import Program
from store.records import ended_record, lease_record, turn_record

ANSWER = Program.define("answer", "Answer.", inputs={"message": str, "topic": str}, outputs={"result": str})
IDENTITY = {"name": "answer", "module": "threadline", "signature": ANSWER.signature}


def call(cid: str, *, turn: str = "t1", attempt: int = 1, signature: str = ANSWER.signature, **inputs: Any) -> Any:
    outputs = {"result": f"answer {cid}"}
    lmcc = {
        "inputs": {"message": "hi", "topic": "x", **inputs},
        "outputs": outputs,
        "steps": [{"kind": "model", "outputs": outputs}],
    }
    identity = {**IDENTITY, "signature": signature}
    return call_record(turn, attempt=attempt, call=cid, site="p#1/answer#1", program=identity, lmcc=lmcc, saw=[])


def test_a_call_of_the_same_signature_is_shown_whole_and_its_steps_only_when_remembered() -> None:
    """Same signature: `{"call"}` without steps, `{"call", "steps": true}` with them; nothing without memory."""
    calls = [call("c1")]

    assert ([], []) == shown_calls(calls, ANSWER, None)
    assert [{"call": "c1"}] == shown_calls(calls, ANSWER, HelperMemory(mode="conversation"))[0]
    assert [{"call": "c1", "steps": True}] == shown_calls(calls, ANSWER, HelperMemory(steps=True))[0]


def test_a_call_of_another_signature_is_shown_by_the_values_the_helper_still_has() -> None:
    """Another signature: its values, `without` the fields the helper lacks; no output left, not shown."""
    other = call("c1", signature="sha256:other", extra="x")
    gone = {**call("c2", signature="sha256:other"), "lmcc": {"inputs": {"message": "hi"}, "outputs": {"old": 1}}}

    saw, exchanges = shown_calls([other, gone], ANSWER, HelperMemory())

    assert [{"call": "c1", "without": ["extra"]}] == saw
    assert [{"inputs": {"message": "hi", "topic": "x"}, "outputs": {"result": "answer c1"}}] == exchanges


def test_only_the_final_attempts_calls_of_done_turns_are_remembered() -> None:
    """A turn resumed once keeps its calls of attempt 2; a turn that failed keeps none."""
    records = [
        turn_record("t1", parent=None, program="v", inputs={"message": "a"}),
        lease_record("t1", attempt=1),
        call("c1", attempt=1),
        lease_record("t1", attempt=2),
        call("c2", attempt=2),
        ended_record("t1", attempt=2, state="done", outputs={"result": "x"}),
        turn_record("t2", parent="t1", program="v", inputs={"message": "b"}),
        call("c3", turn="t2"),
        ended_record("t2", attempt=1, state="failed"),
    ]

    assert ["c2"] == [c["call"] for c in remembered_calls(Log(records), "t2", now=0.0)]


def test_a_recorded_call_answers_only_the_very_same_question() -> None:
    """Same site, helper, inputs and shown calls (ids of an earlier attempt renamed): found; else not."""
    earlier = {**call("c2"), "saw": [{"call": "c1"}]}
    book = CallBook([earlier])

    assert book.found("p#1/answer#1", IDENTITY, earlier["lmcc"]["inputs"], [{"call": "c1"}]) is not None
    assert book.found("p#1/answer#2", IDENTITY, earlier["lmcc"]["inputs"], [{"call": "c1"}]) is None
    assert book.found("p#1/answer#1", IDENTITY, {"message": "other", "topic": "x"}, [{"call": "c1"}]) is None
    assert book.found("p#1/answer#1", {**IDENTITY, "module": "m"}, earlier["lmcc"]["inputs"], [{"call": "c1"}]) is None
    book.renamed["c1"] = "c9"
    assert book.found("p#1/answer#1", IDENTITY, earlier["lmcc"]["inputs"], [{"call": "c9"}]) is not None
