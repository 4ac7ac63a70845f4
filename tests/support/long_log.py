"""Long conversations written straight into a folder store, in the shape Threadline writes them.

    python -m tests.support.long_log functai FOLDER ID   # functai 1.2.0 sends one turn (offline)


Each turn is a `turn`, a `lease` and a done `ended` record whose `saw` is
`[{"saw_of": parent}, {"call": parent, "steps": true}]` and whose lmcc is the one
`store.log.turns.lmcc` builds. The lines are formatted from templates made once with the same encoder
the store uses, so 100,000 turns take a second or two, not the minute building records would.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from store.backends.base import encode
from store.log.turns import lmcc
from store.programs.program import TUTOR
from store.records import ended_record, iso, lease_record, turn_record

START = 1_790_000_000.0
"""2026-09-21: a fixed clock, long past, so no lease reads as live."""
SECONDS_PER_TURN = 7

_TOKENS = ("TID", "PARENT", "AT", "UNTIL", "END", "QUESTION", "ANSWER", "REQUEST", "S0", "S1", "S2")


def turn_id(i: int) -> str:
    """The id of turn `i` (a UUIDv7-shaped string, unique within a conversation)."""
    return f"01990000-0000-7000-8000-{i:012x}"


def question(i: int) -> str:
    """The message of turn `i` (plain ASCII: nothing to escape in JSON)."""
    return f"Question {i}: why does {i % 9 + 1}/{i % 7 + 2} + 1/{i % 5 + 3} need a common denominator?"


def answer(i: int) -> str:
    """The answer of turn `i`."""
    b, c = i % 7 + 2, i % 5 + 3
    return f"Because the pieces differ in size: rewrite both over {b * c}, then add the tops (turn {i})."


def _mark(token: str) -> str:
    return f"@@{token}@@"


def _templates() -> tuple[str, str]:
    """`%`-format templates of one turn's three lines: for the first turn, and for a later one."""
    inputs, outputs = {"message": _mark("QUESTION")}, {"result": _mark("ANSWER")}
    tid, at = _mark("TID"), _mark("AT")
    turn = turn_record(
        tid, parent=None, program=TUTOR.version, inputs=inputs, request_id=_mark("REQUEST"), settings={"lm": "offline"}
    )
    lease = lease_record(tid, attempt=1, owner="long-log:1:abcdef")
    usage = {"input_tokens": 120, "output_tokens": 30, "total_tokens": 150}
    ended = ended_record(
        tid,
        attempt=1,
        state="done",
        saw=[{"saw_of": _mark("PARENT")}, {"call": _mark("PARENT"), "steps": True}],
        seconds=0.25,
        usage=usage,
        outputs=outputs,
        value=outputs["result"],
        lmcc=lmcc(TUTOR, inputs, outputs),
        model="offline",
    )
    turn["at"], lease["at"], lease["until"], ended["at"] = at, at, _mark("UNTIL"), _mark("END")
    lines = [encode(r, 0).decode() for r in (turn, lease, ended)]
    text = "".join(line.replace('"seq":0}', f'"seq":{_mark(f"S{k}")}}}') for k, line in enumerate(lines))
    text = text.replace("%", "%%")
    for token in _TOKENS:
        text = text.replace(_mark(token), f"%({token})s")
    first = text.replace('"saw":[{"saw_of":"%(PARENT)s"},{"call":"%(PARENT)s","steps":true}]', '"saw":[]')
    return first, text.replace('"parent":null', '"parent":"%(PARENT)s"')


def lines(turns: int) -> Iterator[str]:
    """The conversation's text in pieces: the program record, then one turn's three records at a time."""
    yield encode(TUTOR.record(at=iso(START)), 1).decode()
    first, later = _templates()
    for i in range(turns):
        now = START + SECONDS_PER_TURN * i
        seq = 2 + 3 * i
        values = {
            "TID": turn_id(i),
            "PARENT": turn_id(i - 1),
            "AT": iso(now),
            "UNTIL": iso(now + 30),
            "END": iso(now + 1),
            "QUESTION": question(i),
            "ANSWER": answer(i),
            "REQUEST": f"req-{i:08d}",
            "S0": seq,
            "S1": seq + 1,
            "S2": seq + 2,
        }
        yield (later if i else first) % values


def write_conversation(folder: Path, conversation: str, turns: int) -> list[str]:
    """Write a `turns`-turn chain as `<folder>/conversations/<conversation>.jsonl`; return its turn ids."""
    directory = Path(folder) / "conversations"
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = directory / f"{conversation}.jsonl"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        batch: list[str] = []
        for line in lines(turns):
            batch.append(line)
            if len(batch) >= 4096:
                out.write("".join(batch))
                batch.clear()
        out.write("".join(batch))
    return [turn_id(i) for i in range(turns)]


def continue_with_functai(folder: Path, conversation: str) -> None:
    """functai 1.2.0 opens the conversation and sends one turn with an offline model."""
    from tests.support.functai_kit import offline, reply, tutor

    with offline([reply("functai's answer")]):
        tutor.conversation(conversation, store=str(folder))("functai's turn")


if __name__ == "__main__":
    import sys

    if sys.argv[1:2] == ["functai"]:
        continue_with_functai(Path(sys.argv[2]), sys.argv[3])
