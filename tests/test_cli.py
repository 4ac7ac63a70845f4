"""The `threadline` command, run as real subprocesses against the session dev server and a worker."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.workflowservice.v1 import GetSystemInfoRequest
from temporalio.client import Client
from temporalio.service import RPCError
from temporalio.worker import Worker

from core.settings import Settings
from threadline.client import Threadline, workflow_id
from threadline.devserver import free_port
from worker import build_worker

SLOW_REPLY_S = 3.0
"""How long the offline model takes per reply when a test needs a turn that is still running."""
DEV_TIMEOUT_S = 20.0


def clean_env(**values: str) -> dict[str, str]:
    """The test process's environment without its THREADLINE_* variables, plus `values`."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("THREADLINE_")}
    return env | {f"THREADLINE_{name.upper()}": value for name, value in values.items()}


@pytest.fixture(name="cli_env")
def _cli_env(settings: Settings) -> dict[str, str]:
    return clean_env(temporal_address=settings.address, data=str(settings.data), task_queue=settings.task_queue)


async def threadline(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """Run `python -m threadline ARGS` without blocking the loop the in-process worker runs on."""
    command = [sys.executable, "-m", "threadline", *args]
    return await asyncio.to_thread(subprocess.run, command, env=env, capture_output=True, text=True, timeout=30)


async def threadline_json(env: dict[str, str], *args: str, status: int = 0) -> Any:
    """Run `python -m threadline ARGS --json`, check its exit status, and return what it printed."""
    done = await threadline(env, *args, "--json")
    assert status == done.returncode, done.stderr
    return json.loads(done.stdout)


@asynccontextmanager
async def dev_process(env: dict[str, str], log: Path, *args: str) -> AsyncIterator[asyncio.subprocess.Process]:
    """`threadline dev ARGS`, with SIGTERM (to it alone) when a test leaves it running."""
    with log.open("wb") as stderr:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "threadline", "dev", *args, env=env, stdout=subprocess.PIPE, stderr=stderr
        )
        try:
            yield process
        finally:
            if process.returncode is None:
                process.send_signal(signal.SIGTERM)
                await asyncio.wait_for(process.communicate(), DEV_TIMEOUT_S)


async def read_until(process: asyncio.subprocess.Process, text: str, *, count: int = 1) -> list[str]:
    """The lines `process` prints up to the `count`th one containing `text`, within `DEV_TIMEOUT_S`."""
    assert process.stdout is not None
    lines: list[str] = []
    async with asyncio.timeout(DEV_TIMEOUT_S):
        while sum(text in line for line in lines) < count:
            line = (await process.stdout.readline()).decode()
            assert line, f"stdout ended before {text!r}: {lines}"
            lines.append(line.rstrip("\n"))
    return lines


async def terminate(process: asyncio.subprocess.Process) -> int:
    """Send SIGTERM to `process` and return its exit status."""
    process.send_signal(signal.SIGTERM)
    await asyncio.wait_for(process.communicate(), DEV_TIMEOUT_S)
    assert process.returncode is not None
    return process.returncode


async def test_send_waits_and_prints_the_outcome(cli_env: dict[str, str], worker: Worker) -> None:
    """`send` waits for the turn and prints its id, parent, state and answer."""
    first = await threadline_json(cli_env, "send", "cli-alex", "Hi, I'm Alex.")
    second = await threadline(cli_env, "send", "cli-alex", "What is 1/2 + 1/3?")

    assert ("done", None) == (first["state"], first["parent"])
    assert "You said: Hi, I'm Alex." in first["result"]
    assert 0 == second.returncode, second.stderr
    assert f"parent  {first['turn']}" in second.stdout.splitlines()
    assert "state   done" in second.stdout.splitlines()
    assert "I was shown 1 earlier turn(s)." in second.stdout


async def test_send_without_waiting_prints_the_placed_turn(
    cli_env: dict[str, str], worker: Worker, tl: Threadline
) -> None:
    """`send --no-wait` returns once the turn is placed; the turn then ends as usual."""
    placed = await threadline_json(cli_env, "--json", "send", "nowait", "Hello", "--no-wait", "--request-id", "r-1")

    outcome = await tl.conversation("tutor", "nowait").outcome("r-1")

    assert (placed["turn"], "done") == (outcome.turn, outcome.state)
    assert placed["parent"] is None


async def test_send_from_branches_and_head_picks_the_branch(cli_env: dict[str, str], worker: Worker) -> None:
    """`--from` continues after an earlier turn; `head` moves the head; `turns --all` shows every branch."""
    first = await threadline_json(cli_env, "send", "branchy", "one")
    second = await threadline_json(cli_env, "send", "branchy", "two")
    branch = await threadline_json(cli_env, "send", "branchy", "two again", "--from", first["turn"])

    head = await threadline_json(cli_env, "head", "branchy", second["turn"])
    listed = await threadline_json(cli_env, "turns", "branchy")
    every = await threadline_json(cli_env, "turns", "branchy", "--all")

    assert first["turn"] == branch["parent"]
    assert second["turn"] == head["head"]
    assert [first["turn"], second["turn"]] == [turn["id"] for turn in listed["turns"]]
    assert {first["turn"], second["turn"], branch["turn"]} == {turn["id"] for turn in every["turns"]}


