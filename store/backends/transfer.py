"""Copy conversations between stores byte for byte, and check a store's records.

A copy moves each conversation's stored lines exactly, unreadable ones included, so a copy folder
-> PostgreSQL -> folder gives back the same files. It only fills empty conversations: copying onto
one that already holds records would renumber or interleave two histories, so it is refused
before anything is written. Each conversation is written in one step (one transaction, or one
write under the folder's flock), so a copy that stops half-way leaves whole conversations only.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from core.errors import ErrorCode, ThreadlineError

from .base import check_id
from .folder import FolderStore
from .postgres import PostgresStore

LineStore = FolderStore | PostgresStore


def read_lines(store: LineStore, conversation: str) -> list[bytes]:
    """The complete stored lines of `conversation`, without newlines (a folder's torn tail is not one)."""
    return _checked_lines(_supported(store), conversation)[0]


def copy_conversations(src: LineStore, dst: LineStore, conversation: str | None = None) -> dict[str, int]:
    """Copy `conversation` (or every conversation) of `src` into `dst`, byte for byte.

    Returns:
        The number of records copied, per conversation id.

    Raises:
        ThreadlineError: `store-conflict` when a destination conversation already holds records
            (nothing is copied then), `store-unknown` for a store that is neither kind.
    """
    for store in (src, dst):
        _supported(store)
    ids = [check_id(conversation)] if conversation is not None else src.conversations()
    taken = {c: n for c in ids if (n := dst.count(c))}
    if taken:
        first, held = next(iter(taken.items()))
        raise ThreadlineError(
            ErrorCode.STORE_CONFLICT,
            f"conversation {first} already holds {held} records in the destination ({len(taken)} such): "
            "copy into an empty store, or leave those conversations out",
            conversations=sorted(taken)[:20],
        )
    copied = {}
    for c in ids:
        lines = read_lines(src, c)
        if isinstance(dst, PostgresStore):
            dst.append_lines(c, lines, expect=0)
        else:
            _write_folder(dst, c, lines)
        copied[c] = len(lines)
    return copied


@dataclass(slots=True)
class StoreReport:
    """What `check_store` found: counts, and the problems of each conversation that has any."""

    conversations: int = 0
    records: int = 0
    problems: dict[str, list[str]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """Whether no conversation has a problem."""
        return not self.problems


def check_store(store: LineStore) -> StoreReport:
    """Check that every record of every conversation is a JSON object whose `seq` is its position."""
    report = StoreReport()
    for c in _supported(store).conversations():
        lines, tail = _checked_lines(store, c)
        found = [f"{tail} bytes after the last newline: a torn write"] if tail else []
        for position, line in enumerate(lines, 1):
            problem = _line_problem(line, position)
            if problem:
                found.append(f"record {position}: {problem}")
        if isinstance(store, PostgresStore) and store.count(c) != len(lines):
            found.append(f"the conversation counts {store.count(c)} records but holds {len(lines)}")
        report.conversations += 1
        report.records += len(lines)
        if found:
            report.problems[c] = found
    return report


def _checked_lines(store: LineStore, conversation: str) -> tuple[list[bytes], int]:
    if isinstance(store, PostgresStore):
        return store.read_lines(conversation), 0
    return _split(_folder_bytes(store, conversation))


def _line_problem(line: bytes, position: int) -> str | None:
    try:
        record: Any = json.loads(line)
    except ValueError:
        return "not JSON"
    if not isinstance(record, dict):
        return f"a JSON {type(record).__name__}, not an object"
    if record.get("seq") != position or isinstance(record.get("seq"), bool):
        return f"seq is {record.get('seq')!r}, not its position {position}"
    return None


def _supported(store: object) -> LineStore:
    if isinstance(store, FolderStore | PostgresStore):
        return store
    raise ThreadlineError(
        ErrorCode.STORE_UNKNOWN,
        f"a {type(store).__name__} cannot be copied or checked: use a folder or PostgreSQL store",
    )


def _folder_bytes(store: LineStore, conversation: str) -> bytes:
    assert isinstance(store, FolderStore)
    try:
        return store.path(conversation).read_bytes()
    except FileNotFoundError:
        return b""


def _split(data: bytes) -> tuple[list[bytes], int]:
    """A file's records as FolderStore counts them (complete, non-blank lines), and its torn tail's size."""
    end = data.rfind(b"\n") + 1
    return [line for line in data[:end].split(b"\n") if line.strip()], len(data) - end


def _write_folder(store: LineStore, conversation: str, lines: list[bytes]) -> None:
    """Write `lines` as the whole file of `conversation`, under its flock, refusing a file with data."""
    assert isinstance(store, FolderStore)
    if not lines:
        return  # a conversation with no records has no file, as FolderStore leaves it
    path = store.path(conversation)
    with _flock(path.with_suffix(".lock")):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
        try:
            size = os.fstat(fd).st_size
            if size:
                raise ThreadlineError(
                    ErrorCode.STORE_CONFLICT,
                    f"conversation {conversation} already holds {size} bytes in the destination (a torn write, or "
                    "a writer during the copy): copy it into an empty store",
                )
            data = memoryview(b"".join(line + b"\n" for line in lines))
            while data:
                data = data[os.write(fd, data) :]
            os.fsync(fd)
        finally:
            os.close(fd)


@contextmanager
def _flock(path: os.PathLike[str]) -> Iterator[None]:
    """The BSD flock every FolderStore and functai writer takes on `<id>.lock` (docs/format-1.md 1.4)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
