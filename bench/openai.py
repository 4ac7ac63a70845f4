"""The OpenAI protocol's cost: a turn through `/openai/v1/responses` beside the same turn through the native
HTTP API, and the time to the first streamed delta beside a direct call to the provider.

    python -m bench.openai

One fake OpenAI-compatible server on loopback (`tests.support.fakeprovider.FakeProvider`) answers
every model call, streaming the same reply in `CHUNKS` pieces with `CHUNK_DELAY_S` before each
event; one dev server, one in-process worker whose `openai` provider calls the fake, and the service
(`create_app`) served by uvicorn on loopback.

- protocol turn: the official client's `responses.create(model=..., input=..., conversation=...)`,
  answered once the turn ended.
- anchor (native turn): `POST /v1/conversations/{id}/turns` with `{"message", "wait": true}`, the same
  program (`chat`) and model, by httpx.
- protocol first delta: `responses.create(..., stream=True)` until its first `response.output_text.delta`.
- anchor (direct first token): httpx straight to the fake's `/v1/chat/completions` with `stream: true`.

Each system has a conversation of its own with sequential turns; the systems alternate call by
call; `WARMUP` calls of each, then `REPS` timed. Absolute times depend on the machine (the server,
the worker, the fake and the driver share its cores): read the ratio.
"""

from __future__ import annotations

import contextlib
import os
import platform
import tempfile
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx
from openai import AsyncOpenAI

from activities.providers import build_providers
from bench._report import exit_now, run_benchmark
from bench._server import start_dev_server
from bench.streaming import REPLY, TEXT, direct
from bench.turns import Row, check, pct, settings_for, verdict
from tests.support.fakeprovider import Failure, FakeProvider, Reply
from tests.support.service_kit import serving
from threadline.client import connect
from threadline.http import create_app
from worker import build_worker

WARMUP = 5
REPS = 30
MODEL = "gpt-test"
TARGET_RATIO = 1.2
SYSTEMS = ("protocol", "native", "protocol stream", "direct stream")


class Always(deque[Reply | Failure]):
    """The fake's script: every request gets `REPLY`."""

    def __bool__(self) -> bool:
        return True

    def popleft(self) -> Reply | Failure:
        return REPLY


@dataclass(slots=True)
class Bench:
    client: AsyncOpenAI
    service: httpx.AsyncClient
    provider: httpx.AsyncClient
    fake_url: str
    conversations: dict[str, str]

    async def once(self, system: str, text: str) -> float:
        """One call of `system`: its latency (a whole turn) or its time to the first delta, in seconds."""
        start = time.perf_counter()
        if system == "protocol":
            made = await self.client.responses.create(model=MODEL, input=text, conversation=self.conversations[system])
            check(made.output_text == TEXT, f"the protocol answered {made.output_text[:60]!r}")
        elif system == "native":
            body = {"message": text, "wait": True, "program": "chat", "lm": f"openai:{MODEL}"}
            sent = await self.service.post(f"/v1/conversations/{self.conversations[system]}/turns", json=body)
            check(
                sent.status_code == 200 and sent.json()["result"] == TEXT, f"the native send answered {sent.text[:80]}"
            )
        elif system == "protocol stream":
            return await self._first_delta(text, start)
        else:
            first, _, _, got = await direct(self.provider, self.fake_url, text)
            check(got == TEXT, "the direct call's text differs")
            return first - start
        return time.perf_counter() - start

    async def _first_delta(self, text: str, start: float) -> float:
        first = 0.0
        stream = await self.client.responses.create(
            model=MODEL, input=text, conversation=self.conversations["protocol stream"], stream=True
        )
        async for event in stream:
            if event.type == "response.output_text.delta" and not first:
                first = time.perf_counter()
        check(first > 0, "the stream sent no delta")
        return first - start


@contextlib.asynccontextmanager
async def started(root: Path) -> AsyncIterator[Bench]:
    """The fake, a quiet dev server, a worker calling the fake, the service on loopback, the conversations."""
    with FakeProvider() as fake:
        fake.script = Always()
        async with (
            await start_dev_server() as env,
            httpx.AsyncClient(timeout=30) as worker_http,
            httpx.AsyncClient(timeout=30) as provider,
        ):
            settings = settings_for(env, root, f"bench-openai-{uuid.uuid4().hex[:8]}")
            keys = {"OPENAI_API_KEY": "sk-bench", "OPENAI_BASE_URL": fake.openai_url}
            providers = build_providers(settings, worker_http, env=keys)
            tl = await connect(settings, client=env.client)
            async with build_worker(env.client, settings, providers=providers), serving(create_app(tl)) as service:
                base = f"{str(service.base_url).rstrip('/')}/openai/v1"
                async with AsyncOpenAI(base_url=base, api_key="bench", max_retries=0) as client:
                    ids = {name: (await client.conversations.create()).id for name in ("protocol", "protocol stream")}
                    ids["native"] = f"bench-native-{uuid.uuid4().hex[:8]}"
                    yield Bench(client, service, provider, fake.openai_url, ids)


async def measure(b: Bench) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {name: [] for name in SYSTEMS}
    for i in range(WARMUP + REPS):
        for system in SYSTEMS if i % 2 == 0 else SYSTEMS[::-1]:
            took = await b.once(system, f"Question {i}: how do I add 1/{i % 7 + 2} and 1/{i % 5 + 3}?")
            if i >= WARMUP:
                samples[system].append(1000 * took)
    return samples


def report(samples: dict[str, list[float]]) -> list[Row]:
    rows: list[Row] = []
    for measure, (mine, anchor) in {
        "turn latency": ("protocol", "native"),
        "time to first delta": ("protocol stream", "direct stream"),
    }.items():
        for q, name in ((0.5, "p50"), (0.95, "p95")):
            t, a = pct(samples[mine], q), pct(samples[anchor], q)
            print(f"  {measure} {name}: {mine} {t:.1f} ms, {anchor} {a:.1f} ms, ratio {t / a:.2f}")
            rows.append(Row(f"{measure} {name} ({mine} / {anchor})", t, a, "ms", False))
    ratio = pct(samples["protocol"], 0.5) / pct(samples["native"], 0.5)
    print(f"  turn latency p50 ratio {ratio:.2f}   target <= {TARGET_RATIO}: {verdict(ratio <= TARGET_RATIO)}")
    rows.insert(0, Row("turn latency p50 ratio (protocol / native)", ratio, None, "x", False, 2))
    rows[0].target, rows[0].met = f"<= {TARGET_RATIO}", ratio <= TARGET_RATIO
    return rows


def header() -> None:
    print("OpenAI protocol benchmark: a turn through /openai/v1 beside the native HTTP API")
    print(f"  fake OpenAI server on loopback: {len(TEXT)} characters in {REPLY.chunks} chunks")
    print(f"  python {platform.python_version()} on {platform.system()}, os.cpu_count() = {os.cpu_count()}")
    print(f"  {WARMUP} warm-up calls, then {REPS} timed; systems alternate call by call")
    print()


async def run() -> list[Row]:
    with tempfile.TemporaryDirectory(prefix="bench-openai-") as tmp:
        async with started(Path(tmp)) as b:
            samples = await measure(b)
    return report(samples)


def main() -> list[Row]:
    """Run the measurement, print the details and the table; return the table's rows."""
    return run_benchmark(header, run, "ratio = protocol / anchor")


if __name__ == "__main__":
    main()
    exit_now()
