"""A real Prometheus on loopback (Debian's `prometheus` package) and the Grafana dashboard's queries run
against it, as Grafana would send them: each panel's PromQL over Prometheus' HTTP API (`query_range`),
`$__rate_interval` expanded by Grafana's rule.

Prometheus scrapes the processes with the job names of `deploy/prometheus/prometheus.yml` and loads
the alert rules of `deploy/prometheus/alerts.yml`, so a rule it cannot load stops it from starting.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml  # type: ignore[import-untyped]  # schemathesis's dependency; it ships no stubs

from tests.support.processes import ROOT, terminate
from tests.telemetry.kit import free_port

DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "threadline.json"
DEPLOYED = ROOT / "deploy" / "prometheus"
KEYWORDS = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "offset"})
KEYWORDS |= {"and", "or", "unless", "inf", "nan", "Inf", "NaN"}
"""Words of PromQL that are not metric names where `metric_names` may meet them."""


@dataclass(frozen=True, slots=True)
class Target:
    """One query of a panel: its PromQL and its legend (`{{label}}` filled from each series)."""

    expr: str
    legend: str


@dataclass(frozen=True, slots=True)
class Panel:
    """A dashboard panel: where it sits on Grafana's 24-column grid (`gridPos`), its unit, its queries."""

    title: str
    unit: str
    grid: tuple[int, int, int, int]
    """x, y, w, h in grid units."""
    targets: tuple[Target, ...]


@dataclass(frozen=True, slots=True)
class Series:
    """One series a query answered: its labels and its (unix seconds, value) points."""

    labels: dict[str, str]
    points: list[tuple[float, float]]


class QueryError(Exception):
    """Prometheus refused a query (its `errorType` and message)."""


def panels(dashboard: dict[str, Any] | None = None) -> list[Panel]:
    """The panels of `dashboard` (default: the one under deploy/), in the order Grafana lays them out."""
    data = dashboard if dashboard is not None else json.loads(DASHBOARD.read_text())
    out = []
    for panel in data["panels"]:
        grid = panel["gridPos"]
        unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit", "short")
        targets = tuple(Target(t["expr"], t.get("legendFormat", "")) for t in panel["targets"])
        out.append(Panel(panel["title"], unit, (grid["x"], grid["y"], grid["w"], grid["h"]), targets))
    return sorted(out, key=lambda p: (p.grid[1], p.grid[0]))


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (what is left once strings, label matchers, ranges,
    label lists and function calls are set aside)."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    text = re.sub(r"\{[^}]*\}|\[[^\]]*\]", " ", text)
    text = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    return set(re.findall(r"(?<![\w$])[A-Za-z_:][\w:]*\b(?!\s*\()", text)) - KEYWORDS


def rate_interval(step: float, scrape: float) -> str:
    """Grafana's `$__rate_interval`: the larger of step plus scrape interval and four scrape intervals."""
    return f"{round(max(step + scrape, 4 * scrape))}s"


def legend(target: Target, labels: dict[str, str]) -> str:
    """A series' name as Grafana shows it: the legend format with `{{label}}` filled in."""
    if not target.legend:
        return "{" + ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), target.legend).strip()


def binary() -> str | None:
    """The `prometheus` binary on PATH (`make prometheus` installs Debian's), or None."""
    return shutil.which("prometheus")


