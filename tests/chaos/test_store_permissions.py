"""A store unwritable by permission (an immutable log folder, a read-only folder for a worker that is
not root): its EPERM and EACCES were not taken for an outage, so a new conversation sent meanwhile
was answered `internal` after ten tries and never recorded. Now they are `store-unavailable`, and a
send the store cannot take yet is kept and placed once it can."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from temporalio.client import Client

from core.settings import Settings
from tests.chaos.invariants import Ledger
from tests.chaos.outage import forbidden_of
from threadline.client import Threadline
from worker import build_worker

OUTAGE_S = 40.0
"""Longer than the ten tries (about half a minute) a step that places a send makes."""


@pytest.mark.slow
@pytest.mark.timeout(OUTAGE_S + 90)
async def test_sends_made_while_the_store_is_forbidden_run_once_it_is_writable(
    tl: Threadline, client: Client, settings: Settings, folder: Path, cid: str
) -> None:
    """The log folder forbidden for 40 s: a send to a running conversation and the first send of a new
    one, both made meanwhile, end `done` once it is writable again; the logs are whole and both
    conversations take the next send."""
    outage, old, new = forbidden_of(folder), Ledger(), Ledger()
    chat, fresh = tl.conversation("tutor", id=cid), tl.conversation("tutor", id=f"{cid}-new")
    async with build_worker(client, settings, stores=outage.stores):
        await old.predict(chat, "before")
        outage.begin()
        try:
            sent = [asyncio.create_task(old.predict(chat, "meanwhile")), asyncio.create_task(new.predict(fresh, "new"))]
            await asyncio.sleep(OUTAGE_S)
        finally:
            outage.end()
        await asyncio.gather(*sent, return_exceptions=True)
        await old.predict(chat, "after")
        await new.predict(fresh, "after")

    assert {} == {rid: a for rid, a in {**old.answers, **new.answers}.items() if not isinstance(a, str)}
    assert 3 == len(old.check(folder, cid).order)
    assert 2 == len(new.check(folder, f"{cid}-new").order)
