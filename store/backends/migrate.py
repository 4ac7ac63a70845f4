"""The PostgreSQL store's schema, versioned: `store/backends/migrations/NNNN_name.sql`, each applied once.

A store lives in one PostgreSQL schema (`threadline` unless told otherwise), so several stores can
share a database. `migrate` creates the schema, then applies the migrations not yet recorded in
`<schema>.migrations`, in order, all in one transaction under a transaction advisory lock: callers
racing each other wait, and the later ones find nothing left to do. A database whose schema is
newer than this package is refused rather than written to.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from importlib import resources

import psycopg
from psycopg import sql

from core.errors import ErrorCode, ThreadlineError

from .base import DEFAULT_SCHEMA
from .pgsql import check_schema, unavailable

_FILE = re.compile(r"(\d{4})_([a-z0-9_]+)\.sql")


@dataclass(frozen=True, slots=True)
class Migration:
    """One step of the schema: `version` (from the file name), `name`, and its SQL."""

    version: int
    name: str
    sql: str


def migrations() -> list[Migration]:
    """The migrations shipped with this package, by version."""
    found = []
    for entry in resources.files("store.backends").joinpath("migrations").iterdir():
        match = _FILE.fullmatch(entry.name)
        if match:
            found.append(Migration(int(match[1]), match[2], entry.read_text(encoding="utf-8")))
    return sorted(found, key=lambda m: m.version)


def lock_key(schema: str) -> int:
    """The advisory lock that serialises migrations of `schema` (a signed 64-bit key)."""
    digest = hashlib.sha256(f"threadline.migrate:{schema}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def migrate(url: str, *, schema: str = DEFAULT_SCHEMA) -> int:
    """Bring the store schema `schema` of the database at `url` up to this package's version.

    Returns:
        The schema's version afterwards.

    Raises:
        ThreadlineError: `store-unavailable` when the database cannot be reached, `store-invalid`
            when the schema holds migrations this package does not know (a newer Threadline's).
    """
    check_schema(schema)
    try:
        with psycopg.connect(url) as conn, conn.transaction():
            return _apply(conn, schema)
    except psycopg.OperationalError as err:
        raise unavailable(err) from None


def _apply(conn: psycopg.Connection[tuple[object, ...]], schema: str) -> int:
    name = sql.Identifier(schema)
    conn.execute("SELECT pg_advisory_xact_lock(%s)", (lock_key(schema),))
    conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(name))
    conn.execute(sql.SQL("SET LOCAL search_path TO {}").format(name))
    conn.execute(
        "CREATE TABLE IF NOT EXISTS migrations ("
        "version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"
    )
    applied = {int(str(row[0])) for row in conn.execute("SELECT version FROM migrations")}
    known = migrations()
    newer = applied - {m.version for m in known}
    if newer:
        raise ThreadlineError(
            ErrorCode.STORE_INVALID,
            f"store schema {schema} is at version {max(newer)}, newer than this Threadline knows "
            f"({known[-1].version}): upgrade Threadline to use it",
        )
    for step in known:
        if step.version not in applied:
            conn.execute(step.sql.encode("utf-8"))
            conn.execute("INSERT INTO migrations (version, name) VALUES (%s, %s)", (step.version, step.name))
    return known[-1].version
