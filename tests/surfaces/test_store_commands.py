"""`threadline store copy|check|migrate`, run as real subprocesses against folders and a real PostgreSQL."""

from __future__ import annotations

import json
import os
from pathlib import Path

from store.backends.folder import FolderStore
from store.backends.migrate import migrations
from store.backends.writer import Writer
from store.log.turns import Answer, TurnRequest
from store.programs.program import TUTOR
from tests.surfaces.test_cli import clean_env, threadline


def odd_store(folder: Path) -> dict[str, bytes]:
    """A folder with a conversation written as Threadline writes it, and one with lines only a copy keeps
    (not JSON, not UTF-8, no `seq`); returns each file's bytes."""
    writer = Writer(FolderStore(folder), "written", TUTOR)
    for text in ("one", "two"):
        writer.send(
            TurnRequest({"message": text}), lambda _shown, inputs: Answer({"result": f"re: {inputs['message']}"})
        )
    odd = FolderStore(folder).path("odd")
    odd.write_bytes(b'{"kind":"entry","seq":1}\nnot json\n\xff\xfe{"kind":"entry"}\n{"k":"\xc3\xa9","seq":4}\n')
    os.chmod(odd, 0o600)
    return {c: FolderStore(folder).path(c).read_bytes() for c in ("written", "odd")}


async def test_a_copy_to_postgres_and_back_is_byte_identical(tmp_path: Path, pg_spec: str) -> None:
    """folder -> PostgreSQL -> folder gives back every file byte for byte, unreadable lines included."""
    before = odd_store(tmp_path / "a")
    env = clean_env(data=str(tmp_path / "data"), stores=f"main={pg_spec}")

    there = await threadline(env, "store", "copy", str(tmp_path / "a"), "main", "--json")
    back = await threadline(env, "store", "copy", "main", str(tmp_path / "b"))
    again = await threadline(env, "store", "copy", str(tmp_path / "a"), "main")

    assert 0 == there.returncode, there.stderr
    assert {"odd": 4, "written": len(FolderStore(tmp_path / "a").read("written"))} == json.loads(there.stdout)["copied"]
    assert 0 == back.returncode, back.stderr
    assert before == {c: FolderStore(tmp_path / "b").path(c).read_bytes() for c in before}
    assert (1, True) == (again.returncode, "error: store-conflict" in again.stderr)


async def test_one_conversation_is_copied_by_name(tmp_path: Path, pg_spec: str) -> None:
    """`--conversation` copies that conversation alone, and a URL never shows its password."""
    odd_store(tmp_path / "a")
    url = pg_spec.replace("postgres@", "postgres:s3cret@")
    env = clean_env(data=str(tmp_path / "data"))

    done = await threadline(env, "store", "copy", str(tmp_path / "a"), url, "--conversation", "written")

    assert 0 == done.returncode, done.stderr
    assert "s3cret" not in done.stdout
    assert "Copied 1 conversation(s)" in done.stdout


async def test_check_finds_a_misnumbered_record(tmp_path: Path, pg_spec: str) -> None:
    """A whole store checks ok (exit 0); a record whose seq is not its position is named (exit 1)."""
    odd_store(tmp_path / "a")
    env = clean_env(data=str(tmp_path / "data"), stores=f"main={pg_spec},bad={tmp_path / 'a'}")
    await threadline(env, "store", "copy", "bad", "main", "--conversation", "written")

    good = await threadline(env, "store", "check", "main", "--json")
    bad = await threadline(env, "store", "check", "bad", "--json")

    assert (0, True, 1) == (good.returncode, json.loads(good.stdout)["ok"], json.loads(good.stdout)["conversations"])
    assert 1 == bad.returncode
    assert ["record 2: not JSON", "record 3: not JSON"] == json.loads(bad.stdout)["problems"]["odd"]


async def test_migrate_brings_each_database_to_the_schema_version(tmp_path: Path, pg_spec: str) -> None:
    """`migrate` creates a new store's schema; folders have nothing to migrate."""
    env = clean_env(data=str(tmp_path / "data"), stores=f"main={pg_spec}")

    done = await threadline(env, "store", "migrate", "--json")

    assert 0 == done.returncode, done.stderr
    latest = max(migration.version for migration in migrations())
    assert {"default": None, "main": latest} == json.loads(done.stdout)["stores"]
