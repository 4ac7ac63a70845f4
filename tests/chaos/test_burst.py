"""A burst of large sends through the HTTP service: 60 sends of 1,000,000 characters, 10 at a time,
once made Temporal terminate the conversation's workflow (its history passed 50 MB) and lost sends.
With the claim check every send is answered, none is lost, and history per send stays small."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.worker import Worker

from core.errors import ErrorCode, ThreadlineError
from core.temporal import workflow_id
from tests.chaos.invariants import PER_SEND_HISTORY, Answer, Ledger, history_bytes, until_ended
from tests.support.service_kit import send, serving
from threadline.client import Threadline
from threadline.http import create_app

SENDS = 30
AT_ONCE = 10
SIZE = 1_000_000


async def answer_of(http: httpx.AsyncClient, cid: str, k: int) -> tuple[str, Answer]:
    """POST one large send; its request id and how it was answered (a turn id or the coded error)."""
    rid = f"burst-{k}"
    response = await send(http, cid, message=f"{k} " + "x" * (SIZE - 2), request_id=rid)
    body = response.json()
    if response.status_code == 202:
        return rid, body["turn"]
    error = body["error"]  # anything else must be a coded error
    return rid, ThreadlineError(ErrorCode(error["code"]), error["message"])


async def test_a_burst_of_large_sends_is_answered_whole(
    tl: Threadline, client: Client, worker: Worker, folder: Path, cid: str
) -> None:
    """30 sends of 1,000,000 characters, 10 at a time: each is placed (202) or refused with a code,
    each placed turn ends once, the workflow is never terminated, and each adds under 8 KB of history."""
    ledger, gate = Ledger(), asyncio.Semaphore(AT_ONCE)
    chat = tl.conversation("tutor", id=cid)
    await ledger.predict(chat, "warm up")
    before = await history_bytes(client, cid)

    async def one(k: int) -> tuple[str, Answer]:
        async with gate:
            return await answer_of(http, cid, k)

    async with serving(create_app(tl)) as http:
        ledger.answers.update(await asyncio.gather(*(one(k) for k in range(SENDS))))
    await until_ended(folder, cid, [rid for rid, answer in ledger.answers.items() if isinstance(answer, str)])
    await ledger.predict(chat, "after the burst")

    handle = client.get_workflow_handle(workflow_id("default", cid))
    assert WorkflowExecutionStatus.RUNNING == (await handle.describe()).status
    assert (await history_bytes(client, cid) - before) / (SENDS + 1) < PER_SEND_HISTORY
    assert SENDS == sum(isinstance(a, str) for a in ledger.answers.values()) - 2
    ledger.check(folder, cid)
