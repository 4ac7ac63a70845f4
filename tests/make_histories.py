"""Record the workflow histories `tests/workflow/test_replay.py` keeps.

`python -m tests.make_histories [NAME...]` records, with the code of this tree, the single-run
histories of `MAKERS` (kept from releases 0.1 and 0.2). Run it only when a release changes the
workflow on purpose; a history kept from a released version must keep replaying (change the
workflow with `workflow.patched` instead), so name only the new ones.

`python -m tests.make_histories --release VERSION` records every run of the conversations of
`RUN_MAKERS` that continued as new, with the code of that release (`RELEASES`): it checks the
release's commit out in a temporary worktree and runs them there (this file is loaded with that
tree first on the path, so its worker, workflow and client are the release's), one file a run,
oldest first: `conversation-runs-VERSION-N.json` and `conversation-flow-runs-VERSION-N.json`.
Release 0.5.0 (0686863) recorded the `-0.5-` files, before `lean-history-2`: its continued runs look
for lost turns and read the flow back. Release 0.6.0 (71ac80c) recorded the `-0.6-` files: its
continued runs take what the run before handed over. Release 0.9.2 (4a77c48) recorded the `-0.9-`
files, before `lean-history-4`: the first run of each conversation looks for lost turns and reads the
flow back in local activities before its first send. Release 0.11.1 (551f35f) recorded the `-0.11-`
files, with `lean-history-4`: a run's one marker, and the first run's look left to its first send's
step (`place_and_run` with `opening`). Run it once for each release a rolling deploy
may leave runs of (a newer release with a workflow change adds its own); never again for a release
already kept.

`python -m tests.make_histories --rolling` records a rolling deploy: a worker of release 0.5.0 and
one of release 0.6.0 (`ROLLING`, each in its own tree and process) serve one conversation whose run
continues as new from one release's run into the other's: `conversation-rolling-0.6-0.5-N.json`
(a run a worker of 0.5.0 began, from what a run of 0.6.0 handed over: it looked and read, and
must replay so) and `conversation-rolling-0.5-0.6-N.json`. Add a pair when a release changes what a
run hands over.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Awaitable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import TaskQueueType, WorkflowTaskFailedCause
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client, WorkflowHandle, WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from core.errors import ThreadlineError
from core.models import TurnSend
from core.settings import Settings
from core.temporal import workflow_id
from threadline.client import Threadline, connect
from threadline.devserver import START_TIMEOUT, find_temporal_binary
from threadline.options import SendOptions
from worker import build_worker

HERE = Path(__file__).parent / "histories"
UNHANDLED_COMMAND = WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_UNHANDLED_COMMAND
RELEASES = {"0.5": "0686863", "0.6": "71ac80c", "0.9": "4a77c48", "0.11": "551f35f"}
"""The commit of each release whose continued runs are kept (`--release`)."""
RUN_TURNS = 3
"""Turns a run serves in the conversations of `RUN_MAKERS`: three runs in a few turns each (the
releases' own 10 and 5 would make each file larger with no other command in it)."""


async def plain(tl: Threadline) -> str:
    chat = tl.conversation("tutor", id="kept-plain")
    first = await chat.predict("one")
    await chat.predict("two", request_id="r-2")
    await chat.predict("two", request_id="r-2")
    await chat.continue_from(first.id).predict("beside")
    await chat.head(first.id)
    await chat.stop()
    with contextlib.suppress(ThreadlineError):
        await chat.send(wrong="input")
    return chat.id


async def with_context(tl: Threadline) -> str:
    context = {"summary": {"after": 2, "keep": 1}, "topics": "branch", "window": 4}
    chat = tl.conversation("tutor", id="kept-context", context=context)
    for i in range(5):
        await chat.predict(f"message {i}")
    return chat.id


async def with_flow(tl: Threadline) -> str:
    chat = tl.conversation("chat", id="kept-flow")
    await chat.setup("Be brief.", metadata={"shop": "north"})
    await chat.add_messages([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}])
    await chat.start_flow("order")
    for text in ("Soup.", "many", "2"):
        await chat.message(text)
    await chat.stop_flow()
    await chat.message("Thanks")
    return chat.id


