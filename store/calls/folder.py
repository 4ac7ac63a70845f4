"""The call log as a folder, laid out and written as functai 1.2.0 writes its own.

    <folder>/<YYYY-MM-DD>/<host>-<pid>-<6 hex>.jsonl   one file per writing process and UTC day
    <folder>/kept-*.jsonl                              what functai's `prune_calls` kept of old days

Each process appends only to its own files (O_APPEND, 0600; folders 0700), one `write` per batch of
whole lines, so writers never share a file and need no lock between processes. A process killed
mid-line leaves a partial last line in its own file, which every reader skips; no one appends to
that file again. A functai process sharing the store points `log_calls` at this folder.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import socket
import threading
import time
from collections.abc import Collection, Iterator, Sequence
from pathlib import Path

from store.records import Record

from .lines import Logged, first_day, is_about, parse

_DAY = re.compile(r"\d{4}-\d{2}-\d{2}")
_folders: dict[Path, CallFolder] = {}
_folders_lock = threading.Lock()


def call_folder(folder: str | os.PathLike[str]) -> CallFolder:
    """This process's one `CallFolder` for `folder`, so every write goes to the same file of the day."""
    path = Path(os.fspath(folder)).expanduser().absolute()
    with _folders_lock:
        found = _folders.get(path)
        if found is None:
            found = _folders[path] = CallFolder(path)
        return found


class CallFolder:
    """One call-log folder: this process's files in it, and every writer's lines when read.

    Use `call_folder(path)` to share one per process: each instance opens files of its own.

    Args:
        folder: The folder (`~` expanded, made absolute); created 0700 on the first write.
    """

    local = True

    def __init__(self, folder: str | os.PathLike[str]) -> None:
        self.folder = Path(os.fspath(folder)).expanduser().absolute()
        self.where = str(self.folder)
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._day = ""
        self._pid = 0

    def __repr__(self) -> str:
        return f"<CallFolder {self.folder}>"

    def write(self, lines: Sequence[bytes], *, durable: bool = False) -> None:
        """Append whole lines to this process's file of the current UTC day, in one write.

        Args:
            lines: Records as lines, each ending in a newline.
            durable: Also fsync the file (a rating is a person's work; a call record can be
                written again from its conversation).

        Raises:
            OSError: When the folder cannot be written; the file is then left for good, so a
                partial line is never continued.
        """
        data = b"".join(lines)
        if not data:
            return
        day = time.strftime("%Y-%m-%d", time.gmtime())
        with self._lock:
            pid = os.getpid()
            if self._fd is None or day != self._day or pid != self._pid:
                self._open(day, pid)
            assert self._fd is not None
            try:
                _write_all(self._fd, data)
                if durable:
                    os.fsync(self._fd)
            except OSError:
                self._close()
                raise

    def read(self, *, since: str = "") -> Logged:
        """Every call and rating in the folder (calls and ratings before `since` left out)."""
        return parse(_lines(self._files(since[:10])), since=since)

    def find(self, call: str) -> Record | None:
        """The record of `call`, reading only the days it can have been written on."""
        found = parse(_lines(self._files(first_day(call)))).calls
        return next((rec for rec in found if rec.get("id") == call), None)

    def remove(self, calls: Collection[str]) -> int:
        """Blank the lines about `calls` where they are, in every file of the folder; return how many.

        Each such line is overwritten with as many spaces (every reader, functai's too, skips a
        blank line), not cut out: a file is appended to by the process that owns it, and a copy
        put in its place would lose what that process appends meanwhile. Files stay their size.
        """
        removed = 0
        for path in self._files(""):
            try:
                removed += _blank(path, calls)
            except FileNotFoundError:
                continue  # removed by a pruning since it was listed
        return removed

    def _files(self, first: str) -> list[Path]:
        if not self.folder.is_dir():
            return []
        out = sorted(self.folder.glob("*.jsonl"))
        days = sorted(p for p in self.folder.iterdir() if p.is_dir() and _DAY.fullmatch(p.name) and p.name >= first)
        for day in days:
            out += sorted(day.glob("*.jsonl"))
        return out

    def _open(self, day: str, pid: int) -> None:
        self._close()
        folder = self.folder / day
        os.makedirs(folder, mode=0o700, exist_ok=True)
        host = re.sub(r"[^A-Za-z0-9_.-]", "_", socket.gethostname()) or "host"
        path = folder / f"{host}-{pid}-{secrets.token_hex(3)}.jsonl"
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
        self._day, self._pid = day, pid

    def _close(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _blank(path: Path, calls: Collection[str]) -> int:
    """Overwrite the complete lines of `path` about `calls` with spaces; return how many."""
    data = path.read_bytes()
    found: list[tuple[int, int]] = []
    start = 0
    while (end := data.find(b"\n", start)) >= 0:
        if end > start and is_about(data[start:end], calls):
            found.append((start, end))
        start = end + 1
    if not found:
        return 0
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)  # no O_APPEND: pwrite writes where it is told
    try:
        for first, end in found:
            os.pwrite(fd, b" " * (end - first), first)
        os.fsync(fd)
    finally:
        os.close(fd)
    return len(found)


def _lines(files: Sequence[Path]) -> Iterator[bytes]:
    for path in files:
        try:
            data = path.read_bytes()
        except OSError:
            continue  # removed by a pruning since it was listed
        yield from data.split(b"\n")


def _after_fork() -> None:
    """A forked child takes locks no thread of its parent can hold."""
    global _folders_lock
    _folders_lock = threading.Lock()
    for folder in _folders.values():
        folder._lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork)