async def test_turns_prints_an_aligned_table_without_colour(cli_env: dict[str, str], worker: Worker) -> None:
    """Piped, `turns` prints a header and one row per turn in aligned columns, with no escape codes."""
    sent = await threadline_json(cli_env, "send", "table", "first line\nsecond line")

    listed = await threadline(cli_env, "turns", "table")

    header, row = listed.stdout.splitlines()
    assert ["TURN", "PARENT", "STATE", "INPUT", "RESULT"] == header.split()
    assert [sent["turn"], "-", "done", "first", "line", "(offline)"] == row.split()[:6]
    assert header.index("STATE") == row.index("done")
    assert "\x1b" not in listed.stdout


async def test_stop_ends_a_running_turn(
    cli_env: dict[str, str], client: Client, settings: Settings, tl: Threadline
) -> None:
    """`stop ID TURN` stops a turn that is still running."""
    async with build_worker(client, dataclasses.replace(settings, offline_delay_s=SLOW_REPLY_S)):
        placed = await threadline_json(cli_env, "send", "slow", "Take your time.", "--no-wait", "--request-id", "r-1")

        stopped = await threadline_json(cli_env, "stop", "slow", placed["turn"])
        outcome = await tl.conversation("tutor", "slow").outcome("r-1")

    assert placed["turn"] == stopped["stop"]
    assert "stopped" == outcome.state


async def test_refused_send_exits_1_with_its_code(
    cli_env: dict[str, str], client: Client, settings: Settings, tl: Threadline
) -> None:
    """With `--sends refuse`, a send while a turn runs prints `conversation-busy` and exits 1."""
    async with build_worker(client, dataclasses.replace(settings, offline_delay_s=SLOW_REPLY_S)):
        await threadline_json(
            cli_env, "send", "busy", "First.", "--sends", "refuse", "--no-wait", "--request-id", "r-1"
        )

        refused = await threadline_json(cli_env, "send", "busy", "Second.", "--sends", "refuse", status=1)
        await threadline_json(cli_env, "stop", "busy")
        outcome = await tl.conversation("tutor", "busy").outcome("r-1")

    assert "conversation-busy" == refused["error"]["code"]
    assert "stopped" == outcome.state


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["send", "no/such", "hi"], "conversation-id"),
        (["send", "fine", "hi", "--store", "nope"], "store-unknown"),
        (["turns", "fine", "--store", "nope"], "store-unknown"),
    ],
)
async def test_bad_input_is_refused_before_anything_is_recorded(
    cli_env: dict[str, str], client: Client, settings: Settings, args: list[str], code: str
) -> None:
    """A bad id or store exits 1 with its code, in JSON and in text, and starts no workflow."""
    as_json = await threadline_json(cli_env, *args, status=1)
    as_text = await threadline(cli_env, *args)

    assert code == as_json["error"]["code"]
    assert (1, "") == (as_text.returncode, as_text.stdout)
    assert as_text.stderr.startswith(f"error: {code}: ")
    assert not list(settings.data.glob("**/*.jsonl"))
    with pytest.raises(RPCError):
        await client.get_workflow_handle(workflow_id("default", args[1])).describe()


async def test_dev_server_only_answers_and_stops_on_sigterm(tmp_path: Path) -> None:
    """`dev --server-only` serves Temporal until SIGTERM, then exits 0."""
    port, ui_port = free_port(), free_port()
    env = clean_env(data=str(tmp_path / "data"))
    began = time.monotonic()

    async with dev_process(
        env, tmp_path / "dev.log", "--server-only", "--port", str(port), "--ui-port", str(ui_port)
    ) as dev:
        lines = await read_until(dev, "Press Ctrl-C")
        ready_s = time.monotonic() - began
        client = await Client.connect(f"127.0.0.1:{port}")
        system = await client.workflow_service.get_system_info(GetSystemInfoRequest())
        stopping = time.monotonic()
        status = await terminate(dev)

    print(f"dev --server-only: ready in {ready_s:.2f} s, stopped in {time.monotonic() - stopping:.2f} s")
    assert f"Temporal UI: http://127.0.0.1:{ui_port}" in lines
    assert system.server_version
    assert 0 == status, (tmp_path / "dev.log").read_text()


async def test_dev_demo_holds_a_conversation_and_stops_on_sigterm(tmp_path: Path) -> None:
    """`dev --demo` answers three questions, links the UI page, and exits 0 on SIGTERM."""
    port, ui_port = free_port(), free_port()
    env = clean_env(data=str(tmp_path / "data"))
    began = time.monotonic()

    async with dev_process(env, tmp_path / "dev.log", "--demo", "--port", str(port), "--ui-port", str(ui_port)) as dev:
        answers = await read_until(dev, "tutor: ", count=3)
        demo_s = time.monotonic() - began
        link = await read_until(dev, "See it in the Temporal UI")
        status = await terminate(dev)

    print(f"dev --demo: last answer after {demo_s:.2f} s")
    assert "I was shown 2 earlier turn(s)." in answers[-1]
    demo = link[-1].rsplit("%2F", 1)[-1]
    expected = f"See it in the Temporal UI: http://127.0.0.1:{ui_port}/namespaces/default/workflows/conversation%2Fdefault%2F{demo}"
    assert expected == link[-1]
    assert 0 == status, (tmp_path / "dev.log").read_text()
    assert (tmp_path / "data" / "store" / "conversations" / f"{demo}.jsonl").is_file()
