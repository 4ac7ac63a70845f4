"""Oversized request ids and inputs: a send from another SDK with a 450,000-character request id
must not wedge the conversation (it once swelled what continue-as-new carried past Temporal's 2 MB
payload limit), and inputs at the limit go through while one byte more is refused with its code."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowHandle, WorkflowUpdateFailedError
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Worker

from core.errors import ErrorCode, ThreadlineError
from core.models import MAX_INPUT_BYTES, MAX_REQUEST_ID, ConversationState
from core.temporal import from_failure, workflow_id
from tests.chaos.invariants import Ledger, started_input_bytes
from threadline.client import Threadline

FOREIGN_ID = "r" * 450_000
CARRIED_LIMIT = 16 * 1024
"""What continue-as-new may carry: a config, the queue and at most 20 outcomes without outputs."""
MOST_SENDS = 40


async def foreign(client: Client, conversation: str) -> WorkflowHandle[object, object]:
    """The conversation's workflow as another SDK sees it: plain JSON payloads, no claim check."""
    config = client.service_client.config
    other = await Client.connect(config.target_host, namespace=client.namespace, data_converter=pydantic_data_converter)
    return other.get_workflow_handle(workflow_id("default", conversation))


async def test_a_foreign_send_with_a_huge_request_id_wedges_nothing(
    tl: Threadline, client: Client, worker: Worker, folder: Path, cid: str
) -> None:
    """Sends of another SDK with 450,000-character request ids are dropped by the workflow (and a
    `wait` for one is refused `invalid-request`); ordinary sends around them, with request ids at the
    limit, are answered; the run continues as new, and what it carries stays small."""
    chat, ledger = tl.conversation("tutor", id=cid), Ledger()
    await ledger.predict(chat, "before the foreign sends")
    handle = await foreign(client, cid)
    started = (await handle.describe()).run_id

    for k in range(3):
        await handle.signal("turn", {"request_id": f"{FOREIGN_ID}{k}", "inputs": {"message": "big id"}})
    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await handle.execute_update("wait", f"{FOREIGN_ID}0")
    for k in range(MOST_SENDS):
        await ledger.predict(chat, f"after {k}", request_id=f"{k:0{MAX_REQUEST_ID}d}")
        if (await handle.describe()).run_id != started:
            break
    await ledger.predict(chat, "in the new run")

    assert ErrorCode.INVALID_REQUEST == from_failure(refused.value).code
    first = (await client.get_workflow_handle(workflow_id("default", cid)).fetch_history()).events[0]
    assert started == first.workflow_execution_started_event_attributes.continued_execution_run_id
    assert started_input_bytes(first) < CARRIED_LIMIT
    [carried] = await client.data_converter.decode(
        first.workflow_execution_started_event_attributes.input.payloads, [ConversationState]
    )
    assert all(o.outputs is None and len(o.request_id) <= MAX_REQUEST_ID for o in carried.outcomes)
    ledger.check(folder, cid)


async def test_request_ids_over_the_limit_are_refused_by_the_client(tl: Threadline, cid: str) -> None:
    """A request id of 201 characters never leaves the client: `invalid-request`."""
    with pytest.raises(ThreadlineError) as refused:
        await tl.conversation("tutor", id=cid).send("hi", request_id="r" * (MAX_REQUEST_ID + 1))

    assert ErrorCode.INVALID_REQUEST == refused.value.code


async def test_inputs_at_the_limit_go_through_and_one_byte_more_is_refused(
    tl: Threadline, client: Client, worker: Worker, folder: Path, cid: str
) -> None:
    """A message whose inputs are exactly the limit's bytes of JSON is answered; one byte more is
    refused `input-too-large` by the client, and by the worker when another SDK signals it."""
    chat, ledger = tl.conversation("tutor", id=cid), Ledger()
    room = MAX_INPUT_BYTES - len(json.dumps({"message": ""}).encode())

    at_limit = await ledger.predict(chat, "x" * room)
    with pytest.raises(ThreadlineError) as by_client:
        await chat.send("x" * (room + 1))
    await (await foreign(client, cid)).signal("turn", {"request_id": "over", "inputs": {"message": "y" * (room + 1)}})
    with pytest.raises(ThreadlineError) as by_worker:
        await chat.outcome("over")
    ledger.answers["over"] = by_worker.value
    await ledger.predict(chat, "after the large ones")

    assert room == len((await chat.turn(at_limit)).inputs["message"])
    assert ErrorCode.INPUT_TOO_LARGE == by_client.value.code
    assert ErrorCode.INPUT_TOO_LARGE == by_worker.value.code
    ledger.check(folder, cid)
