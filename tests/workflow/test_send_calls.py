"""A turn answered in time costs its sender one call to Temporal: the update-with-start waits for the
answer itself, instead of returning once the update is accepted and asking for the outcome again.

The calls are counted below the SDK, one per RPC the client sends."""

from __future__ import annotations

from temporalio.client import Client
from temporalio.worker import Worker

from bench._anchors import CountedCalls
from core.settings import Settings
from threadline.client import connect


async def test_a_turn_answered_in_time_is_one_call_to_temporal(
    client: Client, settings: Settings, worker: Worker, cid: str
) -> None:
    """`deliver` and `predict` of turns after the first: one `execute_multi_operation` each, nothing else."""
    counted = CountedCalls(client.service_client)
    config = client.config()
    config["service_client"] = counted
    chat = (await connect(settings, client=Client(**config))).conversation("tutor", id=cid)
    await chat.deliver("The first turn connects and starts the conversation.")
    counted.calls.clear()

    delivered = await chat.deliver("How far away is the moon?")
    predicted = await chat.predict("And the sun?")

    assert ("done", "done") == (delivered.state, predicted.state)
    assert {"execute_multi_operation": 2} == dict(counted.calls)
