"""The Python API: conversations on Temporal, shaped like functai's conversation API.

    tl = await threadline.connect()
    chat = tl.conversation("tutor", id="alex")
    print(await chat("Hi, I'm Alex."))
    turn = await chat.send("What is 1/2 + 1/3?")   # placed: its id is known before the answer
    print((await turn.result()).result)

A send and the wait for its answer (or for its placed turn) are one update-with-start (`send`,
`place`); when no worker accepts it within seconds, the send goes as a `turn` signal with
signal-with-start (durable even while no worker runs) and the `wait` update asks for its answer.
Reading turns reads the store's record log through one `ConversationLog` per conversation, so
nothing of the transcript passes through Temporal.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)
from temporalio.service import RPCError, RPCStatusCode

from activities.plan import rule_of
from core.context import ContextRule
from core.errors import ErrorCode, ThreadlineError
from core.limits import check_config, check_send
from core.models import (
    MAX_REQUEST_ID,
    ApproveRule,
    Begun,
    ConversationConfig,
    RenderResult,
    Sends,
    StopSend,
    TurnOutcome,
    TurnSend,
    check_inputs,
)
from core.settings import Settings
from core.temporal import connect_temporal, from_failure, workflow_id
from store.backends.base import check_id
from store.backends.blobs import FolderBlobs, open_blobs
from store.backends.opening import StoreSet
from store.backends.reader import ConversationLog, LogCache, now
from store.backends.streams import StreamReader
from store.log.rules import View, view_head
from store.log.state import Log
from store.programs.program import Program, load_programs
from store.records import uuid7
from workflows.attributes import SEARCH_ATTRIBUTE_KEYS

from . import learning
from .acting import LiveTurn, Waiting
from .coding import refuse_nested, remembers_of
from .delivery import Delivery
from .guided import FlowMethods
from .listing import Listing
from .reading import Page, Turn, find_turn, history, to_turn
from .turnstream import TurnStream

if TYPE_CHECKING:
    from store.backends.pgblobs import PostgresBlobs


async def connect(settings: Settings | None = None, *, client: Client | None = None, lazy: bool = False) -> Threadline:
    """Connect to Temporal (`THREADLINE_TEMPORAL_ADDRESS`) and return the entry point of the API.

    With `lazy`, nothing is connected until something needs Temporal: reading turns and history
    only read the store, and work while Temporal is down.
    """
    tl = Threadline(client, settings or Settings.from_env())
    if not lazy:
        await tl.temporal()
    return tl


async def _registered(client: Client, namespace: str) -> bool:
    from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest

    try:
        found = await client.operator_service.list_search_attributes(ListSearchAttributesRequest(namespace=namespace))
    except RPCError:
        return False
    return all(key.name in found.custom_attributes for key in SEARCH_ATTRIBUTE_KEYS)


class Threadline(Listing):
    """A connection to Threadline: makes conversation handles, reads their logs, lists conversations (`Listing`)."""

    def __init__(self, client: Client | None, settings: Settings, *, search_attributes: bool | None = None) -> None:
        self._client = client
        self.settings = settings
        self.search_attributes = search_attributes
        self._programs: dict[str, Program] | None = None
        self.stores = StoreSet(settings.named_stores())
        """Every store the settings name (a folder or a PostgreSQL database), opened on first use."""
        self.logs = LogCache(self.stores.records)
        self._blobs: FolderBlobs | PostgresBlobs | None = None

    async def close(self) -> None:
        """Close the stores and the payload store this client opened (database connections); the
        Temporal client stays (one it made keeps its payload store, which opens again on use)."""
        await self.stores.close()
        if self._blobs is not None:
            await self._blobs.close()

    def programs(self) -> dict[str, Program]:
        """The programs this client knows (built in, and from THREADLINE_PROGRAMS), loaded once."""
        if self._programs is None:
            self._programs = load_programs(self.settings.programs)
        return self._programs

    async def temporal(self) -> Client:
        """The Temporal client, connected on first use (and Threadline's search attributes looked up)."""
        if self._client is None:
            self._blobs = open_blobs(self.settings)
            self._client = await connect_temporal(self.settings, self._blobs)
        if self.search_attributes is None:
            self.search_attributes = await _registered(self._client, self.settings.namespace)
        return self._client

    @property
    def client(self) -> Client:
        """The Temporal client of a connected `Threadline` (see `temporal()`)."""
        if self._client is None:
            raise ThreadlineError(ErrorCode.SERVER_UNAVAILABLE, "not connected to Temporal: await tl.temporal() first")
        return self._client

    async def workers_poll(self) -> bool:
        """Whether any worker polls this connection's task queue for conversations."""
        queue = TaskQueue(name=self.settings.task_queue)
        query = DescribeTaskQueueRequest(
            namespace=self.client.namespace, task_queue=queue, task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW
        )
        try:
            found = await self.client.workflow_service.describe_task_queue(query, timeout=timedelta(seconds=2))
        except RPCError as err:
            raise from_failure(err) from None
        return bool(found.pollers)

    def log(self, store: str, conversation: str) -> ConversationLog:
        """The record log of `conversation` in `store`, read incrementally and shared by every handle."""
        return self.logs.get(store, check_id(conversation))

    def conversation(
        self,
        program: str = "tutor",
        id: str | None = None,
        *,
        store: str = "default",
        sends: Sends = "queue",
        context: ContextRule | Mapping[str, Any] | None = None,
        lm: str | None = None,
        idle_timeout_s: float | None = None,
        approve: ApproveRule | list[str] = None,
        approval_timeout_s: float | None = None,
        waiting_check_s: float | None = None,
        remembers: Mapping[Any, Any] | None = None,
        earlier_without: Sequence[str] = (),
    ) -> Conversation:
        """A handle on conversation `id` (a new UUIDv7 id when None) made with `program`.

        `approve` names the tool calls a person is asked about first (`"changes"`, `"all"`, tool names
        and paths; None: the program's rule); a turn nobody answers within `approval_timeout_s` is
        abandoned (None: it waits as long as it takes). `remembers` gives a program with code's helpers
        their memory (`{answer: "conversation"}`, `"turn"`, `threadline.remember(..., steps=True)`, or
        `"own"` for a conversation its code uses); `earlier_without` names outputs the program now
        writes that earlier turns lack (`["reasoning"]`).
        """
        self.logs.stores.check(store)
        rule = context if isinstance(context, ContextRule) else ContextRule.model_validate(context or {})
        config = ConversationConfig(
            store=store,
            conversation=check_id(uuid7() if id is None else id),
            program=program,
            sends=sends,
            context=rule,
            lm=lm,
            idle_timeout_s=self.settings.idle_timeout_s if idle_timeout_s is None else idle_timeout_s,
            search_attributes=bool(self.search_attributes),
            attributes_every_s=self.settings.attributes_every_s,
            approve=_rule(approve),
            approval_timeout_s=approval_timeout_s,
            remembers=remembers_of(remembers),
            earlier_without=tuple(earlier_without),
            **({} if waiting_check_s is None else {"waiting_check_s": waiting_check_s}),
        )
        check_config(config)  # before anything is sent or recorded
        return Conversation(self, config)


_LOG_CHECK_S = 0.25
_END_GRACE_S = 2.0
"""How long a watch waits for a stream's `end` once the log says its turn ended: a PostgreSQL
store's stream is written by a thread of its own, so its last events may land just after."""


def _rule(approve: ApproveRule | list[str]) -> ApproveRule:
    """An `approve` rule as it crosses the wire (a list of names becomes a tuple)."""
    return tuple(approve) if isinstance(approve, list) else approve


@dataclass(frozen=True, slots=True)
class Piece:
    """A piece of a turn's streamed text."""

    offset: int
    """The stream offset to reconnect from after this piece."""
    text: str | None
    """The text, or None: the text so far is void (the model was asked again)."""


@dataclass(frozen=True, slots=True)
class Closing:
    """How `close()` went: whether a run was open, whether it had to be terminated (no worker), and
    how many queued sends it answered `conversation-closed`."""

    was_open: bool
    forced: bool = False
    answered: int = 0


async def _terminate(handle: WorkflowHandle[Any, Any]) -> None:
    try:
        await handle.terminate(reason="closed while no worker ran; its records stay and a new turn reopens it")
    except RPCError as err:
        if err.status != RPCStatusCode.NOT_FOUND:  # it closed on its own meanwhile
            raise from_failure(err) from None


@dataclass(slots=True)
class TurnHandle:
    """A placed turn: its id and parent are known; `result()` waits for how it ends."""

    id: str | None
    parent: str | None
    request_id: str
    conversation: Conversation

    async def result(self) -> LiveTurn:
        """Wait for the turn to end (or to wait for a person); return it as the log holds it.

        Raises:
            ThreadlineError: the coded error when the send was refused.
        """
        outcome = await self.conversation.outcome(self.request_id)
        if outcome.turn is None:
            bare = Turn(id="", parent=None, state=outcome.state, inputs={}, request_id=self.request_id)
            return LiveTurn.of(bare, self.conversation)
        return await self.conversation.turn(outcome.turn)


class Conversation(FlowMethods, Delivery):
    """One conversation: send turns, read them, stop them, branch, move the head; guided flows (`FlowMethods`)."""

    tl: Threadline

    def __init__(self, tl: Threadline, config: ConversationConfig, view: View | None = None) -> None:
        self.tl = tl
        self.config = config
        self.view = view or View()

    @property
    def handle(self) -> WorkflowHandle[Any, Any]:
        """The conversation's workflow (on a connected `Threadline`)."""
        return self.tl.client.get_workflow_handle(workflow_id(self.config.store, self.id))

    async def _read(self) -> Log:
        return await self.tl.log(self.config.store, self.id).read()

    async def __call__(
        self, *args: Any, request_id: str | None = None, lm: str | None = None, approve: Any = None, **inputs: Any
    ) -> Any:
        """Send a turn and return its answer (`result`); `lm` and `approve` are this turn's only."""
        send = self._send(self._inputs(args, inputs), request_id=request_id, lm=lm, approve=approve)
        outcome = await self._ended(send)
        if outcome.state == "done":
            return outcome.result  # what the log holds too: no read needed
        return self._finished(await self.turn(str(outcome.turn))).result

    async def predict(
        self, *args: Any, request_id: str | None = None, lm: str | None = None, approve: Any = None, **inputs: Any
    ) -> LiveTurn:
        """Send a turn and return it once it ended.

        Raises:
            Waiting: when it waits for a person (`err.turn.approve()` answers and goes on).
            ThreadlineError: when it was refused, or ended other than `done` (`turn-state`).
        """
        # One update-with-start per turn: the send and the wait for its answer in one round trip.
        send = self._send(self._inputs(args, inputs), request_id=request_id, lm=lm, approve=approve)
        outcome = await self._ended(send)
        turn = await self.turn(str(outcome.turn))
        return self._finished(turn)

    async def deliver(
        self, *args: Any, request_id: str | None = None, lm: str | None = None, approve: Any = None, **inputs: Any
    ) -> TurnOutcome:
        """Send a turn and wait for how it ends, in one round trip: its outcome as the workflow tells it
        (a failed or waiting turn is an outcome here, not an error; nothing is read from the log).

        Raises:
            ThreadlineError: the coded error when the send was refused.
        """
        return await self._ended(self._send(self._inputs(args, inputs), request_id=request_id, lm=lm, approve=approve))

    async def submit(self, send: TurnSend) -> TurnOutcome:
        """Deliver a prepared send (`sent(...)`, perhaps with a merge or flow) and wait for how it ends."""
        return await self._sent("send", send, TurnOutcome)

    async def _ended(self, send: TurnSend) -> TurnOutcome:
        """Send `send` and wait for how it ends; the view follows its turn."""
        outcome = await self._sent("send", send, TurnOutcome)
        if outcome.turn is None:
            raise ThreadlineError(ErrorCode.TURN_STATE, f"the send was {outcome.state} before it was placed")
        self._follow(outcome.turn)
        return outcome

    @staticmethod
    def _finished(turn: LiveTurn) -> LiveTurn:
        """`turn` when it is done, else what it ended as, raised."""
        if turn.state == "waiting":
            raise Waiting(turn)
        if turn.state != "done":
            code = ErrorCode.parse((turn.error or {}).get("code") or ErrorCode.TURN_STATE)
            raise ThreadlineError(code, f"turn {turn.id} ended {turn.state}", turn=turn.id)
        return turn

    async def send(
        self, *args: Any, request_id: str | None = None, lm: str | None = None, approve: Any = None, **inputs: Any
    ) -> TurnHandle:
        """Send a turn; return as soon as it is placed (its id known before the model answers)."""
        send = self._send(self._inputs(args, inputs), request_id=request_id, lm=lm, approve=approve)
        placed = await self._sent("place", send, Begun)
        if placed.error is not None:
            raise placed.error.to_error()
        if placed.turn is not None:
            self._follow(placed.turn)
        return TurnHandle(placed.turn, placed.parent, send.request_id, self)

    def _follow(self, turn: str) -> None:
        """A view that sent follows its own branch (docs/format-1.md 4.3)."""
        self.view = View(pinned=turn)

    async def follow_turn(self, turn: str) -> Turn:
        """Follow the branch through `turn` (this view made it); return it as the log holds it."""
        self._follow(turn)
        return await self.turn(turn)

    async def merge(
        self,
        turns: Sequence[str | Turn],
        program: str | Program,
        *,
        request_id: str | None = None,
        lm: str | None = None,
        **inputs: Any,
    ) -> Turn:
        """Ask `program` (registered on the worker) to combine branches; its answer becomes this
        program's turn after the view's head, with `reads` and `made_by` (docs/format-1.md 4.10).

        The merged turns must be done children of the view's head (`continue_from(root).merge(...)`).
        `inputs` are the merging program's, by name; with none, its single input gets the branches'
        answers (`[{"model", <inputs>..., <outputs>...}]`). Durable like a turn: a crashed worker's
        merge runs again elsewhere, `stop()` cancels it while it is asked, and a request id makes
        it one merge. The view then follows it.

        Raises:
            ThreadlineError: `turn-state` (a merged turn not done, or not a child of the head: nothing
                is recorded), `turn-unknown`, `program-unknown`, `program-invalid` (its answer does
                not fit this program's), `inputs-invalid`, or the model's error.
        """
        return await learning.merge(self, turns, program, request_id=request_id, lm=lm, inputs=inputs)

    async def rate(
        self,
        turn: str | Turn,
        verdict: str | None,
        answer: Any = None,
        outputs: dict[str, Any] | None = None,
        note: str | None = None,
        reasons: Sequence[str] = (),
        by: str | None = None,
    ) -> dict[str, Any]:
        """Judge a turn's answer as functai rates a call: "right", "wrong" (with the right `answer` or
        `outputs` when known), or None to withdraw `by`'s rating; return the rating written to the call log.

        One person's later rating replaces their earlier one; a merged turn's rating goes to its
        merging program's call.

        Raises:
            ThreadlineError: `rating-invalid`, `turn-unknown`, or `turn-state` (it has not ended).
        """
        tid = turn.id if isinstance(turn, Turn) else turn
        return await learning.rate_turn(
            self.tl.settings, self.config.store, self.id, tid, verdict,
            answer=answer, outputs=outputs, note=note, reasons=reasons, by=by,
        )  # fmt: skip

    def sent(self, inputs: dict[str, Any], *, request_id: str | None, lm: str | None) -> TurnSend:
        """The send this view makes with `inputs` (checked), placed where the view continues."""
        return self._send(inputs, request_id=request_id, lm=lm)

    def _send(self, inputs: dict[str, Any], *, request_id: str | None, lm: str | None, approve: Any = None) -> TurnSend:
        if request_id is not None and not 0 < len(request_id) <= MAX_REQUEST_ID:
            raise ThreadlineError(ErrorCode.INVALID_REQUEST, f"a request id has 1 to {MAX_REQUEST_ID} characters")
        refuse_nested(self.config)  # before anything is sent or recorded
        pinned = self.view.pinned
        send = TurnSend(
            request_id=request_id or uuid7(),
            inputs=inputs,
            program=self.config.program,
            continue_from=pinned if self.view.exact else None,
            follow=None if self.view.exact else pinned,
            # The handle's choices travel with each send: the workflow may have been started by another.
            sends=self.config.sends,
            context=self.config.context,
            lm=lm or self.config.lm,
            approve=_rule(approve) if approve is not None else self.config.approve,
            remembers=self.config.remembers,
            earlier_without=self.config.earlier_without,
        )
        check_send(send)
        return send

    def _inputs(self, args: tuple[Any, ...], inputs: dict[str, Any]) -> dict[str, Any]:
        if args:
            program = self.tl.programs().get(self.config.program)
            if program is None:
                raise ThreadlineError(
                    ErrorCode.PROGRAM_UNKNOWN, f"name the inputs of {self.config.program!r}: it is not known here"
                )
            names = [name for name, _ in program.inputs]
            if len(args) > len(names):
                raise ThreadlineError(ErrorCode.INPUTS_INVALID, f"{program.name} takes {len(names)} input(s)")
            inputs = {**dict(zip(names, args, strict=False)), **inputs}
        check_inputs(inputs)  # before anything is sent (the worker checks again: signals come from anywhere)
        return inputs

    def stream(
        self, *args: Any, request_id: str | None = None, lm: str | None = None, approve: Any = None, **inputs: Any
    ) -> TurnStream:
        """Send a turn and watch it being made: `stream = await chat.stream(...)` places it (`stream.turn`
        is its id at once), then `async for piece in stream` yields its text as the model writes it and
        finally the finished `Turn`.

        A `None` means the text so far is void: the model was asked again (a retried attempt, or a
        reply that did not fit the outputs), and what follows replaces it. A turn stopped meanwhile
        raises `Cancelled`; one that waits for a person, `Waiting`.
        """
        return TurnStream(lambda: self.send(*args, request_id=request_id, lm=lm, approve=approve, **inputs))

    async def watch(self, turn: str, *, offset: int = 0, poll: float = 0.01) -> AsyncIterator[Piece]:
        """Yield what `turn`'s model writes, from byte `offset` of its stream, until the turn ends.

        Each `Piece` carries the offset to reconnect from after it, so a reader that went away
        resumes where it stopped and misses nothing.
        """
        self.tl.logs.stores.check(self.config.store)
        streams, reader = self.tl.stores.streams[self.config.store], StreamReader()
        checked = time.monotonic()
        ended_at: float | None = None
        while True:
            events = await asyncio.to_thread(streams.read, turn, offset)
            for end, event in events:
                offset = end
                for text in reader.feed([event]):
                    yield Piece(end, text)
            if reader.ended in ("done", "failed", "stopped", "abandoned", "waiting"):
                return
            if ended_at is not None and (reader.run is None or time.monotonic() - ended_at > _END_GRACE_S):
                return  # ended by a writer that streams nothing here, or its stream's end is lost
            if not events and ended_at is None and time.monotonic() - checked > _LOG_CHECK_S:
                checked = time.monotonic()
                found = (await self._read()).turns.get(turn)
                if found is None or found.ended is not None or found.state(now()) == "waiting":
                    ended_at = time.monotonic()  # ended, or waiting for a person: nothing more streams now
                continue
            await asyncio.sleep(poll)

    # ----- reading

    async def render(self, *args: Any, lm: str | None = None, **inputs: Any) -> RenderResult:
        """The exact request the next turn would send (provider JSON), with nothing sent or recorded.

        Asked of the conversation's workflow, which places and shows it with the worker's own rules,
        model and providers (a topic classified, not recorded), once the summaries being made landed.
        """
        send = self._send(self._inputs(args, inputs), request_id=None, lm=lm)
        try:
            await self._workflow()
            result: RenderResult = await self.tl.client.execute_update_with_start_workflow(
                "render", send, start_workflow_operation=self._start_operation(), result_type=RenderResult
            )
        except (WorkflowUpdateFailedError, RPCError) as err:
            raise from_failure(err) from None
        return result

    async def history(self) -> dict[str, Any]:
        """The branch as the model sees it: summary, key facts, how many turns are shown verbatim,
        how many the branch holds, and the conversation's topics."""
        log = await self._read()
        rule = rule_of(self.config, TurnSend(request_id="history", inputs={}))
        return {"conversation": self.id, **history(log, view_head(log, self.view), rule, now())}

    async def turns(
        self, all: bool = False, *, limit: int | None = None, after: str | None = None, before: str | None = None
    ) -> list[LiveTurn]:
        """The turns from the first to this view's head (`all`: every turn of every branch, in the order
        they were sent); `limit`, `after` and `before` (turn ids) page through a long list."""
        log, moment = await self._read(), now()
        ids = log.order if all else [t.id for t in log.branch(view_head(log, self.view))]
        chosen = Page(limit, after, before).cut(ids, self.id)
        return [LiveTurn.of(to_turn(log, log.turns[tid], moment), self).bound(self._rater) for tid in chosen]

    async def current_head(self) -> str | None:
        """The conversation's head as its log says (every reader's, whatever this handle's view)."""
        return (await self._read()).head

    async def turn(self, turn: str) -> LiveTurn:
        """One turn by id (`turn-unknown` if the log has none); it can be acted on (`approve`, `resume`, ...)."""
        log = await self._read()
        return LiveTurn.of(to_turn(log, find_turn(log, turn, self.id), now()), self).bound(self._rater)

    async def _rater(self, turn: str, verdict: str | None, *fields: Any) -> dict[str, Any]:
        return await self.rate(turn, verdict, *fields)

    # ----- acting

    async def stop(self, turn: str | None = None) -> None:
        """Stop `turn`, or (None) every running and queued turn of this conversation.

        A running turn ends `stopped` (whoever runs it, a functai process too); a waiting or
        interrupted one is abandoned; queued sends are dropped and record nothing.

        Raises:
            ThreadlineError: `turn-unknown` for a turn the log does not hold;
                `conversation-not-found` when there is nothing at all to stop.
        """
        log = await self._read()
        if turn is not None:
            find_turn(log, turn, self.id)
        if log.n:
            await self.signal(StopSend(turn=turn))
            return
        try:  # nothing recorded yet: only an open workflow can hold queued sends
            await (await self._workflow()).signal("stop", StopSend(turn=turn))
        except RPCError as err:
            raise from_failure(err) from None

    async def close(self) -> Closing:
        """Close the conversation's workflow: queued sends are answered `conversation-closed`, running
        turns stop, and the run ends; the records stay, and the next send reopens it.

        With no worker to do that, the run is terminated instead (`forced`): its queued sends are then
        answered by Temporal's termination, not by the workflow.

        Raises:
            ThreadlineError: `conversation-not-found` when there are neither records nor a workflow.
        """
        log = await self._read()
        handle = await self._workflow()
        try:
            running = (await handle.describe()).status == WorkflowExecutionStatus.RUNNING
        except RPCError as err:
            if err.status != RPCStatusCode.NOT_FOUND:
                raise from_failure(err) from None
            running = False  # never started, or its history is past retention
        if not running:
            if not log.n:
                raise ThreadlineError(ErrorCode.CONVERSATION_NOT_FOUND, f"conversation {self.id} has no records")
            return Closing(was_open=False)
        if not await self.tl.workers_poll():
            await _terminate(handle)
            return Closing(was_open=True, forced=True)
        try:
            answered = await handle.execute_update("close", result_type=int)
        except (WorkflowUpdateFailedError, RPCError) as err:
            raise from_failure(err) from None
        return Closing(was_open=True, answered=answered)

    def continue_from(self, turn: str | Turn | None) -> Conversation:
        """A handle whose next send continues after exactly `turn` (a branch when it is not the head)."""
        tid = turn.id if isinstance(turn, Turn) else turn
        return Conversation(self.tl, self.config, View(pinned=tid, exact=True))

    async def head(self, turn: str | Turn) -> None:
        """Move the conversation's head to `turn` (a `head` record every reader follows)."""
        tid = turn.id if isinstance(turn, Turn) else turn
        find_turn(await self._read(), tid, self.id)
        try:
            await self._workflow()
            await self.tl.client.execute_update_with_start_workflow(
                "head", tid, start_workflow_operation=self._start_operation()
            )
        except (WorkflowUpdateFailedError, RPCError) as err:
            raise from_failure(err) from None
        self.view = View(pinned=tid, exact=True)
