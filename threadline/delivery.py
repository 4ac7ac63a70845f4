"""How a conversation handle reaches its workflow: sends, stops and the questions about them.

A send and the wait for its answer (or for its placed turn) are one update-with-start (`send`,
`place`); when no worker accepts it within `ACCEPT_WAIT_S`, the send goes as a `turn` signal with
signal-with-start (durable even while no worker runs) and the caller hears `Queued`; the `wait`
update asks about it later. Every call into Temporal crosses `threadline.crossing`. A
`threadline.client.Conversation` holds one `Delivery`, which also holds its config: reaching the
workflow settles the store's identity and the search attributes in it.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol, TypeVar

from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import PendingWorkflowTaskState, TaskQueueType, UpdateWorkflowExecutionLifecycleStage
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.update.v1 import UpdateRef, WaitPolicy
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest, PollWorkflowExecutionUpdateRequest
from temporalio.client import (
    Client,
    WithStartWorkflowOperation,
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowUpdateStage,
)
from temporalio.common import SearchAttributePair, TypedSearchAttributes, WorkflowIDConflictPolicy

from core.errors import ErrorCode, ThreadlineError
from core.limits import check_send
from core.models import ConversationConfig, ConversationState, StopSend, TurnOutcome, TurnSend
from core.settings import Settings
from core.temporal import CONVERSATION_WORKFLOW, workflow_id
from store.backends.reader import LogCache
from store.records import uuid7
from workflows.attributes import CONVERSATION_KEY, PROGRAM_KEY, STORE_KEY, UPDATED_KEY

from .crossing import ASK_AGAIN, TIMED_OUT, Unreached, crossing


class Progress:
    """When a worker last took a send made through this connection (accepted or answered it): while
    that keeps happening, workers live and take the task queue's sends, and a send not taken yet waits
    its turn behind the others."""

    def __init__(self) -> None:
        self._taken = -math.inf

    def taken(self) -> None:
        """A worker took a send now."""
        self._taken = time.monotonic()

    def within(self, seconds: float) -> bool:
        """Whether a worker took a send in the last `seconds`."""
        return time.monotonic() - self._taken < seconds


class Connection(Protocol):
    """What delivery needs of the connection (`threadline.client.Threadline`)."""

    settings: Settings
    search_attributes: bool | None
    logs: LogCache
    progress: Progress

    @property
    def client(self) -> Client:
        """The Temporal client (connected)."""
        ...

    async def temporal(self) -> Client:
        """The Temporal client, connecting on first use."""
        ...

    async def workers_poll(self) -> bool:
        """Whether any worker polls the task queue."""
        ...


UPDATE_PATIENCE_S = 120.0
"""How long a caller keeps asking while the conversation's workflow task is failing."""
ACCEPT_WAIT_S = 3.0
"""How long a send waits for a worker to accept it before it is kept as a signal and answered `Queued`.
Time decides, not the task queue's list of pollers: Temporal lists a worker that died for minutes."""
KEPT_PATIENCE_S = 30.0
"""How long a caller that waits for a kept send's outcome (`deliver`, HTTP `wait`) waits for a worker
to take it before it hears `Queued`: longer than a conversation takes to move from a dead worker to
a live one (its sticky queue's 10 s, a started task's 10 s timeout)."""
LOOK_EVERY_MAX_S = 12.0
"""The longest a send waits between looks at whether it was taken while a worker is seen on it: each
look after such a one comes twice as late (3, 6, 12 s), so the sends queued behind a busy worker do
not each ask the server two or three questions every `ACCEPT_WAIT_S`, adding to what keeps it busy."""
SETTLE_S = 1.0
PROBE_S = 0.5
"""How long a send not answered within `ACCEPT_WAIT_S` waits to hear whether a worker accepted it."""
ACCEPTED = UpdateWorkflowExecutionLifecycleStage.UPDATE_WORKFLOW_EXECUTION_LIFECYCLE_STAGE_ACCEPTED
"""How long a send that was not accepted waits for its start's own answer (so none goes unretrieved)."""
U = TypeVar("U")