class Prometheus:
    """`prometheus` on a free loopback port, scraping `jobs` (the deployment's job names: `host:port`
    targets on loopback) every `scrape` seconds, its data in a temporary folder removed when it stops."""

    def __init__(self, jobs: dict[str, list[str]], *, scrape: float = 1.0, log: Path | None = None) -> None:
        found = binary()
        if found is None:
            raise FileNotFoundError("prometheus is not installed (make prometheus installs Debian's)")
        self.scrape = scrape
        self.folder = Path(tempfile.mkdtemp(prefix="threadline-prometheus-"))
        config = yaml.safe_load((DEPLOYED / "prometheus.yml").read_text())
        interval = f"{round(scrape * 1000)}ms"
        config["global"] = {"scrape_interval": interval, "evaluation_interval": interval}
        config["rule_files"] = [str(DEPLOYED / "alerts.yml")]
        deployed = sorted(c["job_name"] for c in config["scrape_configs"])
        if deployed != sorted(jobs):  # panels name series by job: these must be the deployment's
            raise ValueError(f"scrape jobs {sorted(jobs)} are not deploy/prometheus/prometheus.yml's {deployed}")
        config["scrape_configs"] = [
            {"job_name": job, "static_configs": [{"targets": targets}]} for job, targets in jobs.items()
        ]
        (self.folder / "prometheus.yml").write_text(yaml.safe_dump(config))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log or self.folder / "prometheus.log"
        self._out = self.log.open("ab")
        command = [
            found,
            f"--config.file={self.folder / 'prometheus.yml'}",
            f"--storage.tsdb.path={self.folder / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
        ]
        self.process = subprocess.Popen(command, stdout=self._out, stderr=self._out)

    def __enter__(self) -> Prometheus:
        try:
            self.wait_ready()
        except BaseException:
            self.stop()  # one that never became ready is stopped all the same
            raise
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Block until Prometheus answers `/-/ready` (it exits at once on a config or rules error)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                self._out.close()
                said = self.log.read_text(errors="replace").splitlines()[-3:]
                raise RuntimeError(f"prometheus exited with {self.process.returncode}: " + "\n".join(said))
            try:
                if httpx.get(f"{self.url}/-/ready", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        raise TimeoutError("prometheus did not start")

    def stop(self) -> None:
        """SIGTERM, then wait; its data folder is removed."""
        terminate(self.process)
        self._out.close()
        shutil.rmtree(self.folder, ignore_errors=True)

    def names(self) -> set[str]:
        """Every metric name Prometheus holds samples of."""
        return set(self._get("/api/v1/label/__name__/values", {}))

    def version(self) -> str:
        """Prometheus' version, as it reports it."""
        return str(self._get("/api/v1/status/buildinfo", {})["version"])

    def scraped(self, count: int = 2, timeout: float = 60.0) -> None:
        """Wait until every target was scraped `count` times from now on (what they counted is stored)."""
        since = time.time()
        deadline = time.monotonic() + timeout
        while True:
            last = self._get("/api/v1/query", {"query": "min(timestamp(up))"})["result"]
            if last and float(last[0]["value"][1]) >= since + (count - 1) * self.scrape:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"the targets were not scraped {count} times in {timeout} s")
            time.sleep(self.scrape / 4)

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[Series]:
        """`expr` from `start` to `end` (unix seconds), one point every `step` seconds.

        Raises:
            QueryError: Prometheus refused the expression (a syntax error, an unknown function, ...).
        """
        params = {"query": expr, "start": str(start), "end": str(end), "step": str(step)}
        data = self._get("/api/v1/query_range", params)
        return [Series(r["metric"], [(float(t), float(v)) for t, v in r["values"]]) for r in data["result"]]

    def _get(self, path: str, params: dict[str, str]) -> Any:
        answer = httpx.get(f"{self.url}{path}", params=params, timeout=30)
        body = answer.json()
        if body.get("status") != "success":
            raise QueryError(f"{body.get('errorType')}: {body.get('error')}")
        return body["data"]


def problems(prometheus: Prometheus, checked: list[Panel], start: float, end: float) -> list[str]:
    """What is wrong with the panels' queries over `start`..`end`: an expression Prometheus refuses,
    or a metric it selects that Prometheus holds no sample of (one line each, naming the panel)."""
    known = prometheus.names()
    step = max(1.0, (end - start) / 200)
    window = rate_interval(step, prometheus.scrape)
    found = []
    for panel in checked:
        for target in panel.targets:
            try:
                prometheus.query_range(target.expr.replace("$__rate_interval", window), start, end, step)
            except QueryError as err:
                found.append(f"{panel.title}: {err}")
            missing = sorted(metric_names(target.expr) - known)
            if missing:
                found.append(f"{panel.title}: no such metric on any target: {', '.join(missing)}")
    return found
