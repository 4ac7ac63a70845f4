"""A store outage a test can switch on and off: the record log's folder remounted read-only or made
immutable (as root, the real faults), or else a store whose appends fail as such a disk's would.

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


class Immutable:
    """`chattr +i` on the log's folder and its logs: creating or appending fails EPERM, even for root,
    until `chattr -i` (a store unwritable by permission, as a read-only folder is for a non-root worker)."""

    kind = "immutable log folder (chattr +i)"

    def __init__(self, folder: Path) -> None:
        self.folder = folder / "conversations"
        self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.stores: dict[str, Store] | None = None
        self.made: list[Path] = []

    def begin(self) -> None:
        """Make the folder and every log in it immutable."""
        self.made = [self.folder, *sorted(self.folder.glob("*.jsonl"))]
        subprocess.run(["chattr", "+i", *map(str, self.made)], capture_output=True, check=True)

    def end(self) -> None:
        """Make them writable again."""
        if self.made:
            subprocess.run(["chattr", "-i", *map(str, self.made)], capture_output=True, check=True)
            self.made = []


class ReadOnlyStore(FolderStore):
    """A folder store whose appends fail with `error` (EROFS) while `down` (for tests that cannot mount)."""

    def __init__(self, folder: Path, error: int = errno.EROFS) -> None:
        super().__init__(folder)
        self.down = False
        self.error = error

    def append(self, conversation: str, records: Sequence[dict[str, Any]], *, expect: int | None = None) -> int:
        """Fail as a read-only (or forbidden) file system would, or append."""
        if self.down:
            raise OSError(self.error, os.strerror(self.error))
        return super().append(conversation, records, expect=expect)


class FailingWrites:
    """The outage as a store wrapper: passed to the worker, its appends fail while it is on."""

    def __init__(self, folder: Path, error: int = errno.EROFS) -> None:
        self.store = ReadOnlyStore(folder, error)
        self.stores: dict[str, Store] | None = {"default": self.store}
        self.kind = f"store wrapper failing writes with {errno.errorcode[error]}"

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


def can_chattr(folder: Path) -> bool:
    """Whether this process may make files under `folder` immutable (root, on a file system that can)."""
    if os.geteuid() != 0:
        return False
    probe = folder / f".chattr-probe-{os.getpid()}"
    probe.touch()
    try:
        found = subprocess.run(["chattr", "+i", str(probe)], capture_output=True, check=False)
        if found.returncode == 0:
            subprocess.run(["chattr", "-i", str(probe)], capture_output=True, check=True)
        return found.returncode == 0
    except OSError:
        return False
    finally:
        probe.unlink()


def outage_of(folder: Path) -> Outage:
    """The realest outage this process can cause on the store at `folder`."""
    return ReadOnlyMount(folder) if can_mount() else FailingWrites(folder)


def forbidden_of(folder: Path) -> Outage:
    """The realest store unwritable by permission this process can cause at `folder` (else EACCES from a wrapper)."""
    folder.mkdir(parents=True, exist_ok=True)
    return Immutable(folder) if can_chattr(folder) else FailingWrites(folder, errno.EACCES)


def _mount(args: list[str], *, command: str = "mount") -> None:
    deadline = time.monotonic() + BUSY_PATIENCE_S
    while True:
        done = subprocess.run([command, *args], capture_output=True, text=True, check=False)
        if done.returncode == 0:
            return
        if "busy" not in done.stderr or time.monotonic() > deadline:
            raise RuntimeError(f"{command} {' '.join(args)} failed: {done.stderr.strip()}")
        time.sleep(0.05)