async def one_round_trip(tl: Threadline) -> str:
    """The sends of 0.2: `send` and `place` updates with start, beside a signal and its `wait`."""
    chat = tl.conversation("tutor", id="kept-sends")
    first = await chat.predict("one", request_id="r-1")
    await chat.deliver("one", request_id="r-1")
    placed = await chat.send("two")
    await placed.result()
    await chat.signal(chat.sent({"message": "three"}, SendOptions(request_id="r-3")))
    await chat.outcome("r-3")
    await chat.continue_from(first.id).deliver("beside")
    return chat.id


MAKERS = [
    ("conversation-0.1", plain),
    ("conversation-context-0.1", with_context),
    ("conversation-flows-0.1", with_flow),
    ("conversation-sends-0.2", one_round_trip),
]


async def continued(tl: Threadline) -> str:
    """Turns one after another across two continue-as-new boundaries, a stop, a send that arrives as
    the run continues, and waits for sends of the runs before (the one whose turn ended its run too).

    The send that arrives as the run continues is a race: it is signalled a few milliseconds after
    the end of the turn that fills the run lands in the log, and the conversation is kept when it
    came while the run's last task (which continued as new) was being made: the server refused that
    task (`UNHANDLED_COMMAND`) and the run served the send first. Each try is a new conversation."""
    for attempt, delay in enumerate(ARRIVAL_DELAYS):
        chat = tl.conversation("tutor", id=f"kept-runs-{attempt}")
        handle = tl.client.get_workflow_handle(workflow_id("default", chat.id))
        await chat.predict("one", request_id="r-1")
        first_run = (await handle.describe()).run_id
        await chat.stop()
        await chat.predict("two", request_id="r-2")
        four = chat.sent({"message": "four"}, SendOptions(request_id="r-4"))
        await arriving_as_run_ends(tl, chat.id, chat.predict("three", request_id="r-3"), four, delay)
        await continued_from(handle, first_run)  # the fourth turn ends the run
        await chat.outcome("r-4")
        await chat.outcome("r-3")
        await chat.outcome("r-2")
        for n in ("five", "six", "seven"):
            await chat.predict(n, request_id=f"r-{n}")
        await chat.outcome("r-1")
        await chat.predict("eight")
        first = (await every_run(tl.client, workflow_id("default", chat.id)))[0]
        if any(e.workflow_task_failed_event_attributes.cause == UNHANDLED_COMMAND for e in first.events):
            print(f"{chat.id}: the send arrived as the run continued, {delay * 1000:.0f} ms after the turn ended")
            return chat.id
    raise RuntimeError(f"no send arrived as the run continued in {len(ARRIVAL_DELAYS)} tries")


ARRIVAL_DELAYS = [0.005, 0.006, 0.004, 0.007, 0.003, 0.008] * 5
"""How long after the end of the turn that fills the run its next send is signalled, in each try:
the run's last task was in flight 5-7 ms after it on an idle machine."""


async def arriving_as_run_ends(
    tl: Threadline, conversation: str, turn: Awaitable[object], send: TurnSend, delay: float
) -> None:
    """Await `turn`, the one that fills its run, and signal `send` `delay` seconds after its records
    (its placing and its end) land in the log."""
    lines = Path(tl.settings.stores["default"]) / "conversations" / f"{conversation}.jsonl"
    before = lines.read_bytes().count(b"\n")
    running = asyncio.ensure_future(turn)
    for _ in range(20_000):  # ten seconds at most
        if running.done() or lines.read_bytes().count(b"\n") >= before + 2:
            break
        await asyncio.sleep(0.0005)
    await asyncio.sleep(delay)
    await tl.conversation("tutor", id=conversation).signal(send)
    await running


async def continued_from(handle: WorkflowHandle[Any, Any], run_id: str | None) -> None:
    """Wait until the workflow's current run is no longer `run_id` (it continued as new)."""
    for _ in range(200):
        if (await handle.describe()).run_id != run_id:
            return
        await asyncio.sleep(0.05)
    raise RuntimeError(f"the run {run_id} never continued as new")


async def continued_flow(tl: Threadline, conversation: str = "kept-flow-runs") -> str:
    """A guided flow started in the first run and answered in the next, then stopped."""
    chat = tl.conversation("chat", id=conversation)
    await chat.start_flow("checkout", request_id="f-start")
    await chat.message("A pie.", request_id="f-pie")
    handle = tl.client.get_workflow_handle(workflow_id("default", chat.id))
    first = (await handle.describe()).run_id
    for n in range(RUN_TURNS):
        if (await handle.describe()).run_id != first:
            break
        await chat.message("lots", request_id=f"f-lots-{n}")
    await chat.outcome("f-lots-0")
    with contextlib.suppress(ThreadlineError):  # refused by 0.5.0 after a run of 0.6.0, which carried only the newest
        await chat.outcome("f-pie")
    await chat.message("4", request_id="f-four")
    await chat.stop_flow()
    await chat.message("Thanks")
    return chat.id


