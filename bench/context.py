"""Context benchmark: a long conversation with summary compression against one shown all its turns.

    python -m bench.context

Two `tutor` conversations are driven side by side (alternating turn by turn, the first one
alternating too) to turn `TURNS` through an in-process worker whose `openai` provider calls a
fake OpenAI-compatible server on loopback:

- threadline (compressed): `context={"summary": {"after": 20, "keep": 6}}`;
- anchor (all turns): the default rule, every earlier turn shown verbatim.

The fake answers per request: a summary request (its system message holds the summariser's
"Summarise the earlier part") gets structured outputs `{"facts": [...], "result": "..."}`, any other
request a tutor's answer of about 500 characters. The fake summariser behaves as a model that
keeps what it is told to: it carries the previous key facts over and adds "The learner is Alex"
once the turns it folds (or the previous facts) say so. Turn 1 says "My name is Alex"; whether
the turn-`POINTS[-1]` request still holds that fact is checked.

Measured at turns `POINTS`:
1. the size of the turn's main request (its Content-Length, as the fake received it);
2. the client's latency of a turn (`chat.predict`), the median of the 10 turns around the point
   (turns k-4..k+5, so the run goes on to turn `TURNS`);
3. summary calls per 100 turns, and the summaries' share of the latency (means over turns 101-200).
Then, from the workflow histories of turns 101-200, where a turn's time goes on the server:
workflow tasks and activities per turn, and how long a workflow task waits and runs.

Absolute times depend on the machine; the ratios compressed / all turns are what to read.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import re
import statistics
import tempfile
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from activities.providers import build_providers
from bench._report import exit_now, run_benchmark
from bench._server import start_dev_server
from bench.streaming import TaskCost, task_cost
from bench.turns import check, settings_for
from tests.support.fakeprovider import Failure, FakeProvider, Received, Reply
from threadline.client import Conversation, connect
from worker import build_worker

MODEL = "openai:gpt-test"
SUMMARY = {"after": 20, "keep": 6}
POINTS = (10, 50, 100, 200)
BEFORE, AFTER = 4, 5
"""The latency at turn k is the median of turns k-BEFORE..k+AFTER."""
TURNS = max(POINTS) + AFTER
SIZE_TARGET = 0.25
NAME_SAID = "My name is Alex"
NAME_FACT = "The learner is Alex"
SUMMARISER_MARK = "Summarise the earlier part"
SYSTEMS = {"threadline": "compressed (summary after 20, keep 6)", "anchor": "all turns (default rule)"}

# ------------------------------------------------------------------ the scripted conversation


def message(i: int) -> str:
    """What the learner says at turn `i` (from 1); turn 1 says who they are."""
    ask = (
        f"Question {i}: I am revising fractions for Thursday's exam. Could you explain once more why "
        f"{i % 9 + 1}/{i % 7 + 2} + 1/{i % 5 + 3} needs a common denominator, and show me the steps?"
    )
    return f"Hi! {NAME_SAID} and I am 14. {ask}" if i == 1 else ask


def answer(i: int) -> str:
    """The tutor's answer to question `i` (about 500 characters)."""
    a, b, c = i % 9 + 1, i % 7 + 2, i % 5 + 3
    return (
        f"Let's add {a}/{b} and 1/{c} step by step.\n\n"
        f"1. The bottoms differ ({b} and {c}), so the pieces are different sizes: we cannot add the tops yet.\n"
        f"2. Find a common denominator: {b} x {c} = {b * c} works (a smaller common multiple also would).\n"
        f"3. Rewrite each fraction: {a}/{b} = {a * c}/{b * c} and 1/{c} = {b}/{b * c}.\n"
        f"4. Now add the tops: {a * c} + {b} = {a * c + b}, so the sum is {a * c + b}/{b * c}.\n\n"
        "Check whether it simplifies, and try the next one yourself: you are getting there!"
    )


def is_summary(request: Received) -> bool:
    """A summariser's request: its system message is the summariser's instruction."""
    messages = request.body.get("messages") or []
    system = [str(m.get("content")) for m in messages if m.get("role") == "system"]
    return any(SUMMARISER_MARK in text for text in system)


def last_user(request: Received) -> str:
    users = [str(m.get("content")) for m in request.body.get("messages") or [] if m.get("role") == "user"]
    return users[-1] if users else ""


