"""Crossing Temporal: the connection every process shares, workflow ids, and coded errors.

`ThreadlineError` knows nothing of Temporal. Here it becomes an `ApplicationError` whose `type`
is the code (activities raise it through `coded`), and any failure that comes back (an activity's,
an update's, an RPC's) becomes a `ThreadlineError` again through `from_failure`, code, retryable
flag and details intact. `store/` never imports this module.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta
from typing import Any, ParamSpec, Protocol, TypeVar

from pydantic import TypeAdapter
from pydantic_core import to_json
from temporalio.api.common.v1 import Payload
from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.contrib.pydantic import PydanticJSONPlainPayloadConverter
from temporalio.converter import (
    CompositePayloadConverter,
    DataConverter,
    DefaultPayloadConverter,
    EncodingPayloadConverter,
    JSONPlainPayloadConverter,
    PayloadCodec,
)
from temporalio.exceptions import ActivityError, ApplicationError, ApplicationErrorCategory, CancelledError
from temporalio.service import RPCError, RPCStatusCode

from . import telemetry
from .encryption import Chain, Encryption, EncryptionKeys
from .errors import ErrorCode, ThreadlineError, is_code
from .models import ONCE
from .settings import Settings

_WIRE = {ONCE: True}
"""The serialization context of every payload: an outcome carries its answer once (core/models.py)."""
_ADAPTERS: Callable[[Any], TypeAdapter[Any]] = functools.lru_cache(maxsize=1024)(TypeAdapter)
"""The process's pydantic type adapters, one per type."""


class _SharedJSON(PydanticJSONPlainPayloadConverter):
    """Pydantic's JSON payloads, with the process's one type-adapter cache.

    The SDK makes a payload converter for every workflow instance, and pydantic's keeps its type
    adapters per converter: every cached conversation built and held its own adapters for the same
    types (measured with bench/_memprofile.py: a third of a cached conversation's Python objects,
    and the schema building in every new or replayed conversation's first task)."""

    def __init__(self) -> None:
        super().__init__()
        self._type_adapter = _ADAPTERS  # type: ignore[assignment]

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._type_adapter = _ADAPTERS  # type: ignore[assignment]

    def to_payload(self, value: Any) -> Payload | None:
        """Pydantic's JSON, with the context in which an outcome carries its answer once."""
        return Payload(metadata={"encoding": self.encoding.encode()}, data=to_json(value, context=_WIRE))


def _converters() -> dict[bytes, EncodingPayloadConverter]:
    json = _SharedJSON()
    defaults = DefaultPayloadConverter.default_encoding_payload_converters
    return CompositePayloadConverter(
        *(json if isinstance(c, JSONPlainPayloadConverter) else c for c in defaults)
    ).converters  # type: ignore[return-value]


_CONVERTERS = _converters()
"""The encoding converters, made once: none keeps state (pydantic's adapters are the process's)."""


class PayloadConverter(CompositePayloadConverter):
    """The SDK's default converters, with pydantic's JSON (sharing its adapters) in place of plain JSON.

    The SDK makes one for every workflow instance and two for every workflow task (its converter
    per task); each shares the process's one set of encoding converters, so making one costs
    nothing (measured by bench/_coldprofile.py: a tenth of a replay's CPU went to building them)."""

    def __init__(self) -> None:
        self.converters = _CONVERTERS


DATA_CONVERTER = DataConverter(payload_converter_class=PayloadConverter)
RETRY_WAIT_MOST_SECONDS = 20.0
"""The longest wait before an activity's next try (a provider's Retry-After, a retry policy's backoff):
half a turn's 40 s lease, which the try before it renewed, so a turn between tries reads `running`
for every reader (docs/operations.md, "Clocks")."""
"""The converter of every client, worker and replayer."""

P = ParamSpec("P")
R = TypeVar("R")


CONVERSATION_WORKFLOW = "Conversation"
"""The conversation workflow's type (`workflows.conversation`): clients name it, so they need not import it."""
SCHEDULED_TURN_WORKFLOW = "ScheduledTurn"
"""The type of the workflow a schedule starts for each firing (`workflows.scheduled`)."""


def workflow_id(store: str, conversation: str) -> str:
    """`conversation/<store>/<id>`: one workflow per conversation."""
    return f"conversation/{store}/{conversation}"


async def connect_temporal(settings: Settings, blobs: Blobs | None = None) -> Client:
    """A client of `settings.address` with the data converter every Threadline process shares
    (with `blobs`, the claim check: large payloads are kept there, not in history)."""
    converter = data_converter(blobs, settings.encryption)
    try:
        return await Client.connect(
            settings.address,
            namespace=settings.namespace,
            data_converter=converter,
            runtime=telemetry.runtime(),
            plugins=telemetry.plugins(),
        )
    except RuntimeError as err:
        raise ThreadlineError(
            ErrorCode.SERVER_UNAVAILABLE,
            f"cannot reach Temporal at {settings.address} ({err}); start one with `threadline dev --server-only`",
            retryable=True,
        ) from None


def to_failure(err: ThreadlineError) -> ApplicationError:
    """The `ApplicationError` that carries `err` across Temporal: `type` is the code, the details ride along.

    A retryable error waits the provider's Retry-After (`details["retry_after"]`) before its next try,
    at most `RETRY_WAIT_MOST_SECONDS`.
    """
    seconds = err.details.get("retry_after")
    delay = None
    if isinstance(seconds, int | float) and seconds > 0:
        delay = timedelta(seconds=min(float(seconds), RETRY_WAIT_MOST_SECONDS))
    # A refusal is an answer, not an incident: BENIGN keeps it out of the worker's warning logs.
    category = ApplicationErrorCategory.UNSPECIFIED if err.retryable else ApplicationErrorCategory.BENIGN
    details = (err.details,) if err.details else ()
    return ApplicationError(
        err.message,
        *details,
        type=str(err.code),
        non_retryable=not err.retryable,
        next_retry_delay=delay,
        category=category,
    )


