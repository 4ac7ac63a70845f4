"""How much a request may hold and how long it may take to arrive: the body size and the read timeouts.

uvicorn bounds neither the time to read a request's headers nor its body (its keep-alive timeout
only covers the quiet between requests, and each byte that arrives cancels it), so a client sending
a byte a second holds its connection for as long as it likes. `timed_protocol` gives uvicorn an
HTTP protocol that closes a connection whose headers take longer than `header_timeout_s` (a new
connection's first request included) or whose body takes longer than `body_timeout_s` after them;
`middleware.BodyLimit` answers 408 `request-timeout` first when the app is the one reading the body.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar, Literal

import h11
import structlog
from uvicorn.protocols.http.h11_impl import H11Protocol

from core.errors import ErrorCode, ThreadlineError

logger = structlog.get_logger("threadline.service")

DEFAULT_MAX_BODY_BYTES = 2 << 20
DEFAULT_HEADER_TIMEOUT_S = 10.0
DEFAULT_BODY_TIMEOUT_S = 30.0
CUT_OFF_AFTER_S = 1.0
"""How much longer than `body_timeout_s` the server waits before it closes a connection: time for the
408 the app answers to leave first."""


@dataclass(frozen=True, slots=True)
class Limits:
    """How large a request's body may be, and how long its headers and its body may take to arrive."""

    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    """`THREADLINE_MAX_BODY_BYTES`: larger request bodies are refused 413 before they are parsed."""
    header_timeout_s: float = DEFAULT_HEADER_TIMEOUT_S
    """`THREADLINE_HEADER_TIMEOUT_S`: a connection whose request headers take longer is closed."""
    body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S
    """`THREADLINE_BODY_TIMEOUT_S`: a body that takes longer is answered 408 and its connection closed."""

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Limits:
        """Read the limits from `env`.

        Raises:
            ThreadlineError: `invalid-request` for a value that is not a positive number.
        """
        size = _number(env, "THREADLINE_MAX_BODY_BYTES", DEFAULT_MAX_BODY_BYTES)
        headers = _number(env, "THREADLINE_HEADER_TIMEOUT_S", DEFAULT_HEADER_TIMEOUT_S)
        body = _number(env, "THREADLINE_BODY_TIMEOUT_S", DEFAULT_BODY_TIMEOUT_S)
        return cls(int(size), headers, body)


DEFAULT_LIMITS = Limits()


def _number(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name) or ""
    if not raw:
        return default
    if isinstance(default, int):
        if not raw.isdigit():
            raise ThreadlineError(ErrorCode.INVALID_REQUEST, f"{name}={raw!r} is not a byte count")
        return int(raw)
    try:
        seconds = float(raw)
    except ValueError:
        seconds = 0.0
    if not 0 < seconds < float("inf"):
        raise ThreadlineError(ErrorCode.INVALID_REQUEST, f"{name}={raw!r} is not a positive number of seconds")
    return seconds


def too_slow(limits: Limits) -> ThreadlineError:
    """The error a body that did not arrive in time is answered with."""
    message = f"the request's body did not arrive within {limits.body_timeout_s:g} s; send it again, faster"
    return ThreadlineError(ErrorCode.REQUEST_TIMEOUT, message, retryable=True)


Phase = Literal["headers", "body"]


class TimedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a deadline for each request's headers, then for its body."""

    header_timeout_s: ClassVar[float] = DEFAULT_HEADER_TIMEOUT_S
    body_timeout_s: ClassVar[float] = DEFAULT_BODY_TIMEOUT_S + CUT_OFF_AFTER_S
    _due: asyncio.TimerHandle | None = None
    _phase: Phase | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        """A new connection: its first request's headers are due (a connection that sends nothing is closed)."""
        super().connection_made(transport)
        self._arm("headers")

    def connection_lost(self, exc: Exception | None) -> None:
        """Gone: no deadline is left behind."""
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        """The first bytes of a request on a kept-alive connection start its headers' deadline."""
        if self._phase is None and self.conn.their_state is h11.IDLE:
            self._arm("headers")
        super().data_received(data)

    def handle_events(self) -> None:
        """After h11 parsed what arrived: headers complete start the body's deadline, a whole request ends it."""
        super().handle_events()
        state = self.conn.their_state
        if state is h11.SEND_BODY:
            if self._phase != "body":
                self._arm("body")
        elif state is not h11.IDLE or self._phase == "body":
            self._disarm()

    def _arm(self, phase: Phase) -> None:
        self._disarm()
        seconds = self.header_timeout_s if phase == "headers" else self.body_timeout_s
        self._phase, self._due = phase, self.loop.call_later(seconds, self._late)

    def _disarm(self) -> None:
        if self._due is not None:
            self._due.cancel()
        self._phase, self._due = None, None

    def _late(self) -> None:
        phase, self._due = self._phase, None
        if not self.transport.is_closing():
            logger.info("http.cut_off", phase=phase, client=self.client[0] if self.client else None)
            self.transport.close()


def timed_protocol(limits: Limits) -> type[TimedH11Protocol]:
    """The protocol class uvicorn serves with (`uvicorn.Config(http=...)`) for these limits."""
    return type(
        "TimedH11Protocol",
        (TimedH11Protocol,),
        {"header_timeout_s": limits.header_timeout_s, "body_timeout_s": limits.body_timeout_s + CUT_OFF_AFTER_S},
    )
