"""kill -9 of the Temporal server while the Python API, the CLI and the HTTP service are all in use,
then a restart on its database: every failure any of them shows is a coded error of docs/errors.md
(Python: only `ThreadlineError`; the CLI: exit 0 or 1, a coded JSON error, no traceback; HTTP: the
`{"error": {"code", "message"}}` body with its code's status), and each conversation's log stays whole."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from activities.language_model import OfflineModel
from core.errors import ThreadlineError
from core.settings import Settings
from core.temporal import connect_temporal
from store.backends.blobs import FolderBlobs
from tests.chaos.invariants import check_log
from tests.support.service_kit import serving
from threadline.client import Threadline, connect
from threadline.devserver import DevServer, free_port
from threadline.http import create_app
from threadline.http.middleware import STATUS
from worker import build_worker

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTED = frozenset(re.findall(r"^\| `([a-z-]+)` \|", (ROOT / "docs" / "errors.md").read_text(), re.M))
"""The codes docs/errors.md lists."""
DELAY_S = 2.0
"""How long the model takes: most sends wait for their outcome when the server dies."""
DOWN_S, AFTER_S = 12.0, 6.0
"""How long the server stays dead (longer than the SDK retries a call), and how long the surfaces
are used after the restart."""


@dataclass
class Seen:
    """What the surfaces answered: Python's exceptions, the CLI's runs, HTTP's error answers."""

    raised: list[BaseException] = field(default_factory=list)
    runs: list[subprocess.CompletedProcess[str]] = field(default_factory=list)
    answers: list[httpx.Response] = field(default_factory=list)
    hung: list[str] = field(default_factory=list)
    """HTTP calls that got no answer within the client's 30 s."""
    sent: dict[str, list[str]] = field(default_factory=dict)
    """The request ids sent to each conversation."""
    answered: set[str] = field(default_factory=set)
    """The conversations a send was answered in (the server is killed once each was)."""

    def rid(self, conversation: str) -> str:
        """A new request id for a send to `conversation`."""
        made = f"{conversation}-{len(self.sent.setdefault(conversation, []))}"
        self.sent[conversation].append(made)
        return made


async def python_sends(tl: Threadline, conversation: str, seen: Seen, until: asyncio.Event) -> None:
    """`deliver` one send after another, keeping every exception."""
    chat = tl.conversation("tutor", id=conversation)
    while not until.is_set():
        try:
            await chat.deliver("through the outage", request_id=seen.rid(conversation))
            seen.answered.add(conversation)
        except Exception as err:  # noqa: BLE001 - what is kept is checked: only ThreadlineError may come
            seen.raised.append(err)
            await asyncio.sleep(0.5)


async def http_calls(http: httpx.AsyncClient, conversation: str, seen: Seen, until: asyncio.Event) -> None:
    """Send (waiting), read the conversation and list conversations, one after another."""
    url = f"/v1/conversations/{conversation}"
    while not until.is_set():
        body = {"message": "through the outage", "request_id": seen.rid(conversation), "wait": True}
        for call in (http.post(f"{url}/turns", json=body), http.get(url), http.get("/v1/conversations")):
            try:
                seen.answers.append(await call)
                seen.answered.update([conversation] if seen.answers[-1].status_code == 200 else [])
            except httpx.TimeoutException:
                seen.hung.append(url)
        await asyncio.sleep(0.2)


async def cli_runs(env: dict[str, str], conversation: str, seen: Seen, until: asyncio.Event) -> None:
    """`threadline send`, `list` and `turns` (with --json), one after another."""
    while not until.is_set():
        for args in (
            ["send", conversation, "through the outage", "--request-id", seen.rid(conversation)],
            ["list"],
            ["turns", conversation],
        ):
            command = [sys.executable, "-m", "threadline", "--json", *args]
            run = subprocess.run
            seen.runs.append(await asyncio.to_thread(run, command, env=env, capture_output=True, text=True, timeout=60))


async def answered_in(seen: Seen, conversations: list[str]) -> None:
    """Wait until a send was answered in each of `conversations`, and the next ones wait for theirs."""
    deadline = asyncio.get_running_loop().time() + 60
    while not set(conversations) <= seen.answered:
        assert asyncio.get_running_loop().time() < deadline, "the surfaces never answered before the kill"
        await asyncio.sleep(0.1)
    await asyncio.sleep(DELAY_S / 2)


