"""A steered turn against an interrupted one: what correcting a turn while its model answers costs.

    python -m bench.steer

Each repetition opens a conversation and sends a plain `tutor` turn whose model (the fake
OpenAI-compatible server on loopback, `tests.support.fakeprovider`) streams a long answer slowly;
once some of it has streamed, a second message is sent to the same conversation:

- threadline (`sends="steer"`): the message joins the running turn; its model call is cut short and
  asked again, shown what it had said and the message. One turn, two model calls.
- anchor (`sends="interrupt"`): the running turn is stopped (a `stop` record, then it ends
  `stopped`) and a new turn beside it answers the message. Two turns, two model calls.

The fake answers by what a request ends with: the first message gets the slow story, the second a
short reply, for both systems alike. Measured per repetition, systems alternating: the time from
the second send to its answer, the CPU time of this process (client, worker and fake, all
in-process) from the first send until both sends ended, and the records written. `WARMUP`
repetitions of each first, then `REPS` timed.

Absolute times depend on the machine; the ratios are what to read.
"""

from __future__ import annotations

import asyncio
import dataclasses
import statistics
import tempfile
import time
import uuid
from pathlib import Path

import httpx

from activities.providers import build_providers
from bench._report import exit_now, run_benchmark
from bench._server import start_dev_server
from bench.turns import Row, check, pct, settings_for
from store.backends.folder import FolderStore
from tests.support.fakeprovider import FakeProvider, Received, Reply
from threadline.client import Threadline, connect
from worker import build_worker

WARMUP = 2
REPS = 15
MODEL = "openai:gpt-test"
KEY = "sk-bench-steer"
FIRST, SECOND = "Tell me a long story.", "Make it short."
STORY = "Once upon a time " + "there was a story that went on and on, " * 20
STREAMED_S = 0.4
"""How long the first answer streams before the second message is sent."""


def script(received: Received) -> Reply:
    """The slow story for the first message, a short reply once the second is the last thing said."""
    users = [m for m in received.body.get("messages", []) if m.get("role") == "user"]
    if users and users[-1].get("content") == SECOND:
        return Reply("Short: they lived happily ever after.")
    return Reply(STORY, chunks=60, delay=0.04)


@dataclasses.dataclass(slots=True)
class Rep:
    latency_ms: float
    cpu_ms: float
    records: int


async def one(tl: Threadline, fake: FakeProvider, policy: str) -> Rep:
    """A turn corrected while it answers, under `policy`; what it cost."""
    cid = f"steer-{policy}-{uuid.uuid4().hex[:12]}"
    asked = len(fake.requests)
    cpu = time.process_time()
    running = await tl.conversation("tutor", id=cid, lm=MODEL).send(FIRST)
    for _ in range(2000):  # the first request reaches the model
        if len(fake.requests) > asked:
            break
        await asyncio.sleep(0.01)
    await asyncio.sleep(STREAMED_S)
    started = time.perf_counter()
    second = await tl.conversation("tutor", id=cid, lm=MODEL, sends=policy).predict(SECOND)  # type: ignore[arg-type]
    latency = time.perf_counter() - started
    first = await running.result()
    cpu = time.process_time() - cpu
    check(second.state == "done" and "Short" in str(second.result), f"the {policy} send was answered")
    if policy == "steer":
        check(first.id == second.id and len(first.steers) == 1, "the steer joined the running turn")
    else:
        check(first.state == "stopped" and first.id != second.id, "the running turn was interrupted")
    records = len(FolderStore(tl.settings.store_folder("default")).read(cid))
    return Rep(latency * 1000, cpu * 1000, records)


async def run() -> list[Row]:
    with tempfile.TemporaryDirectory(prefix="bench-steer-") as tmp, FakeProvider() as fake:
        fake.answer = script
        root = Path(tmp)
        async with await start_dev_server(root / "payloads") as env:
            settings = dataclasses.replace(
                settings_for(env, root / "data", f"bench-steer-{uuid.uuid4().hex[:8]}"), payloads=root / "payloads"
            )
            print(f"\n{WARMUP} warm-up repetitions of each, then {REPS} timed, alternating systems")
            async with httpx.AsyncClient() as http:
                env_vars = {"OPENAI_API_KEY": KEY, "OPENAI_BASE_URL": fake.openai_url}
                providers = build_providers(settings, http, env=env_vars)
                async with build_worker(env.client, settings, providers=providers):
                    tl = await connect(settings, client=env.client)
                    reps: dict[str, list[Rep]] = {"steer": [], "interrupt": []}
                    for i in range(WARMUP + REPS):
                        for policy in ("steer", "interrupt") if i % 2 == 0 else ("interrupt", "steer"):
                            rep = await one(tl, fake, policy)
                            if i >= WARMUP:
                                reps[policy].append(rep)
    ours, theirs = reps["steer"], reps["interrupt"]
    lat_ours, lat_theirs = [r.latency_ms for r in ours], [r.latency_ms for r in theirs]
    cpu_ours, cpu_theirs = [r.cpu_ms for r in ours], [r.cpu_ms for r in theirs]
    print(
        f"   steered p50 {statistics.median(lat_ours):.0f} ms, interrupted p50 {statistics.median(lat_theirs):.0f} ms "
        f"from the second send to its answer; records {ours[0].records} against {theirs[0].records}"
    )
    return [
        Row(
            "second message to its answer, p50", statistics.median(lat_ours), statistics.median(lat_theirs), "ms", False
        ),
        Row("second message to its answer, p95", pct(lat_ours, 0.95), pct(lat_theirs, 0.95), "ms", False),
        Row(
            "CPU per corrected turn (in-process), p50",
            statistics.median(cpu_ours),
            statistics.median(cpu_theirs),
            "ms",
            False,
        ),
        Row("records written", float(ours[0].records), float(theirs[0].records), "", False, digits=0),
    ]


def header() -> None:
    print("A turn corrected while its model answers: steered (threadline) against interrupted (anchor)")


def main() -> list[Row]:
    """Run the measurements, print the details and the table; return the table's rows."""
    return run_benchmark(header, run, "ratio = steer / interrupt")


if __name__ == "__main__":
    main()
    exit_now()
