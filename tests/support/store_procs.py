"""Store writers run as separate processes, so tests can race them or kill them like a crash would.

    python -m tests.support.store_procs append SPEC CONVERSATION WRITER COUNT [--expect]
    python -m tests.support.store_procs hold SPEC CONVERSATION COUNT
    python -m tests.support.store_procs identity FOLDER_OR_SPEC

`append` appends COUNT one-record batches `{"writer": WRITER, "i": i}` (with `--expect`, each is
conditional on the count it read, retried on `store-conflict`), then prints how many conflicts it met.
`hold` runs a PostgresStore's own append statements for COUNT records and prints `inside` before
committing, then sleeps: a writer to SIGKILL mid-transaction. `identity` prints a store's id.
"""

from __future__ import annotations

import sys
import time

from core.errors import ThreadlineError
from store.backends.identity import folder_identity, postgres_identity
from store.backends.locate import is_postgres, open_store, postgres_url
from store.backends.pgsql import add_params
from store.backends.postgres import PostgresStore


def append(spec: str, conversation: str, writer: str, count: int, *, expect: bool) -> None:
    store = open_store(spec)
    conflicts = 0
    try:
        for i in range(count):
            while True:
                try:
                    held = store.count(conversation) if expect else None
                    store.append(conversation, [{"writer": writer, "i": i}], expect=held)
                    break
                except ThreadlineError as err:
                    if err.code != "store-conflict":
                        raise
                    conflicts += 1
    finally:
        getattr(store, "close", lambda: None)()
    print(conflicts, flush=True)


def hold(spec: str, conversation: str, count: int) -> None:
    store = open_store(spec)
    assert isinstance(store, PostgresStore)
    lines = [b'{"held":%d}' % i for i in range(count)]
    with store.connection() as conn, conn.transaction():
        row = conn.execute(store.queries.lock, {"c": conversation}).fetchone()
        assert row is not None
        conn.execute(store.queries.add, add_params(conversation, int(row[0]), lines, store.queries.channel))
        print("inside", flush=True)
        time.sleep(600)


def identity(spec: str) -> None:
    if is_postgres(spec):
        url, schema = postgres_url(spec)
        print(postgres_identity(url, schema=schema), flush=True)
    else:
        print(folder_identity(spec), flush=True)


def main(argv: list[str]) -> None:
    command, *args = argv
    if command == "append":
        append(args[0], args[1], args[2], int(args[3]), expect="--expect" in args)
    elif command == "hold":
        hold(args[0], args[1], int(args[2]))
    elif command == "identity":
        identity(args[0])
    else:
        raise SystemExit(f"unknown command {command}")


if __name__ == "__main__":
    main(sys.argv[1:])
