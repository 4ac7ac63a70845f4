"""The composition root: settings, logging, the Temporal client, stores, programs, providers, the Worker.

Run it with `threadline worker` (or `python worker.py`). SIGTERM and SIGINT shut it down
gracefully, so running turns are handed to another worker at once instead of after a heartbeat
timeout, and its sticky queue is released.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AsyncExitStack, asynccontextmanager, suppress
from datetime import timedelta
from typing import Any

import structlog
from temporalio.client import Client
from temporalio.converter import DataConverter
from temporalio.plugin import SimplePlugin
from temporalio.worker import Plugin, Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from activities.calls import CallWriter
from activities.conversations import ConversationActivities
from activities.evaluations import EvaluationActivities
from activities.flows import FlowActivities
from activities.heartbeats import Heartbeats
from activities.intake import Intake
from activities.language_model import OfflineModel, Provider, Providers
from activities.llm import LLMActivities
from activities.merges import MergeActivities
from activities.observed import ObservedProvider
from activities.plan import prepare_next
from activities.providers import build_providers, new_http_client
from activities.scheduling import ScheduleActivities
from activities.starting import StartActivities
from activities.toolcalls import ToolActivities
from activities.transcript import TranscriptActivities
from activities.waiting import WaitingActivities
from core import logs, telemetry
from core.collector import collector_plugin
from core.runner import ContextFreeRunner, context_free
from core.settings import Settings
from core.temporal import connect_temporal
from store.backends.blobs import open_blobs
from store.backends.folder import FolderStore
from store.backends.opening import StoreSet, as_store, migrate_stores
from store.backends.postgres import PostgresStore
from store.backends.reader import LogCache, Threaded, now
from store.calls.lines import CallLog
from store.calls.log import call_log, store_call_log
from store.calls.metrics import load_metrics
from store.flows.manager import load_flows
from store.log.state import Log
from store.programs.program import Program, load_programs
from workflows.attributes import SEARCH_ATTRIBUTE_KEYS
from workflows.conversation import ConversationWorkflow
from workflows.evaluation import EvaluationWorkflow
from workflows.scheduled import ScheduledTurnWorkflow

logger = structlog.get_logger(__name__)

MOST_ACTIVITIES = 200
"""Tries a worker runs at once (model calls, tools, follows): most wait on a provider, not on the CPU."""
STICKY_TIMEOUT = timedelta(seconds=2)
"""How long a cached conversation's next task waits for this worker before any worker takes it."""
HEARTBEAT_THROTTLE = timedelta(seconds=1)
"""Heartbeats (and so stops and crash detection) get out at least this often: a try's ticker beats
twice as often (`activities.heartbeats.BEAT_EVERY_S`)."""


def default_providers(settings: Settings) -> dict[str, Provider]:
    """The offline model only: what `build_worker` uses unless given providers (so tests never
    pick up a developer's real key). `run` builds the real set from the environment."""
    return {"offline": OfflineModel(delay=settings.offline_delay_s)}


