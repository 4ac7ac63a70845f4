"""Logging set up once: structlog for our code, stdlib (Temporal's records) routed through it.

JSON lines by default (what a service wants); a console renderer when stderr is a terminal.
"""

from __future__ import annotations

import logging
import sys

import structlog

_EXCEPTIONS = structlog.processors.ExceptionRenderer(structlog.tracebacks.ExceptionDictTransformer(show_locals=False))
_SAFE_MESSAGES = frozenset({"ThreadlineError", "ApplicationError"})
"""Exception types whose messages are written to be logged (one sentence, no content, no secret)."""


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


_TRACEBACKS: list[structlog.typing.Processor] = [_EXCEPTIONS, _redact]
"""Tracebacks as data, without frame locals or foreign messages: they may hold a prompt, an answer or a key."""
_SHARED: list[structlog.typing.Processor] = [
    structlog.contextvars.merge_contextvars,
    structlog.stdlib.add_log_level,
    structlog.processors.TimeStamper(fmt="iso", utc=True),
    _trace_ids,
]


def configure(level: str = "info", *, json: bool | None = None) -> None:
    """Configure structlog and the stdlib root logger to write one format to stderr."""
    as_json = (not sys.stderr.isatty()) if json is None else json
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer()
        if as_json
        else structlog.dev.ConsoleRenderer(colors=False, exception_formatter=structlog.dev.plain_traceback)
    )
    tracebacks = _TRACEBACKS if as_json else []
    structlog.configure(
        processors=[*_SHARED, *tracebacks, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level.upper())),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=True,
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, *tracebacks, renderer],
            foreign_pre_chain=[*_SHARED, structlog.stdlib.ExtraAdder()],
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