RUN_MAKERS = [("conversation-runs", continued), ("conversation-flow-runs", continued_flow)]


@contextlib.asynccontextmanager
async def recording(*, worker: bool = True, **changes: object) -> AsyncIterator[tuple[Client, Threadline]]:
    """A dev server, a worker of this tree's code (unless not `worker`) and a client, with `Settings`
    changed by `changes`."""
    binary = find_temporal_binary()
    async with await WorkflowEnvironment.start_local(
        dev_server_existing_path=binary,
        data_converter=pydantic_data_converter,
        dev_server_startup_timeout=timedelta(seconds=START_TIMEOUT),
        ip="127.0.0.1",
    ) as env:
        data = Path(tempfile.mkdtemp())
        address = env.client.service_client.config.target_host
        settings = dataclasses.replace(
            Settings.from_env({}),
            data=data,
            stores={"default": data / "store"},
            address=address,
            task_queue="kept",
            **changes,  # type: ignore[arg-type]
        )
        async with build_worker(env.client, settings) if worker else contextlib.nullcontext():
            yield env.client, await connect(settings, client=env.client)


async def main(only: set[str] | None = None) -> None:
    async with recording() as (client, tl):
        for name, make in [(name, make) for name, make in MAKERS if only is None or name in only]:
            conversation = await make(tl)
            history = await client.get_workflow_handle(workflow_id("default", conversation)).fetch_history()
            (HERE / f"{name}.json").write_text(history.to_json())


async def record_runs(release: str) -> None:
    """Every run of each conversation of `RUN_MAKERS`, oldest first, one file each (see the module)."""
    async with recording(turns_per_run=RUN_TURNS) as (client, tl):
        for name, make in RUN_MAKERS:
            wid = workflow_id("default", await make(tl))
            for n, history in enumerate(await every_run(client, wid), 1):
                (HERE / f"{name}-{release}-{n}.json").write_text(history.to_json())


async def every_run(client: Client, wid: str) -> list[WorkflowHistory]:
    """The histories of every run of `wid` as the server lists them, oldest first, once the list holds
    each run the newest continued from."""
    newest = await client.get_workflow_handle(wid).fetch_history()
    chained = 1
    run_id = newest.events[0].workflow_execution_started_event_attributes.continued_execution_run_id
    while run_id:
        chained += 1
        history = await client.get_workflow_handle(wid, run_id=run_id).fetch_history()
        run_id = history.events[0].workflow_execution_started_event_attributes.continued_execution_run_id
    for _ in range(100):
        runs = [run async for run in client.list_workflows(f"WorkflowId = '{wid}'")]
        if len(runs) == chained:
            break
        await asyncio.sleep(0.1)
    else:
        raise RuntimeError(f"the server listed {len(runs)} runs of {wid}, not the {chained} it chained")
    runs.sort(key=lambda run: run.start_time)
    return [await client.get_workflow_handle(wid, run_id=run.run_id).fetch_history() for run in runs]


BOOT = """import asyncio, importlib.util, sys
tree, here, release = sys.argv[1:]
sys.path.insert(0, tree)
spec = importlib.util.spec_from_file_location("kept_runs", here)
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
import worker
assert worker.__file__.startswith(tree), worker.__file__
asyncio.run(module.record_runs(release))
"""
"""Run in the release's tree: this file's `record_runs` with the release's modules."""


@contextlib.contextmanager
def released(*releases: str) -> Iterator[dict[str, Path]]:
    """The commit of each release checked out in a temporary worktree, removed after."""
    root = Path(__file__).parent.parent
    git = ["git", "-C", str(root), "worktree"]
    with tempfile.TemporaryDirectory() as parent, contextlib.ExitStack() as added:
        trees = {}
        for release in releases:
            trees[release] = tree = Path(parent) / f"release-{release}"
            subprocess.run([*git, "add", "--detach", str(tree), RELEASES[release]], check=True)
            added.callback(subprocess.run, [*git, "remove", "--force", str(tree)], check=True)
        yield trees


