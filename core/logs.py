"""Logging set up once: structlog for our code, stdlib (Temporal's records) routed through it.

JSON lines by default (what a service wants); a console renderer when stderr is a terminal.

A command that only talks to a service (`threadline send`) rarely logs: `configure(..., lazy=True)`
then imports structlog only when the first line is logged, through a logger of `get_logger` or the
stdlib root logger, so the command does not pay for it otherwise.
"""

from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import structlog

_SAFE_MESSAGES = frozenset({"ThreadlineError", "ApplicationError"})
"""Exception types whose messages are written to be logged (one sentence, no content, no secret)."""
_PENDING: dict[str, Any] = {}
"""The arguments of a lazy `configure`, applied by the first line logged."""


def _redact(logger: object, name: str, event: structlog.typing.EventDict) -> structlog.typing.EventDict:
    """Keep the types and frames of an exception, not the message of one whose message may quote values."""
    for found in event.get("exception") or []:
        if isinstance(found, dict) and found.get("exc_type") not in _SAFE_MESSAGES:
            found["exc_value"] = "(message not logged)"
    return event


def _trace_ids(logger: object, name: str, event: structlog.typing.EventDict) -> structlog.typing.EventDict:
    """The current span's trace and span ids, so a log line leads to its trace (when traces are on:
    OpenTelemetry is only loaded then, and nothing is looked up otherwise)."""
    trace = sys.modules.get("opentelemetry.trace")
    if trace is not None:
        context = trace.get_current_span().get_span_context()
        if context.is_valid:
            event.setdefault("trace_id", format(context.trace_id, "032x"))
            event.setdefault("span_id", format(context.span_id, "016x"))
    return event


def configure(level: str = "info", *, json: bool | None = None, lazy: bool = False) -> None:
    """Configure structlog and the stdlib root logger to write one format to stderr (with `lazy`, when
    the first line is logged: every logger of ours comes from `get_logger`)."""
    if not lazy:
        _PENDING.clear()
        _configure(level, json)
        return
    _PENDING.update(level=level, json=json)
    root = logging.getLogger()
    root.handlers[:] = [_FirstRecord()]
    root.setLevel(level.upper())


def get_logger(name: str) -> Any:
    """A structlog logger named `name`, imported and configured (a lazy `configure`) on first use."""
    return _Logger(name)


class _Logger:
    """`structlog.get_logger(name)`, made when it is first used."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._logger: Any = None

    def __getattr__(self, attr: str) -> Any:
        if self._logger is None:
            _configure_pending()
            import structlog

            self._logger = structlog.get_logger(self._name)
        return getattr(self._logger, attr)


class _FirstRecord(logging.Handler):
    """The root logger's handler until the first record: configures (putting structlog's in its place),
    then hands the record on."""

    def emit(self, record: logging.LogRecord) -> None:
        _configure_pending()
        for handler in logging.getLogger().handlers:
            if handler is not self and record.levelno >= handler.level:
                handler.handle(record)


def _configure_pending() -> None:
    if _PENDING:
        pending = dict(_PENDING)
        _PENDING.clear()
        _configure(pending["level"], pending["json"])


def _configure(level: str, json: bool | None) -> None:
    import structlog

    exceptions = structlog.processors.ExceptionRenderer(
        structlog.tracebacks.ExceptionDictTransformer(show_locals=False)
    )
    # Tracebacks as data, without frame locals or foreign messages: they may hold a prompt, an answer or a key.
    tracebacks: list[structlog.typing.Processor] = [exceptions, _redact]
    shared: list[structlog.typing.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        _trace_ids,
    ]
    as_json = (not sys.stderr.isatty()) if json is None else json
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer()
        if as_json
        else structlog.dev.ConsoleRenderer(colors=False, exception_formatter=structlog.dev.plain_traceback)
    )
    if not as_json:
        tracebacks = []
    structlog.configure(
        processors=[*shared, *tracebacks, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level.upper())),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=True,
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, *tracebacks, renderer],
            foreign_pre_chain=[*shared, structlog.stdlib.ExtraAdder()],
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
