"""Store identities: made once, kept in the store, agreed on by racing creators, never overwritten."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from core.errors import ThreadlineError
from store.backends.folder import FolderStore
from store.backends.identity import folder_identity, postgres_identity, store_identity
from store.backends.locate import open_store, postgres_url
from store.backends.memory import MemoryStore
from store.backends.postgres import PostgresStore

ROOT = Path(__file__).resolve().parents[2]


def race(spec: str, processes: int = 4) -> list[str]:
    """The ids that `processes` processes, started together, get for the store at `spec`."""
    started = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.support.store_procs", "identity", spec],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(processes)
    ]
    return [process.communicate(timeout=60)[0].strip() for process in started]


def test_a_folder_identity_is_made_once_and_kept(tmp_path: Path) -> None:
    """The first call creates `store.json` (0600, a UUID); later calls read the same id and leave the file as it was."""
    os.umask(0o022)
    first = folder_identity(tmp_path / "s")
    path = tmp_path / "s" / "store.json"
    written = path.read_bytes()

    again = folder_identity(tmp_path / "s")

    assert first == again == str(uuid.UUID(first))
    assert 0o600 == stat.S_IMODE(path.stat().st_mode)
    assert written == path.read_bytes()
    assert ["store.json"] == [p.name for p in (tmp_path / "s").iterdir()]


def test_processes_racing_to_create_a_folder_identity_agree(tmp_path: Path) -> None:
    """Four processes creating the identity of a new folder at once all get the one id that was kept."""
    ids = race(str(tmp_path / "new"))

    assert 1 == len(set(ids))
    assert ids[0] == folder_identity(tmp_path / "new")


def test_a_damaged_identity_file_is_refused_not_replaced(tmp_path: Path) -> None:
    """A `store.json` without an id is `store-invalid`, and stays as it was."""
    (tmp_path / "store.json").write_text('{"id": "not a uuid"}')

    with pytest.raises(ThreadlineError) as caught:
        folder_identity(tmp_path)

    assert "store-invalid" == caught.value.code
    assert '{"id": "not a uuid"}' == (tmp_path / "store.json").read_text()


def test_a_postgres_identity_is_kept_in_its_schema(pg_spec: str) -> None:
    """Every store object on one schema reads one id; another schema of the same database is another store."""
    url, schema = postgres_url(pg_spec)
    with PostgresStore(url, schema=schema) as first, PostgresStore(url, schema=schema) as second:
        kept = first.identity()

        assert kept == second.identity() == postgres_identity(url, schema=schema) == store_identity(first)
    assert kept != postgres_identity(url, schema=f"{schema}_other")


def test_processes_racing_to_create_a_postgres_identity_agree(pg_spec: str) -> None:
    """Four processes opening a new schema at once (each migrating it) all get one id."""
    ids = race(pg_spec)

    assert 1 == len(set(ids))
    store = open_store(pg_spec)
    assert isinstance(store, PostgresStore)
    with store:
        assert ids[0] == store.identity()


def test_store_identity_names_the_kinds_that_keep_one(tmp_path: Path) -> None:
    """A folder store's identity is its folder's; a store in memory has its own for its lifetime; an
    object that keeps none is refused (`store-unknown`)."""
    assert folder_identity(tmp_path) == store_identity(FolderStore(tmp_path))
    memory = MemoryStore()
    assert store_identity(memory) == store_identity(memory) != store_identity(MemoryStore())

    with pytest.raises(ThreadlineError) as caught:
        store_identity(object())

    assert "store-unknown" == caught.value.code
