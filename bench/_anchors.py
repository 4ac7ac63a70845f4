"""What bench/turns.py needs to set Threadline beside both of its anchors: the best bare
conversation's client handle, a count of the client's calls to the server, and the table of the
four systems' figures side by side.

The count is taken below the SDK, one per RPC the client sends (an update the server answered
before it completed would show as a second call, `poll_workflow_execution_update`), so it says how
many round trips a turn costs the caller, whatever the SDK call that made them.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import google.protobuf.message
from temporalio.client import Client, WithStartWorkflowOperation
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.service import ServiceClient, ServiceResponse

from bench._bare import BareSend, BestBareConversation

SYSTEMS = {
    "threadline": "threadline",
    "anchor": "anchor: signal-with-start + `wait` update",
    "best": "anchor: the best bare conversation (update-with-start)",
    "placed": "the best bare conversation, placed first (two fsynced appends)",
}
"""The systems of bench/turns.py, by the names its figures are kept under, and as the table heads them."""


class CountedCalls(ServiceClient):
    """The service client `inner`, counting every call sent through it by RPC name (`calls`)."""

    def __init__(self, inner: ServiceClient) -> None:
        super().__init__(inner.config)
        self.inner = inner
        self.calls: Counter[str] = Counter()

    @property
    def worker_service_client(self) -> Any:
        """The inner client's (workers are never given this one)."""
        return self.inner.worker_service_client

    def update_rpc_metadata(self, metadata: Mapping[str, str | bytes]) -> None:
        """As the inner client."""
        self.inner.update_rpc_metadata(metadata)

    def update_api_key(self, api_key: str | None) -> None:
        """As the inner client."""
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


def counted_client(client: Client) -> tuple[Client, CountedCalls]:
    """A client like `client` whose calls are counted, and their count."""
    counted = CountedCalls(client.service_client)
    config = client.config()
    config["service_client"] = counted
    return Client(**config), counted


@dataclass(slots=True)
class BestBareChat:
    """A client-side handle on one best bare conversation: a turn is one update-with-start."""

    client: Client
    task_queue: str
    id: str
    path: Path
    placed: bool = False
    """Started `placed` (bench/_bare.py): each turn appends a line placing it before its answer's."""

    async def predict(self, text: str, phases: dict[str, list[float]] | None = None) -> str:
        """Send a turn and get its answer (`phases`: append the seconds the call took)."""
        start = time.perf_counter()
        begin = WithStartWorkflowOperation(
            BestBareConversation.run,
            args=[str(self.path), True] if self.placed else [str(self.path)],
            id=self.id,
            task_queue=self.task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        )
        send = BareSend(request_id=str(uuid.uuid4()), text=text)
        answer: str = await self.client.execute_update_with_start_workflow(
            "turn", send, start_workflow_operation=begin, result_type=str
        )
        if phases is not None:
            phases["update-with-start"].append(time.perf_counter() - start)
        return answer


@dataclass(slots=True)
class Figure:
    """One measure for the systems (`values` by system name; a system not measured has none)."""

    measure: str
    unit: str
    higher: bool
    digits: int
    values: dict[str, float]
    target: float | None = None
    """The most (or, `higher`, the least) Threadline / best bare may be."""

    def cell(self, system: str) -> str:
        value = self.values.get(system)
        return "-" if value is None else f"{value:,.{self.digits}f} {self.unit}".strip()

    def ratio(self, system: str) -> str:
        ours, theirs = self.values.get("threadline"), self.values.get(system)
        return "-" if ours is None or not theirs else f"{ours / theirs:.2f}"

    def met(self) -> str:
        """The target against the best bare conversation, and whether this run met it."""
        ours, best = self.values.get("threadline"), self.values.get("best")
        if self.target is None or ours is None or not best:
            return "-"
        ok = ours / best >= self.target if self.higher else ours / best <= self.target
        return f"{'>=' if self.higher else '<='} {self.target:.2f}: {'met' if ok else 'NOT met'}"


@dataclass(slots=True)
class Beside:
    """Figures of Threadline, both anchors and the placed best bare conversation from one run, printed as one table."""

    figures: list[Figure] = field(default_factory=list)

    def add(
        self,
        measure: str,
        unit: str,
        values: Mapping[str, float],
        *,
        higher: bool = False,
        digits: int = 1,
        target: float | None = None,
    ) -> None:
        """Keep `values` (by system) of `measure`, with its `target` against the best bare conversation."""
        self.figures.append(Figure(measure, unit, higher, digits, dict(values), target))

    def print(self, title: str) -> None:
        """Print `title`, then the table: Threadline, each anchor and Threadline's ratio to it."""
        print(f"\n{title}\n")
        header = f"| measure | {SYSTEMS['threadline']} | {SYSTEMS['anchor']} | ratio | {SYSTEMS['best']} | ratio |"
        print(f"{header} target vs best bare | {SYSTEMS['placed']} | ratio |")
        print("|---|---:|---:|---:|---:|---:|---|---:|---:|")
        for f in self.figures:
            better = "higher is better" if f.higher else "lower is better"
            cells = [f"{f.measure} ({better})", f.cell("threadline")]
            cells += [f.cell("anchor"), f.ratio("anchor"), f.cell("best"), f.ratio("best"), f.met()]
            cells += [f.cell("placed"), f.ratio("placed")]
            print("| " + " | ".join(cells) + " |")
