"""Section 3 of bench/scale.py: one conversation of 1,000 turns, with and without a context rule.

Two `tutor` conversations take `TURNS` turns, alternating turn by turn, through a worker process
whose `openai` provider calls a fake OpenAI server on loopback (bench/context.py's script: a
tutor's answer of about 500 characters, at once): one shows every earlier turn (the default
rule), one `{"window": 10}` (the last 10 messages: 5 turns). Measured at turns `POINTS`: the main
request's size (its Content-Length as the fake received it) and the client's turn latency (the
median of the 10 turns up to that one).

Then, once the conversations' current workflow runs hold each of `POSITIONS` turns (more turns
are taken to get there) and their attribute timers have fired, the worker is stopped (SIGTERM)
and a new one started; after one turn of
a new conversation (the new process's own first workflow task and imports), each long
conversation takes its first turn on the new worker (replaying its current run, reading its log)
and then `WARM` warm turns, whose median is the anchor.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import statistics
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType

from bench._scale_kit import QUIET_S, Chart, Row, Section, sizes
from bench._server import start_dev_server
from bench.context import PerRequestScript, answer, message
from bench.turns import check, settings_for
from core.settings import DEFAULT_TURNS_PER_RUN, Settings
from tests.support.fakeprovider import FakeProvider
from tests.support.processes import WorkerProcess
from threadline.client import Conversation, Threadline, connect

POINTS = sizes(os.environ.get("BENCH_SCALE_TURNS", ""), (10, 100, 1000))
TURNS = max(POINTS)
AROUND = 10
"""The latency at turn k is the median of turns k-AROUND+1..k."""
RULES: dict[str, dict[str, Any] | None] = {"window 10": {"window": 10}, "all turns": None}
POSITIONS = (1, DEFAULT_TURNS_PER_RUN // 2, DEFAULT_TURNS_PER_RUN - 1)
"""Turns the conversation's current workflow run holds when the worker restarts (a run continues as new
after `THREADLINE_TURNS_PER_RUN` turns, so a restart finds from 0 to one fewer to replay)."""
WARM = 5
MODEL = "openai:gpt-test"
TARGET = 1.5


@dataclass(slots=True)
class Track:
    """One long conversation: every turn's latency and main request size, then cold and warm turns."""

    chat: Conversation
    latency_ms: list[float] = field(default_factory=list)
    size: list[int] = field(default_factory=list)
    cold: dict[int, float] = field(default_factory=dict)
    """The first turn after a restart, by the turns the current run held then."""
    warm: dict[int, list[float]] = field(default_factory=dict)
    """The warm turns that followed it."""
    events: dict[int, int] = field(default_factory=dict)
    """The history events of the current run at the restart (what the new worker replays)."""

    def warm_ms(self, position: int) -> float:
        return statistics.median(self.warm[position])

    def around(self, k: int) -> float:
        return statistics.median(self.latency_ms[max(0, k - AROUND) : k])


async def one_turn(fake: FakeProvider, track: Track) -> tuple[float, int]:
    """The conversation's next turn: its latency (ms) and the size of the one request it made."""
    i = len(track.size) + 1
    fake.requests.clear()  # the fake keeps every body; a request of turn 1,000 holds all 999 before
    start = time.perf_counter()
    turn = await track.chat.predict(message(i))
    took = 1000 * (time.perf_counter() - start)
    check(turn.result == answer(i), f"turn {i} was answered {turn.result!r}")
    check(len(fake.requests) == 1, f"turn {i} made {len(fake.requests)} requests")
    size = int(fake.requests[0].headers["content-length"])
    track.size.append(size)
    return took, size


async def drive(fake: FakeProvider, tracks: dict[str, Track]) -> None:
    names = list(tracks)
    for i in range(1, TURNS + 1):
        for name in names if i % 2 else names[::-1]:
            took, _size = await one_turn(fake, tracks[name])
            tracks[name].latency_ms.append(took)
        if i % 100 == 0 or i in POINTS:
            cells = "; ".join(
                f"{name}: {t.around(i):.0f} ms, request {t.size[-1] / 1024:,.1f} KiB" for name, t in tracks.items()
            )
            print(f"  turn {i:>5,}: {cells}", flush=True)


async def current_run(chat: Conversation) -> tuple[int, int]:
    """The turns and the history events of the conversation's current workflow run."""
    history = await chat.handle.fetch_history()
    scheduled = [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]
    return scheduled.count("run_turn") + scheduled.count("place_and_run"), len(history.events)


async def advance(fake: FakeProvider, tracks: dict[str, Track], position: int) -> None:
    """Turns of both conversations until the current run of the first holds `position` turns."""
    first = next(iter(tracks.values()))
    while (await current_run(first.chat))[0] != position:
        for track in tracks.values():
            await one_turn(fake, track)


