"""Payload encryption: what Temporal keeps of a conversation (its history, its database) holds no
message, answer or tool result in clear.

`Encryption` is a payload codec: each payload is serialized whole (its metadata too, so not even its
encoding shows) and sealed with AES-256-GCM under the current key; the result crosses Temporal as
`binary/encrypted` with the key's id beside it. Keys have ids so they can rotate: new payloads use the
current key (the first one given), and every key still listed decrypts what it sealed. Keys come from
`THREADLINE_ENCRYPTION_KEYS` (`id=<base64 of 32 bytes>,...`) or `THREADLINE_ENCRYPTION_KEYS_FILE` (one
`id=<base64>` a line, `#` comments), never from history or the record log, and never reach a log line.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from temporalio.api.common.v1 import Payload
from temporalio.converter import PayloadCodec

from .errors import ErrorCode, ThreadlineError

ENCRYPTED_ENCODING = b"binary/encrypted"
KEY_ID = "encryption-key-id"
NONCE_BYTES = 12
"""GCM's 96-bit nonce, random per payload: 2^32 payloads per key keep the collision risk negligible."""
_KEY_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")


@dataclass(frozen=True, slots=True)
class EncryptionKeys:
    """The keys a process may encrypt and decrypt with; `current` seals every new payload."""

    current: str
    keys: Mapping[str, bytes] = field(repr=False)

    def __repr__(self) -> str:
        return f"EncryptionKeys(current={self.current!r}, ids={sorted(self.keys)!r})"

    @classmethod
    def parse(cls, specs: Sequence[str], *, source: str) -> EncryptionKeys:
        """Keys from `id=<base64>` items, the first one current.

        Raises:
            ThreadlineError: `invalid-request` naming the item (never its key material) that is wrong.
        """
        keys: dict[str, bytes] = {}
        for n, spec in enumerate(specs, 1):
            key_id, _, encoded = spec.strip().partition("=")
            if not _KEY_ID.fullmatch(key_id) or key_id in keys:
                raise _bad(source, n, "an id of letters, digits, '.', '_' or '-' (each id once) before '='")
            try:
                material = base64.b64decode(encoded.strip(), validate=True)
            except binascii.Error:
                material = b""
            if len(material) != 32:
                raise _bad(source, n, "the base64 of 32 random bytes after '=' (AES-256)")
            keys[key_id] = material
        if not keys:
            raise _bad(source, 1, "at least one key")
        return cls(current=next(iter(keys)), keys=keys)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> EncryptionKeys | None:
        """The keys `THREADLINE_ENCRYPTION_KEYS` and `THREADLINE_ENCRYPTION_KEYS_FILE` name, or None."""
        specs = [item for item in env.get("THREADLINE_ENCRYPTION_KEYS", "").split(",") if item.strip()]
        path = env.get("THREADLINE_ENCRYPTION_KEYS_FILE")
        if path:
            specs += _key_lines(Path(path))
        return cls.parse(specs, source="THREADLINE_ENCRYPTION_KEYS") if specs else None


def new_key() -> str:
    """A fresh key's base64, for `THREADLINE_ENCRYPTION_KEYS`."""
    return base64.b64encode(os.urandom(32)).decode()


def _key_lines(path: Path) -> list[str]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as err:
        raise ThreadlineError(
            ErrorCode.INVALID_REQUEST, f"cannot read THREADLINE_ENCRYPTION_KEYS_FILE ({err.strerror}); fix the path"
        ) from None
    return [line for line in lines if line.strip() and not line.lstrip().startswith("#")]


def _bad(source: str, item: int, wanted: str) -> ThreadlineError:
    return ThreadlineError(ErrorCode.INVALID_REQUEST, f"{source}: key {item} needs {wanted}")


class Encryption(PayloadCodec):
    """AES-256-GCM over whole payloads, keys by id (see the module's docstring)."""

    def __init__(self, keys: EncryptionKeys) -> None:
        self.keys = keys
        self._ciphers = {key_id: _aesgcm(material) for key_id, material in keys.keys.items()}

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        """Seal each payload under the current key; its id (also the associated data) goes beside it."""
        key_id = self.keys.current
        cipher, aad = self._ciphers[key_id], key_id.encode()
        out = []
        for payload in payloads:
            nonce = os.urandom(NONCE_BYTES)
            sealed = nonce + cipher.encrypt(nonce, payload.SerializeToString(), aad)
            out.append(Payload(metadata={"encoding": ENCRYPTED_ENCODING, KEY_ID: aad}, data=sealed))
        return out

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        """Open each sealed payload with the key it names; any other payload passes untouched.

        Raises:
            ThreadlineError: `payload-key-unknown` when the key is not among this process's keys, or the
                payload does not open with it (altered, or sealed under another key of that id).
        """
        out = []
        for payload in payloads:
            if payload.metadata.get("encoding") != ENCRYPTED_ENCODING:
                out.append(payload)
                continue
            out.append(self._open(payload))
        return out

    def _open(self, payload: Payload) -> Payload:
        key_id = payload.metadata.get(KEY_ID, b"").decode("utf-8", "replace")
        cipher = self._ciphers.get(key_id)
        if cipher is None:
            raise ThreadlineError(
                ErrorCode.PAYLOAD_KEY_UNKNOWN,
                f"a payload is sealed under key {key_id!r}, which this process does not have; add it to "
                "THREADLINE_ENCRYPTION_KEYS (keep retired keys listed while their payloads are in history)",
            )
        from cryptography.exceptions import InvalidTag

        data = payload.data
        try:
            plain = cipher.decrypt(data[:NONCE_BYTES], data[NONCE_BYTES:], key_id.encode())
        except InvalidTag:
            raise ThreadlineError(
                ErrorCode.PAYLOAD_KEY_UNKNOWN, f"a payload sealed under key {key_id!r} does not open with that key"
            ) from None
        opened = Payload()
        opened.ParseFromString(plain)
        return opened


def _aesgcm(material: bytes) -> Any:
    try:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    except ImportError:
        raise ThreadlineError(
            ErrorCode.INVALID_REQUEST,
            "payload encryption needs the `cryptography` package: pip install 'threadline[encryption]'",
        ) from None
    return AESGCM(material)


class Chain(PayloadCodec):
    """Codecs applied in order on the way out and in reverse on the way in (encrypt, then claim-check:
    what the payload store keeps is sealed too)."""

    def __init__(self, codecs: Sequence[PayloadCodec]) -> None:
        self.codecs = tuple(codecs)

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        out = list(payloads)
        for codec in self.codecs:
            out = await codec.encode(out)
        return out

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        out = list(payloads)
        for codec in reversed(self.codecs):
            out = await codec.decode(out)
        return out
