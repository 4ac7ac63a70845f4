"""Traces and metrics of real turns: a worker and the HTTP service as processes exporting over
OTLP/HTTP to a receiver on loopback, `/metrics` read with real GETs.

A turn is one trace from the caller's request to its end; its spans come once each, even when the
worker is killed in the middle of the turn or every workflow task replays the whole history; no
message text or key reaches a span or a metric unless content capture is on."""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from temporalio.client import Client

from core.models import StopSend, TurnSend
from core.settings import Settings
from core.temporal import workflow_id
from store.backends.folder import FolderStore
from store.log.state import Log
from store.records import uuid7
from tests.chaos.invariants import until_ended
from tests.support.otlp import Receiver, Span, ancestors
from tests.support.processes import ROOT, model_requests
from tests.telemetry.kit import (
    KEY,
    MARKER,
    ServiceProcess,
    deployed_metrics,
    descendants,
    free_port,
    leaked,
    sample,
    scrape,
    telemetry_env,
    turn_spans,
    worker,
)
from threadline.acting import answer
from threadline.client import Threadline

pytestmark = pytest.mark.timeout(300)  # worker and service processes start slowly on a loaded machine

SERVER = 2
"""OTLP's span kind of a server's span."""


def _traceparent() -> tuple[str, str]:
    trace_id = secrets.token_hex(16)
    return trace_id, f"00-{trace_id}-{secrets.token_hex(8)}-01"


def _chats(spans: list[Span], turn: Span) -> list[Span]:
    return [s for s in descendants(spans, turn) if s.name.startswith("chat ")]


async def test_a_turn_is_one_trace_from_the_http_request_to_its_end(
    settings: Settings, tmp_path: Path, cid: str
) -> None:
    """Each `POST .../turns` continues the caller's trace through the service, the workflow and its
    activities: one `invoke_agent` span per turn with the GenAI attributes, a `chat` span per model
    call, an `execute_tool` span per tool call, the turn span ending last; the worker's `/metrics`
    counts the turns, calls and tokens; neither holds the message or the key."""
    worker_port, service_port = free_port(), free_port()
    with Receiver() as receiver:
        running = worker(settings, tmp_path / "worker.log", telemetry_env(receiver, "tl-worker", worker_port))
        service = ServiceProcess(settings, tmp_path / "api.log", telemetry_env(receiver, "tl-api", service_port))
        try:
            service.wait_ready()
            traces = []
            async with httpx.AsyncClient(base_url=service.url, timeout=60) as http:
                for n in range(2):
                    trace_id, parent = _traceparent()
                    body = {"message": f"order 42 {MARKER} {n}", "program": "shop", "wait": True}
                    url = f"/v1/conversations/{cid}/turns"
                    answer = await http.post(url, json=body, headers={"traceparent": parent})
                    assert 200 == answer.status_code, answer.text
                    assert "done" == answer.json()["state"]
                    traces.append((trace_id, answer.json()["turn"]))
            turns = turn_spans(receiver, cid, 2)
            receiver.wait_for(lambda s: s.name.startswith("execute_tool "), 4)
            worker_metrics, service_metrics = scrape(worker_port), scrape(service_port)
        finally:
            service.stop()
            running.stop()

    spans = receiver.received()
    assert sorted(t for t, _ in traces) == sorted(s.trace_id for s in turns)  # one turn span per trace
    for trace_id, turn_id in traces:
        (turn,) = [s for s in turns if s.trace_id == trace_id]
        assert "invoke_agent shop" == turn.name
        expected = {"operation.name": "invoke_agent", "agent.name": "shop", "conversation.id": cid}
        assert expected == {k: turn.attributes[f"gen_ai.{k}"] for k in expected}
        assert (turn_id, "done") == (turn.attributes["threadline.turn.id"], turn.attributes["threadline.turn.state"])
        request = [s for s in ancestors(spans, turn) if s.service == "tl-api" and s.kind == SERVER]
        assert ["POST /v1/conversations/{conversation_id}/turns"] == [s.name for s in request]
        below = descendants(spans, turn)
        chats = sorted((s for s in below if s.name.startswith("chat ")), key=lambda s: s.start_ns)
        assert [["tool_call"], ["stop"]] == [c.attributes["gen_ai.response.finish_reasons"] for c in chats]
        for chat in chats:
            assert ("offline", "offline", "offline") == tuple(
                chat.attributes[k] for k in ("gen_ai.provider.name", "gen_ai.request.model", "gen_ai.response.model")
            )
            assert chat.attributes["gen_ai.usage.input_tokens"] > 0 < chat.attributes["gen_ai.usage.output_tokens"]
        tools = sorted(s.attributes["gen_ai.tool.name"] for s in below if s.name.startswith("execute_tool "))
        assert ["order_status", "refund"] == tools
        assert turn.end_ns >= max(s.end_ns for s in below)
        assert all(s.trace_id == trace_id for s in below)
    assert [] == leaked(spans, MARKER, KEY)
    asked = [e for e in running.events() if e.get("event") == "model.requested"]
    assert sorted(t for t, _ in traces) == sorted({str(e["trace_id"]) for e in asked})  # log lines lead to traces

    assert 2 == sample(worker_metrics, "threadline_turns_total", program="shop", state="done")
    assert 2 == sample(worker_metrics, "threadline_turn_duration_seconds_count", program="shop")
    assert 4 == sample(worker_metrics, "threadline_model_calls_total", model="offline", outcome="ok")
    assert 4 == sample(worker_metrics, "threadline_tool_calls_total", outcome="ok")
    assert sample(worker_metrics, "threadline_model_tokens_total", kind="output") > 0
    assert "temporal_request" in service_metrics  # the SDK runtime's own metrics beside them
    sdk = {m for m in deployed_metrics() if m.startswith("temporal_")}  # the dashboard's and alerts' are real
    assert set() == {m for m in sdk if m not in worker_metrics and m not in service_metrics}
    for text in (worker_metrics, service_metrics):
        assert MARKER not in text
        assert KEY not in text
        assert cid not in text