async def restarts(
    fake: FakeProvider, tl: Threadline, settings: Settings, worker: WorkerProcess, tracks: dict[str, Track]
) -> WorkerProcess:
    """At each of `POSITIONS`, restart the worker; then every conversation's cold turn, then warm ones."""
    for r, position in enumerate(POSITIONS):
        await advance(fake, tracks, position)
        runs = {name: await current_run(t.chat) for name, t in tracks.items()}
        # Once a burst of turns is over the workflow writes its search attributes on a timer (within
        # THREADLINE_ATTRIBUTES_EVERY_S): had it fired on the new worker, the replay would happen there
        # before the cold turn, off its path.
        await asyncio.sleep(settings.attributes_every_s + QUIET_S)
        await asyncio.to_thread(worker.stop)
        worker = WorkerProcess(settings, worker.log.with_name(f"worker-{r + 1}.log"), env=worker_env(fake))
        await asyncio.to_thread(worker.wait_ready)
        start = time.perf_counter()
        await tl.conversation("tutor", id=f"first-{uuid.uuid4().hex[:8]}", lm=MODEL).predict(message(2))
        first = 1000 * (time.perf_counter() - start)
        names = list(tracks) if r % 2 == 0 else list(tracks)[::-1]
        for name in names:
            tracks[name].cold[position] = (await one_turn(fake, tracks[name]))[0]
            tracks[name].events[position] = runs[name][1]
        for _ in range(WARM):
            for name in names:
                tracks[name].warm.setdefault(position, []).append((await one_turn(fake, tracks[name]))[0])
        cells = "; ".join(
            f"{name}: run of {runs[name][0]} turns, {runs[name][1]:,} events: cold {t.cold[position]:.0f} ms, "
            f"warm {t.warm_ms(position):.0f} ms"
            for name, t in tracks.items()
        )
        print(f"  restart {r + 1} (a new conversation's first turn {first:.0f} ms); {cells}", flush=True)
    return worker


def rows_for(tracks: dict[str, Track]) -> list[Row]:
    """Request size and latency at each point, their growth, then the cold turns."""
    rule, every = tracks["window 10"], tracks["all turns"]
    rows = [
        Row(f"request size at turn {k:,}, window 10 (anchor: all turns)", rule.size[k - 1], every.size[k - 1], "B", 0)
        for k in POINTS
    ]
    for k in POINTS:
        measure = f"turn latency at turn {k:,} (median of 10), window 10 / all turns"
        rows.append(Row(measure, rule.around(k), every.around(k), "ms", 0))
    if len(POINTS) > 1:
        low, high = min(POINTS), max(POINTS)
        ours, theirs = (t.around(high) / t.around(low) for t in (rule, every))
        rows.append(Row(f"turn latency, turn {high:,} / turn {low:,}, window 10 / all turns", ours, theirs, "", 2))
    return rows + cold_rows(tracks)


def cold_rows(tracks: dict[str, Track]) -> list[Row]:
    rows = []
    for position in POSITIONS:
        for name, track in tracks.items():
            cold, warm = track.cold[position], track.warm_ms(position)
            measure = (
                f"first turn after a worker restart, its run holding {position} turns "
                f"({track.events[position]:,} events), {name} (anchor: the warm turns after it)"
            )
            rows.append(Row(measure, cold, warm, "ms", 0, f"<= {TARGET}x", cold <= TARGET * warm))
    return rows


def charts(tracks: dict[str, Track]) -> list[Chart]:
    xs = [float(i) for i in range(1, TURNS + 1)]
    rolling = {
        name: [statistics.median(t.latency_ms[max(0, i - AROUND) : i]) for i in range(1, TURNS + 1)]
        for name, t in tracks.items()
    }
    return [
        Chart(
            "scale-long-size",
            "Main request size as one conversation grows",
            "turn",
            "bytes",
            xs,
            {name: [float(n) for n in t.size[:TURNS]] for name, t in tracks.items()},
            log_y=True,
        ),
        Chart("scale-long-latency", "Turn latency (median of the last 10 turns)", "turn", "ms", xs, rolling),
        Chart(
            "scale-long-cold",
            f"First turn after a worker restart, turn {TURNS:,}+ (warm: the turns after it)",
            "turns in the current workflow run (replayed by the new worker)",
            "ms",
            [float(p) for p in POSITIONS],
            {
                **{f"{name}, first turn": [t.cold[p] for p in POSITIONS] for name, t in tracks.items()},
                **{f"{name}, warm turns": [t.warm_ms(p) for p in POSITIONS] for name, t in tracks.items()},
            },
            log_x=False,
        ),
    ]


def worker_env(fake: FakeProvider) -> dict[str, str]:
    return {"OPENAI_API_KEY": "sk-bench-scale", "OPENAI_BASE_URL": fake.openai_url}


async def run() -> Section:
    """Both long conversations, then the restarts; the rows and the charts."""
    with tempfile.TemporaryDirectory(prefix="bench-scale-long-") as tmp, FakeProvider() as fake:
        fake.script = PerRequestScript(fake.requests)
        root = Path(tmp)
        async with await start_dev_server(root / "payloads") as env:
            settings = dataclasses.replace(
                settings_for(env, root / "data", f"bench-scale-long-{uuid.uuid4().hex[:8]}"),
                payloads=root / "payloads",
            )
            worker = WorkerProcess(settings, root / "worker-0.log", env=worker_env(fake))
            try:
                await asyncio.to_thread(worker.wait_ready)
                tl = await connect(settings, client=env.client)
                tag = uuid.uuid4().hex[:8]
                tracks = {
                    name: Track(tl.conversation("tutor", id=f"long-{tag}-{i}", lm=MODEL, context=rule))
                    for i, (name, rule) in enumerate(RULES.items())
                }
                await drive(fake, tracks)
                worker = await restarts(fake, tl, settings, worker, tracks)
            finally:
                await asyncio.to_thread(worker.stop)
    return Section(rows_for(tracks), charts(tracks))
