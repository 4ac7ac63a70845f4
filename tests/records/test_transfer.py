"""Copies between folder and PostgreSQL stores are byte for byte; copies never fill a conversation
that holds records; `check_store` reports each conversation's problems."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.errors import ThreadlineError
from store.backends.folder import FolderStore
from store.backends.locate import postgres_url
from store.backends.memory import MemoryStore
from store.backends.postgres import PostgresStore
from store.backends.transfer import check_store, copy_conversations
from store.conformance import CASES


@pytest.fixture(name="pg")
def _pg(pg_spec: str) -> Iterator[PostgresStore]:
    url, schema = postgres_url(pg_spec)
    with PostgresStore(url, schema=schema) as store:
        yield store


def files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((folder / "conversations").glob("*.jsonl"))}


def test_the_conformance_conversations_go_through_postgres_and_back_byte_for_byte(
    pg: PostgresStore, tmp_path: Path
) -> None:
    """All 14 shipped conversations, and one with a torn line and bytes that are not UTF-8, come back identical."""
    source = FolderStore(tmp_path / "a")
    for path in sorted(CASES.glob("*.json")):
        records = json.loads(path.read_text(encoding="utf-8"))["records"]
        source.append(path.stem, records)
    source.append("odd", [{"a": 1}])
    with source.path("odd").open("ab") as f:
        f.write(b'{"kind":"turn","text":"caf\xc3')  # a writer died mid-line, mid-character
    source.append("odd", [{"b": "é"}])  # terminates the torn line: it is record 2, unreadable

    there = copy_conversations(source, pg)
    back = copy_conversations(pg, FolderStore(tmp_path / "b"))

    assert 15 == len(files(tmp_path / "a"))
    assert files(tmp_path / "a") == files(tmp_path / "b")
    assert there == back
    assert {"unreadable": True} == pg.read("odd")[1]
    assert source.read("state-01-done-turns-and-a-branch") == pg.read("state-01-done-turns-and-a-branch")


def test_a_copy_never_fills_a_conversation_that_holds_records(pg: PostgresStore, tmp_path: Path) -> None:
    """One destination conversation with records: `store-conflict`, and no conversation is copied."""
    source = FolderStore(tmp_path)
    source.append("a", [{"n": 1}])
    source.append("b", [{"n": 2}])
    pg.append("b", [{"mine": True}])

    with pytest.raises(ThreadlineError) as caught:
        copy_conversations(source, pg)

    assert ("store-conflict", ["b"]) == (caught.value.code, caught.value.details["conversations"])
    assert ["b"] == pg.conversations()
    with pytest.raises(ThreadlineError):
        copy_conversations(pg, source, "b")
    assert [{"n": 2, "seq": 1}] == source.read("b")


def test_one_conversation_can_be_copied_alone(pg: PostgresStore, tmp_path: Path) -> None:
    """With `conversation`, only that one is copied."""
    pg.append("a", [{"n": 1}])
    pg.append("b", [{"n": 2}, {"n": 3}])

    assert {"b": 2} == copy_conversations(pg, FolderStore(tmp_path), "b")

    assert ["b"] == FolderStore(tmp_path).conversations()


def test_only_folder_and_postgres_stores_are_copied(tmp_path: Path) -> None:
    """A store in memory keeps no lines to copy: `store-unknown` before anything is written."""
    with pytest.raises(ThreadlineError) as caught:
        copy_conversations(MemoryStore(), FolderStore(tmp_path))  # type: ignore[arg-type]

    assert "store-unknown" == caught.value.code


def test_check_store_reports_problems_per_conversation(pg: PostgresStore, tmp_path: Path) -> None:
    """Misnumbered, unreadable and non-object lines, and a folder's torn tail, are named by conversation."""
    folder = FolderStore(tmp_path)
    folder.append("good", [{"a": 1}, {"b": 2}])
    folder.path("bad").write_bytes(b'{"seq":1}\n{"seq":5}\n[1]\n{"x":\n{"seq":5,"torn"')
    pg.append("good", [{"a": 1}])
    pg.append_lines("bad", [b'{"seq":1}', b'{"seq":true}', b"oops"])

    on_disk, in_pg = check_store(folder), check_store(pg)

    assert (2, 6, False) == (on_disk.conversations, on_disk.records, on_disk.ok)
    assert {
        "bad": [
            "15 bytes after the last newline: a torn write",
            "record 2: seq is 5, not its position 2",
            "record 3: a JSON list, not an object",
            "record 4: not JSON",
        ]
    } == on_disk.problems
    assert {"bad": ["record 2: seq is True, not its position 2", "record 3: not JSON"]} == in_pg.problems
    assert check_store(FolderStore(tmp_path / "empty")).ok
