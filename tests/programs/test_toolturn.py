"""The records of a turn that acts, against the ones functai 1.2.0 writes (key for key, in order), and
the pure rules over them: which recorded result a call may take, and what answering, resuming and
abandoning append or refuse."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import functai
import pytest

from core.errors import ErrorCode, ThreadlineError
from store.backends.folder import FolderStore
from store.log.resume import abandon_records, answer_records, resume_records
from store.log.state import Log
from store.log.toolturn import ToolBook, approval_item, approval_record, reply_record, tool_record, waiting_record
from store.programs.tools import ToolCall
from store.records import Record, with_seq
from tests.support import functai_tools
from tests.support.functai_tools import answers, asks, model

NOW = 4_000_000_000.0

# functai's event feed (its own thread) warns when a turn's event stream was taken by a newer writer
# of functai's own (a waiting turn answered while its first attempt's feed still drains); its records
# are kept. Only functai runs in these tests, so the warning says nothing about Threadline.
pytestmark = pytest.mark.filterwarnings(r"ignore:\[functai\] an observer \(conversation store\) failed:UserWarning")


def functai_records(folder: Path, cid: str, *, approve: bool) -> list[Record]:
    """A functai turn that ran both tools (or, with `approve`, waited for the refund, then was denied)."""
    replies = [asks("Refund order 7"), answers("Done.")]
    with functai.configure(lm="fake-model", client=model(*replies)):
        chat = functai_tools.careful_shop.conversation(cid, store=str(folder), approve="changes" if approve else None)
        if approve:
            with pytest.raises(functai.Waiting):
                chat("Refund order 7")
            turn = chat.turns[-1]
            turn.deny(turn.waiting[0], reason="no receipt", by="ann")
        else:
            chat("Refund order 7")
    return FolderStore(folder).read(cid)


def keys(records: list[Record], kind: str, **where: Any) -> list[str]:
    found = next(r for r in records if r["kind"] == kind and all(r.get(k) == v for k, v in where.items()))
    return list(found)


def test_tool_and_reply_records_have_functais_keys_in_its_order(tmp_path: Path) -> None:
    """`reply`, `tool started` and `tool done` records: the same keys as functai's, in the same order."""
    theirs = functai_records(tmp_path, "plain", approve=False)
    call = ToolCall("c2", "refund", {"amount": 0, "order": "x"})

    ours = [
        reply_record("t", attempt=1, key="sha256:0", response={"message": {}}),
        tool_record("t", "started", site="s#1", invocation=2, call=call, attempt=1, effects="changes"),
        tool_record("t", "done", site="s#1", invocation=2, call=call, attempt=1, output="ok"),
    ]

    assert keys(theirs, "reply") == [*ours[0], "seq"]
    assert keys(theirs, "tool", state="started") == [*ours[1], "seq"]
    assert keys(theirs, "tool", state="done", invocation=2) == [*ours[2], "seq"]


def test_waiting_and_approval_records_have_functais_keys_in_its_order(tmp_path: Path) -> None:
    """A `waiting` record, its question, and an `approval`: functai's keys in functai's order."""
    theirs = functai_records(tmp_path, "waits", approve=True)
    call = ToolCall("c2", "refund", {"amount": 0, "order": "x"})
    item = approval_item("t", invocation=2, call=call, effects="changes", program="careful_shop")

    waiting = waiting_record("t", attempt=1, approvals=[item], saw=[])
    answer = approval_record("t", item, yes=False, by="ann", reason="no receipt")

    recorded = next(r for r in theirs if r["kind"] == "waiting")
    assert list(recorded) == [*waiting, "seq"]
    assert recorded["approvals"][0] == {**item, "call": recorded["turn"], "input": recorded["approvals"][0]["input"]}
    assert keys(theirs, "approval") == [*answer, "seq"]


def test_a_recorded_result_is_reused_only_for_the_same_call(tmp_path: Path) -> None:
    """The result at (site, invocation) is this call's only when the tool and its input are the same."""
    theirs = Log(functai_records(tmp_path, "same", approve=False))
    book = ToolBook(theirs.turns[theirs.order[0]])
    same = ToolCall("z", "refund", {"amount": 0, "order": "Refund order 7"})
    other = ToolCall("z", "refund", {"amount": 5, "order": "Refund order 7"})

    assert book.result("careful_shop#1", 2, same) is not None
    assert book.result("careful_shop#1", 2, other) is None
    assert book.differs("careful_shop#1", 2, other)
    assert "order Refund order 7 is in Leeds" == book.result(
        "careful_shop#1", 1, ToolCall("y", "order_status", {"order": "Refund order 7"})
    )


def waiting_log(tmp_path: Path) -> tuple[Log, str]:
    """A functai turn waiting for the refund (its reading tool ran)."""
    with functai.configure(lm="fake-model", client=model(asks("Refund order 7"))):
        chat = functai_tools.careful_shop.conversation("w", store=str(tmp_path), approve="changes")
        with pytest.raises(functai.Waiting):
            chat("Refund order 7")
    log = Log(FolderStore(tmp_path).read("w"))
    return log, log.order[0]


def code_of(action: Any) -> str:
    try:
        action()
    except ThreadlineError as err:
        return str(err.code)
    return "accepted"


def test_answers_resumes_and_abandons_refuse_what_format_1_refuses(tmp_path: Path) -> None:
    """A question never asked, a resume while a question waits, a state that allows nothing: coded."""
    log, turn = waiting_log(tmp_path)

    refused = [
        code_of(lambda: answer_records(log, turn, yes=True, invocation=9, now=NOW)),
        code_of(lambda: answer_records(log, turn, yes=True, site="other#1", now=NOW)),
        code_of(lambda: resume_records(log, turn, now=NOW)),
        code_of(lambda: answer_records(log, "nope", yes=True, now=NOW)),
    ]
    answered = answer_records(log, turn, yes=True, by="ann", now=NOW)

    assert [
        ErrorCode.APPROVAL_UNKNOWN,
        ErrorCode.APPROVAL_UNKNOWN,
        ErrorCode.TURN_STATE,
        ErrorCode.TURN_UNKNOWN,
    ] == refused
    assert [("approval", 2, "yes", "ann")] == [(r["kind"], r["invocation"], r["verdict"], r["by"]) for r in answered]
    log.apply([with_seq(r, log.n + i) for i, r in enumerate(answered, 1)])
    assert ErrorCode.TURN_STATE == code_of(lambda: answer_records(log, turn, yes=False, invocation=2, now=NOW))
    assert [("lease", 2)] == [(r["kind"], r["attempt"]) for r in resume_records(log, turn, now=NOW)]
    assert [("ended", "abandoned")] == [(r["kind"], r["state"]) for r in abandon_records(log, turn, now=NOW)]
