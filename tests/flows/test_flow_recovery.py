"""A guided flow survives crashes: a worker killed with `kill -9` in the middle of a step (its AI
check asking a model), and a dev server restarted in the middle of a flow. Either way the flow goes
on at the same step, each prompt is asked once, and each answer is one turn."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import uuid
from pathlib import Path

from temporalio.client import Client

from core.models import TurnSend
from core.settings import Settings
from core.temporal import data_converter
from store.backends.blobs import FolderBlobs
from store.backends.folder import FolderStore
from store.flows.progress import flow_entries
from store.log.state import Log
from tests.support.processes import WorkerProcess
from threadline.client import connect
from threadline.devserver import DevServer, free_port
from worker import build_worker

ORDER_PROMPTS = [
    "Hello! What would you like to order?",
    "How many would you like?",
    "What e-mail address should the confirmation go to?",
    "Thank you, that is everything I needed.",
]


def flow_log(folder: Path, conversation: str) -> Log:
    return Log(FolderStore(folder).read(conversation))


def said(log: Log) -> list[str]:
    """What every turn of the conversation answered, in order."""
    return [str(log.turns[tid].outputs.get("result")) for tid in log.order]


def kinds(log: Log) -> list[str]:
    return [str(e.get("entry")) for e in flow_entries(log) if e.get("entry") != "checked"]


def asked(log_file: Path, purpose: str) -> int:
    """How many model calls for `purpose` the workers logging to `log_file` made."""
    lines = [json.loads(line) for line in log_file.read_text().splitlines() if line.startswith("{")]
    return sum(1 for e in lines if e.get("event") == "model.requested" and e.get("purpose") == purpose)


async def until_asked(log_file: Path, purpose: str) -> None:
    for _ in range(200):
        if asked(log_file, purpose):
            return
        await asyncio.sleep(0.05)
    raise TimeoutError(f"no model call for {purpose}")


async def test_a_worker_killed_mid_step_goes_on_at_the_same_step(settings: Settings, tmp_path: Path, cid: str) -> None:
    """kill -9 while the step's AI extractor asks the model: another worker asks again and takes the
    answer once; the flow completes with one turn per message and each prompt asked once."""
    logs, flows = tmp_path / "workers.log", {"THREADLINE_FLOWS": "tests.support.example_flows"}
    first = WorkerProcess(settings, logs, delay=2.0, env=flows)
    first.wait_ready()
    tl = await connect(settings)
    chat = tl.conversation("chat", id=cid)
    started = await chat.start_flow("bulk")
    answering = asyncio.create_task(chat.message("two dozen", request_id="answer-1"))
    await until_asked(logs, "flow extractor")

    first.kill()
    second = WorkerProcess(settings, logs, delay=2.0, env=flows)
    try:
        second.wait_ready()
        reply = await asyncio.wait_for(answering, timeout=60)
    finally:
        second.stop()

    log = flow_log(settings.store_folder("default"), cid)
    assert ("How many would you like?", True, {"quantity": 0}) == (
        started.response,
        reply.flow_completed,
        reply.flow_data,
    )
    assert ["How many would you like?", "Thank you, that is everything I needed."] == said(log)
    assert ["started", "answered", "completed"] == kinds(log)
    assert "answer-1" == log.turns[log.order[-1]].record["request_id"]
    assert 1 == sum(1 for e in flow_entries(log) if e.get("entry") == "checked")
    assert 2 == asked(logs, "flow extractor")


async def test_a_dev_server_restart_mid_flow_goes_on_at_the_same_step(
    settings: Settings, tmp_path: Path, cid: str
) -> None:
    """The server stops and starts again (same database) between two answers: the flow is still at the
    e-mail step, and completes without asking anything twice."""
    port, data = free_port(), tmp_path / "server"
    converter = data_converter(FolderBlobs(settings.payload_folder))
    async with DevServer(data, port=port, ui_port=None) as server:
        mine = dataclasses.replace(settings, address=server.address, task_queue=f"restart-{uuid.uuid4()}")
        client = await Client.connect(server.address, data_converter=converter)
        async with build_worker(client, mine):
            chat = (await connect(mine, client=client)).conversation("chat", id=cid)
            await chat.start_flow("checkout")
            await chat.message("Two pizzas, please.")
            await chat.message("3")
            await server.stop()
            await server.start()
            where = await chat.flow()
            done = await asyncio.wait_for(chat.message("ada@example.com"), timeout=60)

    log = flow_log(settings.store_folder("default"), cid)
    assert ("active", "email") == (where.state, where.step)
    assert {"greeting": "Two pizzas, please.", "quantity": 3, "email": "ada@example.com"} == done.flow_data
    assert ORDER_PROMPTS == said(log)
    assert ["started", "answered", "answered", "answered", "completed"] == kinds(log)


async def test_a_message_sent_while_no_worker_runs_answers_the_flow_once_one_does(
    settings: Settings, tmp_path: Path, cid: str
) -> None:
    """The signal waits durably while no worker runs; the next worker reads the flow back and answers it."""
    logs = tmp_path / "workers.log"
    first = WorkerProcess(settings, logs)
    first.wait_ready()
    tl = await connect(settings)
    chat = tl.conversation("chat", id=cid)
    await chat.start_flow("checkout")
    first.kill()

    await chat.signal(TurnSend(request_id="while-down", inputs={"message": "A salad."}, program="chat"))
    second = WorkerProcess(settings, logs)
    try:
        second.wait_ready()
        outcome = await asyncio.wait_for(chat.outcome("while-down"), timeout=60)
    finally:
        second.stop()

    assert ("How many would you like?", "flow:checkout") == (outcome.result, outcome.model)
    assert ORDER_PROMPTS[:2] == said(flow_log(settings.store_folder("default"), cid))
