"""Merges through the workflow: written as functai writes one, read and continued by functai, continued
after functai's own; refused with nothing recorded; one per request id; stopped or crashed durably."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from functai import _ai, ai
from temporalio.client import Client
from temporalio.worker import Replayer, Worker

from core.errors import ErrorCode, ThreadlineError
from core.settings import Settings
from core.temporal import workflow_id
from store.backends.folder import FolderStore
from store.log.state import Log
from store.records import lease_record, turn_record, uuid7
from tests.support.calllog_kit import call_records, functai_rows
from tests.support.functai_kit import offline, reply, tutor
from tests.support.kit import slow
from tests.support.processes import WorkerProcess, model_requests
from threadline.client import Conversation, Threadline, connect
from threadline.reading import Turn
from worker import build_worker
from workflows.conversation import ConversationWorkflow

PROGRAMS = ("tests.support.learning_programs",)
MERGE_ENDED_KEYS = ["functai_conversation", "kind", "at", "turn", "state", "outputs", "value", "lmcc", "saw", "model"]


@ai  # type: ignore[untyped-decorator]
def pick(answers: list[dict[str, str]]) -> str:
    """Pick the best answer."""
    return _ai  # type: ignore[no-any-return]


@pytest.fixture(name="learning")
def _learning(settings: Settings) -> Settings:
    """The test's settings with the merging programs registered."""
    return dataclasses.replace(settings, programs=PROGRAMS)


@pytest_asyncio.fixture(name="merging")
async def _merging(client: Client, learning: Settings) -> AsyncIterator[Worker]:
    async with build_worker(client, learning) as worker:
        yield worker


async def branches(chat: Conversation) -> tuple[Turn, Turn, Turn]:
    """A root turn and two branches after it."""
    root = await chat.predict("start")
    left = await chat.continue_from(root).predict("left")
    right = await chat.continue_from(root).predict("right")
    return root, left, right


def records(folder: Path, conversation: str) -> list[dict[str, object]]:
    return FolderStore(folder).read(conversation)


def log_bytes(folder: Path) -> list[bytes]:
    """Every file of the store folder (conversations and call log), for "nothing was recorded"."""
    return [p.read_bytes() for p in sorted(folder.rglob("*.jsonl"))]


class TestWrittenAsFunctaiWritesIt:
    async def test_functai_reads_and_continues_a_threadline_merge(
        self, client: Client, learning: Settings, merging: Worker, cid: str
    ) -> None:
        """The merge is a turn with `reads` and `made_by` and an `ended` done with `saw: []`, `model:
        null` and no lease, appended in one batch; functai reads it and its next turn continues it."""
        chat = (await connect(learning, client=client)).conversation("tutor", id=cid)
        root, left, right = await branches(chat)

        merged = await chat.continue_from(root).merge([left, right], "pick")

        folder = learning.store_folder("default")
        mine = [r for r in records(folder, cid) if r.get("turn") == merged.id]
        assert ["turn", "ended"] == [r["kind"] for r in mine]
        assert int(str(mine[1]["seq"])) == int(str(mine[0]["seq"])) + 1
        assert [*MERGE_ENDED_KEYS, "attempt", "seq"] == list(mine[1])
        assert ([], None, "done", 1) == (mine[1]["saw"], mine[1]["model"], mine[1]["state"], mine[1]["attempt"])
        assert ([left.id, right.id], root.id, "pick") == (merged.reads, merged.parent, (merged.made_by or {})["name"])
        assert {"message": "left"} == merged.inputs
        with offline([reply("Next.")]):
            view = tutor.conversation(cid, store=str(folder))
            theirs = view.turn(merged.id)
            assert (theirs.reads, theirs.made_by, theirs.result) == (merged.reads, merged.made_by, merged.result)
            view("and then?")
            after = view.head
        assert merged.id == after.parent
        assert merged.id in [s.id for s in after.saw]

    async def test_threadline_continues_its_merge_and_rates_it_through_the_merging_call(
        self, client: Client, learning: Settings, merging: Worker, cid: str
    ) -> None:
        """The view follows the merge: its next turn continues it. Rating the merged turn rates the
        merging program's call, whose record is in the call log; functai's rows give it."""
        chat = (await connect(learning, client=client)).conversation("tutor", id=cid).continue_from(None)
        root, left, right = await branches(chat)
        view = chat.continue_from(root)
        merged = await view.merge([left.id, right.id], "pick")

        after = await view.predict("after the merge")
        rating = await merged.rate("right", by="ana")

        assert merged.id == after.parent
        assert (merged.made_by or {})["call"] == rating["call"]
        store = FolderStore(learning.store_folder("default"))
        assert "pick" == call_records(store)[rating["call"]]["program"]["name"]
        rows, _ = functai_rows(store, name="pick")
        assert [(rating["call"], merged.result)] == [(r["call"], r["result"]) for r in rows]


async def test_threadline_continues_a_functai_merge(tl: Threadline, worker: Worker, folder: Path, cid: str) -> None:
    """functai merges two branches; Threadline reads the merge (`reads`, `made_by`) and continues it."""
    with offline([reply("root"), reply("A"), reply("B"), reply("B")]):
        view = tutor.conversation(cid, store=str(folder))
        view("start")
        root = view.head
        view.continue_from(root)("left")
        tutor.conversation(cid, store=str(folder)).continue_from(root)("right")
        read = [t for t in view.all_turns() if t.parent == root.id]
        merged = tutor.conversation(cid, store=str(folder)).continue_from(root).merge(read, pick)

    chat = tl.conversation("tutor", id=cid)
    theirs = await chat.turn(merged.id)
    after = await chat.predict("after their merge")

    assert ([t.id for t in read], "pick") == (theirs.reads, (theirs.made_by or {})["name"])
    assert merged.id == after.parent
    assert merged.id in after.saw


