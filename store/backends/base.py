"""The store protocol every record log implements, and the conversation-id rule."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from typing import Any, Protocol, runtime_checkable

from core.errors import ErrorCode, ThreadlineError
from store.records import dumps, with_seq

DEFAULT_SCHEMA = "threadline"
"""The schema a PostgreSQL store lives in when its URL names none."""

_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")

READ_BATCH = 4096
"""Records read at once when catching up with a conversation: a cold read of a long one holds
this many parsed records at a time, not all of them."""


def check_id(conversation: object) -> str:
    """Return `conversation` if it is a valid conversation id (a file name, never a path).

    Raises:
        ThreadlineError: `conversation-id` for anything else.
    """
    if isinstance(conversation, str) and conversation.isascii() and _ID.fullmatch(conversation):
        return conversation
    shown = repr(conversation)[:60]
    raise ThreadlineError(
        ErrorCode.CONVERSATION_ID,
        f"{shown} is not a conversation id: use 1 to 200 ASCII letters, digits, '.', '_' or '-', "
        "starting with a letter or digit",
    )


def check_records(records: Sequence[Any]) -> list[dict[str, Any]]:
    """Return `records` as a list if every one is a JSON object (a dict)."""
    out = list(records)
    for i, record in enumerate(out):
        if not isinstance(record, dict):
            raise ThreadlineError(
                ErrorCode.RECORD_INVALID,
                f"record {i} of the batch is a {type(record).__name__}, not a JSON object; nothing was written",
            )
    return out


def encode(record: dict[str, Any], seq: int) -> bytes:
    """`record` numbered `seq`, as the line functai writes (newline included).

    Raises:
        ThreadlineError: `record-invalid` when it cannot be written as JSON (NaN, infinities, a
            value nested deeper than the encoder follows).
    """
    try:
        return (dumps(with_seq(record, seq)) + "\n").encode("utf-8")
    except (ValueError, TypeError, RecursionError) as err:
        raise ThreadlineError(
            ErrorCode.RECORD_INVALID,
            f"a record of the batch cannot be written as JSON ({err}); nothing was written",
        ) from None


@runtime_checkable
class Store(Protocol):
    """A record log: numbered, append-only conversations (docs/format-1.md 1.6).

    functai accepts any object with `append` and `read` as a store, so the same shape serves both.
    """

    def append(self, conversation: str, records: Sequence[dict[str, Any]], *, expect: int | None = None) -> int:
        """Append `records` all or nothing, numbering them; return the new record count.

        Raises `store-conflict` when `expect` is given and differs from the count before the append.
        """
        ...

    def read(self, conversation: str, after: int = 0, *, limit: int | None = None) -> list[dict[str, Any]]:
        """Return copies of the records after position `after`, in order; at most `limit` of them
        (None: all), so a long conversation can be read a bounded piece at a time."""
        ...

    def wait(self, conversation: str, after: int, timeout: float) -> bool:
        """Block until the conversation holds more than `after` records or `timeout` passes."""
        ...

    def conversations(self) -> list[str]:
        """Return the ids of the conversations that hold records, sorted."""
        ...


def read_batches(store: Store, conversation: str, after: int = 0) -> Iterator[list[dict[str, Any]]]:
    """The records after position `after`, `READ_BATCH` at a time, until the end of the conversation."""
    while True:
        batch = store.read(conversation, after, limit=READ_BATCH)
        if batch:
            yield batch
        if len(batch) < READ_BATCH:
            return
        after += len(batch)
