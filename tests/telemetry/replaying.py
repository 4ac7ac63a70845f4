"""`python -m tests.telemetry.replaying HISTORY PAYLOADS`: replay a conversation's history with traces
on (the standard OTEL_* environment), as a worker taking it over would, then export one `replay.done`
span so the test knows this process could export at all."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer

from core import telemetry
from core.temporal import data_converter
from store.backends.blobs import FolderBlobs
from workflows.conversation import ConversationWorkflow


async def replay(history: str, payloads: Path) -> None:
    telemetry.start(service="tl-replayer", metrics_bind=None)
    replayer = Replayer(
        workflows=[ConversationWorkflow],
        data_converter=data_converter(FolderBlobs(payloads)),
        plugins=telemetry.plugins(),
    )
    await replayer.replay_workflow(WorkflowHistory.from_json("conversation", history))
    tracer = telemetry.tracer(__name__)
    assert tracer is not None, "traces are off: the test's environment names no endpoint"
    tracer.start_span("replay.done").end()
    telemetry.flush()


if __name__ == "__main__":
    asyncio.run(replay(Path(sys.argv[1]).read_text(), Path(sys.argv[2])))
