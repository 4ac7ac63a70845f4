"""A conversation driven from TypeScript with @temporalio/client alone (tests/clients/node, the code
docs/workflow.md shows): started with the minimal input, turns by update-with-start and by signal,
large payloads through the codec endpoint, a request id sent twice, a stop, and a listing."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
from typing import Any

from temporalio.client import Client

from core.settings import Settings
from core.temporal import CLAIM_CHECK_ENCODING
from tests.support.client_kit import built_client, listed_idle
from tests.support.service_kit import serving
from threadline.client import connect
from threadline.http import ServiceSettings, create_codec_app
from worker import build_worker

MESSAGE_4K = "Tell me everything about the sea and its tides. " * 86
MESSAGE_12K = "A message of twelve kilobytes, kept out of history. " * 240
OPEN = ServiceSettings(keys=(), max_body_bytes=10 * 1024 * 1024, cors_origins=())


async def drive(settings: Settings, codec: str, cid: str) -> dict[str, Any]:
    """Run the TypeScript scenario (tests/clients/node/src/drive.ts); what it printed."""
    build = await asyncio.to_thread(built_client)
    env = {
        **os.environ,
        "TEMPORAL_ADDRESS": settings.address,
        "TASK_QUEUE": settings.task_queue,
        "CODEC_ENDPOINT": codec,
        "CONVERSATION": cid,
        "PROGRAM": "echo",
        "MESSAGE_4K": MESSAGE_4K,
        "MESSAGE_12K": MESSAGE_12K,
    }
    node = await asyncio.create_subprocess_exec(
        "node", str(build / "drive.js"), env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(node.communicate(), timeout=90)
    assert 0 == node.returncode, err.decode()
    printed: dict[str, Any] = json.loads(out)
    return printed


async def test_a_typescript_client_drives_a_conversation(client: Client, settings: Settings, cid: str) -> None:
    """The scenario runs as docs/workflow.md says, and `threadline list` then finds the conversation
    with the worker's attribute interval (the start input names none) and every turn."""
    mine = dataclasses.replace(settings, programs=("tests.support.client_programs",), attributes_every_s=0.5)
    async with build_worker(client, mine), serving(create_codec_app(mine, OPEN)) as http:
        done = await drive(mine, str(http.base_url).rstrip("/") + "/v1/codec", cid)
        listed = await listed_idle(await connect(mine, client=client), cid, turns=4)

    first, long, third, again, stopped = (done[name] for name in ("first", "long", "third", "again", "stopped"))
    assert ["done"] * 4 == [first["state"], long["state"], third["state"], again["state"]]
    assert MESSAGE_4K == long["outputs"]["result"]
    assert len(long["outputs"]["result"]) >= 4096
    assert first["turn"] == again["turn"]
    assert "invalid-request" == done["tooLong"]
    assert ("stopped", done["placed"]["turn"]) == (stopped["state"], stopped["turn"])
    assert 4 == done["status"]["turns"]
    sent = {s["request_id"]: s for s in done["history"]["sent"] if isinstance(s, dict)}
    assert MESSAGE_12K == sent["r-3"]["inputs"]["message"]
    assert CLAIM_CHECK_ENCODING.decode() in done["history"]["encodings"]
    assert done["listed"]
    assert ("echo", 4) == (listed.program, listed.turns)
