"""A turn placed by a workflow task the Temporal server lost: its `turn` and `lease` records are in the
log, but the workflow never learned of them (the task that recorded `begin_turn`'s result died with
the server, and the update that carried the send with it). Each case appends those records exactly
as that lost task did, through the store API, with no workflow knowing; the workflow that placed
them must find and end the turn once (at its run's start, on its next send, before an idle close,
or when the send is repeated), never leave it interrupted as the head, never place a second turn
for its request id, and continue the conversation from it."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from pathlib import Path

from temporalio.client import Client

from core.settings import Settings
from core.temporal import workflow_id
from store.backends.folder import FolderStore
from store.log.state import Log
from store.log.turns import Begin, TurnRequest, begin_turn
from store.programs.program import TUTOR
from store.records import uuid7
from tests.chaos.invariants import Ledger, until_ended
from tests.support.functai_kit import tutor as functai_tutor
from threadline.client import connect
from worker import build_worker

PATIENCE_S = 25.0
"""Far less than a lost turn's lease (40 s, read as running 15 s more): a turn that ends within it was
run by its owner, not claimed by whoever found its lease run out."""


def place_lost(folder: Path, conversation: str, message: str) -> tuple[str, str]:
    """Append a send's `turn` and `lease` as the conversation's workflow places them, and tell nobody:
    what a placing task the server lost leaves behind. Its request id and turn."""
    store, rid = FolderStore(folder), uuid7()
    log = Log(store.read(conversation))
    request = TurnRequest({"message": message}, request_id=rid, placed_by=workflow_id("default", conversation))
    decided = begin_turn(log, TUTOR, request, now=time.time())
    assert isinstance(decided, Begin)
    store.append(conversation, decided.records, expect=decided.expect)
    return rid, decided.turn


def check_owned(folder: Path, conversation: str, ledger: Ledger) -> Log:
    """The log is whole, every send (the lost one included) ended once, and nothing is left open."""
    log = ledger.check(folder, conversation)
    assert {} == {tid: turn.state(time.time()) for tid, turn in log.turns.items() if turn.ended is None}
    assert ["done"] * len(log.turns) == [turn.state(0) for turn in log.turns.values()]
    return log


async def test_the_next_send_runs_a_lost_turn_and_continues_from_it(
    client: Client, settings: Settings, folder: Path, cid: str
) -> None:
    """Before: the lost turn stayed the interrupted head and the next send went beside it."""
    tl, ledger = await connect(settings, client=client), Ledger()
    chat = tl.conversation("tutor", id=cid)
    async with build_worker(client, settings):
        first = await ledger.predict(chat, "hello")
        rid, lost = place_lost(folder, cid, "the lost send")
        ledger.answers[rid] = lost
        after = await asyncio.wait_for(ledger.predict(chat, "after it"), PATIENCE_S)
    log = check_owned(folder, cid, ledger)
    assert (first, lost) == (log.turns[lost].parent, log.turns[after].parent)
    assert "shown 1 earlier" in str(log.turns[lost].outputs["result"])  # it ran where it was placed
    assert "shown 2 earlier" in str(log.turns[after].outputs["result"])
    assert after == log.head
    view = functai_tutor.conversation(cid, store=str(folder))  # the key it carries is functai's to ignore
    assert [first, lost, after] == [turn.id for turn in view.turns]
    assert ["done"] * 3 == [turn.state for turn in view.turns]


async def test_a_run_begun_by_a_send_runs_the_lost_turn_before_it(
    client: Client, settings: Settings, folder: Path, cid: str
) -> None:
    """A send that begins the conversation's workflow, its log holding a lost turn of an earlier one:
    its step, which looks at the log for the run, finds the lost turn; the run drives it first and the
    send continues from it (its step placed nothing)."""
    tl, ledger = await connect(settings, client=client), Ledger()
    chat = tl.conversation("tutor", id=cid)
    rid, lost = place_lost(folder, cid, "the lost first send")
    ledger.answers[rid] = lost
    async with build_worker(client, settings):
        after = await asyncio.wait_for(ledger.predict(chat, "after it"), PATIENCE_S)
    log = check_owned(folder, cid, ledger)
    assert [lost, after] == log.order
    assert lost == log.turns[after].parent


async def test_a_run_that_starts_runs_the_turn_its_lost_start_placed(
    client: Client, settings: Settings, folder: Path, cid: str
) -> None:
    """The first send's placing was lost with the start itself: the next run to start (here for a
    setup, which places no turn) runs it. Before: nothing ever ran it."""
    tl, ledger = await connect(settings, client=client), Ledger()
    chat = tl.conversation("tutor", id=cid)
    rid, lost = place_lost(folder, cid, "the lost first send")
    ledger.answers[rid] = lost
    async with build_worker(client, settings):
        await chat.setup("Answer briefly.")
        await until_ended(folder, cid, [rid], patience=PATIENCE_S)
        after = await ledger.predict(chat, "after it")
    log = check_owned(folder, cid, ledger)
    assert lost == log.turns[after].parent


async def test_an_idle_run_runs_a_lost_turn_before_it_closes(
    client: Client, settings: Settings, folder: Path, cid: str
) -> None:
    """No send follows the lost one: the run, idle, runs it before closing. Before: the run closed and
    left it interrupted as the head."""
    own = dataclasses.replace(settings, idle_timeout_s=2.0, attributes_every_s=1.0)
    tl, ledger = await connect(own, client=client), Ledger()
    chat = tl.conversation("tutor", id=cid)
    async with build_worker(client, own):
        await ledger.predict(chat, "hello")
        rid, lost = place_lost(folder, cid, "the lost last send")
        ledger.answers[rid] = lost
        run = client.get_workflow_handle(workflow_id("default", cid))
        closed = await asyncio.wait_for(run.result(), 60)  # the turn's state once it closed tells, not when
    assert "idle" == closed
    log = check_owned(folder, cid, ledger)
    assert lost == log.head


async def test_repeating_a_lost_send_answers_with_its_turn(
    client: Client, settings: Settings, folder: Path, cid: str
) -> None:
    """The caller sends the lost request id again: one turn, run at once, its outcome the answer.
    Before: the repeat followed the turn until its lease ran out (55 s) before anyone ran it."""
    tl, ledger = await connect(settings, client=client), Ledger()
    chat = tl.conversation("tutor", id=cid)
    async with build_worker(client, settings):
        await ledger.predict(chat, "hello")
        rid, lost = place_lost(folder, cid, "the lost send")
        again = await asyncio.wait_for(ledger.predict(chat, "the lost send", request_id=rid), PATIENCE_S)
        after = await ledger.predict(chat, "after it")
    assert lost == again
    log = check_owned(folder, cid, ledger)
    assert lost == log.turns[after].parent
