"""Section 2 of bench/scale.py, continued: turns past a worker's cache.

A new worker process whose cache (`THREADLINE_WORKFLOW_CACHE`, at most Temporal's default of
1,000) holds fewer conversations than it serves takes a second turn of `cache + OVER` of them,
`CONCURRENCY` at a time, so the first ones are evicted (least recently used go first). Once the
timers that write their search attributes after a turn have fired (each brings its conversation
back into the cache), the first `OVER` stay evicted. Then `PROBES` evicted and `PROBES` cached
conversations, alternating, take a third turn, one at a time: each is timed and checked (the
answer says it was shown both earlier turns, the turn follows the second, the log holds three
turns, all done, with three request ids).
"""

from __future__ import annotations

import asyncio
import statistics
import time
from pathlib import Path

from bench._scale_kit import CONCURRENCY, QUIET_S, Row, add, expected, status_kb, worker_env
from bench.turns import check
from core.settings import DEFAULT_WORKFLOW_CACHE, Settings
from tests.support.processes import WorkerProcess
from threadline.client import Threadline

PROBES = 50
OVER = 2 * PROBES
"""Conversations served beyond the cache: twice the probes, so every evicted probe really is."""
KINDS = ("evicted", "cached")


async def third_turn(tl: Threadline, cid: str, second: str | None) -> tuple[float, bool]:
    """The conversation's third turn: its latency (ms), and whether it is right in every way checked."""
    chat = tl.conversation("tutor", id=cid)
    text = f"Third question of {cid}: and 1/4 + 1/4?"
    start = time.perf_counter()
    turn = await chat.predict(text)
    took = 1000 * (time.perf_counter() - start)
    turns = await chat.turns(all=True)
    ok = (
        turn.result == expected(text, 2)
        and turn.parent == second
        and len(turn.saw) == 2
        and [t.state for t in turns] == ["done"] * 3
        and len({t.request_id for t in turns}) == 3
    )
    return took, ok


async def second_turns(tl: Threadline, sent: list[str]) -> list[str | None]:
    """Every conversation's second turn, checked; their turn ids."""
    ids: list[str | None] = [None] * len(sent)

    async def second(i: int) -> None:
        text = f"Second question of {sent[i]}"
        turn = await tl.conversation("tutor", id=sent[i]).predict(text)
        check(turn.result == expected(text, 1), f"{sent[i]}'s second turn was answered {turn.result!r}")
        ids[i] = turn.id

    took = await add(second, 0, len(sent))
    print(f"  second turns of {len(sent):,} conversations ({CONCURRENCY} at a time) in {took:.0f} s", flush=True)
    return ids


Probed = tuple[dict[str, list[float]], dict[str, int]]
"""Each kind's third-turn latencies (ms) and how many of them were right."""


async def probe(tl: Threadline, sent: list[str], seconds: list[str | None]) -> Probed:
    """Third turns of the first (evicted) and last (cached) `PROBES`, alternating: times and rights."""
    times: dict[str, list[float]] = {kind: [] for kind in KINDS}
    right = dict.fromkeys(KINDS, 0)
    for k in range(PROBES):
        which = {"evicted": k, "cached": len(sent) - PROBES + k}
        for kind in KINDS if k % 2 == 0 else KINDS[::-1]:
            took, ok = await third_turn(tl, sent[which[kind]], seconds[which[kind]])
            times[kind].append(took)
            right[kind] += ok
    return times, right


async def past_cache(tl: Threadline, settings: Settings, root: Path, ids: list[str]) -> list[Row]:
    """A worker with a smaller cache: evicted conversations' next turns, checked and timed."""
    cache = min(DEFAULT_WORKFLOW_CACHE, len(ids) - OVER)
    sent = ids[: cache + OVER]
    process = WorkerProcess(settings, root / "worker-evict.log", env=worker_env(cache))
    try:
        await asyncio.to_thread(process.wait_ready)
        print(f"  a new worker caching {cache:,} conversations, sent {len(sent):,}", flush=True)
        seconds = await second_turns(tl, sent)
        # Each conversation writes its search attributes on a timer after its turn; an evicted one's
        # timer would bring it back into the cache. Once all have fired, the cache holds the last ones.
        await asyncio.sleep(settings.attributes_every_s + QUIET_S)
        times, right = await probe(tl, sent, seconds)
        rss = status_kb(process.process.pid, "VmRSS") / 1024
    finally:
        await asyncio.to_thread(process.stop)
    cold, warm = (statistics.median(times[kind]) for kind in KINDS)
    print(
        f"  third turns: evicted p50 {cold:.0f} ms (max {max(times['evicted']):.0f}), cached p50 {warm:.0f} ms; "
        f"right: {right['evicted']}/{PROBES} evicted, {right['cached']}/{PROBES} cached; worker RSS {rss:.0f} MB",
        flush=True,
    )
    return [
        Row(
            f"evicted conversations whose next turn is right (cache {cache:,}, {len(sent):,} served)",
            f"{right['evicted']}/{PROBES}",
            f"{right['cached']}/{PROBES} cached",
            target="all",
            met=right["evicted"] == PROBES and right["cached"] == PROBES,
            higher=None,
        ),
        Row("next turn of an evicted conversation, p50 (anchor: a cached one's)", cold, warm, "ms", 0),
    ]
