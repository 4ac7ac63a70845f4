"""The Grafana dashboard's queries against a real Prometheus (Debian's `prometheus`; `make prometheus`
installs it as root) scraping a real worker and `threadline serve` through a round of traffic: every
panel's PromQL runs, selects only metrics the processes export, and shows what the traffic did."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import pytest_asyncio
from temporalio.testing import WorkflowEnvironment

from core.settings import Settings
from tests.telemetry.prometheus import (
    DASHBOARD,
    Panel,
    Prometheus,
    binary,
    legend,
    panels,
    problems,
)
from tests.telemetry.traffic import ERRORS, Stack, one_round, outage_possible
from threadline.client import connect

pytestmark = pytest.mark.timeout(180)  # worker and service processes start slowly on a loaded machine


@dataclass(frozen=True, slots=True)
class Scraped:
    """Prometheus after a round of traffic, and when the round ran."""

    prometheus: Prometheus
    start: float
    end: float
    outage: bool
    """Whether the round included a real store outage (root only)."""


@pytest_asyncio.fixture(scope="module", name="scraped")
async def _scraped(
    env: WorkflowEnvironment, payloads: Path, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Scraped]:
    if binary() is None:
        pytest.skip("prometheus is not installed (`make prometheus` installs Debian's as root)")
    root = tmp_path_factory.mktemp("dashboard")
    settings = dataclasses.replace(
        Settings.from_env({}),
        data=root / "data",
        stores={"default": root / "data" / "store"},
        address=env.client.service_client.config.target_host,
        task_queue=f"test-{uuid.uuid4()}",
        payloads=payloads,
        programs=("tests.support.acting_programs",),
    )
    outage = outage_possible(settings)
    stack = Stack(settings, root)
    try:
        with Prometheus(stack.jobs(), log=root / "prometheus.log") as prometheus:
            await asyncio.to_thread(stack.wait_ready)
            # Prometheus' first scrape comes seconds after it starts (its target discovery settles first):
            # a round over before it would leave each counter two samples at its end, one query step short
            await asyncio.to_thread(prometheus.scraped, 2)
            start = time.time()
            await one_round(await connect(settings, client=env.client), stack, outage=0.0 if outage else None)
            await asyncio.to_thread(prometheus.scraped, 3)
            yield Scraped(prometheus, start - 5, time.time(), outage)
    finally:
        stack.stop()


def _series(scraped: Scraped, panel: Panel) -> list[str]:
    """The legends of the series the panel shows over the round (rates over a minute: a counter that
    first appears at the round's end has two samples in its window however the scrapes fell)."""
    prometheus, step = scraped.prometheus, 1.0
    shown = []
    for target in panel.targets:
        expr = target.expr.replace("$__rate_interval", "1m")
        shown += [legend(target, s.labels) for s in prometheus.query_range(expr, scraped.start, scraped.end, step)]
    return shown


def test_every_panel_query_runs_and_selects_only_metrics_the_processes_export(scraped: Scraped) -> None:
    """Prometheus accepts each panel's expression and holds samples of every metric it selects (the
    store's append errors only once a real outage made one: as root)."""
    found = problems(scraped.prometheus, panels(), scraped.start, scraped.end)
    if not scraped.outage:  # no append failed, so that counter has no series yet
        found = [p for p in found if not p.endswith(f"no such metric on any target: {ERRORS}")]

    assert [] == found


def test_a_broken_expression_or_an_unknown_metric_is_found(scraped: Scraped) -> None:
    """The check is real: a panel whose PromQL does not parse, and one that selects a misspelt metric,
    are each reported by name; the rest are not."""
    dashboard = json.loads(DASHBOARD.read_text())
    first, second = dashboard["panels"][0], dashboard["panels"][1]
    first["targets"][0]["expr"] = first["targets"][0]["expr"].rstrip(")")
    second["targets"][0]["expr"] = second["targets"][0]["expr"].replace("turn_duration", "turn_durations")

    found = problems(scraped.prometheus, panels(dashboard), scraped.start, scraped.end)

    assert [first["title"], second["title"]] == [p.split(":")[0] for p in found if not p.endswith(ERRORS)]
    assert "bad_data" in found[0]
    assert "threadline_turn_durations_seconds_bucket" in found[1]


def test_the_panels_show_the_round_of_traffic(scraped: Scraped) -> None:
    """Turns done, refused and abandoned (a waiting turn stopped); both tools called; a send refused; a
    stop; a turn still waiting for a person and the conversations open (series though no wait or run
    has ended yet); bytes claim-checked; Temporal's own metrics from both processes; as root, the
    outage's failed appends."""
    by_title = {panel.title: _series(scraped, panel) for panel in panels()}

    assert {"done", "refused", "abandoned"} <= set(by_title["Turns by state"])
    assert {"order_status ok", "refund ok"} <= set(by_title["Tool calls"])
    assert "refused" in by_title["Sends meeting a running turn"]
    assert "all" in by_title["Stops"]
    assert ["waiting"] == by_title["Turns waiting for a person"]
    assert ["open"] == by_title["Open conversations"]
    assert {"threadline-worker requests/s", "threadline-api requests/s"} <= set(by_title["Client requests to Temporal"])
    assert [] != by_title["Claim-checked bytes"]
    assert [] != by_title["Model call latency"]
    assert [] != by_title["Approval wait time"]
    assert (["store-unavailable"] if scraped.outage else []) == by_title["Store append errors"]