class Queued(ThreadlineError):  # noqa: N818 - a state the caller is told, like `Waiting`
    """A send no worker took in time (`ACCEPT_WAIT_S` to be placed, `KEPT_PATIENCE_S` for a caller that
    waits for its outcome): it is kept (a durable `turn` signal), queued, and runs once a worker does.
    Code `server-unavailable`, retryable; `details` hold its `request_id` and `state` (`queued`). Its
    outcome: `chat.outcome(request_id)`, or the same send (same request id) again, which makes no
    second turn."""

    def __init__(self, request_id: str, task_queue: str) -> None:
        message = (
            f"no worker took the send yet (task queue {task_queue!r}): it is kept and "
            f"runs once a worker does (`threadline worker`); send again with request id {request_id} for its answer"
        )
        super().__init__(ErrorCode.SERVER_UNAVAILABLE, message, retryable=True, request_id=request_id, state="queued")
        self.request_id = request_id


def _later(every: float, patience: float) -> float:
    """The wait before the next look at a send a worker is on: twice the last, at most
    `LOOK_EVERY_MAX_S`, and not past the `patience` deadline (but at least `ACCEPT_WAIT_S`)."""
    return max(ACCEPT_WAIT_S, min(2 * every, LOOK_EVERY_MAX_S, patience - time.monotonic()))


def _no_worker(task_queue: str) -> ThreadlineError:
    message = (
        f"no worker polls task queue {task_queue!r}: the send is kept and runs once one starts "
        "(`threadline worker`); ask again with the same request id for its answer"
    )
    return ThreadlineError(ErrorCode.SERVER_UNAVAILABLE, message, retryable=True)


def _signal_of(send: TurnSend | StopSend) -> str:
    """The signal that carries `send`: `flow` starts a guided flow, `turn` sends, `stop` stops."""
    if isinstance(send, StopSend):
        return "stop"
    return "turn" if send.flow is None else "flow"


def _unreached(task: asyncio.Future[Any]) -> bool:
    """Whether the finished `task` failed with `Unreached` (Temporal did not answer)."""
    return not task.cancelled() and isinstance(task.exception(), Unreached)


@contextlib.asynccontextmanager
async def _settling(start: WithStartWorkflowOperation[Any, Any]) -> AsyncIterator[None]:
    """Around an update-with-start: a call that fails before its start is answered fails the start
    too, and that error is taken here. Left untaken, asyncio would log it with its traceback whenever
    the operation is collected, inside whatever code runs then (even inside an `ast.parse`, which
    CPython 3.11 then fails with `AST constructor recursion depth mismatch`)."""
    try:
        yield
    except BaseException:
        taken = asyncio.ensure_future(start.workflow_handle())
        await asyncio.wait({taken}, timeout=SETTLE_S)  # set already, unless the call never began
        if not taken.done():
            taken.cancel()
        elif not taken.cancelled():
            taken.exception()  # a cancellation held here must not cancel the caller
        raise


