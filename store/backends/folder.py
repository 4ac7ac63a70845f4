"""FolderStore: conversations as JSONL files, byte-compatible with functai 1.2.0 (docs/format-1.md 1).

    <folder>/conversations/<id>.jsonl   the records, one per line, `seq` = line number
    <folder>/conversations/<id>.lock    BSD flock taken for every append

Every append is one step across processes and threads: the lock, a count of the complete lines,
the `expect` check, one O_APPEND write of the whole batch, fsync; a write that fails part-way (a
full disk) is cut back to the last whole record before it raises, so the file is only ever whole
lines. Reading takes no lock and is
incremental: only bytes appended since the last read are scanned for line ends, and a trailing
fragment with no newline (a write in progress) is left for later. What this process keeps of a
file is where each line starts and ends (16 bytes a record), not its bytes: records are read
back with `pread` when asked for, a bounded piece at a time.
"""

from __future__ import annotations

import fcntl
import heapq
import os
import threading
import time
from array import array
from bisect import bisect_left
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.errors import ErrorCode, ThreadlineError
from core.logs import get_logger
from store.log.kept import paused_gc
from store.records import has_long_number, loads

from .base import check_id, check_records, encode

log = get_logger(__name__)

READ_CHUNK = 1 << 20
"""Bytes read from a file at once, when scanning it for lines and when reading records back."""
_BLANK = frozenset(b" \t\r\x0b\x0c")


@dataclass(slots=True)
class _Lines:
    """What this process knows of one file: where each complete line starts and ends, not its bytes."""

    starts: array[int] = field(default_factory=lambda: array("q"))
    ends: array[int] = field(default_factory=lambda: array("q"))
    """Where each line's newline is (its end, exclusive)."""
    offset: int = 0
    """The bytes the lines cover, newlines and blank lines included."""
    inode: int = -1
    fragment: bool = False
    """Whether bytes after the last newline were seen: a write in progress, or a torn line."""

    def __len__(self) -> int:
        return len(self.starts)

    @property
    def size(self) -> int:
        """The bytes this index takes in memory."""
        return 16 * len(self.starts) + 200

    def reset(self, inode: int) -> None:
        """Forget the file: it is read again from its first byte."""
        self.starts, self.ends, self.offset, self.inode, self.fragment = array("q"), array("q"), 0, inode, False

    def add(self, data: bytes, end: int, base: int) -> None:
        """Index the lines of `data[:end]` (which ends with a newline), found at file offset `base`."""
        starts, ends, find = self.starts, self.ends, data.find
        i = 0
        while i < end:
            j = find(b"\n", i)
            if j > i and (data[i] not in _BLANK or data[i:j].strip()):
                starts.append(base + i)
                ends.append(base + j)
            i = j + 1
        self.offset = base + end


def _parse(line: bytes, *, long_number: bool | None = None) -> dict[str, Any]:
    try:
        value = loads(line, long_number=long_number)
    except (ValueError, RecursionError):  # nested too deep to decode is as unreadable as torn
        return {"unreadable": True}
    return value if isinstance(value, dict) else {"unreadable": True}


def _parse_piece(data: bytes, starts: array[int], ends: array[int], first: int, upto: int) -> list[dict[str, Any]]:
    """Parse lines `first` to `upto` of `data`, the bytes from the start of the first to the end of the last."""
    long_number = None if has_long_number(data) else False  # one scan of the piece, not one a line
    if data.count(b"\n") == upto - first - 1:  # no blank line between them: split at once
        lines = data.split(b"\n")
    else:
        base = starts[first]
        lines = [data[starts[k] - base : ends[k] - base] for k in range(first, upto)]
    return [_parse(line, long_number=long_number) for line in lines]


def conversations_folder(folder: str | os.PathLike[str]) -> Path:
    """Where the folder store at `folder` keeps its conversations' files (`~` expanded, made absolute)."""
    return Path(os.fspath(folder)).expanduser().absolute() / "conversations"


