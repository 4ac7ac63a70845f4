"""Telemetry, set up once per process by whoever starts it (worker, `dev`, `serve`): traces over OTLP
and Prometheus metrics.

Traces need the `telemetry` extra and the standard OpenTelemetry environment
(`OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, `OTEL_SERVICE_NAME`, ...).
They go through Temporal's replay-safe `OpenTelemetryPlugin`: spans made in workflow code get ids
from the workflow's seeded randomness and are not ended while history replays, so a replayed task
or a worker that takes over a turn emits no span twice. Message content is in no span unless
`OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT` is true (the GenAI convention's setting).

Metrics need nothing more: the Temporal SDK's runtime serves its own (task slots, sticky cache,
schedule-to-start latency) and Threadline's on `/metrics` of `THREADLINE_METRICS_BIND`.

Without either, nothing here does anything, and OpenTelemetry is never imported.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from .logs import get_logger

if TYPE_CHECKING:
    from opentelemetry.trace import Tracer
    from temporalio.common import MetricMeter
    from temporalio.plugin import SimplePlugin
    from temporalio.runtime import Runtime

logger = get_logger(__name__)

SECONDS_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
"""Histogram buckets of Threadline's latencies: a turn takes from tens of milliseconds to minutes."""
HISTOGRAMS = (
    "threadline_turn_duration_seconds",
    "threadline_time_to_first_token_seconds",
    "threadline_model_call_duration_seconds",
)
APPEND_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
"""Histogram buckets of store appends: a local file's takes under a millisecond, a database's a few."""
APPEND_SECONDS = "threadline_store_append_duration_seconds"


@dataclass(slots=True)
class _State:
    runtime: Runtime | None = None
    tracing: bool = False
    temporal_spans: bool = False
    content: bool = False
    instruments: dict[str, Any] = field(default_factory=dict)
    tracers: dict[str, Tracer] = field(default_factory=dict)


_STATE = _State()


def tracing_wanted(env: Mapping[str, str]) -> bool:
    """The environment asks for traces: an OTLP endpoint is named and the SDK is not disabled."""
    disabled = env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true"
    exporter_off = env.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none"
    endpoint = env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    return bool(endpoint) and not disabled and not exporter_off


def start(*, service: str, metrics_bind: str | None, env: Mapping[str, str] | None = None) -> None:
    """Turn on what the environment and `metrics_bind` ask for, before the process's first client connects.

    Args:
        service: The service name spans carry when `OTEL_SERVICE_NAME` names none.
        metrics_bind: `host:port` to serve `/metrics` on, or None for no metrics.
        env: The environment (default: the process's).
    """
    env = os.environ if env is None else env
    if metrics_bind and _STATE.runtime is None:
        _STATE.runtime = _metrics_runtime(metrics_bind)
        logger.info("metrics.serving", address=metrics_bind)
    if tracing_wanted(env) and not _STATE.tracing:
        _STATE.tracing = _start_tracing(env.get("OTEL_SERVICE_NAME") or service)
        # Temporal's own spans (StartActivity, RunActivity, HandleUpdate, ...) cost a worker several
        # spans a turn; without them the trace still crosses processes through the plugin's headers.
        _STATE.temporal_spans = env.get("THREADLINE_TRACE_TEMPORAL", "").strip().lower() == "true"
        # The GenAI semantic conventions' switch for message content in spans (off unless `true`).
        _STATE.content = env.get("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "").strip().lower() == "true"


def _metrics_runtime(bind: str) -> Runtime:
    from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig

    prometheus = PrometheusConfig(
        bind_address=bind,
        counters_total_suffix=True,  # Prometheus's own naming: counters end in `_total`, durations are seconds
        durations_as_seconds=True,
        histogram_bucket_overrides={**dict.fromkeys(HISTOGRAMS, SECONDS_BUCKETS), APPEND_SECONDS: APPEND_BUCKETS},
    )
    return Runtime(telemetry=TelemetryConfig(metrics=prometheus))


def _start_tracing(service: str) -> bool:
    try:
        from opentelemetry import trace
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from temporalio.contrib.opentelemetry import create_tracer_provider
    except ImportError:
        logger.warning("traces.unavailable", reason="install threadline[telemetry] for traces")
        return False
    # Replay-safe: the plugin's workflow spans need this provider (ids from the workflow's randomness).
    provider = create_tracer_provider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    logger.info("traces.exporting", service=service)
    return True


def active() -> bool:
    """Traces or metrics are on (model calls are then observed)."""
    return _STATE.tracing or _STATE.runtime is not None


def runtime() -> Runtime | None:
    """The Temporal runtime serving metrics, for every client this process connects (None: the default)."""
    return _STATE.runtime


def plugins() -> list[SimplePlugin]:
    """The client plugins telemetry needs (a worker built on the client gets them too)."""
    if not _STATE.tracing:
        return []
    from temporalio.contrib.opentelemetry import OpenTelemetryPlugin

    return [OpenTelemetryPlugin(add_temporal_spans=_STATE.temporal_spans)]


def tracer(name: str) -> Tracer | None:
    """A tracer when traces are on, else None (callers then skip their spans at no cost)."""
    if not _STATE.tracing:
        return None
    made = _STATE.tracers.get(name)
    if made is None:  # made once: a tracer is an object with its scope, not a lookup
        from opentelemetry import trace

        made = _STATE.tracers[name] = trace.get_tracer(name)
    return made


def capture_content() -> bool:
    """Message content may go into spans (the GenAI content-capture setting is on)."""
    return _STATE.content


def flush() -> None:
    """Export the spans still buffered (a process about to exit)."""
    if _STATE.tracing:
        from opentelemetry import trace

        getattr(trace.get_tracer_provider(), "force_flush", lambda: None)()


def meter() -> MetricMeter | None:
    """The process's metric meter when metrics are served, else None."""
    return None if _STATE.runtime is None else _STATE.runtime.metric_meter


def instrument(meter: MetricMeter, kind: Literal["counter", "histogram"], name: str, description: str) -> Any:
    """The process's `kind` instrument `name`, made once (a histogram's values are seconds)."""
    made = _STATE.instruments.get(name)
    if made is None:
        if kind == "counter":
            made = meter.create_counter(name, description)
        else:
            made = meter.create_histogram_float(name, description, "s")
        _STATE.instruments[name] = made
    return made


def count(name: str, description: str, labels: Mapping[str, str], value: int = 1) -> None:
    """Add `value` to the process's counter `name` when metrics are served (outside workflow code)."""
    meter = _STATE.runtime.metric_meter if _STATE.runtime is not None else None
    if meter is not None and value > 0:
        instrument(meter, "counter", name, description).add(value, dict(labels))


def seconds(name: str, description: str, labels: Mapping[str, str], value: float) -> None:
    """Record `value` seconds in the process's histogram `name` when metrics are served (outside workflow code)."""
    meter = _STATE.runtime.metric_meter if _STATE.runtime is not None else None
    if meter is not None:
        instrument(meter, "histogram", name, description).record(value, dict(labels))
