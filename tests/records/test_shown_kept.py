"""What a long branch shows, kept in its log (`store.log.memo`), is what the log says afresh.

A worker keeps one `Log` per conversation and applies each turn's records to it; a long branch's
showing is kept there and extended by one turn at a time. Whatever is appended between turns (a
next turn, a branch from an older one, a steer about an ended turn, a program record that comes
after its turns, a turn left running), each showing must equal the one a new `Log` of the same
records works out.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from activities.plan import request_of
from core.context import ContextRule
from store.backends.memory import MemoryStore
from store.log.memo import KEPT_FROM
from store.log.rules import EVERY_TURN, Shown, View
from store.log.state import Log
from store.log.steers import steer_record, steered_record
from store.log.turns import Begin, TurnRequest, begin_turn, lmcc, shown_for
from store.programs.program import TUTOR
from store.records import ended_record, iso

NOW = 1_800_000_000.0
LATE = "late-version"
"""A program version whose turns are recorded before its `program` record."""


class Conversation:
    """One conversation in a memory store, with a `Log` kept across turns as a worker keeps it."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.store = MemoryStore()
        self.kept = Log()
        self.count = 0

    def read(self) -> Log:
        self.kept.apply(self.store.read(self.name, self.kept.n))
        return self.kept

    def fresh(self) -> Log:
        return Log(self.store.read(self.name))

    def send(
        self, *, after: str | None = None, version: str | None = None, end: bool = True, rule: ContextRule | None = None
    ) -> str:
        """A turn after `after` (None: the head) as Threadline writes one: placed with what it is
        shown, then ended done with `saw` compressed as placing it decided."""
        self.count += 1
        view = View(pinned=after, exact=True) if after is not None else View()
        request = TurnRequest(inputs={"message": f"question {self.count}"}, view=view, rule=rule or ContextRule())
        log = self.read()
        decided = begin_turn(log, TUTOR, request, now=NOW)
        assert isinstance(decided, Begin)
        records = decided.records
        if version is not None:
            records = [r if r.get("kind") != "turn" else {**r, "program": version} for r in records]
            records = [r for r in records if r.get("kind") != "program"]
        self.store.append(self.name, records, expect=decided.expect)
        if end:
            outputs = {"result": f"answer {self.count}"}
            done = ended_record(
                decided.turn,
                attempt=1,
                state="done",
                saw=decided.shown.saw,
                outputs=outputs,
                value=outputs["result"],
                lmcc=lmcc(TUTOR, request.inputs, outputs),
                model="offline",
                at=iso(NOW),
            )
            self.store.append(self.name, [done])
        return decided.turn

    def shown(self, parent: str | None, rule: ContextRule = EVERY_TURN) -> tuple[Shown, Shown]:
        """What a turn after `parent` is shown: by the kept log, then by a new one."""
        kept = shown_for(self.read(), TUTOR, parent, rule, now=NOW)
        return kept, shown_for(self.fresh(), TUTOR, parent, rule, now=NOW)


def long_conversation(name: str, turns: int = KEPT_FROM + 2) -> tuple[Conversation, list[str]]:
    chat = Conversation(name)
    return chat, [chat.send() for _ in range(turns)]


def test_a_long_branch_is_kept_and_each_next_turn_is_shown_as_the_log_says() -> None:
    """Turn after turn past `KEPT_FROM`, the kept log shows what a new log shows, and keeps the branch."""
    chat, ids = long_conversation("kept-next")
    for _ in range(5):
        kept, fresh = chat.shown(ids[-1])
        assert kept == fresh
        assert kept.saw == [{"saw_of": ids[-1]}, {"call": ids[-1], "steps": True}]
        assert len(kept.exchanges) == len(ids)
        memo = chat.kept.shown_memo
        assert memo is not None
        assert memo.tip == ids[-1]
        ids.append(chat.send())


def test_a_short_branch_keeps_nothing() -> None:
    """Most conversations are short: their logs keep nothing more."""
    chat, ids = long_conversation("kept-short", KEPT_FROM - 2)
    kept, fresh = chat.shown(ids[-1])
    assert kept == fresh
    assert chat.kept.shown_memo is None


