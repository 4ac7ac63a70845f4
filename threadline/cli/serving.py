"""The serving commands: `dev` (a Temporal dev server and a worker), `worker`, and `serve` (the HTTP service)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import signal
import uuid
from typing import TYPE_CHECKING, Any

from core.errors import ErrorCode, ThreadlineError

from . import output
from .common import Subcommands, close_at_end, env_settings
from .output import Output

if TYPE_CHECKING:
    from temporalio.client import Client

    from core.settings import Settings
    from threadline.devserver import DevServer

DEMO_QUESTIONS = ("Hi, I'm Alex.", "What is 1/2 + 1/3?", "Is it 2/5?")
CODEC_PORT = 8234
"""Where `threadline dev` and `threadline codec` serve the codec routes (beside the dev UI's 8233)."""
WORKER_GRACE_WITHOUT_SERVER_S = 3.0
"""How long `dev` lets its worker stop once the server died (it cannot say goodbye to a dead server)."""


def add_commands(commands: Subcommands, common: argparse.ArgumentParser) -> None:
    """Add `dev`, `worker`, `serve` and `codec`."""
    _add_dev(commands, common)
    summary = "run a worker for the server at THREADLINE_TEMPORAL_ADDRESS"
    worker = commands.add_parser("worker", parents=[common], help=summary, description=summary)
    _add_metrics_port(worker)
    worker.set_defaults(run=run_worker)
    _add_serve(commands, common)
    _add_codec(commands, common)


def _add_dev(commands: Subcommands, common: argparse.ArgumentParser) -> None:
    dev = commands.add_parser(
        "dev",
        parents=[common],
        help="run a Temporal dev server and a worker",
        description="Run a Temporal dev server (state in $THREADLINE_DATA/temporal) and a worker until "
        "Ctrl-C or SIGTERM. With --json, one JSON object per line: ready, each demo turn, the demo's link.",
    )
    dev.add_argument("--port", type=int, default=7233, help="the Temporal frontend's port (default 7233)")
    dev.add_argument("--ui-port", type=int, default=8233, help="the web UI's port; 0 for none (default 8233)")
    dev.add_argument(
        "--codec-port",
        type=int,
        default=CODEC_PORT,
        help=f"the codec server's port; the UI shows payloads in clear through it; 0 for none (default {CODEC_PORT})",
    )
    dev.add_argument("--server-only", action="store_true", help="run the server without a worker")
    dev.add_argument("--demo", action="store_true", help="hold a short conversation with the offline model")
    _add_metrics_port(dev)
    dev.set_defaults(run=run_dev)


def _add_serve(commands: Subcommands, common: argparse.ArgumentParser) -> None:
    serve = commands.add_parser(
        "serve",
        parents=[common],
        help="run the HTTP service",
        description="Serve the HTTP API (/v1/conversations/..., OpenAPI at /docs) for the Temporal server at "
        "THREADLINE_TEMPORAL_ADDRESS until Ctrl-C or SIGTERM. Keys come from THREADLINE_API_KEYS.",
    )
    serve.add_argument("--host", default="127.0.0.1", help="the address to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8000, help="the port to listen on (default 8000)")
    _add_metrics_port(serve)
    serve.set_defaults(run=run_serve)


def _add_metrics_port(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        help="serve Prometheus metrics on http://127.0.0.1:PORT/metrics (default: THREADLINE_METRICS_BIND, else none)",
    )


def _telemetry_settings(args: argparse.Namespace, service: str) -> Settings:
    """The environment's settings with `--metrics-port` applied, telemetry started before any client connects."""
    from core import telemetry

    settings = env_settings()
    if args.metrics_port is not None:
        settings = dataclasses.replace(settings, metrics_bind=f"127.0.0.1:{args.metrics_port}")
    telemetry.start(service=service, metrics_bind=settings.metrics_bind)
    return settings


def _add_codec(commands: Subcommands, common: argparse.ArgumentParser) -> None:
    codec = commands.add_parser(
        "codec",
        parents=[common],
        help="serve Temporal's codec-server protocol",
        description="Serve POST /v1/codec/encode and /v1/codec/decode, so the Temporal UI (its codec endpoint), "
        "`temporal workflow show --codec-endpoint` and other SDKs read Threadline's payloads: large ones kept by "
        "the claim check (THREADLINE_PAYLOADS) and sealed ones (THREADLINE_ENCRYPTION_KEYS). Keys come from "
        "THREADLINE_API_KEYS; browsers may call it from THREADLINE_CORS_ORIGINS.",
    )
    codec.add_argument("--host", default="127.0.0.1", help="the address to listen on (default 127.0.0.1)")
    codec.add_argument("--port", type=int, default=CODEC_PORT, help=f"the port to listen on (default {CODEC_PORT})")
    codec.set_defaults(run=run_codec)


async def run_dev(args: argparse.Namespace, out: Output) -> int:
    """Run a dev server and, unless `--server-only`, a worker (and the demo) until SIGINT or SIGTERM."""
    from threadline.devserver import DevServer

    settings = _telemetry_settings(args, "threadline-worker")
    stop = asyncio.Event()
    _trap_signals(stop)
    codec_url = f"http://127.0.0.1:{args.codec_port}/v1/codec" if args.codec_port and args.ui_port else None
    extra = ["--ui-codec-endpoint", codec_url] if codec_url else []
    async with DevServer(settings.data / "temporal", port=args.port, ui_port=args.ui_port, extra_args=extra) as server:
        settings = dataclasses.replace(settings, address=server.address)
        codec = _codec(settings, server, args.codec_port) if codec_url else None
        out.emit(*_ready(server, settings, serving=not args.server_only, codec=codec_url))
        died = asyncio.create_task(_on_exit(server, stop))
        serving = asyncio.create_task(
            stop.wait() if args.server_only else _serve_with_worker(settings, server, args.demo, stop, out)
        )
        try:
            await asyncio.wait({died, serving}, return_when=asyncio.FIRST_COMPLETED)
            if died.done():  # a worker cannot shut down gracefully without its server: give it a moment
                await asyncio.wait({serving}, timeout=WORKER_GRACE_WITHOUT_SERVER_S)
                raise died.result()
            await serving
        finally:
            await _cancel(died)
            await _cancel(serving)
            await _stop_codec(codec)
    return 0


def _codec(settings: Settings, server: DevServer, port: int) -> tuple[Any, asyncio.Task[None]]:
    """The dev codec server, readable from the dev UI's page (both spellings of loopback)."""
    from threadline.http import codec_server

    ui = server.ui_url or ""
    origins = [ui, ui.replace("127.0.0.1", "localhost")]
    codec = codec_server(settings, "127.0.0.1", port, origins=origins, embedded=True)
    return codec, asyncio.create_task(codec.serve())


async def _stop_codec(codec: tuple[Any, asyncio.Task[None]] | None) -> None:
    if codec is not None:
        codec[0].should_exit = True
        await asyncio.wait({codec[1]}, timeout=5)


async def run_codec(args: argparse.Namespace, out: Output) -> int:
    """Serve the codec routes until SIGINT or SIGTERM."""
    from threadline.http import codec_server

    endpoint = f"http://{args.host}:{args.port}/v1/codec"
    out.emit({"codec_endpoint": endpoint}, f"Codec endpoint: {endpoint}; press Ctrl-C to stop.")
    await codec_server(env_settings(), args.host, args.port).serve()
    return 0


async def _serve_with_worker(
    settings: Settings, server: DevServer, demo_wanted: bool, stop: asyncio.Event, out: Output
) -> None:
    client = await _connected(settings)
    demo = asyncio.create_task(_demo(client, settings, ui_url=server.ui_url, out=out)) if demo_wanted else None
    try:
        await _run_worker(settings, client=client, stop=stop)
    finally:
        # worker.run removes its signal handlers: a second Ctrl-C must still let the server stop in order.
        _trap_signals(stop)
        await _cancel(demo)


async def _on_exit(server: DevServer, stop: asyncio.Event) -> ThreadlineError:
    """Wait for the server to die on its own, then stop everything; the error `threadline dev` exits with."""
    status = await server.exited()
    stop.set()
    return ThreadlineError(
        ErrorCode.SERVER_UNAVAILABLE,
        f"the Temporal dev server exited on its own (status {status}); see {server.log_path} and start again",
    )


async def run_worker(args: argparse.Namespace, out: Output) -> int:
    """Run a worker for the server at THREADLINE_TEMPORAL_ADDRESS until SIGINT or SIGTERM."""
    settings = _telemetry_settings(args, "threadline-worker")
    client = await _connected(settings)
    data = {"address": settings.address, "task_queue": settings.task_queue}
    out.emit(data, f"Worker on task queue {settings.task_queue!r} at {settings.address}; press Ctrl-C to stop.")
    await _run_worker(settings, client=client)
    return 0


async def _connected(settings: Settings) -> Client:
    """A client of Temporal whose payload store (a database's pool) is closed when the command ends."""
    from core.temporal import connect_temporal
    from store.backends.blobs import open_blobs

    blobs = open_blobs(settings)
    close_at_end(blobs.close)
    return await connect_temporal(settings, blobs)


async def run_serve(args: argparse.Namespace, out: Output) -> int:
    """Serve the HTTP API until SIGINT or SIGTERM."""
    try:
        # Imported here: the service's dependencies (FastAPI, uvicorn) are not needed by any other command.
        from threadline.http import serve
    except ImportError:
        raise ThreadlineError(ErrorCode.INTERNAL, "the HTTP service is not available in this build") from None
    await serve(_telemetry_settings(args, "threadline-api"), host=args.host, port=args.port)
    return 0


def _ready(server: DevServer, settings: Settings, *, serving: bool, codec: str | None) -> tuple[dict[str, Any], str]:
    queue = settings.task_queue if serving else None
    data = {"address": server.address, "ui_url": server.ui_url, "task_queue": queue, "data": str(settings.data)}
    data["codec_endpoint"] = codec
    rows = [("Temporal:", server.address), ("Temporal UI:", server.ui_url or "off"), ("Codec:", codec or "off")]
    rows += [("Worker:", f"task queue {queue}" if queue else "off (--server-only)"), ("Data:", str(settings.data))]
    return data, output.fields(rows, gap=1) + "\nPress Ctrl-C to stop."


async def _demo(client: Client, settings: Settings, *, ui_url: str | None, out: Output) -> None:
    """Hold a three-turn conversation with the offline model, then say where the UI shows it."""
    from core.temporal import workflow_id
    from threadline.client import connect

    tl = await connect(settings, client=client)
    close_at_end(tl.close)
    chat = tl.conversation("tutor", f"demo-{uuid.uuid4().hex[:8]}", lm="offline")
    out.emit({"demo": chat.id}, f"\nDemo conversation {chat.id} (tutor, offline model):")
    try:
        for question in DEMO_QUESTIONS:
            turn = await chat.predict(question)
            data = {"demo": chat.id, "turn": turn.id, "question": question, "answer": turn.result}
            out.emit(data, f"  you:   {question}\n  tutor: {output.text_of(turn.result)}")
    except ThreadlineError as err:
        out.error(err)
        return
    url = output.workflow_url(ui_url, settings.namespace, workflow_id("default", chat.id)) if ui_url else None
    out.emit(
        {"demo": chat.id, "ui": url}, f"See it in the Temporal UI: {url}" if url else "The UI is off (--ui-port 0)."
    )


async def _run_worker(settings: Settings, *, client: Client, stop: asyncio.Event | None = None) -> None:
    """The composition root's worker (imported here: only the serving commands run a worker)."""
    from worker import run

    await run(settings, client=client, stop=stop)


def _trap_signals(stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)


async def _cancel(task: asyncio.Task[Any] | None) -> None:
    if task is not None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