async def test_a_turn_resumed_after_kill_9_has_one_turn_span_and_a_chat_span_per_call(
    tl: Threadline, settings: Settings, tmp_path: Path, cid: str
) -> None:
    """The worker dies mid-answer; the one that takes the turn over replays the run and asks the model
    again: the turn still has one span, and one `chat` span for the call that finished."""
    folder, first_log, second_log = settings.store_folder("default"), tmp_path / "first.log", tmp_path / "second.log"
    with Receiver() as receiver:
        env = telemetry_env(receiver, "tl-worker", free_port(), THREADLINE_TRACE_TEMPORAL="true")
        first = worker(settings, first_log, env, delay=2.0)
        rid = uuid7()
        try:
            await tl.conversation("tutor", id=cid).signal(
                TurnSend(request_id=rid, inputs={"message": f"through the crash {MARKER}"}, program="tutor")
            )
            await _until_asked(first_log)
        finally:
            first.kill()
        env = telemetry_env(receiver, "tl-worker", free_port(), THREADLINE_TRACE_TEMPORAL="true")
        second = worker(settings, second_log, env, delay=2.0)
        try:
            await until_ended(folder, cid, [rid])
            (turn,) = turn_spans(receiver, cid)
            await asyncio.sleep(1.0)  # what else would come, came
        finally:
            second.stop()
    turn_id = Log(FolderStore(folder).read(cid)).request_ids[rid]
    spans = receiver.received()
    assert [turn] == [
        s for s in spans if s.name.startswith("invoke_agent") and s.attributes["threadline.turn.id"] == turn_id
    ]
    assert (1, 1) == (model_requests(first_log, turn_id), model_requests(second_log, turn_id))
    assert 1 == len(_chats(spans, turn))
    assert turn.end_ns - turn.start_ns >= 2_000_000_000  # its real duration, from before the crash
    traced = [s for s in spans if s.trace_id == turn.trace_id]
    assert len(traced) == len({s.span_id for s in traced})  # Temporal's spans too: none twice
    assert 1 == sum(s.name == "StartActivity:place_and_run" for s in traced)  # placed and run in one activity
    assert 1 == sum(s.name == "RunActivity:place_and_run" for s in traced)  # the killed attempt's never ended
    assert [] == leaked(spans, MARKER, KEY)


async def _until_asked(log: Path) -> None:
    deadline = time.monotonic() + 30
    while model_requests(log) == 0:
        assert time.monotonic() < deadline, "the model was never asked"
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.3)  # inside the call: its first words stream


