"""The payload store of the claim check: payload bytes too large for Temporal's history, kept by
their SHA-256 in a folder every client and worker of a deployment shares.

    <folder>/<2 hex>/<64 hex>     one file per payload, written whole, then renamed into place

A payload is written before the signal or result that refers to it is sent, and never changed:
the same bytes always have the same name, so writers never conflict.
"""

from __future__ import annotations

import asyncio
import os
import re
import secrets
from pathlib import Path
from typing import TYPE_CHECKING

from core.errors import ErrorCode, ThreadlineError
from core.settings import Settings, is_database_url

if TYPE_CHECKING:
    from .pgblobs import PostgresBlobs

_KEY = re.compile(r"sha256:([0-9a-f]{64})")


class FolderBlobs:
    """Payload bytes in a folder (mode 0700, files 0600), each fsynced before it is named."""

    def __init__(self, folder: str | os.PathLike[str]) -> None:
        self.folder = Path(os.fspath(folder)).expanduser().absolute()

    def __repr__(self) -> str:
        return f"<FolderBlobs {self.folder}>"

    async def put(self, key: str, data: bytes) -> None:
        """Keep `data` under `key`, durably (nothing to do when it is there already).

        Raises:
            ThreadlineError: `store-unavailable` (retryable) when the folder cannot take it now.
        """
        try:
            await asyncio.to_thread(self._put, self._path(key), data)
        except OSError as err:
            message = f"the payload store cannot keep a payload now ({err.strerror}); send again, same request id"
            raise ThreadlineError(ErrorCode.STORE_UNAVAILABLE, message, retryable=True) from None

    async def get(self, key: str) -> bytes:
        """The bytes under `key`.

        Raises:
            ThreadlineError: `store-invalid` when the payload store does not hold them.
        """
        try:
            return await asyncio.to_thread(self._path(key).read_bytes)
        except FileNotFoundError:
            message = f"payload {key[:19]}… is not in the payload store; check THREADLINE_PAYLOADS on every process"
            raise ThreadlineError(ErrorCode.STORE_INVALID, message) from None

    async def close(self) -> None:
        """Nothing to release: files are opened per payload."""

    def _path(self, key: str) -> Path:
        found = _KEY.fullmatch(key)
        if found is None:
            raise ThreadlineError(ErrorCode.STORE_INVALID, "a payload reference is not a sha256 key")
        digest = found.group(1)
        return self.folder / digest[:2] / digest

    def _put(self, path: Path, data: bytes) -> None:
        if path.exists():
            return
        os.makedirs(path.parent, mode=0o700, exist_ok=True)
        temporary = path.with_name(f".{path.name}.{secrets.token_hex(6)}")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temporary, path)  # the same name always holds the same bytes: replacing is safe
        _sync(path.parent)


def _sync(folder: Path) -> None:
    """fsync a folder, so the name just made survives a crash."""
    fd = os.open(folder, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def open_blobs(settings: Settings) -> FolderBlobs | PostgresBlobs:
    """The deployment's payload store, as `settings` name it: `THREADLINE_PAYLOADS` (a folder or a
    `postgresql://` URL), else the default store's database when it is one (every host reaches it),
    else `$THREADLINE_DATA/payloads`."""
    spec = settings.payloads_spec()
    if is_database_url(spec):
        from .pgblobs import PostgresBlobs

        return PostgresBlobs(str(spec))
    return FolderBlobs(spec)