class Delivery:
    """Sends, stops and questions to one conversation's workflow."""

    def __init__(self, tl: Connection, config: ConversationConfig) -> None:
        self.tl = tl
        self.config = config

    @property
    def id(self) -> str:
        """The conversation id."""
        return self.config.conversation

    async def workflow(self) -> WorkflowHandle[Any, Any]:
        """The conversation's workflow, connecting to Temporal if this is the first call that needs it.

        The config it starts with names the store's identity, so a worker with another store under the
        same name never writes this conversation.
        """
        client = await self.tl.temporal()
        if self.config.search_attributes != bool(self.tl.search_attributes):
            self.config = self.config.model_copy(update={"search_attributes": bool(self.tl.search_attributes)})
        if self.config.store_id is None:
            store_id = await self.tl.logs.stores.identity(self.config.store)
            self.config = self.config.model_copy(update={"store_id": store_id})
        return client.get_workflow_handle(workflow_id(self.config.store, self.id))

    async def signal(self, send: TurnSend | StopSend) -> None:
        """Deliver a `turn` or `stop` with signal-with-start (the conversation reopens if it had closed)."""
        await self.workflow()  # connects, and settles the search attributes in the config
        client, config = self.tl.client, self.config
        with crossing():
            await client.start_workflow(
                CONVERSATION_WORKFLOW,
                ConversationState(config=config),
                id=workflow_id(config.store, config.conversation),
                task_queue=self.tl.settings.task_queue,
                start_signal=_signal_of(send),
                start_signal_args=[send],
                static_summary=self._summary(),
                search_attributes=self._attributes(),
            )

    async def ask(self, name: str, send: TurnSend, answer: type[U], *, keep_waiting: bool = True) -> U:
        """Deliver `send` and wait for the update `name`'s answer about it: one update-with-start that
        waits for the answer, so a turn answered within Temporal's long poll costs one client call.

        That update is durable only once a worker accepted it. When it is not answered within
        `ACCEPT_WAIT_S`, Threadline asks whether it was accepted (`_accepted`) and whether a worker is
        on it though slow to accept (`_being_taken`: a busy worker, placing many sends; waited for,
        looking again after 3, 6, then every 12 s, for up to `KEPT_PATIENCE_S`). A caller that waits
        for the outcome asks nothing while the client's other sends are being taken
        (`_queued_behind`). When neither (no worker, a dead one Temporal still lists, a workflow task
        that keeps failing), the send is kept as a signal, durable at once (`_kept`). `place` then
        answers `Queued` at once; `send`, whose caller waits for the outcome, goes on waiting for the
        update's answer (the workflow answers it once the kept send ends) and answers `Queued` when
        no worker took it within `KEPT_PATIENCE_S` (at once when no worker polls at all);
        `keep_waiting=False` answers a kept `send` `Queued` at once too, as the command line does.
        The workflow queues a request id once, so a late acceptance of the update, or the same send
        again, places nothing twice.

        Raises:
            Queued: the send is kept and no worker took it yet.
            Unreached: Temporal did not answer (the send may not be kept: send it again).
            ThreadlineError: the coded refusal of the send.
        """
        check_send(send)  # a flow's or a merge's names too, before anything is sent
        waits_kept = name == "send" and keep_waiting
        await self.workflow()  # connects, and settles the store identity and attributes in the config
        # The update's id is written four times per turn in history: the send it carries names its request id.
        start, update_id = self.start_operation(), f"{name}/{uuid7()}"
        answered = asyncio.ensure_future(self._answer(name, send, answer, start, update_id))
        began = time.monotonic()
        patience, kept, every = began + KEPT_PATIENCE_S, False, ACCEPT_WAIT_S
        try:
            while True:
                await asyncio.wait({answered}, timeout=every)
                if answered.done():
                    if not _unreached(answered):
                        return answered.result()  # the answer, or the coded refusal raised
                    break  # Temporal stopped answering it: keep the send, and ask `wait`
                if waits_kept and not kept and self._queued_behind(began):
                    patience = max(patience, time.monotonic() + ACCEPT_WAIT_S)
                    continue
                if await self._accepted(update_id):
                    return await self._taken(answered, send, answer)  # a worker took it: as long as the turn takes
                if kept:
                    if time.monotonic() > patience or await self._nobody_polls():
                        raise Queued(send.request_id, self.tl.settings.task_queue)
                    every = _later(every, patience)
                    continue
                if time.monotonic() < patience and await self._being_taken():
                    every = _later(every, patience)
                    continue
                await self._kept(send)
                if not waits_kept:
                    raise Queued(send.request_id, self.tl.settings.task_queue)
                # a worker has that long to take it
                patience, kept, every = time.monotonic() + KEPT_PATIENCE_S, True, ACCEPT_WAIT_S
        finally:
            if not answered.done():
                answered.cancel()
                await asyncio.wait({answered})
            if not answered.cancelled():
                answered.exception()  # taken: its error, if any, was answered otherwise
        if not kept:
            if await self._accepted(update_id):
                return await self._taken(answered, send, answer)
            await self._kept(send)
            if not waits_kept:
                raise Queued(send.request_id, self.tl.settings.task_queue)
            patience = time.monotonic() + KEPT_PATIENCE_S
        left = max(patience - time.monotonic(), ACCEPT_WAIT_S)
        return await self.update("wait", send.request_id, answer, kept=left)

    async def _answer(
        self, name: str, send: TurnSend, answer: type[U], start: WithStartWorkflowOperation[Any, Any], update_id: str
    ) -> U:
        """The update-with-start that waits for the answer (Temporal answers within its long poll, or
        says the update was accepted and the SDK then asks for the outcome)."""
        async with _settling(start):
            with crossing():
                handle = await self.tl.client.start_update_with_start_workflow(
                    name,
                    send,
                    start_workflow_operation=start,
                    id=update_id,
                    wait_for_stage=WorkflowUpdateStage.COMPLETED,
                    result_type=answer,
                )
                result: U = await handle.result()  # known already: no call
        self.tl.progress.taken()
        return result

    def _queued_behind(self, began: float) -> bool:
        """Whether a send made at `began` and not taken yet is queued behind others: workers took
        another send of this connection within the last `ACCEPT_WAIT_S` (up to `UPDATE_PATIENCE_S`
        after `began`). Asking the server about it then adds work to what keeps the workers busy: at
        1,000 conversations at once, every send waits tens of seconds to be taken, and three questions
        per send every few seconds cost as much server time as the turns themselves."""
        return self.tl.progress.within(ACCEPT_WAIT_S) and time.monotonic() - began < UPDATE_PATIENCE_S

    async def _taken(self, answered: asyncio.Future[U], send: TurnSend, answer: type[U]) -> U:
        """The answer of an update a worker accepted. A long poll for it that ran out of time (a busy
        server) is asked again as `wait`: accepted, the send is durable. Temporal going silent is
        `Unreached` (the send is kept)."""
        try:
            try:
                return await answered
            except Unreached as err:
                if err.status != TIMED_OUT:
                    raise
            return await self.update("wait", send.request_id, answer)
        except Unreached as err:
            message = (
                "Temporal stopped answering after a worker took the send: it is kept; "
                f"send again with request id {send.request_id} for its answer"
            )
            raise Unreached(message, status=err.status) from None

    async def _being_taken(self) -> bool:
        """Whether a worker is on the conversation's send though it did not accept it yet: one works on
        its workflow task now (its first try), or polled the task queue since that task was scheduled
        (busy: an idle live worker would have taken it at once, a dead one polls no more; both times
        are the server's). A busy worker is slow to accept, not gone; keeping the send as a signal
        then only adds work. So is a busy server: one that does not answer these questions within
        `PROBE_S`, or has not started the conversation's workflow yet (the send's own start is still
        on its way), is waited for too, up to the send's patience; one that is down refuses them."""
        try:
            with crossing():
                described = await (await self.workflow()).describe(rpc_timeout=timedelta(seconds=PROBE_S))
                task = described.raw_description.pending_workflow_task
                if task.state == PendingWorkflowTaskState.PENDING_WORKFLOW_TASK_STATE_STARTED:
                    return task.attempt == 1  # a task that keeps failing is no worker taking it
                queue = DescribeTaskQueueRequest(
                    namespace=self.tl.client.namespace,
                    task_queue=TaskQueue(name=self.tl.settings.task_queue),
                    task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
                )
                found = await self.tl.client.workflow_service.describe_task_queue(
                    queue, timeout=timedelta(seconds=PROBE_S)
                )
        except Unreached as err:
            return err.status == TIMED_OUT
        except ThreadlineError as err:
            return err.code == ErrorCode.CONVERSATION_NOT_FOUND
        if not task.HasField("scheduled_time"):
            return False
        scheduled = task.scheduled_time.ToDatetime(UTC)
        return any(p.last_access_time.ToDatetime(UTC) > scheduled for p in found.pollers)

    async def _accepted(self, update_id: str) -> bool:
        """Whether a worker accepted the update `update_id` (asked for at most `PROBE_S`): False when it
        was not, is unknown, or Temporal does not answer."""
        request = PollWorkflowExecutionUpdateRequest(
            namespace=self.tl.client.namespace,
            update_ref=UpdateRef(
                workflow_execution=WorkflowExecution(workflow_id=workflow_id(self.config.store, self.id)),
                update_id=update_id,
            ),
            identity=self.tl.client.identity,
            wait_policy=WaitPolicy(lifecycle_stage=ACCEPTED),
        )
        try:
            with crossing():
                polled = await self.tl.client.workflow_service.poll_workflow_execution_update(
                    request, timeout=timedelta(seconds=PROBE_S)
                )
        except ThreadlineError:
            return False
        if polled.stage < ACCEPTED:
            return False
        self.tl.progress.taken()
        return True

    async def _kept(self, send: TurnSend) -> None:
        """Keep `send`, which no worker accepted in time, as a `turn` signal: durable whatever becomes of
        the update that carried it."""
        try:
            await self.signal(send)
        except Unreached as err:
            message = (
                "Temporal cannot be reached, so the send may not be kept; "
                f"send it again with request id {send.request_id}"
            )
            raise Unreached(message, status=err.status) from None

    async def update_with_start(self, name: str, arg: Any, answer: type[U]) -> U:
        """Ask the update `name` with `arg`, starting the workflow first when it is not open (a closed
        conversation reopens, rebuilt from its log)."""
        await self.workflow()  # connects, and settles the store identity and attributes in the config
        start = self.start_operation()
        async with _settling(start):
            with crossing():
                result: U = await self.tl.client.execute_update_with_start_workflow(
                    name, arg, start_workflow_operation=start, result_type=answer
                )
        return result

    async def outcome(self, request_id: str) -> TurnOutcome:
        """Wait for how the send `request_id` ended."""
        return await self.update("wait", request_id, TurnOutcome)

    async def update(self, name: str, request_id: str, answer: type[U], *, kept: float | None = None) -> U:
        """Ask the workflow `name` for `request_id`.

        A send is durable before this is asked, so two waits end early with a coded error instead of
        hanging: no worker polls the task queue (`server-unavailable` within `ACCEPT_WAIT_S`), or the
        workflow task keeps failing (a worker with the wrong store took it, a deploy is half done),
        during which Temporal refuses updates, asked again for `UPDATE_PATIENCE_S` (as when the
        conversation has Temporal's 10 updates in flight already). For a send just kept (`kept`
        seconds of patience), no worker taking the question within them is `Queued`.
        """
        handle, pause, deadline = await self.workflow(), 0.1, time.monotonic() + UPDATE_PATIENCE_S
        patience = None if kept is None else time.monotonic() + kept
        # One id for this question, kept when it is asked again after a timeout (not a second update);
        # another question about the same send (after it waited for a person) is a new one.
        update_id = f"{name}/{request_id}/{uuid7()}"
        while True:
            try:
                with crossing():
                    accepted = await handle.start_update(
                        name,
                        request_id,
                        id=update_id,
                        wait_for_stage=WorkflowUpdateStage.ACCEPTED,
                        result_type=answer,
                        rpc_timeout=timedelta(seconds=ACCEPT_WAIT_S),
                    )
                    result: U = await accepted.result()
                self.tl.progress.taken()
                return result
            except Unreached as err:
                if err.status == TIMED_OUT:
                    nobody = await self._nobody_polls()
                    if patience is not None and (nobody or time.monotonic() > patience):
                        raise Queued(request_id, self.tl.settings.task_queue) from None
                    if nobody:
                        raise _no_worker(self.tl.settings.task_queue) from None
                    continue  # a worker is listed, perhaps only busy (or dead: Temporal lists it for minutes)
                if err.status not in ASK_AGAIN or time.monotonic() > deadline:
                    raise
            await asyncio.sleep(pause)
            pause = min(pause * 2, 2.0)

    async def is_open(self) -> bool:
        """Whether the conversation's workflow runs now (not when it never started, closed, or its
        history is past retention)."""
        handle = await self.workflow()
        try:
            with crossing():
                return (await handle.describe()).status == WorkflowExecutionStatus.RUNNING
        except ThreadlineError as err:
            if err.code != ErrorCode.CONVERSATION_NOT_FOUND:
                raise
            return False

    async def _nobody_polls(self) -> bool:
        """Whether no worker polls the task queue; False when Temporal is too busy to tell in time (a
        server that is down fails the next call itself)."""
        try:
            return not await self.tl.workers_poll()
        except ThreadlineError as err:
            if err.code != ErrorCode.SERVER_UNAVAILABLE:
                raise
            return False

    def _attributes(self) -> TypedSearchAttributes | None:
        if not self.tl.search_attributes:
            return None
        pairs: list[SearchAttributePair[Any]] = [
            SearchAttributePair(CONVERSATION_KEY, self.id),
            SearchAttributePair(STORE_KEY, self.config.store),
            SearchAttributePair(PROGRAM_KEY, self.config.program),
            SearchAttributePair(UPDATED_KEY, datetime.now(UTC)),  # listed as updated from its start
        ]
        return TypedSearchAttributes(pairs)

    def _summary(self) -> str:
        return f"{self.config.program} conversation {self.id} (store {self.config.store})"

    def start_operation(self) -> WithStartWorkflowOperation[Any, Any]:
        return WithStartWorkflowOperation(
            CONVERSATION_WORKFLOW,
            ConversationState(config=self.config),
            id=workflow_id(self.config.store, self.id),
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            task_queue=self.tl.settings.task_queue,
            static_summary=self._summary(),
            search_attributes=self._attributes(),
        )