class TestRefused:
    async def test_a_bad_merge_is_refused_and_records_nothing(
        self, client: Client, learning: Settings, merging: Worker, cid: str
    ) -> None:
        """A running turn, a turn of another branch, turns that do not continue the view's head, an
        unknown turn and a merging program whose answer does not fit: each refused with its code,
        and not a byte is added to the conversation or the call log."""
        chat = (await connect(learning, client=client)).conversation("tutor", id=cid)
        root, left, right = await branches(chat)
        deeper = await chat.continue_from(left).predict("deeper")
        running = uuid7()
        folder = learning.store_folder("default")
        FolderStore(folder).append(
            cid, [turn_record(running, parent=root.id, program=_version(folder, cid), inputs={"message": "r"}),
                  lease_record(running, attempt=1)],
        )  # fmt: skip
        before = log_bytes(folder)
        at_root = chat.continue_from(root)

        refused = [
            await _code(at_root.merge([left, running], "pick")),
            await _code(at_root.merge([left, deeper], "pick")),
            await _code(chat.continue_from(deeper).merge([left, right], "pick")),
            await _code(at_root.merge([left, uuid7()], "pick")),
            await _code(at_root.merge([left, right], "count")),
        ]

        assert [ErrorCode.TURN_STATE] * 3 + [ErrorCode.TURN_UNKNOWN, ErrorCode.PROGRAM_INVALID] == refused
        assert before == log_bytes(folder)


async def test_a_merge_conversations_history_replays(
    client: Client, learning: Settings, merging: Worker, cid: str
) -> None:
    """A conversation with a merge, a refused merge and a stop replays without a non-determinism error."""
    chat = (await connect(learning, client=client)).conversation("tutor", id=cid)
    root, left, right = await branches(chat)
    await chat.continue_from(root).merge([left, right], "pick")
    with pytest.raises(ThreadlineError):
        await chat.merge([left, right], "pick")
    await chat.stop()

    history = await client.get_workflow_handle(workflow_id("default", cid)).fetch_history()

    await Replayer(workflows=[ConversationWorkflow], data_converter=client.data_converter).replay_workflow(history)


async def test_a_request_id_makes_one_merge(client: Client, learning: Settings, merging: Worker, cid: str) -> None:
    """The same merge sent twice with one request id is one turn, recorded once."""
    chat = (await connect(learning, client=client)).conversation("tutor", id=cid)
    root, left, right = await branches(chat)

    first = await chat.continue_from(root).merge([left, right], "pick", request_id="merge-1")
    again = await chat.continue_from(root).merge([left, right], "pick", request_id="merge-1")

    assert first.id == again.id
    kinds = [r["kind"] for r in records(learning.store_folder("default"), cid) if r.get("turn") == first.id]
    assert ["turn", "ended"] == kinds


async def test_a_stopped_merge_records_nothing(client: Client, learning: Settings, cid: str) -> None:
    """A stop while the merging program is asked cancels it: the merge ends `stopped`, nothing is written."""
    async with build_worker(client, learning):
        chat = (await connect(learning, client=client)).conversation("tutor", id=cid)
        root, left, right = await branches(chat)
    folder = learning.store_folder("default")
    before = log_bytes(folder)
    async with build_worker(client, slow(learning, 5.0)):
        merging = asyncio.create_task(chat.continue_from(root).merge([left, right], "pick"))
        await asyncio.sleep(1.5)
        await chat.stop()
        code = await _code(merging)

    assert ErrorCode.TURN_STATE == code
    assert before == log_bytes(folder)


async def test_a_merge_whose_worker_is_killed_is_recorded_once(
    client: Client, learning: Settings, tmp_path: Path, cid: str
) -> None:
    """kill -9 while the merging program is asked: another worker asks it again and records the merge once."""
    env = {"THREADLINE_PROGRAMS": ",".join(PROGRAMS)}
    logs = tmp_path / "workers.log"
    chat = (await connect(learning, client=client)).conversation("tutor", id=cid)
    async with build_worker(client, learning):
        root, left, right = await branches(chat)
    first = WorkerProcess(learning, logs, delay=3.0, env=env)
    await asyncio.to_thread(first.wait_ready)
    merging = asyncio.create_task(chat.continue_from(root).merge([left, right], "pick"))
    await _until_logged(logs, "merge.requested")

    await asyncio.to_thread(first.kill)
    second = WorkerProcess(learning, logs, delay=0.5, env=env)
    try:
        merged = await asyncio.wait_for(merging, timeout=60)
    finally:
        await asyncio.to_thread(second.stop)

    kinds = [r["kind"] for r in records(learning.store_folder("default"), cid) if r.get("turn") == merged.id]
    assert ["turn", "ended"] == kinds
    assert 2 == _logged(logs, "merge.requested")
    assert 0 == model_requests(logs)


def _version(folder: Path, conversation: str) -> str:
    return next(iter(Log(FolderStore(folder).read(conversation)).programs))


async def _code(action: object) -> ErrorCode:
    try:
        await action  # type: ignore[misc]
    except ThreadlineError as err:
        return err.code
    raise AssertionError("nothing was refused")


def _logged(log: Path, event: str) -> int:
    if not log.exists():
        return 0
    return log.read_text(encoding="utf-8", errors="replace").count(f'"event": "{event}"')


async def _until_logged(log: Path, event: str) -> None:
    for _ in range(400):
        if await asyncio.to_thread(_logged, log, event):
            return
        await asyncio.sleep(0.05)
    raise TimeoutError(f"no {event} was logged")
