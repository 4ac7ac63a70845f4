"""What placing a turn decides it is shown is what its run would read back from the log.

`place_and_run` hands the run the `Shown` its placing worked out (`Placing.place_shown`) instead of
working it out again (`shown_for_run`). That is right only while the two agree, whatever the
conversation's history, its rule and its setup; these properties hold them to it.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from activities.plan import shown_for_run
from core.context import ContextRule
from store.backends.memory import MemoryStore
from store.log.preamble import setup_record
from store.log.state import Log
from store.log.turns import Begin, TurnRequest, begin_turn
from store.programs.program import TUTOR
from store.records import ended_record, head_record

NOW = 1_800_000_000.0
RULES = (
    ContextRule(),
    ContextRule(last=2),
    ContextRule(without=("message",)),
    ContextRule(window=3),
    ContextRule(max_tokens=60),
)

turn = st.tuples(st.just("turn"), st.sampled_from(["done"] * 6 + ["failed", "stopped"]), st.integers(0, 400))
head = st.tuples(st.just("head"), st.integers(0, 30), st.just(0))
setup = st.tuples(st.just("setup"), st.integers(0, 3), st.just(0))
histories = st.lists(st.one_of(turn, turn, turn, turn, head, setup), min_size=3, max_size=25)


@settings(max_examples=200, deadline=None)
@given(histories, st.sampled_from(RULES))
def test_a_placed_turn_is_shown_what_its_placing_decided(
    history: list[tuple[str, object, int]], rule: ContextRule
) -> None:
    """After any history of turns (ended in any state, answers of any length), head moves and setups,
    each new turn's run reads back from the log exactly the `Shown` its placing decided."""
    store, placed = MemoryStore(), 0
    for kind, value, size in history:
        log = Log(store.read("c"))
        if kind == "setup":
            record = setup_record(
                log,
                system_prompt=f"be brief {value}",
                metadata={"n": value},
                program=TUTOR.name,
                request_id=f"s{value}",
                now=NOW,
            )
            if record is not None:
                store.append("c", [record])
            continue
        if kind == "head":
            if log.order:
                store.append("c", [head_record(log.order[int(str(value)) % len(log.order)])])
            continue
        request = TurnRequest(
            {"message": f"question {placed} " + "x" * (size // 10)}, request_id=f"r{placed}", rule=rule
        )
        decided = begin_turn(log, TUTOR, request, now=NOW)
        assert isinstance(decided, Begin)
        store.append("c", decided.records, expect=decided.expect)
        placed += 1

        read_back = shown_for_run(Log(store.read("c")), TUTOR, decided.turn, rule, now=NOW)

        assert (read_back.turns, read_back.saw, read_back.rows) == (
            decided.shown.turns,
            decided.shown.saw,
            decided.shown.rows,
        )
        assert (read_back.exchanges, read_back.without, read_back.sections) == (
            decided.shown.exchanges,
            decided.shown.without,
            decided.shown.sections,
        )
        answer = {"result": "y" * size} if value == "done" else None
        usage = {"input_tokens": size, "output_tokens": size // 2, "total_tokens": size + size // 2}
        store.append("c", [ended_record(decided.turn, attempt=1, state=str(value), outputs=answer, usage=usage)])

    assert placed == sum(kind == "turn" for kind, _, _ in history)
