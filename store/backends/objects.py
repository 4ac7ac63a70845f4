"""A store object of the user's own, as functai accepts one (`store=` an object with `append` and
`read`, or `append_records` and `read_records`), seen as a `Store`.

Such an object lives in one process: the client that names it and the worker that serves it must be
given the same object (an embedded worker, or a worker built in the same process).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import Any

from core.errors import ErrorCode, ThreadlineError
from store.records import with_seq

from .base import check_id, check_records


def is_store_object(value: object) -> bool:
    """Whether `value` has the methods of a record log (functai's names or the contract's)."""
    return any(_methods(value, *names) is not None for names in _NAMES)


_NAMES = (("append", "read"), ("append_records", "read_records"))


def _methods(value: object, append: str, read: str) -> tuple[Callable[..., Any], Callable[..., Any]] | None:
    found = getattr(value, append, None), getattr(value, read, None)
    return (found[0], found[1]) if callable(found[0]) and callable(found[1]) else None


class ObjectStore:
    """A user's store object with the numbering and `expect` rule the log needs.

    Args:
        target: An object with `append(conversation, records, expect=)` and `read(conversation, after=)`
            (or `append_records` and `read_records`).
    """

    def __init__(self, target: object) -> None:
        methods = next((m for names in _NAMES if (m := _methods(target, *names)) is not None), None)
        if methods is None:
            message = "a store object has append(conversation, records, expect=) and read(conversation, after=)"
            message += f" (or append_records and read_records); a {type(target).__name__} has neither"
            raise ThreadlineError(ErrorCode.STORE_KIND, message)
        self.target = target
        self._append, self._read = methods
        # The same object seen by a client and a worker of one process has the same identity.
        self._id = str(uuid.uuid5(uuid.NAMESPACE_OID, f"threadline-object-store-{id(target)}"))

    @property
    def persistent(self) -> bool:
        """Whether the object keeps records beyond this process (functai's flag; unknown: yes)."""
        return bool(getattr(self.target, "persistent", True))

    def __repr__(self) -> str:
        return f"ObjectStore({type(self.target).__name__})"

    def identity(self) -> str:
        """The object's own `identity()` when it has one, else an id of the object in this process."""
        own = getattr(self.target, "identity", None)
        return str(own()) if callable(own) else self._id

    def append(self, conversation: str, records: Sequence[dict[str, Any]], *, expect: int | None = None) -> int:
        """Append through the object; its answer is the new count (read again when it answers none)."""
        check_id(conversation)
        try:
            answer = self._append(conversation, check_records(records), expect=expect)
        except Exception as err:
            if getattr(err, "code", None) != ErrorCode.STORE_CONFLICT.value:
                raise
            # functai's stores raise their own error with the same code: decide again, as on ours.
            raise ThreadlineError(ErrorCode.STORE_CONFLICT, str(err), expected=expect) from None
        return answer if isinstance(answer, int) and not isinstance(answer, bool) else len(self._all(conversation))

    def read(self, conversation: str, after: int = 0, *, limit: int | None = None) -> list[dict[str, Any]]:
        """The records after `after` (at most `limit`): the object is asked for them all after `after`."""
        check_id(conversation)
        found = list(self._read(conversation, after=after))
        found = found if limit is None else found[: max(limit, 0)]
        # An object that keeps records as given, unnumbered, is numbered by position (`seq` = line number).
        return [r if "seq" in r else with_seq(dict(r), after + i + 1) for i, r in enumerate(found)]

    def wait(self, conversation: str, after: int, timeout: float) -> bool:
        """Whether more than `after` records are held (polled by the caller: objects need not wait)."""
        own = getattr(self.target, "wait", None)
        if callable(own) and timeout > 0:
            own(conversation, after, timeout)
        return bool(self.read(conversation, after, limit=1))

    def conversations(self) -> list[str]:
        """The object's `conversations()` when it has one, else none known."""
        own = getattr(self.target, "conversations", None)
        return sorted(own()) if callable(own) else []

    def _all(self, conversation: str) -> list[dict[str, Any]]:
        return list(self._read(conversation, after=0))
