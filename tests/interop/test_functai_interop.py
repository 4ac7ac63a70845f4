"""Interop with the real functai 1.2.0: both read, continue and append to the same record log."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from store.backends.folder import FolderStore
from store.backends.writer import Writer
from store.log.rules import View, branches, parent_for, shown, view_head
from store.log.state import Log
from store.log.turns import Answer, TurnRequest
from store.programs.program import TUTOR
from tests.support.functai_kit import offline, reply, tutor

ROOT = Path(__file__).resolve().parents[2]


def answer(text: str) -> Answer:
    return Answer({"result": text}, model="offline")


def functai_history(folder: Path) -> str:
    """functai writes: three turns, a branch from the first, a failed turn, a head move, a stopped turn."""
    replies = [reply("A1"), reply("A2"), reply("A3"), RuntimeError("boom"), reply("B1"), reply("late")]
    with offline(replies, delay=0.3):
        chat = tutor.conversation("alex", store=str(folder))
        chat("one")
        chat("two")
        second = chat.head
        chat("three")
        branch = chat.continue_from(chat.turns[0])
        with pytest.raises(RuntimeError):
            branch("boom")
        branch("branch")
        chat.head = second
        stream = chat.stream("stopped")
        threading.Timer(0.1, chat.stop, args=[stream.turn_id]).start()
        with pytest.raises(BaseException, match="closed"):
            stream.result()
    return "alex"


def test_threadline_reads_functai_history_as_functai_does(tmp_path: Path) -> None:
    """States, head, branches, next parent and every turn's saw agree with functai's own reading."""
    conversation = functai_history(tmp_path)
    records = FolderStore(tmp_path).read(conversation)
    log, now = Log(records), time.time()

    with offline([reply("next")]):
        view = tutor.conversation(conversation, store=str(tmp_path))
        theirs = {t.id: t for t in view.all_turns()}
        their_head = view.head.id
        predicted = parent_for(log, view_head(log, View()), "queue", now).parent
        view("after")
        their_next = view.head.parent

    assert {tid: t.state for tid, t in theirs.items()} == log.states(now)
    assert {"done": 4, "failed": 1, "stopped": 1} == Counter(log.states(now).values())
    assert their_head == view_head(log)
    assert sorted(tid for tid in theirs if not any(t.parent == tid for t in theirs.values())) == sorted(branches(log))
    assert their_next == predicted
    for tid in log.order:
        turn = log.turns[tid]
        before = Log(r for r in records if r["seq"] < turn.record["seq"])
        ours = shown(before, turn.parent, fields=TUTOR.field_records(), signature=TUTOR.signature, now=now)
        assert turn.ended is not None
        assert turn.ended["saw"] == ours.saw


def test_functai_continues_a_threadline_conversation(tmp_path: Path) -> None:
    """functai lists Threadline's turns and continues after them, compressing its saw with saw_of."""
    writer = Writer(FolderStore(tmp_path), "bob", TUTOR)
    first = writer.send(TurnRequest({"message": "Hi, I'm Bob."}), lambda _s, _i: answer("Welcome, Bob!"))
    second = writer.send(TurnRequest({"message": "What is 1/2 + 1/3?"}), lambda _s, _i: answer("First, the bottoms."))

    with offline([reply("Not quite.")]) as config:
        chat = tutor.conversation("bob", store=str(tmp_path))
        listed = [(t.id, t.state, t.result) for t in chat.turns]
        result = chat("Is it 2/5?")
        new = chat.head
        request = config.requests[0]

    assert [(first, "done", "Welcome, Bob!"), (second, "done", "First, the bottoms.")] == listed
    assert "Not quite." == result
    assert second == new.parent
    assert [first, second] == [t.id for t in new.saw]
    ended = [r for r in FolderStore(tmp_path).read("bob") if r.get("kind") == "ended"][-1]
    assert [{"saw_of": second}, {"call": second, "steps": True}] == ended["saw"]
    assert 5 == len(request.messages)


def test_threadline_continues_after_functai(tmp_path: Path) -> None:
    """A Threadline turn after functai's turns continues the head and records the same saw functai would."""
    conversation = functai_history(tmp_path)
    writer = Writer(FolderStore(tmp_path), conversation, TUTOR)
    head = view_head(writer.read())
    assert head is not None

    turn = writer.send(TurnRequest({"message": "ours"}), lambda _s, _i: answer("yes"))

    log = writer.read()
    assert log.turns[head].state(time.time()) == "stopped"
    assert log.nearest_done(head, time.time()) == log.turns[turn].parent
    with offline([]):
        assert "yes" == tutor.conversation(conversation, store=str(tmp_path)).head.result


