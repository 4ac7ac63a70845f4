"""Invariants of the rules over any history of sends, ends, head moves and torn writes."""

from __future__ import annotations

import json
import tempfile

from hypothesis import given, settings
from hypothesis import strategies as st

from core.errors import ThreadlineError
from store.backends.folder import FolderStore
from store.backends.memory import MemoryStore
from store.log.rules import SENDS, parent_for, view_head
from store.log.state import Log
from store.records import ended_record, head_record, lease_record, turn_record, uuid7

NOW = 1_800_000_000.0

send = st.tuples(st.just("send"), st.sampled_from(SENDS), st.booleans(), st.sampled_from(["r1", "r2", None]))
end = st.tuples(st.just("end"), st.integers(0, 30), st.sampled_from(["done", "failed", "stopped", "abandoned"]))
head = st.tuples(st.just("head"), st.integers(0, 30))
expire = st.tuples(st.just("expire"), st.integers(0, 30))
operations = st.lists(st.one_of(send, end, head, expire), max_size=40)


def play(ops: list[tuple[object, ...]]) -> tuple[MemoryStore, list[str | None]]:
    """Apply `ops` to one conversation as writers would; return the store and each send's parent."""
    store, parents = MemoryStore(), []
    for op in ops:
        log = Log(store.read("c"))
        if op[0] == "send":
            _, sends, expired, request_id = op
            try:
                nxt = parent_for(log, view_head(log), sends, NOW)  # type: ignore[arg-type]
            except ThreadlineError:
                continue
            if nxt.waits or (request_id and request_id in log.request_ids):
                continue
            parents.append(nxt.parent)
            tid = uuid7()
            turn = turn_record(tid, parent=nxt.parent, program="p", inputs={}, request_id=request_id)  # type: ignore[arg-type]
            lease = lease_record(tid, attempt=1, now=NOW - 60 if expired else NOW)
            store.append("c", [turn, lease], expect=log.n)
        elif log.order:
            tid = log.order[int(op[1]) % len(log.order)]  # type: ignore[call-overload]
            if op[0] == "end":
                store.append("c", [ended_record(tid, attempt=1, state=str(op[2]))])
            elif op[0] == "head":
                store.append("c", [head_record(tid)])
            else:
                store.append("c", [lease_record(tid, attempt=2, now=NOW - 60)])
    return store, parents


@settings(max_examples=150, deadline=None)
@given(operations)
def test_a_new_turn_continues_a_done_turn_or_none(ops: list[tuple[object, ...]]) -> None:
    """Whatever happened before, a new turn's parent was `done` when it was chosen, or null."""
    store, parents = play(ops)
    log = Log(store.read("c"))

    assert parents == [log.turns[tid].parent for tid in log.order]
    for tid in log.order:
        parent = log.turns[tid].parent
        before = Log([r for r in store.read("c") if r["seq"] < log.turns[tid].record["seq"]])
        assert parent is None or "done" == before.turns[parent].state(NOW)


@settings(max_examples=100, deadline=None)
@given(operations, st.integers(0, 60))
def test_applying_in_pieces_equals_applying_at_once(ops: list[tuple[object, ...]], cut: int) -> None:
    """Incremental reading reaches the same state, head and request ids as reading everything."""
    store, _ = play(ops)
    records = store.read("c")
    whole = Log(records)
    pieces = Log(store.read("c")[:cut])
    pieces.apply(store.read("c", after=pieces.n))

    assert (whole.n, whole.head, whole.request_ids) == (pieces.n, pieces.head, pieces.request_ids)
    assert whole.states(NOW) == pieces.states(NOW)


@settings(max_examples=100, deadline=None)
@given(operations)
def test_a_request_id_names_its_first_turn(ops: list[tuple[object, ...]]) -> None:
    """The same request id twice is one turn: the first turn record that carried it."""
    store, _ = play(ops)
    log = Log(store.read("c"))

    first: dict[str, str] = {}
    for record in store.read("c"):
        if record.get("kind") == "turn" and record.get("request_id"):
            first.setdefault(record["request_id"], record["turn"])
    assert first == log.request_ids


batches = st.lists(
    st.one_of(st.lists(st.dictionaries(st.sampled_from("abc"), st.integers()), max_size=4), st.just("torn")),
    max_size=12,
)


@settings(max_examples=60, deadline=None)
@given(batches)
def test_seq_is_always_the_line_number(plan: list[object]) -> None:
    """Whatever batches arrive, and whatever torn lines dead writers leave, record k carries seq k."""
    with tempfile.TemporaryDirectory() as folder:
        store = FolderStore(folder)
        for batch in plan:
            if batch == "torn":
                with store.path("c").open("ab") as f:
                    f.write(b'{"half":')
            else:
                store.append("c", batch)  # type: ignore[arg-type]
        text = store.path("c").read_bytes() if store.path("c").exists() else b""

    complete = [line for line in text.split(b"\n")[: text.count(b"\n")] if line.strip()]
    for k, line in enumerate(complete, start=1):
        try:
            record = json.loads(line)
        except ValueError:
            continue
        assert k == record["seq"]
    assert sum(len(b) for b in plan if isinstance(b, list)) == sum(1 for line in complete if b'"seq"' in line)


@settings(max_examples=100, deadline=None)
@given(operations)
def test_a_log_keeps_records_equal_to_those_read(ops: list[tuple[object, ...]]) -> None:
    """What a log keeps of each turn equals what was written: its first `turn` and `ended`
    records whole, and of its last lease who holds it, until when, which attempt and where."""
    store, _ = play(ops)
    records = store.read("c")
    log = Log(store.read("c"))

    for tid, turn in log.turns.items():
        mine = [r for r in records if r.get("turn") == tid]
        ended = [r for r in mine if r["kind"] == "ended"]
        lease = [r for r in mine if r["kind"] == "lease"][-1]
        assert next(r for r in mine if r["kind"] == "turn") == turn.record
        assert (ended[0] if ended else None) == turn.ended
        assert {k: lease[k] for k in ("kind", "turn", "holder", "until", "attempt", "seq")} == turn.lease
