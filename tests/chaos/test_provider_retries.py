"""A turn between a provider's failures stays `running` for every reader: each try renews the lease
before Temporal's wait, the wait is at most 20 s (under the 40 s lease, whatever the provider's
Retry-After asks), and the next try starts with a lease of its own.

The fault: a provider failing 5xx for a while made a turn read `interrupted` at 29.9 s, `running`
again at 33.1 s and `failed` at 62 s: the retry policy's backoff (up to 30 s) and a Retry-After
(up to 60 s) outlasted the lease the turn was placed with, which no try renewed.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from core.settings import Settings
from store.backends.folder import FolderStore
from store.log.state import Log
from tests.support.fakeprovider import Failure, FakeProvider, Reply
from threadline.client import Threadline

POLL_S = 0.5
Seen = list[tuple[float, str]]
"""The states a reader saw, each with the second it first saw it at."""


async def watch_states(folder: Path, cid: str, turn: str) -> Seen:
    """Read the turn's state from the log every `POLL_S` (as any reader does, functai's too) until it ends."""
    began, seen = time.monotonic(), Seen()
    while True:
        state = Log(FolderStore(folder).read(cid)).turns[turn].state(time.time())
        if not seen or seen[-1][1] != state:
            seen.append((round(time.monotonic() - began, 1), state))
        if state not in ("running", "interrupted"):
            return seen
        assert time.monotonic() - began < 100, f"the turn did not end: {seen}"
        await asyncio.sleep(POLL_S)


@pytest.mark.slow
async def test_a_turn_between_provider_retries_reads_running_throughout(
    tl: Threadline, live: Settings, fake: FakeProvider, cid: str
) -> None:
    """A 503 asking to come back in a minute, then 500 and 502, then an answer: the turn reads `running`
    at every poll until it ends `done` after about 23 s (a 20 s wait, then 1 s and 2 s backoffs)."""
    fake.add(Failure(503, retry_after="60"), Failure(500), Failure(502), Reply("At last."))
    chat = tl.conversation("tutor", id=cid, lm="openai:gpt-test")

    handle = await chat.send("hello")
    assert handle.id is not None
    seen = await watch_states(live.store_folder("default"), cid, handle.id)
    turn = await handle.result()

    assert ["running", "done"] == [state for _, state in seen], seen
    assert ("done", "At last.") == (turn.state, turn.result)
    assert 4 == len(fake.requests)
    assert seen[-1][0] < 40  # the minute's Retry-After was held to 20 s
    records = [r for r in FolderStore(live.store_folder("default")).read(cid) if r.get("turn") == handle.id]
    leases = [r["attempt"] for r in records if r["kind"] == "lease"]
    assert 4 == max(leases)  # each retry took the turn with a lease of its own
