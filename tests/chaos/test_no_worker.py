"""A send while the only worker is gone (stopped, or killed with kill -9) answers within 5 s: Temporal
still lists the dead worker as a poller for minutes, so nothing may wait for it to be listed or not.
The send is kept (HTTP 202 `queued`, Python `Queued`, the CLI `queued`), a retry with its request id
is the same send, and once a worker runs again every kept send ends `done` exactly once."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
from temporalio.client import Client

from core.errors import ErrorCode, ThreadlineError
from core.settings import Settings
from tests.chaos.invariants import check_log
from tests.support.processes import WorkerProcess
from tests.support.service_kit import send, serving
from threadline.client import Threadline, connect
from threadline.http import create_app
from worker import build_worker

ANSWER_WITHIN_S = 5.0
"""The promise: a send is answered within this, whatever the workers do."""
T = TypeVar("T")


async def timed(call: Callable[[], Awaitable[T]]) -> tuple[T, float]:
    """What `call` answered, and how many seconds it took."""
    started = time.monotonic()
    answer = await call()
    return answer, time.monotonic() - started


async def queued_over_http(http: httpx.AsyncClient, cid: str, rid: str) -> float:
    """POST a send that no worker takes: 202 `queued` with its request id, within the promise."""
    answer, seconds = await timed(lambda: send(http, cid, message="while no worker runs", request_id=rid))
    assert (202, {"turn": None, "parent": None, "request_id": rid, "state": "queued"}) == (
        answer.status_code,
        answer.json(),
    )
    assert seconds < ANSWER_WITHIN_S
    return seconds


async def queued_in_python(tl: Threadline, cid: str, rid: str) -> float:
    """`send` of a send that no worker takes raises `Queued` (kept), within the promise."""
    started = time.monotonic()
    with pytest.raises(ThreadlineError) as kept:
        await tl.conversation("tutor", id=cid).send("while no worker runs", request_id=rid)
    seconds = time.monotonic() - started
    assert ("Queued", ErrorCode.SERVER_UNAVAILABLE, True) == (
        type(kept.value).__name__,
        kept.value.code,
        kept.value.retryable,
    )
    assert {"request_id": rid, "state": "queued"} == kept.value.details
    assert seconds < ANSWER_WITHIN_S
    return seconds


async def queued_on_the_command_line(settings: Settings, cid: str, rid: str) -> dict[str, Any]:
    """`threadline send --no-wait` of a send no worker takes prints it `queued` and exits 0."""
    env = {
        "PATH": "/usr/bin:/bin",
        "THREADLINE_TEMPORAL_ADDRESS": settings.address,
        "THREADLINE_DATA": str(settings.data),
        "THREADLINE_TASK_QUEUE": settings.task_queue,
        "THREADLINE_PAYLOADS": str(settings.payload_folder),
    }
    command = [sys.executable, "-m", "threadline", "send", cid, "from the shell", "--no-wait", "--request-id", rid]
    done = await asyncio.to_thread(subprocess.run, [*command, "--json"], env=env, capture_output=True, text=True)
    assert 0 == done.returncode, done.stderr
    printed: dict[str, Any] = json.loads(done.stdout)
    return printed


def stop(worker: WorkerProcess, how: str) -> None:
    """Stop the only worker of the task queue `how`: `graceful` (SIGTERM) or `kill` (kill -9)."""
    if how == "kill":
        worker.kill()
    else:
        assert 0 == worker.stop()


@pytest.mark.slow
@pytest.mark.parametrize("how", ["graceful", "kill"])
async def test_a_send_with_no_worker_left_is_kept_and_answered_within_seconds(
    settings: Settings, client: Client, tmp_path: Path, cid: str, how: str
) -> None:
    """With the only worker gone, sends to a new and to an existing conversation answer 202 `queued`
    (Python `Queued`, the CLI `queued`) within 5 s and are kept; sent again, they are the same sends;
    once a worker runs, each ends `done` exactly once and `wait` gets its outcome."""
    tl = await connect(settings, client=client)
    existing, new, folder = f"{cid}-old", f"{cid}-new", settings.store_folder("default")
    rids = {existing: f"{cid}-r1", new: f"{cid}-r2"}
    async with serving(create_app(await connect(settings, client=client))) as http:
        worker = WorkerProcess(settings, tmp_path / "worker.log")
        await asyncio.to_thread(worker.wait_ready)
        first = await send(http, existing, message="before the worker goes", wait=True)
        assert (200, "done") == (first.status_code, first.json()["state"])
        stop(worker, how)

        seconds = [await queued_over_http(http, conversation, rid) for conversation, rid in rids.items()]
        seconds.append(await queued_in_python(tl, f"{cid}-py", f"{cid}-r3"))
        again = [await queued_over_http(http, conversation, rid) for conversation, rid in rids.items()]
        shell = await queued_on_the_command_line(settings, f"{cid}-sh", f"{cid}-r4")
        sys.stdout.write(f"\n{how}: answered in {', '.join(f'{s:.2f}' for s in seconds + again)} s\n")

        async with build_worker(client, settings):
            done = {
                c: await send(http, c, message="while no worker runs", request_id=r, wait=True) for c, r in rids.items()
            }
            python = await tl.conversation("tutor", id=f"{cid}-py").outcome(f"{cid}-r3")
            shelled = await tl.conversation("tutor", id=f"{cid}-sh").outcome(f"{cid}-r4")

    assert {"conversation": f"{cid}-sh", "turn": None, "request_id": f"{cid}-r4", "state": "queued"} == shell
    assert {c: (200, "done") for c in rids} == {c: (a.status_code, a.json()["state"]) for c, a in done.items()}
    assert ("done", "done") == (python.state, shelled.state)
    for conversation, rid in [*rids.items(), (f"{cid}-py", f"{cid}-r3"), (f"{cid}-sh", f"{cid}-r4")]:
        log = check_log(folder, conversation)  # one turn per request id, ended once
        turn = log.turns[log.request_ids[rid]]
        assert "done" == turn.state(0)
    assert 2 == len(check_log(folder, existing).order)
