"""A turn answered in time costs its sender one call to Temporal: the update-with-start waits for the
answer itself, instead of returning once the update is accepted and asking for the outcome again.

The calls are counted below the SDK, one per RPC the client sends."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import google.protobuf.message
from temporalio.client import Client
from temporalio.service import ServiceClient, ServiceResponse
from temporalio.worker import Worker

from core.settings import Settings
from threadline.client import connect


class Counted(ServiceClient):
    """The service client `inner`, counting the calls sent through it by RPC name."""

    def __init__(self, inner: ServiceClient) -> None:
        super().__init__(inner.config)
        self.inner = inner
        self.calls: Counter[str] = Counter()

    @property
    def worker_service_client(self) -> Any:
        return self.inner.worker_service_client

    def update_rpc_metadata(self, metadata: Mapping[str, str | bytes]) -> None:
        self.inner.update_rpc_metadata(metadata)

    def update_api_key(self, api_key: str | None) -> None:
        self.inner.update_api_key(api_key)

    async def _rpc_call(
        self,
        rpc: str,
        req: google.protobuf.message.Message,
        resp_type: type[ServiceResponse],
        *,
        service: str,
        retry: bool,
        metadata: Mapping[str, str | bytes],
        timeout: timedelta | None,  # noqa: ASYNC109 - the SDK's signature, passed on
    ) -> ServiceResponse:
        self.calls[rpc] += 1
        return await self.inner._rpc_call(
            rpc, req, resp_type, service=service, retry=retry, metadata=metadata, timeout=timeout
        )


async def test_a_turn_answered_in_time_is_one_call_to_temporal(
    client: Client, settings: Settings, worker: Worker, cid: str
) -> None:
    """`deliver` and `predict` of turns after the first: one `execute_multi_operation` each, nothing else."""
    counted = Counted(client.service_client)
    config = client.config()
    config["service_client"] = counted
    chat = (await connect(settings, client=Client(**config))).conversation("tutor", id=cid)
    await chat.deliver("The first turn connects and starts the conversation.")
    counted.calls.clear()

    delivered = await chat.deliver("How far away is the moon?")
    predicted = await chat.predict("And the sun?")

    assert ("done", "done") == (delivered.state, predicted.state)
    assert {"execute_multi_operation": 2} == dict(counted.calls)