async def killed_and_restarted(server: DevServer, data: Path, port: int) -> DevServer:
    """kill -9 of the server's process group; `DOWN_S` later, a new server on its database and port."""
    assert server.pid is not None
    os.killpg(server.pid, signal.SIGKILL)
    await server.stop()  # reaps it; it is dead already
    await asyncio.sleep(DOWN_S)
    restarted = DevServer(data, port=port, ui_port=None)
    await restarted.start()
    return restarted


def check_python(raised: list[BaseException]) -> None:
    assert [] == [type(err).__name__ for err in raised if not isinstance(err, ThreadlineError)]
    assert set() == {err.code for err in raised if isinstance(err, ThreadlineError)} - DOCUMENTED


def check_cli(runs: list[subprocess.CompletedProcess[str]]) -> None:
    assert [] == [run.stderr for run in runs if run.returncode not in (0, 1) or "Traceback" in run.stderr]
    printed = [json.loads(run.stdout) for run in runs if run.returncode == 1]
    errors = [out["error"] for out in printed if "error" in out]
    assert set() == {error["code"] for error in errors} - DOCUMENTED
    assert [] == [out for out in printed if "error" not in out and out.get("state") in (None, "done")]


def check_http(answers: list[httpx.Response]) -> None:
    failed = [answer for answer in answers if answer.status_code >= 400]
    bodies = [answer.json() for answer in failed]
    assert [] == [body for body in bodies if set(body) != {"error"} or not {"code", "message"} <= set(body["error"])]
    assert set() == {body["error"]["code"] for body in bodies} - DOCUMENTED
    statuses = {(answer.status_code, body["error"]["code"]) for answer, body in zip(failed, bodies, strict=True)}
    assert set() == {(status, code) for status, code in statuses if STATUS.get(code, 500) != status}


def unavailable(seen: Seen) -> int:
    """How many answers said Temporal was unavailable (the outage was felt)."""
    python = sum(isinstance(err, ThreadlineError) and err.code == "server-unavailable" for err in seen.raised)
    cli = sum('"server-unavailable"' in run.stdout for run in seen.runs)
    return python + cli + sum(answer.status_code == 503 for answer in seen.answers)


def cli_env(settings: Settings) -> dict[str, str]:
    return {
        "PATH": "/usr/bin:/bin",
        "THREADLINE_TEMPORAL_ADDRESS": settings.address,
        "THREADLINE_DATA": str(settings.data),
        "THREADLINE_TASK_QUEUE": settings.task_queue,
        "THREADLINE_PAYLOADS": str(settings.payload_folder),
    }


@pytest.mark.slow
async def test_every_surface_answers_coded_errors_through_a_server_kill(
    settings: Settings, tmp_path: Path, cid: str
) -> None:
    """Python, the CLI and HTTP in use while the server dies (kill -9) and comes back 12 s later: no
    raw SDK exception, only documented codes, exit statuses and error bodies; the logs stay whole."""
    data, port, seen, until = tmp_path / "temporal", free_port(), Seen(), asyncio.Event()
    own = dataclasses.replace(settings, address=f"127.0.0.1:{port}")
    server = DevServer(data, port=port, ui_port=None)
    await server.start()
    try:
        client = await connect_temporal(own, FolderBlobs(own.payload_folder))
        tl = await connect(own, client=client)
        async with (
            build_worker(client, own, providers={"offline": OfflineModel(delay=DELAY_S)}),
            serving(create_app(await connect(own, client=client))) as http,
        ):
            users = [
                *(python_sends(tl, f"{cid}-py{i}", seen, until) for i in range(4)),
                *(http_calls(http, f"{cid}-http{i}", seen, until) for i in range(2)),
                cli_runs(cli_env(own), f"{cid}-cli", seen, until),
            ]
            using = asyncio.gather(*users)
            await answered_in(seen, [*(f"{cid}-py{i}" for i in range(4)), *(f"{cid}-http{i}" for i in range(2))])
            server = await killed_and_restarted(server, data, port)
            await asyncio.sleep(AFTER_S)
            until.set()
            await using
            after = await tl.conversation("tutor", id=f"{cid}-py0").deliver("after the restart")
    finally:
        until.set()
        await server.stop()

    check_python(seen.raised)
    check_cli(seen.runs)
    check_http(seen.answers)
    assert [] == seen.hung
    assert unavailable(seen) > 0
    assert "done" == after.state
    for conversation in seen.sent:
        check_log(own.store_folder("default"), conversation)
