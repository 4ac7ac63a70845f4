"""A question answered by its approval deadline, read by functai 1.2.0: the answer is an ordinary
`approval` record (`by: "deadline"`), so functai reads the turn as Threadline ended it and continues
the conversation after it. On Temporal's time-skipping test server: the deadline passes in a second."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import functai
import pytest
import pytest_asyncio
from temporalio.testing import WorkflowEnvironment

from store.backends.folder import FolderStore
from tests.support import functai_tools
from tests.support.functai_tools import answers, model
from tests.support.timeskip import skipping_settings, time_skipping
from threadline.acting import Waiting
from threadline.client import connect
from worker import build_worker


@pytest_asyncio.fixture(name="skipping")
async def _skipping(tmp_path: Path) -> AsyncIterator[WorkflowEnvironment]:
    async with await time_skipping(tmp_path / "payloads") as env:
        yield env


async def test_functai_reads_a_turn_its_deadline_denied_and_goes_on_after_it(
    skipping: WorkflowEnvironment, tmp_path: Path, cid: str
) -> None:
    """Nobody answers the refund within a minute: the deadline says no, the turn ends done; functai reads
    it done with the same answer and the deadline's record, and its next turn follows it."""
    settings = skipping_settings(skipping, tmp_path, programs=("tests.support.acting_programs",))
    folder = settings.store_folder("default")
    async with build_worker(skipping.client, settings):
        chat = (await connect(settings, client=skipping.client)).conversation(
            "shop", id=cid, approve={"calls": "changes", "within": 60, "then": "deny"}
        )
        with pytest.raises(Waiting) as waiting:
            await chat("Refund order 5")
        tid = waiting.value.turn.id
        await skipping.sleep(61)
        for _ in range(200):
            if (ours := await chat.turn(tid)).state == "done":
                break
            await asyncio.sleep(0.05)

    def functai_reads() -> tuple[Any, Any, Any]:
        with functai.configure(lm="fake-model", client=model(answers("Nothing more."))):
            theirs = functai_tools.shop.conversation(cid, store=str(folder))
            turn = theirs.turn(tid)
            after = theirs("Anything else?")
            return turn.state, turn.result, (after, theirs.turns[-1].parent)

    state, result, (after, parent) = await asyncio.to_thread(functai_reads)

    answered = [r for r in FolderStore(folder).read(cid) if r["kind"] == "approval"]
    assert [("no", "deadline", "nobody answered before the deadline")] == [
        (r["verdict"], r["by"], r["reason"]) for r in answered
    ]
    assert ("done", ours.result) == (state, result)
    assert ("Nothing more.", tid) == (after, parent)
