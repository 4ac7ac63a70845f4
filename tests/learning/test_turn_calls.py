"""Every turn a worker ends is in its store's call log, so functai rates it and the functai turns shown it."""

from __future__ import annotations

import dataclasses
import subprocess
from pathlib import Path

import functai
import pytest
from functai import schemas
from temporalio.client import Client

from core.settings import Settings
from store.backends.folder import FolderStore
from tests.chaos.outage import can_chattr
from tests.support.calllog_kit import call_records, functai_rows, functai_turn
from threadline.client import connect
from worker import build_worker


async def test_every_turn_a_worker_ends_is_logged_as_functai_logs_it(
    client: Client, settings: Settings, cid: str
) -> None:
    """Two turns through the workflow: each has its call record in `<store folder>/calls`, which
    functai's schema accepts, naming its conversation and what it saw."""
    async with build_worker(client, settings):
        chat = (await connect(settings, client=client)).conversation("tutor", id=cid)
        first = await chat.predict("one")
        second = await chat.predict("two")

    found = call_records(FolderStore(settings.store_folder("default")))

    assert {first.id, second.id} <= set(found)
    assert [None, None] == [schemas.problem("call", found[t]) for t in (first.id, second.id)]
    assert (cid, first.id) == (found[second.id]["conversation"]["id"], found[second.id]["conversation"]["parent"])
    assert [{"call": first.id}] == [{"call": e["call"]} for e in found[second.id]["saw"]]


async def test_a_functai_turn_shown_a_workers_turn_keeps_its_rated_row(
    client: Client, settings: Settings, cid: str
) -> None:
    """The regression of issue 13: functai, then a turn through the workflow, then functai; functai's
    rated row of its last turn holds both earlier turns and none is left out as `no_context`."""
    store = FolderStore(settings.store_folder("default"))
    functai_turn(store, cid, "Hi, I'm Alex.", "Welcome, Alex!")
    async with build_worker(client, settings):
        chat = (await connect(settings, client=client)).conversation("tutor", id=cid)
        ours = await chat.predict("What is 1/2 + 1/3?")
    theirs = functai_turn(store, cid, "Is it 2/5?", "Not quite.")

    functai.rate(theirs, "right", folder=str(store.folder / "calls"), by="ana")
    rows, left = functai_rows(store)

    assert (1, 0) == (len(rows), left["no_context"])
    assert ["Hi, I'm Alex.", "What is 1/2 + 1/3?"] == [e["inputs"]["message"] for e in rows[0]["earlier"]]
    assert ours.id in call_records(store)


async def test_the_call_log_folder_is_a_setting(client: Client, settings: Settings, tmp_path: Path, cid: str) -> None:
    """`THREADLINE_CALL_LOGS=default=<folder>` moves the default store's call log there."""
    elsewhere = tmp_path / "elsewhere"
    moved = dataclasses.replace(settings, call_logs={"default": elsewhere})
    async with build_worker(client, moved):
        turn = await (await connect(moved, client=client)).conversation("tutor", id=cid).predict("one")

    assert elsewhere == Settings.from_env({"THREADLINE_CALL_LOGS": f"default={elsewhere}"}).call_log_folder("default")
    assert [turn.id] == [c["id"] for c in functai.calllog.read(str(elsewhere))[0]]
    assert not (settings.store_folder("default") / "calls").exists()


async def test_a_call_log_that_cannot_be_written_never_stands_in_a_turns_way(
    client: Client, settings: Settings, tmp_path: Path, cid: str
) -> None:
    """The call-log folder immutable (`chattr +i`: no file can be made in it, even by root): the turn
    ends done without its call record, which the worker writes on its event loop; once the folder
    can be written again, the next turn's record is there."""
    calls = tmp_path / "calls"
    calls.mkdir()
    if not can_chattr(calls):
        pytest.skip("needs root and a file system with chattr")
    moved = dataclasses.replace(settings, call_logs={"default": calls})
    _immutable(calls, True)
    try:
        async with build_worker(client, moved):
            chat = (await connect(moved, client=client)).conversation("tutor", id=cid)
            first = await chat.predict("one")
            _immutable(calls, False)
            second = await chat.predict("two")
    finally:
        _immutable(calls, False)

    assert ("done", "done") == (first.state, second.state)
    assert [second.id] == [c["id"] for c in functai.calllog.read(str(calls))[0]]


def _immutable(folder: Path, on: bool) -> None:
    subprocess.run(["chattr", "+i" if on else "-i", str(folder)], capture_output=True, check=True)
