"""The Grafana dashboard as docs/operations.md shows it, drawn without Grafana (which no registry this
project installs from carries): a Temporal dev server, a worker process and `threadline serve` with
the offline model, rounds of traffic for a few minutes (`traffic.one_round`), a real Prometheus
scraping both, then every panel's own PromQL from deploy/grafana/dashboards/threadline.json run
through Prometheus' HTTP API (`query_range`, `$__rate_interval` as Grafana expands it) and drawn at
its place on the grid (`drawing.draw`).

    python -m tests.telemetry.dashboard docs/images/dashboard.png [--minutes 4]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from core.settings import Settings
from tests.support.servers import dev_server
from tests.telemetry.drawing import Line, draw
from tests.telemetry.prometheus import DASHBOARD, Panel, Prometheus, binary, legend, panels, rate_interval
from tests.telemetry.traffic import Stack, one_round, outage_possible
from threadline.client import connect

SCRAPE_S = 5.0
"""Prometheus' scrape interval here (deploy/prometheus/prometheus.yml's is 15 s)."""
OUTAGE_S = 20.0
"""How long the store outage halfway through lasts (as root): over a few scrapes, so its rate shows."""


def query(prometheus: Prometheus, panel: Panel, start: float, end: float) -> list[Line]:
    """The panel's series over `start`..`end`, as Grafana asks for them: a point per scrape interval."""
    step = prometheus.scrape
    window = rate_interval(step, prometheus.scrape)
    found = []
    for target in panel.targets:
        for series in prometheus.query_range(target.expr.replace("$__rate_interval", window), start, end, step):
            found.append(Line(legend(target, series.labels), series.points))
    return found


@dataclass(frozen=True, slots=True)
class Recorded:
    """What the panels showed over `span`, and the Prometheus that answered."""

    shown: list[tuple[Panel, list[Line]]]
    span: tuple[float, float]
    version: str


async def record(root: Path, minutes: float) -> Recorded:
    """Run the traffic for `minutes` with Prometheus scraping it; what each panel shows then."""
    env = await dev_server(root / "payloads", log_level="error")
    async with env:
        settings = dataclasses.replace(
            Settings.from_env({}),
            data=root / "data",
            stores={"default": root / "data" / "store"},
            address=env.client.service_client.config.target_host,
            task_queue=f"dashboard-{uuid.uuid4()}",
            payloads=root / "payloads",
            programs=("tests.support.acting_programs",),
        )
        outage, stack = outage_possible(settings), Stack(settings, root / "logs")
        try:
            with Prometheus(stack.jobs(), scrape=SCRAPE_S, log=root / "prometheus.log") as prometheus:
                await asyncio.to_thread(stack.wait_ready)
                await asyncio.to_thread(prometheus.scraped, 2)  # the round drawn from its start
                tl = await connect(settings, client=env.client)
                start = time.time()
                while time.time() < start + 60 * minutes:
                    now = outage and time.time() > start + 30 * minutes  # once, halfway through
                    await one_round(tl, stack, outage=OUTAGE_S if now else None)
                    outage = outage and not now
                await asyncio.to_thread(prometheus.scraped)
                end = time.time()
                shown = await asyncio.to_thread(lambda: [(p, query(prometheus, p, start, end)) for p in panels()])
                return Recorded(shown, (start, end), await asyncio.to_thread(prometheus.version))
        finally:
            stack.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("path", type=Path, help="the PNG to write")
    parser.add_argument("--minutes", type=float, default=4.0, help="how long the traffic runs")
    args = parser.parse_args()
    if binary() is None:
        raise SystemExit("prometheus is not installed (`make prometheus` installs Debian's as root)")
    with tempfile.TemporaryDirectory(prefix="threadline-dashboard-") as folder:
        recorded = asyncio.run(record(Path(folder), args.minutes))
    caption = (
        f"Each panel is its PromQL from {DASHBOARD.relative_to(DASHBOARD.parents[3])}, answered by "
        f"Prometheus {recorded.version} (query_range, a {SCRAPE_S:g} s scrape) from a worker and threadline serve "
        f"running {args.minutes:g} minutes of offline-model traffic;\n"
        "drawn by python -m tests.telemetry.dashboard (matplotlib), not by Grafana. Times are UTC."
    )
    draw(recorded.shown, args.path, span=recorded.span, title="Threadline", caption=caption)
    print(f"wrote {args.path}")


if __name__ == "__main__":
    main()
