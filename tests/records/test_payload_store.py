"""The claim check's payload folder when it cannot take a payload: a coded, retryable error, never a
raw OSError, and the payload is kept once the folder takes writes again."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import pytest

from core.errors import ErrorCode, ThreadlineError
from store.backends.blobs import FolderBlobs


def chattr(flag: str, path: Path) -> bool:
    """Set or clear the immutable flag; whether the filesystem allowed it (quick: no event loop to spare)."""
    return subprocess.run(["chattr", flag, str(path)], capture_output=True, check=False).returncode == 0


def key_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


async def test_an_immutable_payload_folder_is_store_unavailable_then_takes_the_payload(tmp_path: Path) -> None:
    """`chattr +i` on the folder (root cannot write there either): `store-unavailable`, retryable; after
    `chattr -i` the same put keeps the payload."""
    folder, data = tmp_path / "payloads", b"x" * 5000
    folder.mkdir()
    blobs = FolderBlobs(folder)
    if not chattr("+i", folder):
        pytest.skip("chattr +i is refused on this filesystem")
    try:
        with pytest.raises(ThreadlineError) as refused:
            await blobs.put(key_of(data), data)
    finally:
        assert chattr("-i", folder)
    await blobs.put(key_of(data), data)

    assert (ErrorCode.STORE_UNAVAILABLE, True) == (refused.value.code, refused.value.retryable)
    assert data == await blobs.get(key_of(data))
