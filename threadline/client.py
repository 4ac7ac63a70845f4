"""The Python API: conversations on Temporal, shaped like functai's conversation API.

    tl = await threadline.connect()
    chat = tl.conversation("tutor", id="alex")
    print(await chat("Hi, I'm Alex."))
    turn = await chat.send("What is 1/2 + 1/3?")   # placed: its id is known before the answer
    print((await turn.result()).result)

Sends are `turn` signals with signal-with-start (durable even while no worker runs); answers
come back through the `wait` update. Reading turns reads the store's record log directly, so
nothing of the transcript passes through Temporal.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

from temporalio.client import Client, WithStartWorkflowOperation, WorkflowHandle, WorkflowUpdateFailedError
from temporalio.common import SearchAttributePair, TypedSearchAttributes, WorkflowIDConflictPolicy
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from core.errors import ErrorCode, ThreadlineError, is_code
from core.models import (
    Begun,
    ContextRule,
    ConversationConfig,
    ConversationInput,
    Sends,
    StopSend,
    TurnOutcome,
    TurnSend,
    check_input_size,
)
from core.settings import Settings
from store.base import check_id
from store.folder import FolderStore
from store.log import Log
from store.program import Program, load_programs
from store.records import uuid7
from store.rules import View, view_head
from store.streams import StreamLog, StreamReader
from workflows.attributes import CONVERSATION_KEY, PROGRAM_KEY, SEARCH_ATTRIBUTE_KEYS, STORE_KEY
from workflows.conversation import ConversationWorkflow

from .turns import Turn, to_turn


def workflow_id(store: str, conversation: str) -> str:
    """`conversation/<store>/<id>`: one workflow per conversation."""
    return f"conversation/{store}/{conversation}"


def from_failure(err: BaseException) -> ThreadlineError:
    """The `ThreadlineError` behind a failed update (or an RPC error), code intact."""
    cause = err.cause if isinstance(err, WorkflowUpdateFailedError) else err
    if isinstance(cause, ApplicationError) and is_code(cause.type):
        return ThreadlineError(str(cause.type), cause.message)
    if isinstance(err, RPCError) and err.status == RPCStatusCode.NOT_FOUND:
        return ThreadlineError(ErrorCode.CONVERSATION_NOT_FOUND, "no such conversation is open: send a turn first")
    if isinstance(err, RPCError):
        return ThreadlineError(ErrorCode.SERVER_UNAVAILABLE, f"Temporal did not answer: {err}", retryable=True)
    return ThreadlineError(ErrorCode.INTERNAL, f"{type(cause).__name__}: {cause}")


async def connect_temporal(settings: Settings) -> Client:
    """A client of `settings.address` with the pydantic data converter every Threadline process shares."""
    try:
        return await Client.connect(
            settings.address, namespace=settings.namespace, data_converter=pydantic_data_converter
        )
    except RuntimeError as err:
        raise ThreadlineError(
            ErrorCode.SERVER_UNAVAILABLE,
            f"cannot reach Temporal at {settings.address} ({err}); start one with `threadline dev --server-only`",
            retryable=True,
        ) from None


async def connect(settings: Settings | None = None, *, client: Client | None = None, lazy: bool = False) -> Threadline:
    """Connect to Temporal (`THREADLINE_TEMPORAL_ADDRESS`) and return the entry point of the API.

    With `lazy`, nothing is connected until something needs Temporal: reading turns, rendering
    and history only read the store, and work while Temporal is down.
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


class Threadline:
    """A connection to Threadline: makes conversation handles."""

    def __init__(self, client: Client | None, settings: Settings, *, search_attributes: bool | None = None) -> None:
        self._client = client
        self.settings = settings
        self.search_attributes = search_attributes
        self._stores: dict[str, FolderStore] = {}
        self._programs: dict[str, Program] | None = None

    def programs(self) -> dict[str, Program]:
        """The programs this client knows (built in, and from THREADLINE_PROGRAMS), loaded once."""
        if self._programs is None:
            self._programs = load_programs(self.settings.programs)
        return self._programs

    async def temporal(self) -> Client:
        """The Temporal client, connected on first use (and Threadline's search attributes looked up)."""
        if self._client is None:
            self._client = await connect_temporal(self.settings)
        if self.search_attributes is None:
            self.search_attributes = await _registered(self._client, self.settings.namespace)
        return self._client

    @property
    def client(self) -> Client:
        """The Temporal client of a connected `Threadline` (see `temporal()`)."""
        if self._client is None:
            raise ThreadlineError(ErrorCode.SERVER_UNAVAILABLE, "not connected to Temporal: await tl.temporal() first")
        return self._client

    def store(self, name: str) -> FolderStore:
        """The store named `name`, read-only here: clients never append (workers do)."""
        if name not in self._stores:
            self._stores[name] = FolderStore(self.settings.store_folder(name))
        return self._stores[name]

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
    ) -> Conversation:
        """A handle on conversation `id` (a new UUIDv7 id when None) made with `program`."""
        self.settings.store_folder(store)
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
        )
        return Conversation(self, config)


