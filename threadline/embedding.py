"""A worker inside the client's process (`threadline.connect(embedded=True)`), and the stores only such a
worker can serve: the process's memory and store objects.

An embedded worker polls a task queue of its own, so no other worker ever takes a turn of a store it
cannot reach; it shares the client's `StoreSet`, so both see one memory store and the same objects.
For notebooks, scripts and tests: a deployment runs workers of its own (`threadline worker`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import uuid

from temporalio.client import Client, WorkflowExecutionStatus

from core.errors import ErrorCode, ThreadlineError
from core.models import ConversationConfig
from core.settings import FUNCTAI_STORE, Settings
from core.temporal import workflow_id
from store.backends.objects import is_store_object
from store.backends.opening import StoreSet

from .crossing import crossing

MEMORY = "memory"
"""The name that asks for the process's memory store (as `store=None` does)."""


def own_queue(settings: Settings) -> Settings:
    """`settings` with a task queue of this process's own."""
    return dataclasses.replace(settings, task_queue=f"{settings.task_queue}-embedded-{uuid.uuid4().hex[:12]}")


class Embedded:
    """The embedded worker of one client: it runs until `stop()`."""

    def __init__(self, client: Client, settings: Settings, task: asyncio.Task[None]) -> None:
        self.client, self.settings, self._task = client, settings, task
        self._served: set[str] = set()

    def served(self, config: ConversationConfig) -> None:
        """Remember a conversation this worker may have opened, to close it at the end."""
        self._served.add(workflow_id(config.store, config.conversation))

    async def stop(self) -> None:
        """Close the conversations opened on this worker's task queue (no other worker polls it: left
        open, a later send from elsewhere would wait for it), then stop the worker."""
        for wid in sorted(self._served):
            await self._close(wid)
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task

    async def _close(self, wid: str) -> None:
        handle = self.client.get_workflow_handle(wid)
        with contextlib.suppress(ThreadlineError), crossing():  # gone, or closed meanwhile
            described = await handle.describe()
            if described.status == WorkflowExecutionStatus.RUNNING and described.task_queue == self.settings.task_queue:
                await handle.execute_update("close", result_type=int)


async def start(client: Client, settings: Settings, stores: StoreSet) -> Embedded:
    """Start a worker in this process on `stores` (the client's) and `settings`' task queue."""
    from worker import run_embedded  # the composition root: only what runs a worker imports it

    ready = asyncio.Event()
    task = asyncio.create_task(run_embedded(client, settings, stores, ready))
    waiting = asyncio.create_task(ready.wait())
    await asyncio.wait({task, waiting}, return_when=asyncio.FIRST_COMPLETED)
    if not ready.is_set():
        waiting.cancel()
        task.result()  # the worker could not start: its error
    return Embedded(client, settings, task)


def store_name(stores: StoreSet, store: object, *, embedded: Embedded | None) -> str:
    """The name, among `stores`, of the store a conversation is given: a name as it is; `None`, `False`
    or `"memory"` the process's memory store; `True` functai's default folder; a store object its name.

    Raises:
        ThreadlineError: `store-kind` for the memory store or an unnamed store object without an
            embedded worker (no worker elsewhere reaches this process's memory), or anything else.
    """
    if store is True:
        return FUNCTAI_STORE
    if store is None or store is False or store == MEMORY:
        _embedded_only(embedded, "the memory store")
        return stores.memory
    if isinstance(store, str):
        return store
    if not is_store_object(store):
        message = "store is a name, None or 'memory' (this process's memory), True (functai's folder) or an object"
        message += f" with append and read; not a {type(store).__name__}"
        raise ThreadlineError(ErrorCode.STORE_KIND, message)
    if not stores.knows(store):
        _embedded_only(embedded, "a store object not given to connect(stores={name: ...})")
    return stores.adopt(store)


def _embedded_only(embedded: Embedded | None, what: str) -> None:
    if embedded is None:
        message = f"{what} lives in this process, where no worker runs: connect(embedded=True) to run its turns here"
        raise ThreadlineError(ErrorCode.STORE_KIND, message)
