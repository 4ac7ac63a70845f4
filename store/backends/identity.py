"""A store's identity: a UUID made once and kept in the store, so that two names for one store, or
one name moved to another store, can be told apart.

    folder store       <folder>/store.json   {"id": "<uuid>", "created": "<time>"}, mode 0600
    PostgreSQL store   <schema>.store         one row, written by the schema's first migration

The file is written whole to a temporary name, then hard-linked to `store.json`: a link never
replaces an existing file, so the first creator wins, the others read its id, and no reader ever
sees a half-written file.
"""

from __future__ import annotations

import json
import os
import secrets
import uuid
from pathlib import Path

from core.errors import ErrorCode, ThreadlineError
from store.records import iso

from .base import DEFAULT_SCHEMA
from .folder import FolderStore

FILE = "store.json"


def folder_identity(folder: str | os.PathLike[str]) -> str:
    """The id of the folder store at `folder`, created (with the folder) on first use.

    Raises:
        ThreadlineError: `store-invalid` when `store.json` exists but holds no id.
    """
    path = Path(os.fspath(folder)).expanduser().absolute() / FILE
    found = _read(path)
    if found is not None:
        return found
    os.makedirs(path.parent, mode=0o700, exist_ok=True)
    body = json.dumps({"id": str(uuid.uuid4()), "created": iso()}) + "\n"
    temporary = path.with_name(f".{FILE}.{secrets.token_hex(8)}")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        os.fchmod(fd, 0o600)  # whatever the umask
        os.write(fd, body.encode("utf-8"))
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(temporary, path)
        _sync_folder(path.parent)
    except FileExistsError:
        pass  # another creator won: its id is the store's
    finally:
        os.unlink(temporary)
    found = _read(path)
    assert found is not None, "store.json exists once linked"
    return found


def postgres_identity(url: str, *, schema: str = DEFAULT_SCHEMA) -> str:
    """The id of the PostgreSQL store in `schema` at `url` (its schema is created if need be)."""
    import psycopg  # the driver loads for a database only: a folder's identity is a file

    from .migrate import migrate
    from .pgsql import Queries, reachable

    migrate(url, schema=schema)
    with reachable(), psycopg.connect(url) as conn:
        row = conn.execute(Queries.of(schema).identity).fetchone()
    assert row is not None, "the first migration writes the store's one row"
    return str(row[0])


def store_identity(store: object) -> str:
    """The id of a folder or PostgreSQL store object.

    Raises:
        ThreadlineError: `store-unknown` for a store that keeps no identity (one in memory).
    """
    if isinstance(store, FolderStore):
        return folder_identity(store.folder)
    identity = getattr(store, "identity", None)  # a PostgresStore reads its schema's row
    if callable(identity):
        return str(identity())
    raise ThreadlineError(
        ErrorCode.STORE_UNKNOWN, f"a {type(store).__name__} keeps no identity: use a folder or PostgreSQL store"
    )


def _read(path: Path) -> str | None:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    try:
        return str(uuid.UUID(json.loads(text)["id"]))
    except (ValueError, TypeError, KeyError, AttributeError):
        raise ThreadlineError(
            ErrorCode.STORE_INVALID,
            f"{path} holds no store id: restore it from a backup (a new id would make this another store)",
        ) from None


def _sync_folder(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
