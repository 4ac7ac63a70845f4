"""A store outage a test can switch on and off: the record log's folder remounted read-only (as
root, the real fault), or else a store whose appends fail as a read-only disk's would.

The bind mount covers `<store>/conversations` (the record log), not the whole store folder: a
running turn keeps its text stream (`<store>/streams/<turn>.jsonl`) open for writing, and Linux
refuses to remount a folder read-only while a file in it is open for writing (EBUSY).
"""

from __future__ import annotations

import errno
import os
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from store.backends.base import Store
from store.backends.folder import FolderStore

BUSY_PATIENCE_S = 10.0
"""How long to retry a (re)mount that finds the folder busy (an append in progress)."""


class Outage(Protocol):
    """A fault on the store: on with `begin`, off with `end` (safe to repeat)."""

    stores: dict[str, Store] | None
    """What to give `build_worker(stores=...)`: None when the fault is in the file system itself."""

    def begin(self) -> None:
        """Make the store refuse writes."""
        ...

    def end(self) -> None:
        """Give the store back."""
        ...


class ReadOnlyMount:
    """`mount --bind F F`, then `mount -o remount,ro,bind F`: writes fail EROFS until `umount F`."""

    kind = "read-only bind mount"

    def __init__(self, folder: Path) -> None:
        self.folder = folder / "conversations"
        self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.stores: dict[str, Store] | None = None
        self.mounted = False

    def begin(self) -> None:
        """Mount the log's folder over itself, read-only."""
        _mount(["--bind", str(self.folder), str(self.folder)])
        self.mounted = True
        _mount(["-o", "remount,ro,bind", str(self.folder)])

    def end(self) -> None:
        """Unmount it: the folder underneath was writable all along."""
        if self.mounted:
            _mount([str(self.folder)], command="umount")
            self.mounted = False


class ReadOnlyStore(FolderStore):
    """A folder store whose appends fail with EROFS while `down` (for tests that cannot mount)."""

    def __init__(self, folder: Path) -> None:
        super().__init__(folder)
        self.down = False

    def append(self, conversation: str, records: Sequence[dict[str, Any]], *, expect: int | None = None) -> int:
        """Fail as a read-only file system would, or append."""
        if self.down:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS))
        return super().append(conversation, records, expect=expect)


class FailingWrites:
    """The outage as a store wrapper: passed to the worker, its appends fail while it is on."""

    kind = "store wrapper failing writes with EROFS"

    def __init__(self, folder: Path) -> None:
        self.store = ReadOnlyStore(folder)
        self.stores: dict[str, Store] | None = {"default": self.store}

    def begin(self) -> None:
        """Fail every append from now on."""
        self.store.down = True

    def end(self) -> None:
        """Append again."""
        self.store.down = False


def can_mount() -> bool:
    """Whether this process may bind-mount (root with the capability to, as CI runs)."""
    if os.geteuid() != 0:
        return False
    probe = Path(f"/tmp/threadline-mount-probe-{os.getpid()}")
    probe.mkdir(exist_ok=True)
    try:
        found = subprocess.run(["mount", "--bind", str(probe), str(probe)], capture_output=True, check=False)
        if found.returncode == 0:
            subprocess.run(["umount", str(probe)], capture_output=True, check=True)
        return found.returncode == 0
    except OSError:
        return False
    finally:
        probe.rmdir()


def outage_of(folder: Path) -> Outage:
    """The realest outage this process can cause on the store at `folder`."""
    return ReadOnlyMount(folder) if can_mount() else FailingWrites(folder)


def _mount(args: list[str], *, command: str = "mount") -> None:
    deadline = time.monotonic() + BUSY_PATIENCE_S
    while True:
        done = subprocess.run([command, *args], capture_output=True, text=True, check=False)
        if done.returncode == 0:
            return
        if "busy" not in done.stderr or time.monotonic() > deadline:
            raise RuntimeError(f"{command} {' '.join(args)} failed: {done.stderr.strip()}")
        time.sleep(0.05)