async def test_a_replayed_conversation_emits_no_span_again(
    tl: Threadline, client: Client, settings: Settings, tmp_path: Path, cid: str, payloads: Path
) -> None:
    """A worker that keeps no conversation cached replays the whole history at every task, and a
    replayer replays it once more: still one turn span and one `chat` span per turn."""
    folder = settings.store_folder("default")
    env = telemetry_env(receiver := Receiver(), "tl-worker", free_port(), THREADLINE_WORKFLOW_CACHE="0")
    with receiver:
        running = worker(settings, tmp_path / "worker.log", env)
        chat = tl.conversation("tutor", id=cid)
        try:
            for n in range(3):
                rid = uuid7()
                await chat.signal(TurnSend(request_id=rid, inputs={"message": f"turn {n}"}, program="tutor"))
                await until_ended(folder, cid, [rid])
            turns = turn_spans(receiver, cid, 3)
            await asyncio.sleep(1.0)
        finally:
            running.stop()
        assert 3 == len(turn_spans(receiver, cid))
        assert [1, 1, 1] == [len(_chats(receiver.received(), t)) for t in turns]

        history = await client.get_workflow_handle(workflow_id("default", cid)).fetch_history()
        saved = tmp_path / "history.json"
        saved.write_text(history.to_json())
        before = len(receiver.received())
        replay = [sys.executable, "-m", "tests.telemetry.replaying", str(saved), str(payloads)]
        process = await asyncio.create_subprocess_exec(*replay, cwd=ROOT, env={**os.environ, **env})
        assert 0 == await asyncio.wait_for(process.wait(), 60)
        (done,) = receiver.wait_for(lambda s: s.name == "replay.done")
    assert [done] == receiver.received()[before:]  # the replayer could export, and exported nothing else


@pytest.mark.parametrize("capture", ["true", "false"])
async def test_message_content_is_in_spans_only_when_capture_is_on(
    tl: Threadline, settings: Settings, tmp_path: Path, cid: str, capture: str
) -> None:
    """`OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true` puts the messages on the `chat` span;
    otherwise they are nowhere."""
    env_capture = {"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": capture}
    with Receiver() as receiver:
        running = worker(settings, tmp_path / "worker.log", telemetry_env(receiver, "w", free_port(), **env_capture))
        try:
            rid = uuid7()
            await tl.conversation("tutor", id=cid).signal(
                TurnSend(request_id=rid, inputs={"message": MARKER}, program="tutor")
            )
            (turn,) = turn_spans(receiver, cid)
            (chat,) = receiver.wait_for(lambda s: s.trace_id == turn.trace_id and s.name.startswith("chat "))
        finally:
            running.stop()
    holding = [("chat offline", "gen_ai.input.messages"), ("chat offline", "gen_ai.output.messages")]
    assert (holding if capture == "true" else []) == sorted(leaked(receiver.received(), MARKER))
    assert [] == leaked(receiver.received(), KEY)
    assert chat.attributes["gen_ai.request.model"] == "offline"


def test_without_traces_or_metrics_nothing_of_opentelemetry_loads(settings: Settings) -> None:
    """A worker and the service with neither asked for import no OpenTelemetry of their own (FastAPI
    may load its API) and add no plugin, runtime or tracer."""
    script = (
        "import sys, fastapi\n"
        "loaded = {m for m in sys.modules if m.startswith('opentelemetry')}\n"
        "from core import telemetry\n"
        "import worker, threadline.http.app\n"
        "telemetry.start(service='w', metrics_bind=None, env={})\n"
        "assert telemetry.plugins() == [] and telemetry.runtime() is None and telemetry.tracer('x') is None\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry') and m not in loaded))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)

    assert 0 == done.returncode, done.stderr
    assert "[]" == done.stdout.strip()


def test_the_worker_command_serves_metrics_on_its_metrics_port(settings: Settings, tmp_path: Path) -> None:
    """`threadline worker --metrics-port N` serves the SDK runtime's metrics on loopback port N."""
    port = free_port()
    env = {
        **os.environ,
        "THREADLINE_TEMPORAL_ADDRESS": settings.address,
        "THREADLINE_TASK_QUEUE": settings.task_queue,
        "THREADLINE_DATA": str(settings.data),
        "THREADLINE_PAYLOADS": str(settings.payloads_spec()),
    }
    command = [sys.executable, "-m", "threadline", "worker", "--metrics-port", str(port)]
    with (tmp_path / "worker.log").open("wb") as out:
        process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=out)
        try:
            deadline, text = time.monotonic() + 90, ""
            while "temporal_num_pollers" not in text:
                assert time.monotonic() < deadline, "no poller was ever counted on /metrics"
                assert process.poll() is None, (tmp_path / "worker.log").read_text()
                time.sleep(0.2)
                with contextlib.suppress(httpx.HTTPError):
                    text = scrape(port)
        finally:
            process.terminate()
            process.wait(timeout=30)

    assert sample(text, "temporal_num_pollers", task_queue=settings.task_queue) > 0


