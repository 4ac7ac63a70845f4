"""A full disk under a folder store. A write that runs out of space part-way once left the part that
fit (102,592 bytes of a 151,618-byte `ended` record) as a line of its own for good, below which the
retry wrote the whole record: functai and Threadline skip such a line, a plain JSON-lines reader
fails on it. Now an append that fails part-way cuts the file back to its last whole record first."""

from __future__ import annotations

import errno
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import functai.stores
import pytest

from core.errors import ErrorCode, ThreadlineError
from store.backends.folder import FolderStore
from store.backends.reader import Threaded
from store.records import ended_record, lease_record, turn_record, uuid7

SIZE = 512 * 1024
"""The file system's size: a few records and the filler that leaves too little room for the big one."""
ROOM = 100 * 1024
"""What the filler leaves free: less than the big record, so its write stops part-way."""


@pytest.fixture(name="small_disk")
def _small_disk(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs of `SIZE` bytes mounted for the test (as root), unmounted after it."""
    mount = tmp_path / "small"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={SIZE}", "tmpfs", str(mount)], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        pytest.skip(f"mounting a tmpfs was refused: {done.stderr.strip() or 'not root'}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def fill(folder: Path, leave: int) -> Path:
    """A file that takes all the space on `folder`'s file system but `leave` bytes."""
    stat = os.statvfs(folder)
    filler = folder / "filler"
    filler.write_bytes(b"\0" * max(stat.f_bavail * stat.f_frsize - leave, 0))
    return filler


def whole_lines(path: Path) -> list[dict[str, object]]:
    """The records as a plain JSON-lines reader reads them: every line must parse."""
    data = path.read_bytes()
    assert data.endswith(b"\n")
    return [json.loads(line) for line in data.splitlines()]


async def test_an_append_that_runs_out_of_space_leaves_only_whole_records(small_disk: Path) -> None:
    """The big `ended` record does not fit: the append fails `store-unavailable` and the file is
    exactly what it was; once there is room, the same append lands whole, numbered next, and plain
    JSON-lines, Threadline and functai readers all read every record."""
    store, cid, tid = FolderStore(small_disk), "full", uuid7()
    store.append(cid, [turn_record(tid, parent=None, program="tutor", inputs={"message": "hi"})])
    store.append(cid, [lease_record(tid, attempt=1)])
    path = store.path(cid)
    before = path.read_bytes()
    big = ended_record(tid, attempt=1, state="done", outputs={"result": "w" * 150_000}, value="w" * 150_000)
    filler = fill(small_disk, ROOM)

    with pytest.raises(OSError, match="No space") as raw:
        store.append(cid, [big], expect=2)
    with pytest.raises(ThreadlineError) as coded:
        await Threaded(store).append(cid, [big], expect=2)
    assert before == path.read_bytes()

    filler.unlink()
    assert 3 == store.append(cid, [big], expect=2)
    records = whole_lines(path)
    assert errno.ENOSPC == raw.value.errno
    assert (ErrorCode.STORE_UNAVAILABLE, True) == (coded.value.code, coded.value.retryable)
    assert [1, 2, 3] == [r["seq"] for r in records]
    assert "ended" == records[-1]["kind"]
    assert records == FolderStore(small_disk).read(cid)
    assert 3 == len(functai.stores.FolderStore(str(small_disk)).read(cid))