def test_a_branch_from_an_older_turn_is_shown_as_the_log_says() -> None:
    """Continuing from an older turn, then the head again, each shows its own branch."""
    chat, ids = long_conversation("kept-branch")
    older = ids[KEPT_FROM // 2]
    side = chat.send(after=older)
    for parent in (side, ids[-1], ids[-2], side):
        kept, fresh = chat.shown(parent)
        assert kept == fresh, parent


def test_a_steer_about_an_ended_turn_changes_what_is_kept() -> None:
    """A `steered` entry recorded about a turn that already ended moves the log's generation on."""
    chat, ids = long_conversation("kept-steer")
    chat.shown(ids[-1])
    target = ids[3]
    chat.store.append(
        chat.name,
        [
            steer_record(target, "steer-1", {"message": "shorter, please"}, now=NOW),
            steered_record(target, "steer-1", step=0, now=NOW),
        ],
    )
    kept, fresh = chat.shown(ids[-1])
    assert kept == fresh
    assert any("steers" in exchange for exchange in kept.exchanges)


def test_a_program_recorded_after_its_turns_changes_what_is_kept() -> None:
    """Turns of a version the log has no record of yet are shown by their values; once the record
    comes (same signature), whole: the kept showing follows."""
    chat, _ids = long_conversation("kept-late")
    late = [chat.send(version=LATE) for _ in range(2)]
    before, fresh = chat.shown(late[-1])
    assert before == fresh
    chat.store.append(chat.name, [{**TUTOR.record(at=iso(NOW)), "version": LATE}])
    after, fresh = chat.shown(late[-1])
    assert after == fresh
    assert after != before


def test_a_turn_that_saw_less_is_not_taken_to_have_seen_the_branch() -> None:
    """After a turn shown only a window, the next turn (every turn) compresses its saw to that
    turn's only if that turn saw exactly what it is shown before it: here it did not."""
    chat, ids = long_conversation("kept-window")
    chat.shown(ids[-1])
    narrow = chat.send(rule=ContextRule(window=4))
    kept, fresh = chat.shown(narrow)
    assert kept == fresh
    assert kept.saw[0] != {"saw_of": narrow}
    assert len(kept.saw) == len(ids) + 1


def test_a_turn_left_running_is_not_kept() -> None:
    """A branch with a turn that has not ended may still change: it is worked out each time."""
    chat, _ids = long_conversation("kept-running")
    running = chat.send(end=False)
    kept, fresh = chat.shown(running)
    assert kept == fresh
    assert running not in kept.turns


@pytest.mark.parametrize("seed", range(6))
def test_any_mix_of_appends_is_shown_as_the_log_says(seed: int) -> None:
    """Random sends (at the head, from older turns, left running), steers and late programs between
    showings: every showing of the kept log equals a new log's, for the default rule and a window."""
    rng = random.Random(seed)
    chat, ids = long_conversation(f"kept-mix-{seed}")
    for _ in range(30):
        action = rng.random()
        if action < 0.5:
            ids.append(chat.send())
        elif action < 0.6:
            ids.append(chat.send(rule=ContextRule(window=rng.randint(1, 8))))
        elif action < 0.75:
            ids.append(chat.send(after=rng.choice(ids)))
        elif action < 0.85:
            target = rng.choice(ids)
            rid = f"steer-{rng.random()}"
            chat.store.append(
                chat.name,
                [
                    steer_record(target, rid, {"message": "and?"}, now=NOW),
                    steered_record(target, rid, step=0, now=NOW),
                ],
            )
        elif action < 0.95:
            ids.append(chat.send(version=LATE))
        else:
            chat.store.append(chat.name, [{**TUTOR.record(at=iso(NOW)), "version": LATE}])
        parents: list[Any] = [ids[-1], rng.choice(ids), chat.read().head]
        for parent in parents:
            for rule in (ContextRule(), ContextRule(window=10)):
                kept, fresh = chat.shown(parent, rule)
                assert kept == fresh, (parent, rule)
                asked = {"message": "next"}
                assert request_of(TUTOR, kept, asked, model="m") == request_of(TUTOR, fresh, asked, model="m")


def test_a_long_branch_keeps_its_rendered_messages_for_the_next_request() -> None:
    """The request after a long branch renders only the exchange that is new; with a steer recorded
    on an earlier turn, what was kept is let go and the request is the one a new log builds."""
    chat, ids = long_conversation("kept-render")
    asked = {"message": "next"}
    kept, _ = chat.shown(ids[-1])
    first = request_of(TUTOR, kept, asked, model="m")
    assert kept.renders is not None
    assert len(kept.renders) == len(ids)
    ids.append(chat.send())
    kept, fresh = chat.shown(ids[-1])
    renders = kept.renders
    assert renders is not None
    assert len(renders) == len(ids) - 1
    second = request_of(TUTOR, kept, asked, model="m")
    assert second == request_of(TUTOR, fresh, asked, model="m")
    assert second.messages[: len(first.messages) - 1] == first.messages[:-1]
    assert len(renders) == len(ids)
    chat.store.append(
        chat.name,
        [
            steer_record(ids[2], "steer-r", {"message": "x"}, now=NOW),
            steered_record(ids[2], "steer-r", step=0, now=NOW),
        ],
    )
    kept, fresh = chat.shown(ids[-1])
    assert request_of(TUTOR, kept, asked, model="m") == request_of(TUTOR, fresh, asked, model="m")