class FolderStore:
    """A record log in a folder that functai processes may share at the same time.

    Args:
        folder: The store's folder (`~` expanded, made absolute); `conversations/` is created 0700.
        cache: How many conversations' line indexes to keep between reads (least recently used go).
        cache_bytes: The most bytes of line indexes kept in all (16 a record); past it, least
            recently used go first.
    """

    durability = "disk"
    persistent = True

    def __init__(self, folder: str | os.PathLike[str], *, cache: int = 256, cache_bytes: int = 256 << 20) -> None:
        self.folder = Path(os.fspath(folder)).expanduser().absolute()
        self._dir = conversations_folder(self.folder)
        os.makedirs(self._dir, mode=0o700, exist_ok=True)
        self._cache: OrderedDict[str, _Lines] = OrderedDict()
        self._cache_size = cache
        self._cache_bytes = cache_bytes
        self._guard = threading.Lock()
        self._mutexes: dict[str, threading.Lock] = {}

    def __repr__(self) -> str:
        return f"<FolderStore {self.folder}>"

    def path(self, conversation: str) -> Path:
        """The JSONL file of `conversation`."""
        return self._dir / f"{check_id(conversation)}.jsonl"

    def append(self, conversation: str, records: Sequence[dict[str, Any]], *, expect: int | None = None) -> int:
        """Append `records` all or nothing, numbered from the current line count; return the new count.

        Raises:
            ThreadlineError: `conversation-id`, `record-invalid`, or `store-conflict` when `expect`
                is given and the file does not hold exactly that many records.
        """
        check_id(conversation)
        batch = check_records(records)
        path = self._dir / f"{conversation}.jsonl"
        with self._locked(conversation):
            # One descriptor for the whole step: read what is new, repair, check, write, fsync.
            fd = _open(path, os.O_RDWR | os.O_APPEND)
            try:
                held = self._sync(conversation, fd, repair=True)
                n = len(held)
                if expect is not None and expect != n:
                    raise ThreadlineError(
                        ErrorCode.STORE_CONFLICT,
                        f"conversation {conversation} holds {n} records, not {expect}: read again and retry",
                        expected=expect,
                        found=n,
                    )
                if not batch:
                    return n
                data = b"".join(encode(record, n + i + 1) for i, record in enumerate(batch))
                if fd is None:
                    fd = _open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT)
                    assert fd is not None
                _append_whole(fd, data)
                # Under the lock the file ended at held.offset, so these lines are exactly what was added.
                held.add(data, len(data), held.offset)
                return n + len(batch)
            finally:
                if fd is not None:
                    os.close(fd)

    def read(self, conversation: str, after: int = 0, *, limit: int | None = None) -> list[dict[str, Any]]:
        """Return the records after position `after` (fresh objects), at most `limit` of them, without
        taking the lock."""
        records = self._read(conversation, after, limit, wait=True)
        assert records is not None
        return records

    def read_nowait(
        self, conversation: str, after: int = 0, *, limit: int | None = None
    ) -> list[dict[str, Any]] | None:
        """`read`, or None at once while this process appends to the conversation (its mutex is held
        through the append's fsync): a read an event loop makes itself, never waiting on the disk's
        flush."""
        return self._read(conversation, after, limit, wait=False)

    def _read(self, conversation: str, after: int, limit: int | None, *, wait: bool) -> list[dict[str, Any]] | None:
        check_id(conversation)
        fd = _open(self._dir / f"{conversation}.jsonl", os.O_RDONLY)
        try:
            mutex = self._mutex(conversation)
            if not mutex.acquire(blocking=wait):
                return None
            try:
                held = self._sync(conversation, fd, repair=False)
                first = min(max(int(after or 0), 0), len(held))
                last = len(held) if limit is None else min(len(held), first + max(int(limit), 0))
                starts, ends = held.starts[first:last], held.ends[first:last]
            finally:
                mutex.release()
            # Parsed outside the mutex: the descriptor keeps reading this very file, even if replaced.
            return _records(fd, starts, ends) if fd is not None else []
        finally:
            if fd is not None:
                os.close(fd)

    def count(self, conversation: str) -> int:
        """How many records `conversation` holds now (complete lines, unreadable ones included)."""
        check_id(conversation)
        with self._mutex(conversation):
            return len(self._load(conversation))

    def wait(self, conversation: str, after: int, timeout: float) -> bool:
        """Block until more than `after` records are held or `timeout` passes (20 ms to 200 ms polls)."""
        deadline = time.monotonic() + timeout
        pause = 0.02
        while True:
            if self.count(conversation) > after:
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(pause, left))
            pause = min(pause * 2, 0.2)

    def conversations(self) -> list[str]:
        """Return the ids of the conversations in the folder, sorted."""
        return sorted(p.stem for p in self._dir.glob("*.jsonl"))

    def recent(self, limit: int) -> list[str]:
        """The ids of the `limit` conversations appended to last (by their files' modification
        times, so appends by any process count), the latest first."""
        found: list[tuple[int, str]] = []
        with os.scandir(self._dir) as entries:
            for entry in entries:
                if entry.name.endswith(".jsonl"):
                    try:
                        found.append((entry.stat().st_mtime_ns, entry.name[: -len(".jsonl")]))
                    except FileNotFoundError:
                        continue  # purged while listed
        return [name for _, name in heapq.nlargest(max(limit, 0), found)]

    def purge(self, conversation: str) -> int:
        """Remove `conversation`'s file under its lock; return how many records it held.

        The id can be used again: the next append starts a new file at record 1, and this process's
        index of the old one is dropped. The empty `<id>.lock` stays, holding nothing: removing it
        would let a writer already waiting on the old lock and one taking a new lock append at once.
        """
        check_id(conversation)
        with self._locked(conversation):
            held = self._load(conversation)
            n = len(held)
            try:
                os.unlink(self._dir / f"{conversation}.jsonl")
            except FileNotFoundError:
                n = 0
            with self._guard:
                self._cache.pop(conversation, None)
            return n

    # ----- files

    def _mutex(self, conversation: str) -> threading.Lock:
        with self._guard:
            return self._mutexes.setdefault(conversation, threading.Lock())

    @contextmanager
    def _locked(self, conversation: str) -> Iterator[None]:
        """This process's mutex for the file, then BSD flock on `<id>.lock`, as functai takes it."""
        with self._mutex(conversation):
            flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC
            fd = os.open(self._dir / f"{conversation}.lock", flags, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                yield
            finally:
                os.close(fd)  # closing releases the flock

    def _held(self, conversation: str) -> _Lines:
        with self._guard:
            held = self._cache.get(conversation)
            if held is None:
                held = self._cache[conversation] = _Lines()
                kept = sum(lines.size for lines in self._cache.values())
                while len(self._cache) > 1 and (len(self._cache) > self._cache_size or kept > self._cache_bytes):
                    kept -= self._cache.popitem(last=False)[1].size
            else:
                self._cache.move_to_end(conversation)
            return held

    def _load(self, conversation: str) -> _Lines:
        """Bring this process's view of the file up to date, reading only new bytes (no lock)."""
        fd = _open(self._dir / f"{conversation}.jsonl", os.O_RDONLY)
        try:
            return self._sync(conversation, fd, repair=False)
        finally:
            if fd is not None:
                os.close(fd)

    def _sync(self, conversation: str, fd: int | None, *, repair: bool) -> _Lines:
        """Index the complete lines appended since the last read of `fd`'s file.

        With `repair` (only under the lock, where no live writer can be mid-line), a fragment with
        no newline is a torn line from a writer that died: it is terminated, so it becomes one
        unreadable record, as functai counts it, instead of swallowing the next record written.
        """
        held = self._held(conversation)
        if fd is None:
            held.reset(-1)
            return held
        stat = os.fstat(fd)
        if stat.st_ino != held.inode or stat.st_size < held.offset:
            held.reset(stat.st_ino)  # replaced or shrunk: read it all
        fragment = _scan(fd, held)
        held.fragment = bool(fragment)
        if repair and fragment:
            log.warning(
                "store.torn_line_repaired",
                conversation=conversation,
                position=len(held) + 1,
                fragment_bytes=len(fragment),
            )
            _write_all(fd, b"\n")
            held.add(fragment + b"\n", len(fragment) + 1, held.offset)
            held.fragment = False
        return held


def _scan(fd: int, held: _Lines) -> bytes:
    """Index the complete lines after `held.offset`, a chunk at a time; return the bytes after the last newline."""
    size = READ_CHUNK
    while True:
        data = os.pread(fd, size, held.offset)
        end = data.rfind(b"\n") + 1
        if end:
            held.add(data, end, held.offset)
        if len(data) < size:
            return data[end:]  # the end of the file
        size = READ_CHUNK if end else size * 2  # a line longer than a chunk: read more at once


def _records(fd: int, starts: array[int], ends: array[int]) -> list[dict[str, Any]]:
    """Parse the lines at `starts`/`ends`, reading about a chunk of bytes at a time."""
    out: list[dict[str, Any]] = []
    first, last = 0, len(starts)
    while first < last:
        base = starts[first]
        upto = max(bisect_left(ends, base + READ_CHUNK, first + 1, last), first + 1)
        data = _read_range(fd, base, ends[upto - 1])
        with paused_gc():
            out += _parse_piece(data, starts, ends, first, upto)
        first = upto
    return out


def _open(path: Path, flags: int) -> int | None:
    """`os.open` with close-on-exec and mode 0600, or None when the file does not exist (and no O_CREAT)."""
    try:
        return os.open(path, flags | os.O_CLOEXEC, 0o600)
    except FileNotFoundError:
        return None


def _write_all(fd: int, data: bytes) -> None:
    """One write of `data` to an O_APPEND descriptor (repeated only on a short write), then fsync."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    os.fsync(fd)


def _append_whole(fd: int, data: bytes) -> None:
    """`_write_all`, all or nothing: when the write or its fsync fails (no space left, an I/O error),
    the file is cut back to its length before the write, its last whole record, and then the error
    is raised. Without it, the part that fit stayed as a line of its own once the next append
    terminated it, and plain JSON-lines readers fail on that line."""
    size = os.fstat(fd).st_size  # under the lock: nobody else appends meanwhile
    try:
        _write_all(fd, data)
    except OSError:
        try:
            os.ftruncate(fd, size)
            os.fsync(fd)
        except OSError as err:  # the next append terminates what is left, as a torn line
            log.error("store.truncate_failed", size=size, reason=err.strerror)
        raise


def _read_range(fd: int, start: int, end: int) -> bytes:
    """Bytes `start` to `end` of the file (fewer only if it shrank meanwhile)."""
    chunks: list[bytes] = []
    while start < end:
        chunk = os.pread(fd, end - start, start)
        if not chunk:
            break
        chunks.append(chunk)
        start += len(chunk)
    return b"".join(chunks)
