"""Programs with code: a `support` turn (two helpers, one remembered) against the same model calls made
directly.

    python -m bench.code

One fake OpenAI-compatible server on loopback (`tests.support.fakeprovider`) answers both systems by what a
request holds (`tests.support.support_kit`: `topic` sorts, `answer` answers). Whole replies (no streaming), so
both sides parse the same JSON.
- anchor: two `httpx` POSTs to `/v1/chat/completions` with the bodies Threadline sends for `topic` and
  `answer` (what code calling a model twice without durability does);
- threadline: `chat.predict(...)` of `support` (`tests.support.support_programs`, `remembers={"answer":
  "conversation"}`) through an in-process worker on a dev server, a new conversation each turn: the
  code runs in the turn's activity, each reply is recorded before it is used, `answer`'s call is a
  `call` record.
The systems alternate turn by turn; `WARMUP` turns of each first, then `REPS` timed. Absolute times
depend on the machine (the server, the worker, the fake and the driver share its cores); the ratios
are what to read.
"""

from __future__ import annotations

import dataclasses
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

from activities.providers import build_providers
from bench._report import exit_now, run_benchmark
from bench._server import start_dev_server
from bench.turns import Row, check, pct, settings_for
from tests.support.fakeprovider import FakeProvider
from tests.support.support_kit import MODEL, answer_for, helper_of
from threadline.client import Threadline, connect
from worker import build_worker

WARMUP = 3
REPS = 20
KEY = "sk-bench-code"
MESSAGE = "Where is my parcel B-2210?"


async def anchor_turn(http: httpx.AsyncClient, url: str, bodies: list[dict[str, Any]]) -> float:
    """The same two model calls made directly, one after the other (the second needs the first's answer)."""
    started = time.perf_counter()
    for body in bodies:
        answer = (await http.post(f"{url}/chat/completions", json=body)).json()
        check(bool(answer["choices"][0]["message"].get("content")), "the anchor got an answer")
    return time.perf_counter() - started


async def threadline_turn(tl: Threadline) -> float:
    started = time.perf_counter()
    chat = tl.conversation(
        "support", id=f"code-{uuid.uuid4().hex[:12]}", lm=MODEL, remembers={"answer": "conversation"}
    )
    turn = await chat.predict(MESSAGE)
    check(turn.state == "done" and turn.result.startswith("answer after"), "the threadline turn ran both helpers")
    return time.perf_counter() - started


async def bench_turns(tl: Threadline, fake: FakeProvider, http: httpx.AsyncClient) -> list[Row]:
    await threadline_turn(tl)
    bodies = [fake.requests[-2].body | {"stream": False}, fake.requests[-1].body | {"stream": False}]
    check([helper_of(r) for r in fake.requests[-2:]] == ["topic", "answer"], "the turn asked topic, then answer")
    for body in bodies:
        body.pop("stream_options", None)
    times: dict[str, list[float]] = {"threadline": [], "anchor": []}
    for i in range(WARMUP + REPS):
        for name in ("threadline", "anchor") if i % 2 == 0 else ("anchor", "threadline"):
            took = await (threadline_turn(tl) if name == "threadline" else anchor_turn(http, fake.openai_url, bodies))
            if i >= WARMUP:
                times[name].append(took * 1000)
    ours, theirs = times["threadline"], times["anchor"]
    overhead = statistics.median(ours) - statistics.median(theirs)
    print(
        f"   threadline p50 {statistics.median(ours):.0f} ms, anchor p50 {statistics.median(theirs):.0f} ms: "
        f"{overhead:.0f} ms for durability (a turn placed and ended, 2 replies and 1 call recorded)"
    )
    return [
        Row(
            "program turn with two helpers, p50", statistics.median(ours), statistics.median(theirs), "ms", higher=False
        ),
        Row("program turn with two helpers, p95", pct(ours, 0.95), pct(theirs, 0.95), "ms", higher=False),
    ]


async def run() -> list[Row]:
    with tempfile.TemporaryDirectory(prefix="bench-code-") as tmp, FakeProvider() as fake:
        fake.answer = answer_for
        root = Path(tmp)
        async with await start_dev_server(root / "payloads") as env:
            settings = dataclasses.replace(
                settings_for(env, root / "data", f"bench-code-{uuid.uuid4().hex[:8]}"),
                programs=("tests.support.support_programs",),
                payloads=root / "payloads",
            )
            print(f"\nA support turn: {WARMUP} warm-up turns, then {REPS} timed, alternating systems")
            async with httpx.AsyncClient() as http:
                env_vars = {"OPENAI_API_KEY": KEY, "OPENAI_BASE_URL": fake.openai_url, "OPENAI_STREAM": "false"}
                providers = build_providers(settings, http, env=env_vars)
                async with build_worker(env.client, settings, providers=providers):
                    return await bench_turns(await connect(settings, client=env.client), fake, http)


def header() -> None:
    print("Programs with code: a turn whose code calls two helpers, against the same model calls made directly")


def main() -> list[Row]:
    """Run the measurement, print the details and the table; return the table's rows."""
    return run_benchmark(header, run, "ratio = threadline / anchor")


if __name__ == "__main__":
    main()
    exit_now()
