"""Call-log benchmark: what logging a turn's call adds to a turn, and reading rated rows, beside functai 1.2.0.

    python -m bench.calllog

Measured (medians over repetitions; read the ratios, not the absolute times):
1. Logging one turn's call (`write_call`: build the record from the conversation log, one
   unsynced append) against the anchor every turn already pays: the conversation's fsynced
   `ended` append. Also against functai's own writer appending the same line.
2. `rated()` over a call log of 200 conversations of 5 turns (1,000 calls, 400 ratings, every
   rated turn shown its earlier turns), against functai's own reading of the same folder
   (`calllog.read`, `rated_rows`, `with_context`: its `rated()` less the table).
3. `train_test` of 10,000 rows in 2,000 conversations against `functai.split`.
"""

from __future__ import annotations

import gc
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import functai
import functai.calllog as functai_calls

from store.backends.folder import FolderStore
from store.calls.log import call_log, write_call
from store.calls.rated import rated
from store.calls.ratings import rate
from store.calls.record import call_line
from store.calls.split import train_test
from store.log.state import Log
from store.programs.program import TUTOR
from store.records import ended_record, turn_record, uuid7

REPS = 7
TURNS = 300
CONVERSATIONS, PER_CONVERSATION = 200, 5


def _median(run: Callable[[], Any], reps: int = REPS) -> float:
    times = []
    for _ in range(reps):
        gc.collect()
        gc.disable()
        try:
            start = time.perf_counter()
            run()
            times.append(time.perf_counter() - start)
        finally:
            gc.enable()
    return statistics.median(times)


def _turns(store: FolderStore, conversation: str, n: int) -> tuple[list[str], Log]:
    """`n` ended turns in one conversation, each shown the one before it."""
    records: list[dict[str, Any]] = [TUTOR.record(at="2026-09-21T00:00:00.000000Z")]
    parent: str | None = None
    ids = []
    for i in range(n):
        tid = uuid7()
        saw = [{"call": parent, "steps": True}] if parent else []
        ended = ended_record(tid, attempt=1, state="done", saw=saw, outputs={"result": f"a{i}"}, value=f"a{i}")
        ended["lmcc"] = {"steps": [{"kind": "model", "outputs": {"result": f"a{i}"}}]}
        records += [turn_record(tid, parent=parent, program=TUTOR.version, inputs={"message": f"m{i}"}), ended]
        parent = tid
        ids.append(tid)
    store.append(conversation, records)
    return ids, Log(store.read(conversation))


def logging_a_turn(root: Path) -> list[tuple[str, float, float]]:
    """Per turn: write_call vs the fsynced `ended` append, and vs functai's writer."""
    store = FolderStore(root / "write")
    ids, log = _turns(store, "w", TURNS)
    calls = call_log(store)
    done = iter(ids)
    ours = _median(lambda: [write_call(calls, "w", log, next(done)) for _ in range(TURNS // REPS)], REPS)
    ended = ended_record(uuid7(), attempt=1, state="done", outputs={"result": "x"}, value="x")
    anchor = _median(lambda: [store.append("anchor", [ended]) for _ in range(TURNS // REPS)], REPS)
    line = call_line(functai_calls.read(calls.where)[0][0])
    writer = functai_calls._writer(root / "functai-calls")
    theirs = _median(lambda: [writer.write(line) for _ in range(TURNS // REPS)], REPS)
    per = TURNS // REPS
    return [
        ("log one turn's call vs its fsynced `ended` append", ours / per, anchor / per),
        ("log one turn's call vs functai's writer of the same line (the write alone)", ours / per, theirs / per),
    ]


def reading_rows(root: Path) -> list[tuple[str, float, float]]:
    """rated() vs functai's reading of the same call log."""
    store = FolderStore(root / "read")
    for c in range(CONVERSATIONS):
        ids, log = _turns(store, f"c{c}", PER_CONVERSATION)
        for tid in ids:
            write_call(call_log(store), f"c{c}", log, tid)
        for tid in ids[-2:]:
            rate(store, tid, "right", by="ana", conversation=f"c{c}")
    folder = str(call_log(store).where)

    def theirs() -> int:
        found, ratings = functai_calls.read(folder)
        rows, _ = functai_calls.rated_rows(found, ratings, name="tutor")
        return len(functai_calls.with_context(rows, found)[0])

    assert len(rated(TUTOR, stores=[store])) == theirs() == 2 * CONVERSATIONS
    return [("rated rows of 1,000 calls (400 rated)", _median(lambda: rated(TUTOR, stores=[store])), _median(theirs))]


def splitting() -> list[tuple[str, float, float]]:
    rows = [{"x": i, "conversation": f"c{i % 2000}"} for i in range(10_000)]
    ours = _median(lambda: train_test(rows, test=0.34, seed=1))
    theirs = _median(lambda: functai.split(rows, test=0.34, seed=1))
    return [("train_test of 10,000 rows (2,000 conversations)", ours, theirs)]


def main() -> None:
    print(__doc__.split("\n\n")[0])
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        figures = logging_a_turn(root) + reading_rows(root) + splitting()
    print("\n| measure | threadline | anchor | ratio |\n|---|---:|---:|---:|")
    for measure, ours, anchor in figures:
        print(f"| {measure} | {ours * 1e3:.3f} ms | {anchor * 1e3:.3f} ms | {ours / anchor:.2f} |")


if __name__ == "__main__":
    main()
