"""The composition root: settings, logging, the Temporal client, stores, programs, providers, the Worker.

Run it with `threadline worker` (or `python worker.py`). SIGTERM and SIGINT shut it down
gracefully, so running turns are handed to another worker at once instead of after a heartbeat
timeout, and its sticky queue is released.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable, Mapping
from datetime import timedelta
from pathlib import Path

import structlog
from temporalio.client import Client
from temporalio.worker import Worker

from activities.language_model import OfflineModel, Provider, Providers
from activities.llm import LLMActivities
from activities.providers import build_providers, new_http_client
from activities.toolcalls import ToolActivities
from activities.transcript import TranscriptActivities
from activities.waiting import WaitingActivities
from core import logs
from core.settings import Settings
from core.temporal import connect_temporal
from store.base import Store
from store.blobs import open_blobs
from store.folder import FolderStore
from store.program import load_programs
from store.reader import AsyncStore, LogCache, Stores, Threaded
from store.streams import StreamLog
from workflows.conversation import ConversationWorkflow

logger = structlog.get_logger(__name__)

STICKY_TIMEOUT = timedelta(seconds=2)
"""How long a cached conversation's next task waits for this worker before any worker takes it."""
HEARTBEAT_THROTTLE = timedelta(seconds=1)
"""Heartbeats (and so stops and crash detection) get out at least this often."""


def default_providers(settings: Settings) -> dict[str, Provider]:
    """The offline model only: what `build_worker` uses unless given providers (so tests never
    pick up a developer's real key). `run` builds the real set from the environment."""
    return {"offline": OfflineModel(delay=settings.offline_delay_s)}


def build_worker(
    client: Client,
    settings: Settings,
    *,
    stores: Mapping[str, Store] | None = None,
    providers: Mapping[str, Provider] | None = None,
) -> Worker:
    """A Worker running conversations and their activities on `settings.task_queue`."""
    folders = settings.stores or {"default": settings.data / "store"}
    if stores is not None:
        openers = {name: _opener(store) for name, store in stores.items()}
    else:
        openers = {name: _folder_opener(folder) for name, folder in folders.items()}
    logs = LogCache(Stores(openers))
    programs = load_programs(settings.programs)
    transcript = TranscriptActivities(logs, programs)
    tools, waiting = ToolActivities(logs, programs), WaitingActivities(logs)
    llm = LLMActivities(
        logs,
        programs,
        Providers(providers if providers is not None else default_providers(settings)),
        default_model=settings.model,
        streams={name: StreamLog(folder) for name, folder in folders.items()},
    )
    return Worker(
        client,
        task_queue=settings.task_queue,
        workflows=[ConversationWorkflow],
        activities=[
            transcript.begin_turn,
            transcript.follow_turn,
            transcript.stop_turn,
            transcript.move_head,
            transcript.end_turn,
            transcript.watch_log,
            llm.prepare_turn,
            llm.summarise_branch,
            llm.run_turn,
            llm.render_turn,
            tools.run_tool,
            tools.fail_tool,
            waiting.answer_turn,
            waiting.resume_turn,
            waiting.abandon_turn,
            waiting.check_waiting,
        ],
        max_concurrent_activities=200,
        max_heartbeat_throttle_interval=HEARTBEAT_THROTTLE,
        default_heartbeat_throttle_interval=HEARTBEAT_THROTTLE,
        sticky_queue_schedule_to_start_timeout=STICKY_TIMEOUT,
        graceful_shutdown_timeout=timedelta(seconds=5),
    )


async def run(settings: Settings, *, client: Client | None = None, stop: asyncio.Event | None = None) -> None:
    """Run a worker until `stop` is set or the process gets SIGTERM or SIGINT."""
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with new_http_client() as http:
        providers = build_providers(settings, http)
        worker = build_worker(
            client or await connect_temporal(settings, open_blobs(settings)), settings, providers=providers
        )
        async with worker:
            logger.info(
                "worker.started", task_queue=settings.task_queue, address=settings.address, providers=sorted(providers)
            )
            await stop.wait()
            logger.info("worker.stopping")
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.remove_signal_handler(sig)


def _opener(store: Store) -> Callable[[], AsyncStore]:
    return lambda: Threaded(store)


def _folder_opener(folder: Path) -> Callable[[], AsyncStore]:
    return lambda: Threaded(FolderStore(folder))


def main() -> None:
    """Entry point: a worker for the server in THREADLINE_TEMPORAL_ADDRESS."""
    logs.configure()
    asyncio.run(run(Settings.from_env()))


if __name__ == "__main__":
    main()