async def test_sends_stops_appends_claim_checks_and_open_runs_are_counted(
    tl: Threadline, settings: Settings, tmp_path: Path, cid: str
) -> None:
    """While a turn with a message over 8 KB runs: a send refused, one branched beside it, two queued;
    then a stop. The worker's `/metrics` counts exactly those, times its appends, counts the bytes
    kept out of history, and shows one open run; no label holds the conversation id or the text."""
    port, log = free_port(), tmp_path / "worker.log"
    with Receiver() as receiver:
        running = worker(settings, log, telemetry_env(receiver, "tl-worker", port), delay=3.0)
        chat = tl.conversation("tutor", id=cid)
        try:
            await chat.signal(TurnSend(request_id=uuid7(), inputs={"message": f"{MARKER} " + "x" * 9000}))
            await _until_asked(log)
            for sends in ("refuse", "branch", "queue", "queue"):  # in this order: a queued one holds the queue
                await chat.signal(TurnSend(request_id=uuid7(), inputs={"message": f"{sends} {MARKER}"}, sends=sends))
            deadline, text = time.monotonic() + 120, ""
            while sample(text, "threadline_busy_sends_total") < 4 or sample(text, "threadline_turns_total") < 5:
                assert time.monotonic() < deadline, text
                await asyncio.sleep(0.5)
                text = scrape(port)
            await chat.signal(StopSend())
            while sample(text, "threadline_stops_total") < 1:
                assert time.monotonic() < deadline, text
                await asyncio.sleep(0.2)
                text = scrape(port)
        finally:
            running.stop()

    busy = {o: sample(text, "threadline_busy_sends_total", outcome=o) for o in ("queued", "refused", "branched")}
    assert {"queued": 2, "refused": 1, "branched": 1} == busy
    assert 1 == sample(text, "threadline_stops_total", scope="all")
    assert 4 == sample(text, "threadline_turns_total", state="done")
    assert sample(text, "threadline_store_append_duration_seconds_count") > 0
    assert 0 == sample(text, "threadline_store_append_errors_total", code="store-unavailable")
    assert sample(text, "threadline_claim_checked_bytes_total") > 8 * 1024
    runs = {e: sample(text, "threadline_conversation_runs_total", event=e) for e in ("started", "ended")}
    assert {"started": 1, "ended": 0} == runs
    assert cid not in text
    assert MARKER not in text
    stops = [s for s in receiver.received() if s.name == "stop"]
    assert [("all", cid)] == [
        (s.attributes["threadline.stop.scope"], s.attributes["gen_ai.conversation.id"]) for s in stops
    ]


async def test_a_wait_for_a_person_is_one_span_and_counted_once_though_every_task_replays(
    tl: Threadline, settings: Settings, tmp_path: Path, cid: str
) -> None:
    """A refund waits for a person's yes on a worker that caches no conversation (each workflow task
    replays the history): one `wait_for_person` span under the turn's, as long as the wait, and the
    wait counted once started and once ended."""
    port = free_port()
    with Receiver() as receiver:
        env = telemetry_env(receiver, "tl-worker", port, THREADLINE_WORKFLOW_CACHE="0")
        running = worker(settings, tmp_path / "worker.log", env)
        try:
            chat, rid = tl.conversation("careful_shop", id=cid), uuid7()
            send = TurnSend(request_id=rid, inputs={"request": f"order 42 {MARKER}"}, program="careful_shop")
            await chat.signal(send)
            waiting = await _until_waiting(settings.store_folder("default"), cid, rid)
            await asyncio.sleep(1.0)  # a wait of a second at least, across several replayed tasks
            await answer(chat, waiting, "approve", wait=False)
            (turn,) = turn_spans(receiver, cid)
            await asyncio.sleep(1.0)  # what else would come, came
            text = scrape(port)
        finally:
            running.stop()

    waits = [s for s in receiver.received() if s.name == "wait_for_person"]
    assert [turn.span_id] == [s.parent_id for s in waits]
    assert waits[0].end_ns - waits[0].start_ns >= 1_000_000_000
    assert waits[0].attributes["threadline.turn.id"] == waiting
    assert 1 == sample(text, "threadline_approval_waits_total", program="careful_shop", event="started")
    assert 1 == sample(text, "threadline_approval_waits_total", program="careful_shop", event="ended")
    assert 1 == sample(text, "threadline_approval_wait_seconds_count", program="careful_shop")
    assert [] == leaked(receiver.received(), MARKER, KEY)


async def _until_waiting(folder: Path, conversation: str, request_id: str) -> str:
    """The id of the turn `request_id` placed, once it waits for a person."""
    deadline = time.monotonic() + 60
    while True:
        assert time.monotonic() < deadline, "the turn never waited"
        with contextlib.suppress(FileNotFoundError):
            log = Log(FolderStore(folder).read(conversation))
            turn = log.request_ids.get(request_id)
            if turn is not None and log.turns[turn].state(time.time()) == "waiting":
                return turn
        await asyncio.sleep(0.1)
