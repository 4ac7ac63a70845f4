"""Hosts whose clocks disagree share a conversation. A lease's `until` is the writer's clock and is
compared with the reader's, so a reader ahead of the writer once read a running turn's lease as run
out and branched beside it: functai 25 s ahead (within the skew leases allow) did so to a running
Threadline turn, and Threadline did so to a functai turn whose process ran 60 s behind. Now the
turn is waited for, and the next one continues from it."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest
from temporalio.client import Client

from activities.language_model import OfflineModel
from core.settings import Settings
from store.backends.folder import FolderStore
from tests.chaos.invariants import check_log
from threadline.client import Threadline
from worker import build_worker

ROOT = Path(__file__).resolve().parents[2]
AHEAD_S = 25.0
"""Within the bound, and past the 20 s that a 30-s lease renewed every 10 s covers."""
BEHIND_S = 60.0
"""Beyond the bound: a reader that watched the lease being written trusts the log's order instead."""


def functai(folder: Path, cid: str, skew: float, *, delay: float = 0.0) -> subprocess.Popen[str]:
    """A functai process whose clock is `skew` s off sends one turn (its reply takes `delay` s)."""
    args = [sys.executable, "-m", "tests.support.functai_skewed", str(folder), cid, str(skew), "--delay", str(delay)]
    return subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, text=True)


def turn_of(process: subprocess.Popen[str]) -> str:
    """The turn the functai process sent, once it ended."""
    out, _ = process.communicate(timeout=90)
    assert 0 == process.returncode
    return str(json.loads(out.strip().splitlines()[-1])["turn"])


async def until_turns(folder: Path, cid: str, count: int) -> None:
    """Wait until the log holds `count` turns."""
    for _ in range(300):
        if sum(1 for r in FolderStore(folder).read(cid) if r.get("kind") == "turn") >= count:
            return
        await asyncio.sleep(0.05)
    raise TimeoutError(f"the log never held {count} turns")


@pytest.mark.slow
@pytest.mark.timeout(120)
async def test_functai_ahead_waits_for_a_running_threadline_turn(
    tl: Threadline, client: Client, settings: Settings, folder: Path, cid: str
) -> None:
    """functai, its clock 25 s ahead, sends while a Threadline turn runs for 14 s: it waits for that
    turn and continues from it, instead of reading the lease as run out and branching beside it."""
    gate, chat = asyncio.Event(), tl.conversation("tutor", id=cid)
    async with build_worker(client, settings, providers={"offline": OfflineModel(hold=gate)}):
        gate.set()
        first = await chat.predict("first")
        gate.clear()
        running = await chat.send("running while functai sends")
        process = await asyncio.to_thread(functai, folder, cid, AHEAD_S)
        await asyncio.sleep(14.0)  # across a renewal: where a 30-s lease read 25 s ahead runs out
        gate.set()
        ended = await running.result()
        theirs = await asyncio.to_thread(turn_of, process)

    log = check_log(folder, cid)
    assert "done" == ended.state
    assert (running.id, "done") == (log.turns[theirs].parent, log.turns[theirs].state(0))
    assert [first.id, running.id, theirs] == log.order


@pytest.mark.slow
@pytest.mark.timeout(120)
async def test_threadline_waits_for_a_functai_turn_whose_clock_runs_behind(
    tl: Threadline, client: Client, settings: Settings, folder: Path, cid: str
) -> None:
    """A functai process 60 s behind runs a 10-s turn: its lease reads as run out the moment it is
    written, yet Threadline, which read the log before it was written, sees it is fresh, waits for the
    turn (`queue`) and continues from it."""
    chat = tl.conversation("tutor", id=cid)
    async with build_worker(client, settings):
        first = await chat.predict("first")
        process = await asyncio.to_thread(functai, folder, cid, -BEHIND_S, delay=10.0)
        await until_turns(folder, cid, 2)
        await asyncio.sleep(1.0)
        after = await chat.predict("threadline while functai runs")
        theirs = await asyncio.to_thread(turn_of, process)

    log = check_log(folder, cid)
    assert "done" == log.turns[theirs].state(0)
    assert (theirs, "done") == (after.parent, after.state)
    assert [first.id, theirs, after.id] == log.order