def build_worker(
    client: Client,
    settings: Settings,
    *,
    stores: Mapping[str, object] | StoreSet | None = None,
    providers: Mapping[str, Provider] | None = None,
) -> Worker:
    """A Worker running conversations and their activities on `settings.task_queue`.

    Args:
        client: The Temporal client.
        settings: Where the stores are, the task queue, the programs, the default model.
        stores: The stores to use: a `StoreSet` (closed by whoever made it), or store objects by name
            (blocking stores, or any object with `append` and `read`: theirs to close), or None to open
            `settings`' stores (folders, PostgreSQL databases). What the worker opens itself it closes
            once it has stopped.
        providers: The model providers (default: the offline model only).
    """
    opened, plugins = _stores_of(settings, stores)
    if settings.worker_gc == "tuned":
        plugins.append(collector_plugin())
    calls = CallWriter(call_logs(settings, opened if stores is None else stores))
    logs = LogCache(opened.records)
    programs = load_programs(settings.programs)
    if settings.warm_logs:
        plugins.append(_warming(logs, opened.existing(), settings.warm_logs, programs))
    transcript = TranscriptActivities(
        logs, programs, calls=calls, prices=settings.prices, default_model=settings.model, budgets=settings.budgets
    )
    models = Providers(observed(providers if providers is not None else default_providers(settings)))
    merges = MergeActivities(logs, programs, models, default_model=settings.model, calls=calls)
    evaluations = EvaluationActivities(programs, load_metrics(settings.programs), models, default_model=settings.model)
    tools, waiting = ToolActivities(logs, programs), WaitingActivities(logs)
    llm = LLMActivities(
        logs,
        programs,
        models,
        default_model=settings.model,
        streams=opened.streams,
        calls=calls,
        prices=settings.prices,
        budgets=settings.budgets,
    )
    guided = load_flows((*settings.programs, *settings.flows))  # a module may hold programs and flows
    flows = FlowActivities(logs, guided, models, default_model=settings.model)
    records = ConversationActivities(logs, programs)
    starts = StartActivities(
        [key.name for key in SEARCH_ATTRIBUTE_KEYS],
        idle_timeout_s=settings.idle_timeout_s,
        attributes_every_s=settings.attributes_every_s,
    )
    intake = Intake(MOST_ACTIVITIES)
    return Worker(
        client,
        task_queue=settings.task_queue,
        workflows=[ConversationWorkflow, EvaluationWorkflow, ScheduledTurnWorkflow],
        activities=activities_of(
            transcript, llm, merges, evaluations, flows, records, tools, waiting, starts, ScheduleActivities()
        ),
        tuner=intake.tuner(),
        max_cached_workflows=settings.workflow_cache,
        max_heartbeat_throttle_interval=HEARTBEAT_THROTTLE,
        default_heartbeat_throttle_interval=HEARTBEAT_THROTTLE,
        # every try with a heartbeat timeout beats for its whole life; the worker takes no more tasks than it begins
        interceptors=[Heartbeats(), intake],
        sticky_queue_schedule_to_start_timeout=STICKY_TIMEOUT,
        graceful_shutdown_timeout=timedelta(seconds=5),
        plugins=plugins,
        workflow_runner=workflow_runner(client.data_converter),
    )


PASSED_THROUGH = SandboxRestrictions.default.with_passthrough_modules("workflows")
"""The sandbox's restrictions, with the workflow modules themselves passed through (imported once per
process). Everything they import already is (`imports_passed_through`); the sandbox otherwise runs the
module of a workflow class again for every new workflow instance: for `workflows/conversation.py`,
about 20 ms of CPU and a copy of the module kept per cached conversation, paid by every new run and
every replay (a cold turn)."""


def workflow_runner(converter: DataConverter) -> SandboxedWorkflowRunner:
    """The workflow sandbox every worker and replayer runs conversations in: the workflow modules
    passed through, and with a converter that reads no serialization context, a payload's context
    answered outside the sandbox (`ContextFreeRunner`)."""
    if context_free(converter):
        return ContextFreeRunner(restrictions=PASSED_THROUGH)
    return SandboxedWorkflowRunner(restrictions=PASSED_THROUGH)


def observed(providers: Mapping[str, Provider]) -> dict[str, Provider]:
    """The providers, their calls traced and counted while telemetry is on."""
    if not telemetry.active():
        return dict(providers)
    return {name: ObservedProvider(provider, name) for name, provider in providers.items()}


def _stores_of(settings: Settings, stores: Mapping[str, object] | StoreSet | None) -> tuple[StoreSet, list[Plugin]]:
    """The worker's store set, and the plugin that closes it after the worker stops when the worker made it."""
    if isinstance(stores, StoreSet):
        return stores, []
    given = None if stores is None else {name: Threaded(as_store(store)) for name, store in stores.items()}
    made = StoreSet(settings.named_stores(), records=given, hidden=settings.hidden_stores())
    return made, [_closing(made)]


def _closing(stores: StoreSet) -> SimplePlugin:
    """The worker plugin that closes a worker's own store set (pools, listeners, stream writers) once
    the worker has stopped, however it stopped."""

    @asynccontextmanager
    async def closed_after() -> AsyncIterator[None]:
        try:
            yield
        finally:
            await stores.close()

    return SimplePlugin("threadline.closing-stores", run_context=closed_after)


