"""What the telemetry tests share: worker and service processes exporting to a receiver, `/metrics`."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from core.settings import Settings
from tests.support.otlp import Receiver, Span
from tests.support.processes import ROOT, WorkerProcess, terminate

MARKER = "zebra-7731-marker"
"""Text put in every message: it must reach no span and no metric unless content capture is on."""
KEY = "sk-test-4d1f0c9e"
"""A provider key in the workers' environment: never in a span or a metric."""


_GIVEN: set[int] = set()


def free_port() -> int:
    """A loopback port nothing listens on, never one this process handed out before: the process
    given an earlier one may still be starting, its port free until it binds it."""
    while True:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if port not in _GIVEN:
            _GIVEN.add(port)
            return port


def telemetry_env(receiver: Receiver, service: str, metrics_port: int, **more: str) -> dict[str, str]:
    """The standard OpenTelemetry environment for `receiver`, metrics on `metrics_port`."""
    return {
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
        "OTEL_SERVICE_NAME": service,
        "OTEL_BSP_SCHEDULE_DELAY": "50",  # spans leave within 50 ms: a kill -9 loses none already ended
        "THREADLINE_METRICS_BIND": f"127.0.0.1:{metrics_port}",
        "THREADLINE_PROGRAMS": "tests.support.acting_programs",
        "OPENAI_API_KEY": KEY,
        "THREADLINE_MODEL": "offline",
        **more,
    }


def worker(settings: Settings, log: Path, env: dict[str, str], *, delay: float = 0.0) -> WorkerProcess:
    """A worker process, started and polling."""
    process = WorkerProcess(settings, log, delay=delay, env=env)
    process.wait_ready(timeout=90)  # a loaded machine takes its time to import and connect
    return process


class ServiceProcess:
    """`threadline serve` for the test's server and task queue, on a free port."""

    def __init__(self, settings: Settings, log: Path, env: dict[str, str]) -> None:
        self.port = free_port()
        environment = {
            **os.environ,
            "THREADLINE_TEMPORAL_ADDRESS": settings.address,
            "THREADLINE_TASK_QUEUE": settings.task_queue,
            "THREADLINE_DATA": str(settings.data),
            "THREADLINE_PAYLOADS": str(settings.payloads_spec()),
            **env,
        }
        self._out = log.open("ab")
        command = [sys.executable, "-m", "threadline", "serve", "--port", str(self.port)]
        self.process = subprocess.Popen(command, cwd=ROOT, env=environment, stdout=self._out, stderr=self._out)
        self.url = f"http://127.0.0.1:{self.port}"

    def wait_ready(self, timeout: float = 90.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.process.poll() is None, "the service exited"
            try:
                httpx.get(f"{self.url}/health", timeout=1)
                return
            except httpx.TransportError:
                time.sleep(0.1)
        raise TimeoutError("the service did not start")

    def stop(self) -> None:
        terminate(self.process)
        self._out.close()


def scrape(port: int) -> str:
    """`/metrics` as Prometheus reads it (a real HTTP GET)."""
    answer = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10)
    answer.raise_for_status()
    return answer.text


def sample(text: str, name: str, **labels: str) -> float:
    """The sum of `name`'s samples whose labels include `labels` (0 when none)."""
    total = 0.0
    for line in text.splitlines():
        match = re.match(rf"^{re.escape(name)}(?:\{{(.*)\}})? (\S+)$", line)
        if match is None:
            continue
        found = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', match.group(1) or ""))
        if all(found.get(k) == v for k, v in labels.items()):
            total += float(match.group(2))
    return total


def leaked(spans: list[Span], *secrets: str) -> list[tuple[str, str]]:
    """The (span, attribute) pairs whose value holds one of `secrets`."""
    return [
        (span.name, key)
        for span in spans
        for key, value in span.attributes.items()
        if any(secret in str(value) for secret in secrets)
    ]


def turn_spans(receiver: Receiver, conversation: str, count: int = 1) -> list[Span]:
    """The conversation's turn spans, once `count` have arrived."""
    return receiver.wait_for(
        lambda s: s.name.startswith("invoke_agent ") and s.attributes.get("gen_ai.conversation.id") == conversation,
        count,
    )


def descendants(spans: list[Span], root: Span) -> list[Span]:
    """Every span under `root` in the spans received."""
    children: dict[str, list[Span]] = {}
    for span in spans:
        children.setdefault(span.parent_id, []).append(span)
    out, todo = [], [root]
    while todo:
        for child in children.get(todo.pop().span_id, []):
            out.append(child)
            todo.append(child)
    return out


def deployed_metrics() -> set[str]:
    """The metric names the Grafana dashboard and the Prometheus alerts under deploy/ query."""
    texts = [(ROOT / "deploy" / "grafana" / "dashboards" / "threadline.json").read_text()]
    texts.append((ROOT / "deploy" / "prometheus" / "alerts.yml").read_text())
    return {name for text in texts for name in re.findall(r"\b((?:threadline|temporal)_[a-z_]+)\b", text)}