def record_release(release: str) -> None:
    """Record the runs of `RUN_MAKERS` with the code of `release`, in its own tree."""
    with released(release) as trees:
        tree = str(trees[release])
        subprocess.run([sys.executable, "-c", BOOT, tree, __file__, release], check=True, cwd=tree)


ROLLING = {"0.5": "lean-history", "0.6": "lean-history-2"}
"""The releases of the workers of a rolling deploy (`record_rolling`), by the patch each run of it
writes first (`workflows._patches`)."""


async def record_rolling(trees: dict[str, Path]) -> None:
    """A worker of each release of `ROLLING` polls the task queue, in its own process and tree, as in
    a rolling deploy; the conversation of `continued_flow` is made again (a new id each try) until its
    first run was begun by one release and the next, which takes over that run's flow and what it
    accounted for, by the other, both ways: `conversation-rolling-0.6-0.5-N.json` (a run of 0.6.0
    continued into one a worker of 0.5.0 began) and `conversation-rolling-0.5-0.6-N.json`, every run.

    Which worker takes a task is the server's choice: the one that polled longest, so a run that
    continued as new is mostly taken on by the other worker, and a one-turn conversation made
    before a try moves the next conversation's start to the other worker."""
    async with recording(turns_per_run=RUN_TURNS, worker=False) as (client, tl):
        env = {
            **os.environ,
            "THREADLINE_DATA": str(tl.settings.data),
            "THREADLINE_TEMPORAL_ADDRESS": tl.settings.address,
            "THREADLINE_TASK_QUEUE": tl.settings.task_queue,
        }
        workers = [
            await asyncio.create_subprocess_exec(sys.executable, "worker.py", cwd=trees[release], env=env)
            for release in ROLLING
        ]
        releases = {patch: release for release, patch in ROLLING.items()}
        wanted = {(newer, older) for newer in ROLLING for older in ROLLING if newer != older}
        try:
            await polled_by(client, tl.settings.task_queue, len(workers))
            for attempt in range(40):
                if attempt % 2:
                    await tl.conversation("tutor", id=f"kept-rolling-turn-{attempt}").predict("one")
                wid = workflow_id("default", await continued_flow(tl, f"kept-rolling-{attempt}"))
                runs = await every_run(client, wid)
                began = tuple(releases.get(patch_of(run) or "", "?") for run in runs[:2])
                if began in wanted:
                    wanted.discard(began)
                    for n, history in enumerate(runs, 1):
                        (HERE / f"conversation-rolling-{'-'.join(began)}-{n}.json").write_text(history.to_json())
                if not wanted:
                    return
            raise RuntimeError(f"no conversation's runs were begun by the releases {sorted(wanted)}")
        finally:
            for process in workers:
                process.terminate()
                await asyncio.wait_for(process.wait(), 30)


def patch_of(history: WorkflowHistory) -> str | None:
    """The first patch marker of a run: which release's code began it."""
    for event in history.events:
        if event.marker_recorded_event_attributes.marker_name == "core_patch":
            data = event.marker_recorded_event_attributes.details["patch-data"].payloads[0].data
            return str(json.loads(data)["id"])
    return None


async def polled_by(client: Client, task_queue: str, count: int) -> None:
    """Wait until `count` workers poll `task_queue` for workflow tasks."""
    query = DescribeTaskQueueRequest(
        namespace=client.namespace,
        task_queue=TaskQueue(name=task_queue),
        task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
    )
    for _ in range(600):
        if len((await client.workflow_service.describe_task_queue(query)).pollers) >= count:
            return
        await asyncio.sleep(0.1)
    raise RuntimeError(f"fewer than {count} workers poll {task_queue}")


def record_rolling_deploy() -> None:
    """Record the conversation of `record_rolling` with the workers of `ROLLING`, each in its tree."""
    with released(*ROLLING) as trees:
        asyncio.run(record_rolling(trees))


if __name__ == "__main__":
    # `python -m tests.make_histories NAME...` records only those (a history kept from a release stays as it is);
    # `--release VERSION` records that release's continued runs, `--rolling` a rolling deploy's.
    if sys.argv[1:2] == ["--release"]:
        record_release(sys.argv[2])
    elif sys.argv[1:] == ["--rolling"]:
        record_rolling_deploy()
    else:
        asyncio.run(main(set(sys.argv[1:]) or None))