def _warming(logs: LogCache, stores: list[str], conversations: int, programs: Mapping[str, Program]) -> SimplePlugin:
    """The worker plugin that reads the logs of the conversations appended to last while the worker
    starts and runs, with what each next turn is shown (`LogCache.warm`, `prepare_next`), and stops
    reading when the worker stops."""

    def prepare(log: Log) -> bool:
        return prepare_next(log, programs, now=now())

    async def warm() -> None:
        began = time.monotonic()
        try:
            warmed = await logs.warm(stores, conversations, prepare=prepare)
        except Exception as err:  # noqa: BLE001 - a worker runs on without its logs warm: turns read them as they come
            logger.warning("logs.warming_failed", error=type(err).__name__)
            return
        seconds = round(time.monotonic() - began, 3)
        counts = {"conversations": warmed.conversations, "records": warmed.records, "prepared": warmed.prepared}
        logger.info("logs.warmed", **counts, seconds=seconds)
        for store, code in warmed.failed.items():
            logger.warning("logs.warming_failed", store=store, code=code)

    @asynccontextmanager
    async def warming() -> AsyncIterator[None]:
        task = asyncio.create_task(warm(), name="threadline.warming-logs")
        try:
            yield
        finally:
            task.cancel()
            with suppress(asyncio.CancelledError):
                await task

    return SimplePlugin("threadline.warming-logs", run_context=warming)


def activities_of(*holders: object) -> list[Callable[..., Any]]:
    """Every `@activity.defn` method of `holders`: a class's new activity is registered with it."""
    return [
        method
        for holder in holders
        for name in sorted(dir(type(holder)))
        if hasattr(getattr(type(holder), name), "__temporal_activity_definition")
        for method in [getattr(holder, name)]
    ]


async def run(settings: Settings, *, client: Client | None = None, stop: asyncio.Event | None = None) -> None:
    """Run a worker until `stop` is set or the process gets SIGTERM or SIGINT."""
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    # Migrated before anything polls: a database that cannot be reached stops the worker here.
    await migrate_stores(settings.named_stores())
    async with AsyncExitStack() as opened:  # what this worker opens, closed (last opened first) after it stops
        stores = StoreSet(settings.named_stores(), hidden=settings.hidden_stores())
        opened.push_async_callback(stores.close)
        if client is None:
            blobs = open_blobs(settings)
            opened.push_async_callback(blobs.close)
            client = await connect_temporal(settings, blobs)
        providers = build_providers(settings, await opened.enter_async_context(new_http_client()))
        async with build_worker(client, settings, stores=stores, providers=providers):
            logger.info(
                "worker.started",
                task_queue=settings.task_queue,
                address=settings.address,
                providers=sorted(providers),
                stores=stores.names(),
            )
            await stop.wait()
            logger.info("worker.stopping")
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.remove_signal_handler(sig)


async def run_embedded(client: Client, settings: Settings, stores: StoreSet, ready: asyncio.Event) -> None:
    """Run a worker inside a client's process on the client's own store set until cancelled; `ready` is
    set once it polls. The stores stay the client's to close."""
    async with new_http_client() as http:
        providers = build_providers(settings, http)
        async with build_worker(client, settings, stores=stores, providers=providers):
            logger.info("worker.embedded", task_queue=settings.task_queue, providers=sorted(providers))
            ready.set()
            await asyncio.Event().wait()  # until the client stops it


def call_logs(settings: Settings, stores: Mapping[str, object] | StoreSet) -> dict[str, CallLog]:
    """Each store's call log: a folder store's in `<store folder>/calls` unless `THREADLINE_CALL_LOGS`
    names another folder, a PostgreSQL store's in its schema (through the pool of the store set's
    streams: opened on first write, closed with the set); a store given as an object keeps its own."""
    if not isinstance(stores, StoreSet):
        return {
            name: call_log(store) for name, store in stores.items() if isinstance(store, FolderStore | PostgresStore)
        }
    found = {name: store_call_log(settings, stores, name) for name in stores.streams}
    return {name: calls for name, calls in found.items() if calls is not None}


def main() -> None:
    """Entry point: a worker for the server in THREADLINE_TEMPORAL_ADDRESS."""
    logs.configure()
    settings = Settings.from_env()
    telemetry.start(service="threadline-worker", metrics_bind=settings.metrics_bind)
    asyncio.run(run(settings))


if __name__ == "__main__":
    main()