def summary_reply(request: Received) -> Reply:
    """What a careful summariser answers: the previous facts, and the learner's name once it is seen."""
    text = last_user(request)
    facts: list[str] = []
    for line in text.splitlines():
        if line.startswith("previous_facts:"):
            facts = [str(f) for f in json.loads(line.removeprefix("previous_facts:").strip())]
    if NAME_SAID in text and NAME_FACT not in facts:
        facts.append(NAME_FACT)
    asked = [int(n) for n in re.findall(r"Question (\d+):", text)]
    upto = f" up to question {max(asked)}" if asked else ""
    summary = f"The learner is revising adding fractions for Thursday's exam; the questions{upto} were worked through."
    return Reply(outputs={"facts": facts, "result": summary}, input_tokens=len(text) // 4, output_tokens=40)


def tutor_reply(request: Received) -> Reply:
    asked = re.search(r"Question (\d+):", last_user(request))
    return Reply(answer(int(asked.group(1)) if asked else 0), input_tokens=len(json.dumps(request.body)) // 4)


class PerRequestScript(deque[Reply | Failure]):
    """The fake's script, chosen per request: a summary reply for a summary request, a tutor's
    answer for any other. `FakeProvider` keeps the request in `requests` and takes
    `script.popleft()` right after, with no await between, so `requests[-1]` is the one answered."""

    def __init__(self, requests: list[Received]) -> None:
        super().__init__()
        self.requests = requests

    def __bool__(self) -> bool:
        return True

    def popleft(self) -> Reply | Failure:
        request = self.requests[-1]
        return summary_reply(request) if is_summary(request) else tutor_reply(request)


# ------------------------------------------------------------------ measuring


@dataclass(slots=True)
class Track:
    """One conversation's turns: latency, the main request's size, the summary calls it took."""

    chat: Conversation
    latency: list[float] = field(default_factory=list)
    size: list[int] = field(default_factory=list)
    summaries: list[int] = field(default_factory=list)
    requests: dict[int, Received] = field(default_factory=dict)
    unclaimed: int = 0
    """Summary calls seen during the other conversation's turns (summaries are made in the
    background after a turn, so they often arrive while the next turn, the other's, runs)."""

    def around(self, k: int) -> list[float]:
        """The latencies of turns k-BEFORE..k+AFTER (turns count from 1)."""
        return self.latency[k - 1 - BEFORE : k + AFTER]


async def one_turn(fake: FakeProvider, track: Track, i: int, summarising: Track) -> None:
    before = len(fake.requests)
    start = time.perf_counter()
    turn = await track.chat.predict(message(i))
    track.latency.append(time.perf_counter() - start)
    check(turn.result == answer(i), f"turn {i} was answered {turn.result!r}")
    new = fake.requests[before:]
    main = [r for r in new if not is_summary(r)]
    check(len(main) == 1, f"turn {i}: {len(main)} main requests")
    track.size.append(int(main[0].headers["content-length"]))
    # Only the compressed conversation summarises: its calls are its own, whenever they arrive.
    summarising.unclaimed += len(new) - 1
    track.summaries.append(0)
    if track is summarising:
        track.summaries[-1], track.unclaimed = track.unclaimed, 0
    if i in POINTS:
        track.requests[i] = main[0]


async def drive(fake: FakeProvider, tracks: dict[str, Track]) -> None:
    names = list(tracks)
    for i in range(1, TURNS + 1):
        for name in names if i % 2 else names[::-1]:
            await one_turn(fake, tracks[name], i, tracks["threadline"])
        if i % 25 == 0 or i == TURNS:
            cells = "; ".join(
                f"{name} last 25 turns median {1000 * statistics.median(t.latency[-25:]):.0f} ms, "
                f"request {t.size[-1] / 1024:.1f} KiB, {sum(t.summaries)} summary calls"
                for name, t in tracks.items()
            )
            print(f"  turn {i}: {cells}")


# ------------------------------------------------------------------ the table


@dataclass(slots=True)
class Row:
    """One line of the result table: threadline = compressed, anchor = all turns."""

    measure: str
    threadline: float | str
    anchor: float | str
    unit: str = ""
    digits: int = 1
    target: str = "-"
    met: bool | None = None
    lower: bool | None = True

    @property
    def ratio(self) -> float | None:
        if isinstance(self.threadline, str) or isinstance(self.anchor, str) or not self.anchor:
            return None
        return self.threadline / self.anchor

    def cell(self, value: float | str) -> str:
        if isinstance(value, str):
            return value
        return f"{value:,.{self.digits}f} {self.unit}".strip()

    def markdown(self) -> str:
        better = "" if self.lower is None else (" (lower is better)" if self.lower else " (higher is better)")
        ratio = "-" if self.ratio is None else f"{self.ratio:.3f}" if self.ratio < 0.1 else f"{self.ratio:.2f}"
        met = "-" if self.met is None else ("met" if self.met else "**NOT met**")
        cells = [f"{self.measure}{better}", self.cell(self.threadline), self.cell(self.anchor), ratio, self.target, met]
        return "| " + " | ".join(cells) + " |"


def per_100(counts: Sequence[int], first: int) -> int:
    """The summary calls of turns first..first+99."""
    return sum(counts[first - 1 : first + 99])


def report(tracks: dict[str, Track], history: dict[str, Any]) -> list[Row]:
    tl, all_turns = tracks["threadline"], tracks["anchor"]
    rows: list[Row] = []
    print("  at turn   request size (compressed / all turns / ratio)     turn latency, median of 10 (ratio)")
    for k in POINTS:
        size_t, size_a = tl.size[k - 1], all_turns.size[k - 1]
        lat_t, lat_a = (1000 * statistics.median(t.around(k)) for t in (tl, all_turns))
        print(
            f"  {k:>7}   {size_t:>9,} B / {size_a:>9,} B / {size_t / size_a:.3f}"
            f"          {lat_t:.1f} ms / {lat_a:.1f} ms ({lat_t / lat_a:.2f})"
        )
        target, met = ("-", None)
        if k == max(POINTS):
            target, met = f"ratio <= {SIZE_TARGET:.2f}", size_t / size_a <= SIZE_TARGET
        rows.append(Row(f"main request size at turn {k}", size_t, size_a, "B", 0, target, met))
    for k in POINTS:
        lat_t, lat_a = (1000 * statistics.median(t.around(k)) for t in (tl, all_turns))
        rows.append(Row(f"turn latency at turn {k} (median, turns {k - BEFORE}-{k + AFTER})", lat_t, lat_a, "ms"))
    late = slice(100, 200)
    mean_t, mean_a = (1000 * statistics.mean(t.latency[late]) for t in (tl, all_turns))
    with_summary = [1000 * s for s, n in zip(tl.latency[late], tl.summaries[late], strict=True) if n]
    without = [1000 * s for s, n in zip(tl.latency[late], tl.summaries[late], strict=True) if not n]
    rows.append(Row("turn latency, mean of turns 101-200 (summary turns included)", mean_t, mean_a, "ms"))
    for first in (1, 101):
        rows.append(
            Row(
                f"summary calls, turns {first}-{first + 99}",
                float(per_100(tl.summaries, first)),
                float(per_100(all_turns.summaries, first)),
                digits=0,
            )
        )
    final = max(POINTS)
    body_t, body_a = (json.dumps(t.requests[final].body, ensure_ascii=False) for t in (tl, all_turns))
    fact_t = NAME_FACT in body_t or NAME_SAID in body_t
    fact_a = NAME_FACT in body_a or NAME_SAID in body_a
    rows.append(
        Row(
            f"turn 1's key fact (the learner is Alex) in the turn-{final} request",
            "yes" if fact_t else "no",
            "yes" if fact_a else "no",
            target="yes",
            met=fact_t,
            lower=None,
        )
    )
    shown = {
        name: sum(m["role"] == "user" for m in t.requests[final].body["messages"]) - 1 for name, t in tracks.items()
    }
    print(
        f"  turn {final}: compressed request shows {shown['threadline']} earlier turns verbatim plus the summary "
        f"(it says {NAME_FACT!r}: {NAME_FACT in body_t}; the turn-1 words {NAME_SAID!r}: {NAME_SAID in body_t}); "
        f"the all-turns request shows {shown['anchor']} earlier turns"
    )
    keep = SUMMARY["keep"]
    print(
        f"  (a compressed request shows {keep} to {2 * keep - 1} earlier turns verbatim, the summary being extended "
        f"once {2 * keep} are left out, so its size saw-tooths rather than growing)"
    )
    print(
        f"  chat.history() of the compressed conversation at turn {TURNS}: {history.get('summarised_turns')} turns "
        f"summarised, {history.get('verbatim_turns')} verbatim, facts {history.get('facts')}"
    )
    print(
        f"  summary calls: {per_100(tl.summaries, 1)} in turns 1-100, {per_100(tl.summaries, 101)} in turns 101-200 "
        f"(the first at turn {tl.summaries.index(1) + 1 if 1 in tl.summaries else '-'}, then every "
        f"{SUMMARY['keep']} turns: each folds the {SUMMARY['keep']} turns newly left out)"
    )
    if with_summary and without:
        print(
            f"  compressed turns 101-200: {len(with_summary)} with a summary call, median "
            f"{statistics.median(with_summary):.1f} ms; {len(without)} without, median "
            f"{statistics.median(without):.1f} ms; "
            f"mean of all {mean_t:.1f} ms against {mean_a:.1f} ms for all turns"
        )
    return rows


# ------------------------------------------------------------------ the run


@contextlib.asynccontextmanager
async def started(root: Path) -> AsyncIterator[tuple[FakeProvider, dict[str, Track]]]:
    with FakeProvider() as fake:
        fake.script = PerRequestScript(fake.requests)
        async with await start_dev_server() as env, httpx.AsyncClient(timeout=30) as http:
            settings = settings_for(env, root, f"bench-context-{uuid.uuid4().hex[:8]}")
            env_vars = {"OPENAI_API_KEY": "sk-bench", "OPENAI_BASE_URL": fake.openai_url}
            async with build_worker(env.client, settings, providers=build_providers(settings, http, env=env_vars)):
                tl = await connect(settings, client=env.client)
                # warm the worker and the fake (imports, first workflow task, first connection)
                warm = tl.conversation("tutor", id=f"warm-{uuid.uuid4().hex[:8]}", lm=MODEL)
                for i in range(1, 4):
                    await warm.predict(message(i))
                fake.requests.clear()
                contexts: dict[str, dict[str, Any] | None] = {"threadline": {"summary": SUMMARY}, "anchor": None}
                tracks = {
                    name: Track(tl.conversation("tutor", id=f"ctx-{name}-{uuid.uuid4().hex[:8]}", lm=MODEL, context=c))
                    for name, c in contexts.items()
                }
                yield fake, tracks


def header() -> None:
    import temporalio

    print("Context benchmark: a 200-turn conversation with summary compression against all turns shown")
    for name, what in SYSTEMS.items():
        print(f"  {name}: {what}")
    print(f"  lm {MODEL}: a fake OpenAI server on loopback, answering at once (tutor answers of ~500 characters)")
    print(
        f"  temporalio {temporalio.__version__}, python {platform.python_version()} on {platform.system()} "
        f"{platform.machine()}, os.cpu_count() = {os.cpu_count()}"
    )
    print(f"  {TURNS} turns each, the conversations alternating turn by turn; ratio = compressed / all turns")
    print()


async def run() -> list[Row]:
    with tempfile.TemporaryDirectory(prefix="bench-context-") as tmp:
        async with started(Path(tmp)) as (fake, tracks):
            await drive(fake, tracks)
            history = await tracks["threadline"].chat.history()
            costs = {name: await task_cost(t.chat) for name, t in tracks.items()}
    print()
    rows = report(tracks, history)
    explain(costs, tracks)
    return rows


def explain(costs: dict[str, TaskCost], tracks: dict[str, Track]) -> None:
    """Where a turn's time goes on the server, turns 101-200 (the run holding them)."""
    print("  On the server, turns 101-200 (the run holding them, from its history's timestamps):")
    for name, cost in costs.items():
        print(f"    {name} ({SYSTEMS[name]}): {cost.line()}")
    extra = costs["threadline"].tasks - costs["anchor"].tasks
    each = statistics.mean(c.wait_ms + c.run_ms for c in costs.values())
    t, a = (1000 * statistics.mean(tracks[name].latency[100:200]) for name in ("threadline", "anchor"))
    measured = t - a
    print(
        f"    compression costs {extra:.2f} more workflow task per turn (prepare_turn, an activity on every turn, "
        f"due or not) at about {each:.0f} ms each (queue wait + run) here: {extra * each:.0f} ms a turn, against "
        f"a measured difference of {measured:.0f} ms (means, turns 101-200); the fake answers at once, so the "
        "summary calls themselves cost next to nothing here (with a real model each one delays its turn's answer)"
    )


def main() -> list[Row]:
    """Run the measurement, print the details and the table; return the table's rows."""
    return run_benchmark(header, run, "threadline = compressed, anchor = all turns")


if __name__ == "__main__":
    main()
    exit_now()