_ENDED = frozenset({"done", "failed", "stopped", "abandoned"})
_LOG_CHECK_S = 0.25


@dataclass(frozen=True, slots=True)
class Piece:
    """A piece of a turn's streamed text."""

    offset: int
    """The stream offset to reconnect from after this piece."""
    text: str | None
    """The text, or None: the text so far is void (the model was asked again)."""


@dataclass(slots=True)
class TurnHandle:
    """A placed turn: its id and parent are known; `result()` waits for how it ends."""

    id: str | None
    parent: str | None
    request_id: str
    conversation: Conversation

    async def result(self) -> Turn:
        """Wait for the turn to end; return it as the log holds it.

        Raises:
            ThreadlineError: the coded error when the send was refused.
        """
        outcome = await self.conversation.outcome(self.request_id)
        if outcome.turn is None:
            return Turn(id="", parent=None, state=outcome.state, inputs={}, request_id=self.request_id)
        return await self.conversation.turn(outcome.turn)


class Conversation:
    """One conversation: send turns, read them, stop them, branch, move the head."""

    def __init__(self, tl: Threadline, config: ConversationConfig, view: View | None = None) -> None:
        self.tl = tl
        self.config = config
        self.view = view or View()
        self._cache = Log()

    @property
    def id(self) -> str:
        """The conversation id."""
        return self.config.conversation

    @property
    def handle(self) -> WorkflowHandle[Any, Any]:
        """The conversation's workflow (on a connected `Threadline`)."""
        return self.tl.client.get_workflow_handle(workflow_id(self.config.store, self.id))

    async def _workflow(self) -> WorkflowHandle[Any, Any]:
        """The conversation's workflow, connecting to Temporal if this is the first call that needs it."""
        client = await self.tl.temporal()
        if self.config.search_attributes != bool(self.tl.search_attributes):
            self.config = self.config.model_copy(update={"search_attributes": bool(self.tl.search_attributes)})
        return client.get_workflow_handle(workflow_id(self.config.store, self.id))

    async def __call__(self, *args: Any, request_id: str | None = None, **inputs: Any) -> Any:
        """Send a turn and return its answer (`result`)."""
        turn = await self.predict(*args, request_id=request_id, **inputs)
        return turn.result

    async def predict(self, *args: Any, request_id: str | None = None, **inputs: Any) -> Turn:
        """Send a turn and return it once it ended.

        Raises:
            ThreadlineError: when it was refused, or ended other than `done` (`turn-state`).
        """
        # No `begun` round trip: the caller wants the answer, and one update per turn is cheaper.
        send = self._send(self._inputs(args, inputs), request_id=request_id, lm=None)
        await self.signal(send)
        outcome = await self.outcome(send.request_id)
        if outcome.turn is None:
            raise ThreadlineError(ErrorCode.TURN_STATE, f"the send was {outcome.state} before it was placed")
        self._follow(outcome.turn)
        turn = await self.turn(outcome.turn)
        if turn.state != "done":
            code = (turn.error or {}).get("code") or ErrorCode.TURN_STATE
            raise ThreadlineError(code, f"turn {turn.id} ended {turn.state}", turn=turn.id)
        return turn

    async def send(self, *args: Any, request_id: str | None = None, lm: str | None = None, **inputs: Any) -> TurnHandle:
        """Send a turn; return as soon as it is placed (its id known before the model answers)."""
        send = self._send(self._inputs(args, inputs), request_id=request_id, lm=lm)
        await self.signal(send)
        try:
            placed: Begun = await (await self._workflow()).execute_update("begun", send.request_id, result_type=Begun)
        except (WorkflowUpdateFailedError, RPCError) as err:
            raise from_failure(err) from None
        if placed.error is not None:
            raise ThreadlineError(placed.error.code, placed.error.message)
        if placed.turn is not None:
            self._follow(placed.turn)
        return TurnHandle(placed.turn, placed.parent, send.request_id, self)

    def _follow(self, turn: str) -> None:
        """A view that sent follows its own branch (format-1.md 4.3)."""
        self.view = View(pinned=turn)

    async def signal(self, send: TurnSend | StopSend) -> None:
        """Deliver a `turn` or `stop` with signal-with-start (the conversation reopens if it had closed)."""
        await self._workflow()  # connects, and settles the search attributes in the config
        client, config = self.tl.client, self.config
        try:
            await client.start_workflow(
                ConversationWorkflow.run,
                ConversationInput(config=config),
                id=workflow_id(config.store, config.conversation),
                task_queue=self.tl.settings.task_queue,
                start_signal="turn" if isinstance(send, TurnSend) else "stop",
                start_signal_args=[send],
                static_summary=f"{config.program} conversation {config.conversation} (store {config.store})",
                search_attributes=self._attributes(),
            )
        except RPCError as err:
            raise from_failure(err) from None

    async def outcome(self, request_id: str) -> TurnOutcome:
        """Wait for how the send `request_id` ended."""
        try:
            handle = await self._workflow()
            outcome: TurnOutcome = await handle.execute_update("wait", request_id, result_type=TurnOutcome)
        except (WorkflowUpdateFailedError, RPCError) as err:
            raise from_failure(err) from None
        return outcome

    def _attributes(self) -> TypedSearchAttributes | None:
        if not self.tl.search_attributes:
            return None
        pairs = [
            SearchAttributePair(CONVERSATION_KEY, self.id),
            SearchAttributePair(STORE_KEY, self.config.store),
            SearchAttributePair(PROGRAM_KEY, self.config.program),
        ]
        return TypedSearchAttributes(pairs)

    def _send(self, inputs: dict[str, Any], *, request_id: str | None, lm: str | None) -> TurnSend:
        pinned = self.view.pinned
        return TurnSend(
            request_id=request_id or uuid7(),
            inputs=inputs,
            program=self.config.program,
            continue_from=pinned if self.view.exact else None,
            follow=None if self.view.exact else pinned,
            # The handle's choices travel with each send: the workflow may have been started by another.
            sends=self.config.sends,
            context=self.config.context,
            lm=lm or self.config.lm,
        )

    def _inputs(self, args: tuple[Any, ...], inputs: dict[str, Any]) -> dict[str, Any]:
        if args:
            program = self.tl.programs().get(self.config.program)
            if program is None:
                raise ThreadlineError(
                    ErrorCode.INPUTS_INVALID, f"name the inputs of {self.config.program!r}: it is not known here"
                )
            names = [name for name, _ in program.inputs]
            if len(args) > len(names):
                raise ThreadlineError(ErrorCode.INPUTS_INVALID, f"{program.name} takes {len(names)} input(s)")
            inputs = {**dict(zip(names, args, strict=False)), **inputs}
        check_input_size(inputs)  # before anything is sent (the worker checks again: signals come from anywhere)
        return inputs

    async def stream(
        self, *args: Any, request_id: str | None = None, lm: str | None = None, **inputs: Any
    ) -> AsyncIterator[str | Turn | None]:
        """Send a turn and yield its text as the model writes it, then the finished `Turn`.

        A `None` means the text so far is void: the model was asked again (a retried attempt, or a
        reply that did not fit the outputs), and what follows replaces it.
        """
        placed = await self.send(*args, request_id=request_id, lm=lm, **inputs)
        if placed.id is not None:
            async for piece in self.watch(placed.id):
                yield piece.text
        yield await placed.result()

    async def watch(self, turn: str, *, offset: int = 0, poll: float = 0.01) -> AsyncIterator[Piece]:
        """Yield what `turn`'s model writes, from byte `offset` of its stream, until the turn ends.

        Each `Piece` carries the offset to reconnect from after it, so a reader that went away
        resumes where it stopped and misses nothing.
        """
        streams, reader = StreamLog(self.tl.settings.store_folder(self.config.store)), StreamReader()
        checked = time.monotonic()
        last_try = False
        while True:
            events = await asyncio.to_thread(streams.read, turn, offset)
            for end, event in events:
                offset = end
                for text in reader.feed([event]):
                    yield Piece(end, text)
            if reader.ended in _ENDED or last_try:
                return
            if not events and time.monotonic() - checked > _LOG_CHECK_S:
                # The turn may have been ended by another writer, which streams nothing here.
                checked = time.monotonic()
                last_try = await self._has_ended(turn)
                continue
            await asyncio.sleep(poll)

    async def _has_ended(self, turn: str) -> bool:
        log = await asyncio.to_thread(self._log)
        found = log.turns.get(turn)
        return found is None or found.ended is not None

    # ----- reading

    async def render(self, *args: Any, lm: str | None = None, **inputs: Any) -> dict[str, Any]:
        """The exact request the next turn would send (provider JSON), with nothing sent or recorded."""
        from .views import render, require_program

        send = self._send(self._inputs(args, inputs), request_id="render", lm=lm)
        return render(self, send, require_program(self), await asyncio.to_thread(self._log))

    async def history(self) -> dict[str, Any]:
        """The branch as the model sees it: summary, key facts, how many turns are shown verbatim,
        how many the branch holds, and the conversation's topics."""
        from .views import history

        log = await asyncio.to_thread(self._log)
        return history(self, log, view_head(log, self.view))

    def _log(self) -> Log:
        """The conversation's log, read incrementally (only what was appended since the last read)."""
        self._cache.apply(self.tl.store(self.config.store).read(self.id, self._cache.n))
        return self._cache

    async def turns(self, all: bool = False) -> list[Turn]:
        """The turns from the first to this view's head (`all`: every turn of every branch)."""
        log, now = self._log(), time.time()
        ids = log.order if all else [t.id for t in log.branch(view_head(log, self.view))]
        return [to_turn(log, log.turns[tid], now) for tid in ids]

    async def turn(self, turn: str) -> Turn:
        """One turn by id (`turn-unknown` if the log has none)."""
        log = self._log()
        if turn not in log.turns:
            raise ThreadlineError(ErrorCode.TURN_UNKNOWN, f"turn {turn} is not in conversation {self.id}")
        return to_turn(log, log.turns[turn], time.time())

    # ----- acting

    async def stop(self, turn: str | None = None) -> None:
        """Stop `turn`, or (None) every running and queued turn of this conversation.

        A running turn ends `stopped` (whoever runs it, a functai process too); a waiting or
        interrupted one is abandoned; queued sends are dropped and record nothing.

        Raises:
            ThreadlineError: `turn-unknown` for a turn the log does not hold;
                `conversation-not-found` when there is nothing at all to stop.
        """
        log = self._log()
        if turn is not None and turn not in log.turns:
            raise ThreadlineError(ErrorCode.TURN_UNKNOWN, f"turn {turn} is not in conversation {self.id}")
        if log.n:
            await self.signal(StopSend(turn=turn))
            return
        try:  # nothing recorded yet: only an open workflow can hold queued sends
            await (await self._workflow()).signal("stop", StopSend(turn=turn))
        except RPCError as err:
            raise from_failure(err) from None

    def continue_from(self, turn: str | Turn | None) -> Conversation:
        """A handle whose next send continues after exactly `turn` (a branch when it is not the head)."""
        tid = turn.id if isinstance(turn, Turn) else turn
        return Conversation(self.tl, self.config, View(pinned=tid, exact=True))

    async def head(self, turn: str | Turn) -> None:
        """Move the conversation's head to `turn` (a `head` record every reader follows)."""
        tid = turn.id if isinstance(turn, Turn) else turn
        if tid not in self._log().turns:
            raise ThreadlineError(ErrorCode.TURN_UNKNOWN, f"turn {tid} is not in conversation {self.id}")
        await self._workflow()
        client = self.tl.client
        start = WithStartWorkflowOperation(
            ConversationWorkflow.run,
            ConversationInput(config=self.config),
            id=workflow_id(self.config.store, self.id),
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            task_queue=self.tl.settings.task_queue,
            search_attributes=self._attributes(),
        )
        try:
            await client.execute_update_with_start_workflow("head", tid, start_workflow_operation=start)
        except (WorkflowUpdateFailedError, RPCError) as err:
            raise from_failure(err) from None
        self.view = View(pinned=tid, exact=True)
