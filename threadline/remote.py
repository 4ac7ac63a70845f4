"""Stores over the network, for functai processes on other hosts: `functai_store(url)`.

    store = threadline.functai_store("postgresql://db.internal/threadline")
    store = threadline.functai_store("https://threadline.internal", api_key=os.environ["THREADLINE_API_KEY"])
    chat = tutor.conversation("alex", store=store)      # functai 1.2.0, sharing Threadline's conversation

The first talks to the PostgreSQL store directly; the second to the Threadline HTTP service's record
endpoints (`/v1/conversations/{id}/records`), with its bearer keys and store scopes. Either is a
store as functai takes one (docs/format-1.md 1.6: `append`, `read`, `wait`) and is synchronous, as
functai calls it. functai reads again and retries a conditional append only when the store raises
its own `ConversationError("store-conflict")`, so these stores raise an error that is both that
and a `ThreadlineError` (when functai is importable; it is not a dependency of Threadline).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Sequence
from typing import Any, Protocol, Self

import httpx

from core.errors import ErrorCode, ThreadlineError
from core.settings import is_database_url
from store.backends.base import check_id, check_records
from store.backends.locate import postgres_url

MAX_WAIT_S = 20.0
"""The longest one long-poll request waits (the service allows up to `records.MAX_WAIT_S`)."""
_FUNCTAI_CODES = frozenset({ErrorCode.STORE_CONFLICT.value, ErrorCode.CONVERSATION_ID.value})
"""The codes functai raises as `ConversationError` from a store, and branches on."""


class SyncStore(Protocol):
    """A blocking store that can be closed."""

    def append(self, conversation: str, records: Sequence[dict[str, Any]], *, expect: int | None = None) -> int: ...
    def read(self, conversation: str, after: int = 0) -> list[dict[str, Any]]: ...
    def wait(self, conversation: str, after: int, timeout: float) -> bool: ...
    def conversations(self) -> list[str]: ...
    def close(self) -> None: ...


def functai_store(
    url: str, *, store: str | None = None, api_key: str | None = None, timeout: float = 30.0
) -> FunctaiStore:
    """A store object functai 1.2.0 accepts as `store=`, reaching a Threadline store over the network.

    Args:
        url: `postgresql://...` (the database, directly) or `http(s)://...` (the Threadline HTTP service).
        store: Over HTTP, the name of the store on the service (default `default`). For a database,
            its schema (default: the URL's `schema` parameter, else `threadline`).
        api_key: Over HTTP, a bearer key of the service (one scoped to `store` will do).
        timeout: Seconds to wait for a connection or an answer before `store-unavailable`.

    Raises:
        ThreadlineError: `invalid-request` for a URL of another kind; `store-unavailable` when a
            database cannot be reached.
    """
    if is_database_url(url):
        libpq, schema = postgres_url(url)
        from store.backends.postgres import PostgresStore  # psycopg loads for a database only

        return FunctaiStore(PostgresStore(libpq, schema=store or schema, timeout=timeout))
    if url.startswith(("http://", "https://")):
        return FunctaiStore(HTTPStore(url, store=store or "default", api_key=api_key, timeout=timeout))
    raise ThreadlineError(
        ErrorCode.INVALID_REQUEST,
        "functai_store takes a postgresql:// or http(s):// URL; a folder needs no store object",
    )


class FunctaiStore:
    """A blocking store whose errors functai understands: a `store-conflict` (and a bad conversation
    id) is raised as functai's `ConversationError` too, so functai reads again and retries."""

    durability = "disk"
    persistent = True

    def __init__(self, store: SyncStore) -> None:
        self.store = store

    def __repr__(self) -> str:
        return f"FunctaiStore({self.store!r})"

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def append(self, conversation: str, records: Sequence[dict[str, Any]], *, expect: int | None = None) -> int:
        """Append `records` all or nothing; a stale `expect` raises `store-conflict` as functai's error."""
        try:
            return self.store.append(conversation, records, expect=expect)
        except ThreadlineError as err:
            raise functai_error(err) from None

    def read(self, conversation: str, after: int = 0) -> list[dict[str, Any]]:
        """The records after position `after`."""
        try:
            return self.store.read(conversation, after)
        except ThreadlineError as err:
            raise functai_error(err) from None

    def wait(self, conversation: str, after: int, timeout: float) -> bool:
        """Block until more than `after` records are held (True) or `timeout` passes."""
        try:
            return self.store.wait(conversation, after, timeout)
        except ThreadlineError as err:
            raise functai_error(err) from None

    def conversations(self) -> list[str]:
        """The ids of the conversations that hold records, sorted."""
        return self.store.conversations()

    def close(self) -> None:
        """Close the connections."""
        self.store.close()


def functai_error(err: ThreadlineError) -> ThreadlineError:
    """`err`, as an error that is functai's `ConversationError` too when its code is one functai
    branches on and functai is importable; else `err` unchanged."""
    kind = _functai_kind()
    if kind is ThreadlineError or str(err.code) not in _FUNCTAI_CODES:
        return err
    return kind(err.code, err.message, retryable=err.retryable, **err.details)


@functools.cache
def _functai_kind() -> type[ThreadlineError]:
    try:
        from functai.errors import ConversationError
    except ImportError:
        return ThreadlineError

    class FunctaiConversationError(ThreadlineError, ConversationError):  # type: ignore[misc]
        """A `ThreadlineError` that functai's `except ConversationError` catches as well."""

        def __init__(self, code: ErrorCode, message: str, *, retryable: bool = False, **details: Any) -> None:
            Exception.__init__(self, message)  # both bases' __init__ take other arguments
            self.code = ErrorCode(code)
            self.message = message
            self.retryable = retryable
            self.details = details
            self.turn = None

    return FunctaiConversationError


class HTTPStore:
    """A Threadline store reached through the HTTP service's record endpoints (blocking, over httpx).

    Args:
        url: The service's base URL (`https://threadline.internal`).
        store: The store's name on the service.
        api_key: A bearer key of the service, if it asks for one.
        timeout: Seconds to wait for a connection or an answer.
    """

    durability = "disk"
    persistent = True

    def __init__(self, url: str, *, store: str = "default", api_key: str | None = None, timeout: float = 30.0) -> None:
        self.store = store
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._timeout = timeout
        self._http = httpx.Client(base_url=url.rstrip("/"), headers=headers, timeout=timeout)

    def __repr__(self) -> str:
        return f"<HTTPStore {self._http.base_url} store={self.store}>"  # never the key

    def append(self, conversation: str, records: Sequence[dict[str, Any]], *, expect: int | None = None) -> int:
        """Append `records` all or nothing (a conditional append with `expect`); return the new count."""
        body = {"records": check_records(records), "expect": expect}
        return int(self._call("POST", conversation, "records", json=body)["count"])

    def read(self, conversation: str, after: int = 0) -> list[dict[str, Any]]:
        """The records after position `after`."""
        found: list[dict[str, Any]] = self._call("GET", conversation, "records", after=max(int(after), 0))["records"]
        return found

    def wait(self, conversation: str, after: int, timeout: float) -> bool:
        """Long-poll until more than `after` records are held (True) or `timeout` passes."""
        deadline = time.monotonic() + timeout
        while True:
            left = max(deadline - time.monotonic(), 0.0)
            poll = min(left, MAX_WAIT_S)
            answer = self._call("GET", conversation, "records/wait", after=after, timeout=poll, read_s=poll)
            if answer["more"] or left <= poll:
                return bool(answer["more"])

    def conversations(self) -> list[str]:
        """The ids of the conversations that hold records, sorted."""
        answer = self._request("GET", "/v1/conversations/records", params={"store": self.store})
        return [str(c) for c in answer["conversations"]]

    def close(self) -> None:
        """Close the connections."""
        self._http.close()

    def _call(self, method: str, conversation: str, path: str, *, read_s: float = 0.0, **query: Any) -> Any:
        url = f"/v1/conversations/{check_id(conversation)}/{path}"
        json = query.pop("json", None)
        return self._request(method, url, params={"store": self.store, **query}, json=json, read_s=read_s)

    def _request(self, method: str, url: str, *, params: dict[str, Any], json: Any = None, read_s: float = 0.0) -> Any:
        timeout = httpx.Timeout(self._timeout, read=self._timeout + read_s)
        try:
            answer = self._http.request(method, url, params=params, json=json, timeout=timeout)
        except httpx.TransportError as err:
            raise ThreadlineError(
                ErrorCode.STORE_UNAVAILABLE,
                f"the Threadline service cannot be reached ({type(err).__name__}): check its URL, then retry",
                retryable=True,
            ) from None
        if answer.is_success:
            return answer.json()
        raise answer_error(answer)


def answer_error(answer: httpx.Response) -> ThreadlineError:
    """The coded error of a service's error answer (`{"error": {"code", "message"}}`)."""
    try:
        error = answer.json()["error"]
        code, message = ErrorCode.parse(error["code"]), str(error["message"])
        details = dict(error.get("details") or {})
    except (ValueError, KeyError, TypeError, AttributeError):
        code, message = ErrorCode.INTERNAL, f"the service answered {answer.status_code} without a coded error"
        details = {}
    retryable = answer.status_code in (408, 429) or answer.status_code >= 500
    return ThreadlineError(code, message, retryable=retryable, **details)