def test_functai_honours_a_threadline_request_id(tmp_path: Path) -> None:
    """The same request id sent through functai is the Threadline turn: no model call, nothing recorded."""
    store = FolderStore(tmp_path)
    writer = Writer(store, "rid", TUTOR)
    turn = writer.send(TurnRequest({"message": "once"}, request_id="r-1"), lambda _s, _i: answer("only once"))
    count = len(store.read("rid"))

    with offline([]) as config:
        result = tutor.conversation("rid", store=str(tmp_path))("once", request_id="r-1")

    assert "only once" == result
    assert count == len(store.read("rid"))
    assert [] == config.requests
    assert turn == Log(store.read("rid")).request_ids["r-1"]


def test_threadline_honours_a_functai_request_id(tmp_path: Path) -> None:
    """A request id functai recorded is one turn for Threadline too."""
    with offline([reply("theirs")]):
        tutor.conversation("rid", store=str(tmp_path))("hello", request_id="r-9")
    writer = Writer(FolderStore(tmp_path), "rid", TUTOR)
    count = writer.read().n

    begun = writer.begin(TurnRequest({"message": "hello"}, request_id="r-9"))

    assert writer.read().request_ids["r-9"] == begun.turn
    assert count == writer.read().n


def test_after_a_torn_line_both_read_every_complete_record(tmp_path: Path) -> None:
    """A writer died mid-line: Threadline terminates it, and neither reader loses a complete record."""
    with offline([reply("one"), reply("two")]):
        chat = tutor.conversation("torn", store=str(tmp_path))
        chat("1")
        chat("2")
    store = FolderStore(tmp_path)
    with store.path("torn").open("ab") as f:
        f.write(b'{"functai_conversation":1,"kind":"turn","tu')

    Writer(store, "torn", TUTOR).send(TurnRequest({"message": "3"}), lambda _s, _i: answer("three"))

    with offline([reply("four")]):
        chat = tutor.conversation("torn", store=str(tmp_path))
        assert ["one", "two", "three"] == [t.result for t in chat.turns]
        chat("4")
    records = store.read("torn")
    assert [{"unreadable": True}] == [r for r in records if "seq" not in r]
    assert list(range(1, len(records) + 1)) == [r.get("seq", i + 1) for i, r in enumerate(records)]
    log = Log(records)
    assert ["one", "two", "three", "four"] == [log.turns[tid].outputs["result"] for tid in log.order]


def test_processes_of_both_engines_append_at_once(tmp_path: Path) -> None:
    """Two functai and two Threadline processes send turns while another appends entries:
    no record is lost, duplicated or misnumbered, and every turn ends once."""
    n = 12
    agents = [("functai", "f1"), ("functai", "f2"), ("threadline", "t1"), ("threadline", "t2"), ("entries", "e")]
    FolderStore(tmp_path)
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.support.agents", kind, str(tmp_path), "crowd", str(n), name], cwd=ROOT
        )
        for kind, name in agents
    ]
    time.sleep(1.5)  # let every process import before they start together
    (tmp_path / "go").touch()
    codes = [p.wait(timeout=90) for p in procs]

    assert [0] * len(procs) == codes
    raw = (tmp_path / "conversations" / "crowd.jsonl").read_text(encoding="utf-8").splitlines()
    records = [json.loads(line) for line in raw]
    assert list(range(1, len(raw) + 1)) == [r["seq"] for r in records]
    log = Log(records)
    sent = sorted(t.inputs["message"] for t in log.turns.values())
    assert sorted(f"{name} {k}" for kind, name in agents[:4] for k in range(n)) == sent
    assert all(t.state(time.time()) == "done" for t in log.turns.values())
    ended = Counter(r["turn"] for r in records if r.get("kind") == "ended")
    assert set(ended.values()) == {1}
    assert sum(1 + k % 3 for k in range(n)) == len(log.entries)
    # Every turn continued a turn that had ended done before it was sent.
    for tid in log.order:
        parent = log.turns[tid].parent
        if parent is not None:
            parent_ended = log.turns[parent].ended
            assert parent_ended is not None
            assert parent_ended["seq"] < log.turns[tid].record["seq"]
