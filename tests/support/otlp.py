"""A small OTLP/HTTP receiver on loopback: what a collector would be given, decoded for assertions.

It takes `POST /v1/traces` (protobuf, gzip or not, as the OTLP/HTTP exporter sends it) and keeps
every span with its resource's service name; nothing in it is Threadline's.
"""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue


@dataclass(frozen=True, slots=True)
class Span:
    """One received span."""

    name: str
    service: str
    trace_id: str
    span_id: str
    parent_id: str
    kind: int
    attributes: dict[str, Any]
    start_ns: int
    end_ns: int
    status: int


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    return getattr(value, kind) if kind else None


class Receiver:
    """Serves OTLP/HTTP on a free loopback port while used as a context manager."""

    def __init__(self) -> None:
        self.spans: list[Span] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                if self.path == "/v1/traces":
                    receiver._take(ExportTraceServiceRequest.FromString(body))
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> Receiver:
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _take(self, request: ExportTraceServiceRequest) -> None:
        got = []
        for resource in request.resource_spans:
            attributes = {a.key: _value(a.value) for a in resource.resource.attributes}
            service = str(attributes.get("service.name", ""))
            for scope in resource.scope_spans:
                got += [_span(service, span) for span in scope.spans]
        with self._lock:
            self.spans.extend(got)

    def received(self, where: Callable[[Span], bool] = lambda s: True) -> list[Span]:
        """The spans received so far that `where` keeps."""
        with self._lock:
            return [s for s in self.spans if where(s)]

    def wait_for(self, where: Callable[[Span], bool], count: int = 1, timeout: float = 30.0) -> list[Span]:
        """Block until at least `count` received spans satisfy `where`; those spans."""
        deadline = time.monotonic() + timeout
        while len(found := self.received(where)) < count:
            if time.monotonic() > deadline:
                raise AssertionError(f"{len(found)} of {count} spans arrived; received: {self.names()}")
            time.sleep(0.05)
        return found

    def names(self) -> list[str]:
        return sorted({s.name for s in self.received()})


def _span(service: str, span: Any) -> Span:
    return Span(
        name=span.name,
        service=service,
        trace_id=span.trace_id.hex(),
        span_id=span.span_id.hex(),
        parent_id=span.parent_span_id.hex(),
        kind=span.kind,
        attributes={a.key: _value(a.value) for a in span.attributes},
        start_ns=span.start_time_unix_nano,
        end_ns=span.end_time_unix_nano,
        status=span.status.code,
    )


def ancestors(spans: list[Span], span: Span) -> list[Span]:
    """`span`'s parents up to its trace's root, as far as they were received."""
    by_id = {s.span_id: s for s in spans}
    out: list[Span] = []
    while span.parent_id and (parent := by_id.get(span.parent_id)) is not None:
        out.append(parent)
        span = parent
    return out
