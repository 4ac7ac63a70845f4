"""A span per HTTP request (`SERVER` kind, the caller's W3C `traceparent` continued), while traces
are on: the Temporal client's spans and, through the plugin's headers, the workflow's and the
activities' are its children, so a turn's trace starts at `POST .../turns`."""

from __future__ import annotations

from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from core import telemetry


class Traced:
    """Runs each HTTP request inside a span named by its method and route template (never its path:
    paths carry conversation ids, which spans keep in an attribute of their own)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        tracer = telemetry.tracer(__name__)
        if tracer is None or scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        from opentelemetry.propagate import extract
        from opentelemetry.trace import SpanKind, Status, StatusCode

        carrier = {key.decode("latin-1"): value.decode("latin-1") for key, value in scope["headers"]}
        method = scope["method"]
        with tracer.start_as_current_span(
            method, context=extract(carrier), kind=SpanKind.SERVER, attributes={"http.request.method": method}
        ) as span:

            async def sending(message: Message) -> None:
                if message["type"] == "http.response.start":
                    status: int = message["status"]
                    span.set_attribute("http.response.status_code", status)
                    if status >= 500:
                        span.set_status(Status(StatusCode.ERROR))
                await send(message)

            try:
                await self.app(scope, receive, sending)
            finally:
                route: Any = scope.get("route")
                if template := getattr(route, "path", None):
                    span.set_attribute("http.route", template)
                    span.update_name(f"{method} {template}")
