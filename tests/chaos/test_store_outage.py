"""A store outage of two minutes during a running turn, with sends queued behind it: it once left
the turn in the workflow's table for good, so every later send hung and a stop freed nothing. Now
the turn ends once the store is back, every send is answered, and the conversation serves again."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs
from temporalio.client import Client

from activities.language_model import OfflineModel
from core.errors import ErrorCode, ThreadlineError
from core.models import StopSend
from core.settings import Settings
from store.records import uuid7
from tests.chaos.invariants import Ledger, check_log, until_ended
from tests.chaos.outage import FailingWrites, Outage, outage_of
from threadline.client import Conversation, Threadline
from worker import build_worker

OUTAGE_S = 120.0
QUEUED = 3


def asked(logs: list[MutableMapping[str, Any]]) -> Counter[str]:
    """How often the model was asked, by turn."""
    return Counter(str(e["turn"]) for e in logs if e.get("event") == "model.requested")


async def until_queued(chat: Conversation, count: int) -> None:
    """Wait until the workflow holds `count` queued sends."""
    for _ in range(200):
        status = await chat.handle.query("status")
        if status["pending"] >= count:
            return
        await asyncio.sleep(0.05)
    raise TimeoutError(f"{count} sends never queued")


async def through_outage(
    tl: Threadline, client: Client, settings: Settings, outage: Outage, cid: str, seconds: float
) -> tuple[Ledger, str, Counter[str]]:
    """A turn runs when the store goes away for `seconds`, with sends queued behind it (`while_away`);
    then the conversation must serve again. Returns how each send was answered, the turn the outage
    hit, and how often the model was asked for each turn."""
    gate, ledger, folder = asyncio.Event(), Ledger(), settings.store_folder("default")
    chat = tl.conversation("tutor", id=cid)
    with capture_logs() as logs:
        providers = {"offline": OfflineModel(hold=gate)}
        async with build_worker(client, settings, stores=outage.stores, providers=providers):
            gate.set()
            await ledger.predict(chat, "before the outage")
            gate.clear()
            hit = await ledger.send(chat, "running when the store goes")
            await while_away(tl, ledger, outage, gate, cid, seconds)
            await until_ended(folder, cid, [r for r, a in ledger.answers.items() if isinstance(a, str)])
            await serves_again(tl, ledger, gate, folder, cid)
    assert hit is not None
    return ledger, hit, asked(logs)


async def while_away(
    tl: Threadline, ledger: Ledger, outage: Outage, gate: asyncio.Event, cid: str, seconds: float
) -> None:
    """Sends queue behind the running turn; the store goes away and its model answers; one `refuse`
    and one `branch` send come, and a stop drops one queued send; after `seconds` the store is back.
    Returns once every send was answered."""
    chat = tl.conversation("tutor", id=cid)
    queued = [asyncio.create_task(ledger.predict(chat, f"queued {k}")) for k in range(QUEUED)]
    await until_queued(chat, QUEUED)
    dropped = uuid7()
    outage.begin()
    try:
        gate.set()  # the model answers: its end cannot be written
        others = [
            asyncio.create_task(ledger.send(tl.conversation("tutor", id=cid, sends=policy), policy))
            for policy in ("refuse", "branch")
        ]
        late = asyncio.create_task(ledger.predict(chat, "dropped by a stop", request_id=dropped))
        await until_queued(chat, QUEUED + 3)
        await chat.signal(StopSend(request_id=dropped))
        await asyncio.sleep(seconds)
    finally:
        outage.end()
    await asyncio.gather(*queued, *others, late, return_exceptions=True)
    ledger.answers[dropped] = None if isinstance(ledger.answers[dropped], ThreadlineError) else "not dropped"


async def serves_again(tl: Threadline, ledger: Ledger, gate: asyncio.Event, folder: Path, cid: str) -> None:
    """After the outage: a `queue` send runs (held), a `refuse` send is refused busy, a `branch` send
    goes beside it, a stop stops both, and the next send is answered."""
    chat = tl.conversation("tutor", id=cid)
    gate.clear()
    held, beside = uuid7(), uuid7()
    assert await ledger.send(chat, "held after the outage", request_id=held)
    assert None is await ledger.send(tl.conversation("tutor", id=cid, sends="refuse"), "refused")
    assert await ledger.send(tl.conversation("tutor", id=cid, sends="branch"), "beside", request_id=beside)
    await chat.stop()
    await until_ended(folder, cid, [held, beside])
    log = check_log(folder, cid)
    assert ["stopped", "stopped"] == [log.turns[log.request_ids[rid]].state(0) for rid in (held, beside)]
    gate.set()
    await ledger.predict(chat, "after the outage")
    assert {ErrorCode.CONVERSATION_BUSY} <= {a.code for a in ledger.answers.values() if isinstance(a, ThreadlineError)}


@pytest.mark.slow
@pytest.mark.timeout(OUTAGE_S + 180)
async def test_a_two_minute_store_outage_wedges_nothing(
    tl: Threadline, client: Client, settings: Settings, folder: Path, cid: str
) -> None:
    """The record log read-only for two minutes while a turn runs and sends queue: afterwards every
    send ended once or was answered with a code, the dropped one recorded nothing, `queue`, `refuse`
    and `branch` sends and a stop work, and nothing is lost, duplicated or misnumbered."""
    ledger, hit, asks = await through_outage(tl, client, settings, outage_of(folder), cid, OUTAGE_S)

    log = ledger.check(folder, cid)
    assert ("done", 1) == (log.turns[hit].state(0), asks[hit])  # its reply was kept, not asked for again
    assert QUEUED + 4 <= sum(1 for a in ledger.answers.values() if isinstance(a, str) and log.turns[a].ended)


async def test_a_short_outage_through_a_failing_store(
    tl: Threadline, client: Client, settings: Settings, folder: Path, cid: str
) -> None:
    """The same faults through the store wrapper that fails writes (what runs where mounting is not
    allowed), for a few seconds: every send is answered and the conversation serves again."""
    ledger, hit, asks = await through_outage(tl, client, settings, FailingWrites(folder), cid, 3.0)

    log = ledger.check(folder, cid)
    assert ("done", 1) == (log.turns[hit].state(0), asks[hit])
