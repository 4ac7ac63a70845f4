"""Open a store from one string: a folder path, or a PostgreSQL URL.

    /var/lib/threadline/store                       a FolderStore (created if need be)
    postgresql://user@host:5432/db                  a PostgresStore in schema `threadline`
    postgresql://user@host:5432/db?schema=tenant_a  the same database, another store

`schema` is taken out of the URL before it reaches libpq, which would refuse it.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from core.errors import ErrorCode, ThreadlineError

from .base import DEFAULT_SCHEMA
from .folder import FolderStore

if TYPE_CHECKING:
    from .postgres import PostgresStore


POSTGRES_SCHEMES = ("postgresql", "postgres")
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")


def is_postgres(spec: str) -> bool:
    """Whether `spec` is a PostgreSQL URL."""
    return urlsplit(spec).scheme.lower() in POSTGRES_SCHEMES


def postgres_url(spec: str) -> tuple[str, str]:
    """The libpq URL in `spec` and the schema it names (`threadline` by default)."""
    parts = urlsplit(spec)
    query = parse_qsl(parts.query, keep_blank_values=True)
    schemas = [value for key, value in query if key == "schema"]
    rest = [(key, value) for key, value in query if key != "schema"]
    return urlunsplit(parts._replace(query=urlencode(rest))), (schemas[-1] if schemas else DEFAULT_SCHEMA)


def open_store(spec: str, **options: Any) -> FolderStore | PostgresStore:
    """The store `spec` names: a `postgresql://` URL, or else a folder path.

    Args:
        spec: A folder path (`~` expanded) or a PostgreSQL URL (with an optional `schema` parameter).
        options: Keyword arguments for the store's class (`PostgresStore(max_size=...)`).

    Raises:
        ThreadlineError: `store-unknown` for a URL of another kind, `store-unavailable` when the
            database cannot be reached.
    """
    if is_postgres(spec):
        from .postgres import PostgresStore  # psycopg loads only for a database

        url, schema = postgres_url(spec)
        return PostgresStore(url, schema=schema, **options)
    if _SCHEME.match(spec):
        scheme = spec.split(":", 1)[0]
        raise ThreadlineError(
            ErrorCode.STORE_UNKNOWN,
            f"a store is a folder path or a postgresql:// URL, not a {scheme}:// URL",
        )
    return FolderStore(spec, **options)