def from_failure(err: BaseException) -> ThreadlineError:
    """The `ThreadlineError` behind any failure that crossed Temporal (or failed to reach it)."""
    if isinstance(err, ThreadlineError):
        return err
    cause: BaseException = err
    while isinstance(cause, WorkflowUpdateFailedError | ActivityError) and cause.cause is not None:
        cause = cause.cause
    if isinstance(cause, CancelledError):
        return ThreadlineError(ErrorCode.TURN_STATE, "the turn was stopped")
    if isinstance(cause, ApplicationError) and is_code(cause.type):
        details = cause.details[0] if cause.details and isinstance(cause.details[0], dict) else {}
        retryable = not cause.non_retryable
        return ThreadlineError(ErrorCode.parse(cause.type), cause.message, retryable=retryable, **details)
    if isinstance(cause, RPCError) and cause.status == RPCStatusCode.NOT_FOUND:
        return ThreadlineError(ErrorCode.CONVERSATION_NOT_FOUND, "no such conversation is open: send a turn first")
    if isinstance(cause, RPCError):
        message = f"Temporal did not answer ({cause.status.name}); retry when it is back"
        return ThreadlineError(ErrorCode.SERVER_UNAVAILABLE, message, retryable=True)
    # The message of an unexpected error may quote values; only its type leaves the process.
    return ThreadlineError(ErrorCode.INTERNAL, f"an unexpected {type(cause).__name__}; the worker log has the details")


def coded(method: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
    """The activity-side error boundary: a `ThreadlineError` leaves an activity as `to_failure(err)`."""

    @functools.wraps(method)
    async def boundary(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return await method(*args, **kwargs)
        except ThreadlineError as err:
            raise to_failure(err) from None

    return boundary


def raise_coded(err: BaseException) -> Any:
    """Raise `err` as the coded `ApplicationError` an update handler answers with (never returns)."""
    raise to_failure(from_failure(err)) from None


# ----- the claim check: large payloads stay out of history

CLAIM_CHECK_ENCODING = b"threadline/claim-check"
CLAIM_CHECK_THRESHOLD = 8 * 1024
"""Payloads larger than this many bytes are kept in the payload store; history holds their key.

Where history is at risk: a turn's message crosses history once (the send) and its answer twice
(the turn's result, the send's outcome), so a turn whose message and answer are both just under
8 KB adds at most about 29 KB, and a run of 100 turns (ten times a run's default share before it
continues as new) stays under 3 MB: below the 4 MB at which Temporal suggests continuing as new, far from its 50 MB
limit and its 2 MB limit per payload. Below it, an ordinary long message or answer (a few KB)
stays in history, readable in the UI and by any SDK without the codec endpoint."""


CLAIM_CHECKED = (
    "threadline_claim_checked_bytes",
    "Bytes of payloads kept in the payload store instead of history (a payload encoded again counts again).",
)


class Blobs(Protocol):
    """A content-addressed store of payload bytes, shared by every client and worker of a deployment."""

    async def put(self, key: str, data: bytes) -> None:
        """Keep `data` under `key` (its hash) durably before returning; nothing when it is there."""
        ...

    async def get(self, key: str) -> bytes:
        """The bytes kept under `key` (`store-invalid` when there are none)."""
        ...


class ClaimCheck(PayloadCodec):
    """Temporal's claim-check pattern as a payload codec: a payload over the threshold is written to
    the payload store under its SHA-256 and crosses Temporal as a small reference, so a send of 1 MB
    costs history the same few hundred bytes as a send of 1 KB. Smaller payloads pass untouched."""

    def __init__(self, blobs: Blobs, *, threshold: int = CLAIM_CHECK_THRESHOLD) -> None:
        self.blobs = blobs
        self.threshold = threshold

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        """Replace each large payload with its key, after its bytes are kept."""
        out = []
        for payload in payloads:
            data = payload.SerializeToString()
            if len(data) <= self.threshold:
                out.append(payload)
                continue
            key = "sha256:" + hashlib.sha256(data).hexdigest()
            await self.blobs.put(key, data)
            telemetry.count(*CLAIM_CHECKED, {}, len(data))
            metadata = {"encoding": CLAIM_CHECK_ENCODING, "size": str(len(data)).encode()}
            out.append(Payload(metadata=metadata, data=key.encode()))
        return out

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        """Bring back each referenced payload from the payload store."""
        out = []
        for payload in payloads:
            if payload.metadata.get("encoding") != CLAIM_CHECK_ENCODING:
                out.append(payload)
                continue
            found = Payload()
            found.ParseFromString(await self.blobs.get(payload.data.decode()))
            out.append(found)
        return out


def data_converter(blobs: Blobs | None, keys: EncryptionKeys | None = None) -> DataConverter:
    """The converter of every client, worker and replayer: pydantic, then encryption when `keys` are
    given, then the claim check when a payload store is given (so what it keeps is sealed too)."""
    codecs: list[PayloadCodec] = [
        *([Encryption(keys)] if keys is not None else []),
        *([ClaimCheck(blobs)] if blobs is not None else []),
    ]
    if not codecs:
        return DATA_CONVERTER
    return dataclasses.replace(DATA_CONVERTER, payload_codec=codecs[0] if len(codecs) == 1 else Chain(codecs))
