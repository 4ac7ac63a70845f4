"""The store contract on every store (folder, PostgreSQL, memory), then what only a folder has:
layout, modes, partial and torn lines, its cache."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from core.errors import ThreadlineError
from store.backends.base import Store, read_batches
from store.backends.folder import READ_CHUNK, FolderStore
from store.backends.locate import postgres_url
from store.backends.memory import MemoryStore
from store.backends.postgres import PostgresStore
from store.backends.transfer import read_lines

Opener = Callable[[], FolderStore | PostgresStore]


def _openers(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Opener]:
    """Opens store objects on one persistent store (as separate processes would), closing them after."""
    if kind == "folder":
        yield lambda: FolderStore(tmp_path)
        return
    url, schema = postgres_url(request.getfixturevalue("pg_spec"))
    opened: list[PostgresStore] = []

    def open_postgres() -> PostgresStore:
        opened.append(PostgresStore(url, schema=schema))
        return opened[-1]

    yield open_postgres
    for store in opened:
        store.close()


@pytest.fixture(name="opener", params=["folder", "postgres"])
def _opener(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Opener]:
    yield from _openers(request.param, request, tmp_path)


@pytest.fixture(params=["folder", "postgres", "memory"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == "memory":
        yield MemoryStore()
        return
    for opener in _openers(request.param, request, tmp_path):
        yield opener()


def lines(store: FolderStore, conversation: str) -> list[str]:
    return store.path(conversation).read_text(encoding="utf-8").splitlines()


def test_append_numbers_records_by_position(store: Store) -> None:
    """Each record gets `seq` = its position, and append returns the new count."""
    assert store.append("c1", [{"a": 1}, {"b": 2}]) == 2
    assert store.append("c1", [{"c": 3}], expect=2) == 3

    assert [{"a": 1, "seq": 1}, {"b": 2, "seq": 2}, {"c": 3, "seq": 3}] == store.read("c1")
    assert [{"c": 3, "seq": 3}] == store.read("c1", after=2)


def test_existing_seq_keeps_its_place(store: Store) -> None:
    """A record that carries a `seq` key is renumbered in place; otherwise `seq` comes last."""
    store.append("c1", [{"seq": 99, "a": 1}, {"a": 2}])

    assert [["seq", "a"], ["a", "seq"]] == [list(r) for r in store.read("c1")]


def test_expect_that_does_not_match_writes_nothing(store: Store) -> None:
    """A conditional append on a stale count is refused with `store-conflict`."""
    store.append("c1", [{"a": 1}])

    with pytest.raises(ThreadlineError) as caught:
        store.append("c1", [{"b": 2}], expect=0)

    assert "store-conflict" == caught.value.code
    assert 1 == len(store.read("c1"))


@pytest.mark.parametrize("bad", ["../etc", "a/b", "", ".hidden", "é", "x" * 201, "a b", 5])
def test_invalid_ids_are_refused(store: Store, bad: object) -> None:
    """Conversation ids are file names, never paths."""
    with pytest.raises(ThreadlineError) as caught:
        store.append(bad, [{"a": 1}])  # type: ignore[arg-type]

    assert "conversation-id" == caught.value.code
    assert [] == store.conversations()


@pytest.mark.parametrize("bad", [[["not", "an", "object"]], [{"a": 1}, "text"], [{"x": float("nan")}]])
def test_records_that_are_not_json_objects_write_nothing(store: Store, bad: list[object]) -> None:
    """A batch with a non-object (or non-JSON) record is refused whole, with `record-invalid`."""
    store.append("c1", [{"a": 1}])

    with pytest.raises(ThreadlineError) as caught:
        store.append("c1", bad)  # type: ignore[arg-type]

    assert "record-invalid" == caught.value.code
    assert 1 == len(store.read("c1"))


def test_wait_returns_when_records_arrive(store: Store) -> None:
    """`wait` answers at once when the count is already past `after`, else after the timeout."""
    store.append("c1", [{"a": 1}])

    assert store.wait("c1", 0, timeout=5)
    assert not store.wait("c1", 1, timeout=0.05)


def test_conversations_are_listed_sorted(store: Store) -> None:
    """Only conversations that hold records are listed, by id."""
    store.append("b", [{}])
    store.append("a", [{}])

    assert ["a", "b"] == store.conversations()


def test_count_and_reads_past_either_end(opener: Opener) -> None:
    """`count` is the number of records; `after` past the end reads nothing, below 0 reads all."""
    store = opener()
    assert 0 == store.count("c1")
    store.append("c1", [{"a": 1}, {"b": 2}])

    assert 2 == store.count("c1")
    assert [] == store.read("c1", after=2)
    assert 2 == len(store.read("c1", after=-3))
    assert [] == store.read("nothing-here")


def test_an_empty_batch_checks_expect_and_writes_nothing(opener: Opener) -> None:
    """An empty append returns the count, refuses a stale `expect`, and creates no conversation."""
    store = opener()

    assert 0 == store.append("c1", [], expect=0)
    with pytest.raises(ThreadlineError) as caught:
        store.append("c1", [], expect=3)

    assert "store-conflict" == caught.value.code
    assert [] == store.conversations()


def test_folder_layout_and_modes(tmp_path: Path) -> None:
    """`conversations/` is 0700; the log and its lock are 0600, as functai creates them."""
    os.umask(0o022)
    store = FolderStore(tmp_path / "s")
    store.append("c1", [{"a": 1}])

    folder = tmp_path / "s" / "conversations"
    assert 0o700 == stat.S_IMODE(folder.stat().st_mode)
    assert 0o600 == stat.S_IMODE((folder / "c1.jsonl").stat().st_mode)
    assert 0o600 == stat.S_IMODE((folder / "c1.lock").stat().st_mode)


def test_lines_are_functai_bytes(opener: Opener) -> None:
    """Compact JSON, insertion order, raw UTF-8, control characters escaped: the line a folder holds."""
    store = opener()
    store.append("c1", [{"kind": "x", "text": "café\n\u0001/", "n": 0.5}])

    expected = '{"kind":"x","text":"café\\n\\u0001/","n":0.5,"seq":1}'
    assert [expected.encode()] == read_lines(store, "c1")


def test_partial_last_line_is_left_for_later(tmp_path: Path) -> None:
    """A fragment with no newline is not a record yet; once completed, it is read."""
    store = FolderStore(tmp_path)
    store.append("c1", [{"a": 1}])
    with store.path("c1").open("ab") as f:
        f.write(b'{"b":2,')

    assert 1 == len(store.read("c1"))

    with store.path("c1").open("ab") as f:
        f.write(b'"seq":2}\n')

    assert [{"a": 1, "seq": 1}, {"b": 2, "seq": 2}] == store.read("c1")


def test_torn_line_becomes_one_unreadable_record_before_appending(tmp_path: Path) -> None:
    """A writer that died mid-line never swallows the next record: the fragment is terminated."""
    store = FolderStore(tmp_path)
    store.append("c1", [{"a": 1}])
    with store.path("c1").open("ab") as f:
        f.write(b'{"kind":"turn","tu')

    assert 3 == store.append("c1", [{"b": 2}], expect=2)

    assert [{"a": 1, "seq": 1}, {"unreadable": True}, {"b": 2, "seq": 3}] == store.read("c1")
    assert {"b": 2, "seq": 3} == json.loads(lines(store, "c1")[2])


def test_another_process_reading_sees_the_same_records(opener: Opener) -> None:
    """A second store object (another process's view) reads what the first wrote, incrementally."""
    first, second = opener(), opener()
    first.append("c1", [{"a": 1}])
    assert 1 == len(second.read("c1"))

    first.append("c1", [{"b": 2}], expect=1)

    assert [{"b": 2, "seq": 2}] == second.read("c1", after=1)
    assert 3 == second.append("c1", [{"c": 3}], expect=2)


def test_a_replaced_file_is_read_again(tmp_path: Path) -> None:
    """A file that shrank or was replaced is read from the start, not from the old offset."""
    store = FolderStore(tmp_path)
    store.append("c1", [{"a": 1}, {"b": 2}])
    store.read("c1")
    store.path("c1").write_text('{"z":1,"seq":1}\n')

    assert [{"z": 1, "seq": 1}] == store.read("c1")


def test_a_small_cache_still_reads_and_appends_correctly(tmp_path: Path) -> None:
    """Conversations pushed out of the cache are read again from disk, and numbering holds."""
    store = FolderStore(tmp_path, cache=1, cache_bytes=1)
    for name in ("a", "b", "a", "c", "b"):
        store.append(name, [{"name": name}], expect=len(store.read(name)))

    assert [1, 2] == [r["seq"] for r in store.read("a")]
    assert [1, 2] == [r["seq"] for r in store.read("b")]
    assert [{"name": "c", "seq": 1}] == store.read("c")


def test_reads_take_at_most_limit_records_from_any_position(store: Store) -> None:
    """`limit` bounds a read; `read_batches` walks a conversation in such reads, missing nothing."""
    store.append("c1", [{"k": k} for k in range(10)])

    assert [{"k": 3, "seq": 4}, {"k": 4, "seq": 5}] == store.read("c1", after=3, limit=2)
    assert [] == store.read("c1", after=3, limit=0)
    assert [{"k": 9, "seq": 10}] == store.read("c1", after=9, limit=5)
    assert [] == store.read("c1", after=12, limit=5)
    assert list(range(10)) == [r["k"] for batch in read_batches(store, "c1") for r in batch]
    assert [3] == [len(batch) for batch in read_batches(store, "c1", after=7)]


def test_blank_lines_and_lines_longer_than_a_read_chunk_are_read_as_written(tmp_path: Path) -> None:
    """Blank lines are not records; a record of several MiB is read whole; numbering holds."""
    store = FolderStore(tmp_path)
    big = "x" * (3 * READ_CHUNK)
    store.append("c1", [{"a": 1}])
    with store.path("c1").open("ab") as f:
        f.write(b"\n   \n")
    store.append("c1", [{"big": big}, {"b": 2}], expect=1)

    assert [{"a": 1, "seq": 1}, {"big": big, "seq": 2}, {"b": 2, "seq": 3}] == store.read("c1")
    assert [{"b": 2, "seq": 3}] == FolderStore(tmp_path).read("c1", after=2)
    assert 3 == FolderStore(tmp_path).count("c1")


def test_a_store_keeps_where_lines_are_not_their_bytes(tmp_path: Path) -> None:
    """Records are read back from the file: a record changed in place on disk (same length) reads
    as it now is, which a cache of line bytes would hide."""
    store = FolderStore(tmp_path)
    store.append("c1", [{"name": "before"}, {"b": 2}])
    assert "before" == store.read("c1")[0]["name"]
    text = store.path("c1").read_bytes()
    store.path("c1").write_bytes(text.replace(b"before", b"after!"))

    assert "after!" == store.read("c1")[0]["name"]
