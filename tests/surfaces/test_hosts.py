"""A deployment over several hosts: three test hosts (network namespaces, tests/support/hosts.py), each running
a worker, one Temporal dev server and one PostgreSQL store on the bridge every host reaches, the HTTP
service beside them. One host's worker is killed and its link cut mid-turn; a functai process on
another host continues a conversation through the HTTP store object meanwhile."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sys
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from core.settings import Settings
from store.backends.locate import postgres_url
from store.backends.postgres import PostgresStore
from store.log.state import Log
from tests.support.hosts import Network, can_make_hosts, host_network
from tests.support.pg_kit import postgres_server
from tests.support.processes import ROOT, WorkerProcess, model_requests
from tests.support.service_kit import serving
from threadline.client import Threadline
from threadline.devserver import DevServer, free_port
from threadline.http import create_app
from threadline.turnstream import TurnHandle

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not can_make_hosts(), reason="test hosts are network namespaces: run as root with `ip`"),
]

KEY = "k-hosts-91c2"
REPLY_S = 3.0
CONVERSATIONS = 6


@pytest.fixture(name="net", scope="module")
def _net() -> Iterator[Network]:
    with host_network(3) as net:
        yield net


@pytest.fixture(name="pg_url", scope="module")
def _pg_url(net: Network) -> Iterator[str]:
    with postgres_server(host=net.bridge, network=net.subnet) as server:
        yield server.create_database("hosts") + f"?schema=h_{uuid.uuid4().hex[:12]}"


@pytest_asyncio.fixture(name="temporal", scope="module")
async def _temporal(net: Network, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[str]:
    """A dev server every host reaches on the bridge: its address there."""
    # On every address: with --ip set to the bridge's, the server's own services still dial loopback.
    port = free_port()
    async with DevServer(tmp_path_factory.mktemp("temporal"), host="0.0.0.0", port=port, ui_port=None):
        yield f"{net.bridge}:{port}"


@pytest.fixture(name="hosts_settings")
def _hosts_settings(temporal: str, pg_url: str, tmp_path: Path) -> Settings:
    return dataclasses.replace(
        Settings.from_env({}),
        data=tmp_path / "no-folder",
        stores={"default": pg_url},
        address=temporal,
        task_queue=f"hosts-{uuid.uuid4()}",
    )


def start_workers(net: Network, settings: Settings, folder: Path) -> list[WorkerProcess]:
    env = {"THREADLINE_STORES": f"default={settings.stores['default']}"}
    workers = [
        WorkerProcess(settings, folder / f"{host.name}.log", delay=REPLY_S, env=env, prefix=host.prefix)
        for host in net.hosts
    ]
    for worker in workers:
        worker.wait_ready(timeout=60)
    return workers


async def functai_on(host_prefix: list[str], url: str, conversation: str, count: int) -> dict[str, Any]:
    """`tests.support.functai_proc` on a test host, through the HTTP store object."""
    process = await asyncio.create_subprocess_exec(
        *host_prefix,
        sys.executable,
        "-m",
        "tests.support.functai_proc",
        url,
        conversation,
        str(count),
        "--api-key",
        KEY,
        "--delay",
        "0.2",
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 120)
    assert 0 == process.returncode, err.decode()
    found: dict[str, Any] = json.loads(out)
    return found


async def until_running(pg: PostgresStore, conversation: str, turn: str) -> None:
    deadline = time.monotonic() + 60  # workers on a loaded machine may take a while to pick a turn up
    while time.monotonic() < deadline:
        log = Log(await asyncio.to_thread(pg.read, conversation))
        if turn in log.turns and log.turns[turn].state(time.time()) == "running":
            return
        await asyncio.sleep(0.05)
    raise TimeoutError(f"turn {turn} never ran")


def runner_of(workers: list[WorkerProcess], turn: str) -> int:
    """Which worker asked the model for `turn` first."""
    for i, worker in enumerate(workers):
        if model_requests(worker.log, turn):
            return i
    raise AssertionError(f"no worker ran turn {turn}")


def assert_whole(records: list[dict[str, Any]]) -> Log:
    """Every seq is its position; every turn ended exactly once, `done`."""
    log = Log(records)
    ended = Counter(str(r["turn"]) for r in records if r.get("kind") == "ended")
    assert list(range(1, len(records) + 1)) == [r["seq"] for r in records]
    assert dict.fromkeys(log.order, 1) == dict(ended)
    assert {"done"} == {str(log.turns[t].ended["state"]) for t in log.order}  # type: ignore[index]
    return log


async def test_a_host_dies_mid_turn_and_the_others_finish_its_turns(
    net: Network, hosts_settings: Settings, pg_url: str, tmp_path: Path
) -> None:
    """Turns spread over three hosts; one host's worker is killed and its link cut while its turns run:
    they finish on the others, each with one `ended`; a functai process on the third host continues a
    conversation over HTTP while Threadline sends to it too. Nothing lost, nothing duplicated."""
    url, schema = postgres_url(pg_url)
    tl = Threadline(None, hosts_settings)
    workers = start_workers(net, hosts_settings, tmp_path)
    try:
        with PostgresStore(url, schema=schema) as pg:
            ids = [f"h-{uuid.uuid4().hex[:12]}" for _ in range(CONVERSATIONS)]
            placed: list[TurnHandle] = [await tl.conversation("tutor", id=c).send(f"hello {c}") for c in ids]
            for c, handle in zip(ids, placed, strict=True):
                assert handle.id is not None
                await until_running(pg, c, handle.id)
            await asyncio.sleep(0.5)  # inside the model call
            runners = {h.id: runner_of(workers, str(h.id)) for h in placed}
            victim = Counter(runners.values()).most_common(1)[0][0]
            net.hosts[victim].cut()
            workers[victim].kill()
            survivor = next(i for i in range(len(workers)) if i != victim)

            async with serving(create_app(tl, keys=[KEY]), host=net.bridge) as http:
                shared = ids[0]
                functai, more = await asyncio.gather(
                    functai_on(net.hosts[survivor].prefix, str(http.base_url), shared, 3),
                    asyncio.gather(*(tl.conversation("tutor", id=shared).predict(f"more {i}") for i in range(2))),
                )
                ended = [await asyncio.wait_for(h.result(), 90) for h in placed]

            logs = {c: assert_whole(await asyncio.to_thread(pg.read, c)) for c in ids}
    finally:
        for worker in workers:
            if worker.process.poll() is None:
                worker.stop()
        await tl.close()

    moved = [h.id for h in placed if runners[h.id] == victim]
    assert moved, "the victim ran no turn"
    assert ["done"] * CONVERSATIONS == [t.state for t in ended]
    for turn in moved:
        assert any(model_requests(w.log, turn) for i, w in enumerate(workers) if i != victim)
    assert 1 + 3 + 2 == len(logs[shared].order)
    assert {*functai["turns"], *(t.id for t in more)} <= set(logs[shared].order)
