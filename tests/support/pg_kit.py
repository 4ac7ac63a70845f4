"""A real PostgreSQL 15 server of its own in a temporary folder, for the tests and the benchmarks.

    with postgres_server() as server:
        url = server.create_database("threadline")

It listens on a free 127.0.0.1 port, with its unix socket in the same folder, and is stopped and
removed at the end; `restart()` stops it and starts it again on the same data folder and port.
initdb refuses to run as root, so as root the folder is given to the `postgres`
user and the server's programs run as that user (`runuser -u postgres --`); otherwise they run as
the current user.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psycopg
from psycopg import sql

BIN = Path(os.environ.get("THREADLINE_PG_BIN", "/usr/lib/postgresql/15/bin"))
SUPERUSER = "postgres"
FAST = ["-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off"]
"""For tests: a crash of the test server loses nothing anyone needs."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _as_server_user(argv: list[str]) -> list[str]:
    if os.geteuid() == 0:
        return ["runuser", "-u", SUPERUSER, "--", *argv]
    return argv


def _run(argv: list[str], folder: Path) -> None:
    done = subprocess.run(_as_server_user(argv), capture_output=True, text=True, check=False, cwd=folder)
    if done.returncode != 0:
        raise RuntimeError(f"{Path(argv[0]).name} failed ({done.returncode}): {done.stdout}{done.stderr}")


@dataclass(slots=True)
class PostgresServer:
    """A running server: its folder (data, socket, log) and its port."""

    folder: Path
    port: int
    host: str = "127.0.0.1"
    """The address clients reach it on (127.0.0.1 unless it listens on another too)."""
    options: tuple[str, ...] = ()
    """The `postgres` options it was started with (a restart uses them again)."""

    @property
    def data(self) -> Path:
        return self.folder / "data"

    def url(self, database: str = "postgres") -> str:
        """The URL of `database` on this server, over TCP on 127.0.0.1."""
        return f"postgresql://{SUPERUSER}@{self.host}:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        """Create database `name`; return its URL."""
        with psycopg.connect(self.url().replace(self.host, "127.0.0.1"), autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        return self.url(name)

    def start(self) -> None:
        """Start the server on its data folder and port (waiting until it takes connections)."""
        log = self.folder / "server.log"
        argv = [str(BIN / "pg_ctl"), "-D", str(self.data), "-l", str(log), "-w", "-o", " ".join(self.options)]
        _run([*argv, "start"], self.folder)

    def restart(self, mode: str = "fast") -> None:
        """Stop the server (`fast`: clients are disconnected; `immediate`: as a crash) and start it again."""
        _run([str(BIN / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop"], self.folder)
        self.start()

    def stop(self) -> None:
        """Stop the server (fast shutdown: clients are disconnected) and remove its folder."""
        try:
            _run([str(BIN / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop"], self.folder)
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)


def start(*, durable: bool = False, host: str | None = None, network: str | None = None) -> PostgresServer:
    """Initialise and start a server in a new temporary folder.

    Args:
        durable: Keep PostgreSQL's default durability (fsync on every commit), as the benchmarks
            need to compare with a folder store's fsync; the tests run without it.
        host: Another address to listen on (besides 127.0.0.1), which `url()` then names: the
            address test hosts in network namespaces reach it on.
        network: The network (`10.1.2.0/24`) whose clients it trusts, besides loopback.
    """
    folder = Path(tempfile.mkdtemp(prefix="threadline-pg-"))
    if os.geteuid() == 0:
        shutil.chown(folder, SUPERUSER)
    server = PostgresServer(folder, free_port(), host or "127.0.0.1")
    addresses = ",".join(dict.fromkeys(["127.0.0.1", server.host]))
    options = ["-c", f"listen_addresses={addresses}", "-c", f"port={server.port}"]
    options += ["-c", f"unix_socket_directories={folder}", "-c", "max_connections=300"]
    server.options = tuple(options + ([] if durable else FAST))
    try:
        _run(
            [str(BIN / "initdb"), "-D", str(server.data), "-U", SUPERUSER, "-A", "trust", "-E", "UTF8", "--locale=C"],
            folder,
        )
        if network is not None:
            with (server.data / "pg_hba.conf").open("a", encoding="utf-8") as hba:
                hba.write(f"host all all {network} trust\n")
        server.start()
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return server


@contextmanager
def postgres_server(
    *, durable: bool = False, host: str | None = None, network: str | None = None
) -> Iterator[PostgresServer]:
    """A server for the block's duration (see `start`)."""
    server = start(durable=durable, host=host, network=network)
    try:
        yield server
    finally:
        server.stop()
