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
from collections.abc import AsyncIterator, Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Unpack

from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client, WorkflowHandle

from core.errors import ErrorCode, ThreadlineError
from core.limits import check_config
from core.models import Begun, RenderResult, TurnOutcome, TurnSend
from core.settings import Settings
from core.temporal import connect_temporal, workflow_id
from store.backends.base import check_id
from store.backends.blobs import FolderBlobs, open_blobs
from store.backends.opening import StoreSet
from store.backends.reader import ConversationLog, LogCache, now
from store.log.rules import View, view_head
from store.programs.program import Program, load_programs
from store.records import uuid7
from workflows.attributes import SEARCH_ATTRIBUTE_KEYS

from . import embedding
from .acting import LiveTurn
from .configuring import SettingsMethods
from .crossing import Unreached, crossing
from .delivery import Progress
from .guided import FlowMethods
from .handle import finished
from .listing import Listing
from .options import ConversationKeywords, ConversationOptions, SendOptions
from .reading import Page, Turn, find_turn, history, to_turn
from .scheduling import ScheduleMethods
from .turnstream import Piece, TextWatch, TurnHandle, TurnStream

if TYPE_CHECKING:
    from store.backends.pgblobs import PostgresBlobs

    from .closing import Closing
    from .purging import Purged


async def connect(
    settings: Settings | None = None,
    *,
    client: Client | None = None,
    lazy: bool = False,
    embedded: bool = False,
    stores: Mapping[str, object] | None = None,
) -> Threadline:
    """Connect to Temporal (`THREADLINE_TEMPORAL_ADDRESS`) and return the entry point of the API.

    With `lazy`, nothing is connected until something needs Temporal: reading turns and history
    only read the store, and work while Temporal is down. With `embedded`, a worker runs in this
    process on a task queue of its own, sharing this client's stores: the memory store
    (`store=None` or `"memory"`) and store objects work then; `await tl.close()` stops it. `stores`
    names store objects (`append`/`read`, or `append_records`/`read_records`) as a worker built in
    this process with the same objects knows them.
    """
    settings = settings or Settings.from_env()
    if embedded:
        settings = embedding.own_queue(settings)
    tl = Threadline(client, settings, stores=stores)
    if embedded:
        tl.embedded = await embedding.start(await tl.temporal(), settings, tl.stores)
    elif not lazy:
        await tl.temporal()
    return tl


LOOKUP_TIMEOUT_S = 5.0
LOOKUP_PAUSES_S = (0.2, 0.4)
"""A client's first call looks up Threadline's search attributes: each try has `LOOKUP_TIMEOUT_S`,
and one Temporal did not answer is asked again after each pause before the call fails with it."""


async def _registered(client: Client, namespace: str) -> bool:
    from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest

    async def lookup() -> bool:
        try:
            with crossing():
                found = await client.operator_service.list_search_attributes(
                    ListSearchAttributesRequest(namespace=namespace), timeout=timedelta(seconds=LOOKUP_TIMEOUT_S)
                )
        except Unreached:
            raise
        except ThreadlineError:
            return False
        return all(key.name in found.custom_attributes for key in SEARCH_ATTRIBUTE_KEYS)

    for pause in LOOKUP_PAUSES_S:
        try:
            return await lookup()
        except Unreached:
            await asyncio.sleep(pause)
    return await lookup()  # its `Unreached` fails the call: the next call that needs Temporal asks again


class Threadline(Listing):
    """A connection to Threadline: makes conversation handles, reads their logs, lists conversations (`Listing`)."""

    def __init__(
        self,
        client: Client | None,
        settings: Settings,
        *,
        search_attributes: bool | None = None,
        stores: Mapping[str, object] | None = None,
    ) -> None:
        self._client = client
        self.settings = settings
        self.search_attributes = search_attributes
        self._programs: dict[str, Program] | None = None
        self.stores = StoreSet(settings.named_stores(), hidden=settings.hidden_stores())
        """Every store the settings name (a folder or a PostgreSQL database), opened on first use; the
        memory store, functai's folder and store objects besides."""
        for name, target in (stores or {}).items():
            self.stores.adopt(target, name)
        self.logs = LogCache(self.stores.records)
        self.progress = Progress()
        """When a worker last took a send made through this client (sends queued behind others wait quietly)."""
        self._blobs: FolderBlobs | PostgresBlobs | None = None
        self.embedded: embedding.Embedded | None = None
        """The worker this process runs for this client (`connect(embedded=True)`), else None."""

    async def close(self) -> None:
        """Close the stores and the payload store this client opened (database connections); the
        Temporal client stays (one it made keeps its payload store, which opens again on use). An
        embedded worker first closes the conversations it served, then stops."""
        if self.embedded is not None:
            await self.embedded.stop()
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
            with crossing():
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
        with crossing():
            found = await self.client.workflow_service.describe_task_queue(query, timeout=timedelta(seconds=2))
        return bool(found.pollers)

    def log(self, store: str, conversation: str) -> ConversationLog:
        """The record log of `conversation` in `store`, read incrementally and shared by every handle."""
        return self.logs.get(store, check_id(conversation))

    def conversation(
        self,
        program: str = "tutor",
        id: str | None = None,
        *,
        options: ConversationOptions | None = None,
        **given: Unpack[ConversationKeywords],
    ) -> Conversation:
        """A handle on conversation `id` (a new UUIDv7 id when None) made with `program`.

        Its choices are `options` (a `ConversationOptions`), or that object's fields given as keywords
        (`store=`, `lm=`, `approve=`, ...), which change those of `options` when both are given.
        """
        chosen = (options or ConversationOptions()).replace(**given)
        store = embedding.store_name(self.stores, chosen.store, embedded=self.embedded)
        chosen = chosen.replace(store=store)
        self.logs.stores.check(store)
        conversation = check_id(uuid7() if id is None else id)
        config = chosen.config(program, conversation, self.settings, search=bool(self.search_attributes))
        check_config(config)  # before anything is sent or recorded
        if self.embedded is not None:
            self.embedded.served(config)
        return Conversation(self, config)


class Conversation(FlowMethods, ScheduleMethods, SettingsMethods):
    """One conversation: send turns, read them, stop them, branch, move the head; guided flows (`FlowMethods`),
    scheduled turns (`ScheduleMethods`), settings changed while it runs (`SettingsMethods`)."""

    tl: Threadline

    @property
    def handle(self) -> WorkflowHandle[Any, Any]:
        """The conversation's workflow (on a connected `Threadline`)."""
        return self.tl.client.get_workflow_handle(workflow_id(self.config.store, self.id))

    # ----- sending: each call builds its `SendOptions` once

    async def __call__(
        self, *args: Any, request_id: str | None = None, lm: str | None = None, approve: Any = None, **inputs: Any
    ) -> Any:
        """Send a turn and return its answer (`result`); `lm` and `approve` are this turn's only."""
        outcome = await self._ended(self._prepared(args, inputs, SendOptions(request_id, lm, approve)))
        if outcome.state == "done":
            return outcome.result  # what the log holds too: no read needed
        return finished(await self.turn(str(outcome.turn))).result

    async def predict(
        self, *args: Any, request_id: str | None = None, lm: str | None = None, approve: Any = None, **inputs: Any
    ) -> LiveTurn:
        """Send a turn and return it once it ended.

        Raises:
            Waiting: when it waits for a person (`err.turn.approve()` answers and goes on).
            ThreadlineError: when it was refused, or ended other than `done` (`turn-state`).
        """
        # One update-with-start per turn: the send and the wait for its answer in one round trip.
        outcome = await self._ended(self._prepared(args, inputs, SendOptions(request_id, lm, approve)))
        return finished(await self.turn(str(outcome.turn)))

    async def deliver(
        self,
        *args: Any,
        request_id: str | None = None,
        lm: str | None = None,
        approve: Any = None,
        tools: Sequence[Mapping[str, Any]] = (),
        **inputs: Any,
    ) -> TurnOutcome:
        """Send a turn and wait for how it ends, in one round trip: its outcome as the workflow tells it
        (a failed or waiting turn is an outcome here, not an error; nothing is read from the log).

        `tools` are functions the caller runs itself (`SendOptions.tools`): a turn whose model calls one
        waits, and `(await chat.turn(id)).resume(results={call_id: output})` goes on.

        Raises:
            ThreadlineError: the coded error when the send was refused.
        """
        options = SendOptions(request_id, lm, approve, tools=tools)
        return await self._ended(self._prepared(args, inputs, options))

    async def send(
        self,
        *args: Any,
        request_id: str | None = None,
        lm: str | None = None,
        approve: Any = None,
        tools: Sequence[Mapping[str, Any]] = (),
        **inputs: Any,
    ) -> TurnHandle:
        """Send a turn; return as soon as it is placed (its id known before the model answers); `tools`
        as in `deliver`."""
        return await self._placed(self._prepared(args, inputs, SendOptions(request_id, lm, approve, tools=tools)))

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
        options = SendOptions(request_id, lm, approve)
        return TurnStream(lambda: self._placed(self._prepared(args, inputs, options)))

    def _prepared(self, args: tuple[Any, ...], inputs: dict[str, Any], options: SendOptions) -> TurnSend:
        return self.sent(self._inputs(args, inputs), options)

    async def _ended(self, send: TurnSend) -> TurnOutcome:
        """Send `send` and wait for how it ends; the view follows its turn."""
        outcome = await self.submit(send)
        if outcome.turn is None:
            raise ThreadlineError(ErrorCode.TURN_STATE, f"the send was {outcome.state} before it was placed")
        self._follow(outcome.turn)
        return outcome

    async def _placed(self, send: TurnSend) -> TurnHandle:
        """Send `send` and wait until it is placed; the view follows its turn."""
        placed = await self.delivery.ask("place", send, Begun)
        if placed.turn is not None:
            self._follow(placed.turn)
        return TurnHandle(placed.turn, placed.parent, send.request_id, self)

    def watch(self, turn: str, *, offset: int = 0, poll: float = 0.01) -> AsyncIterator[Piece]:
        """Yield what `turn`'s model writes, from byte `offset` of its stream, until the turn ends.

        Each `Piece` carries the offset to reconnect from after it, so a reader that went away
        resumes where it stopped and misses nothing.
        """
        store = self.config.store
        self.tl.logs.stores.check(store)
        text = TextWatch(self.tl.stores.streams[store], self.tl.log(store, self.id))
        return text.pieces(turn, offset=offset, poll=poll)

    async def placed_turn(self, request_id: str) -> str | None:
        """The turn the send `request_id` began, as the record log holds it now (None: not placed yet,
        or it began none: refused, or it joined a running turn)."""
        return (await self._read()).request_ids.get(request_id)

    async def render(self, *args: Any, lm: str | None = None, **inputs: Any) -> RenderResult:
        """The exact request the next turn would send (provider JSON), with nothing sent or recorded.

        Asked of the conversation's workflow, which places and shows it with the worker's own rules,
        model and providers (a topic classified, not recorded), once the summaries being made landed.
        """
        send = self._prepared(args, inputs, SendOptions(lm=lm))
        return await self.delivery.update_with_start("render", send, RenderResult)

    # ----- branches, merges and ratings

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
        from . import learning  # the call log and its stores load only for merges and ratings

        return await learning.merge(self, turns, program, options=SendOptions(request_id, lm), inputs=inputs)

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
        from . import learning

        return await learning.rate_turn(
            self.tl.settings, self.config.store, self.id, tid, verdict,
            answer=answer, outputs=outputs, note=note, reasons=reasons, by=by,
        )  # fmt: skip

    # ----- reading

    async def history(self) -> dict[str, Any]:
        """The branch as the model sees it: summary, key facts, how many turns are shown verbatim,
        how many the branch holds, and the conversation's topics."""
        log = await self._read()
        rule = self.config.context  # a send of its own would bring its own rule
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

    # ----- stopping, closing and the head

    async def stop(self, turn: str | None = None) -> None:
        """Stop `turn`, or (None) every running and queued turn of this conversation.

        A running turn ends `stopped` (whoever runs it, a functai process too); a waiting or
        interrupted one is abandoned; queued sends are dropped and record nothing.

        Raises:
            ThreadlineError: `turn-unknown` for a turn the log does not hold;
                `conversation-not-found` when there is nothing at all to stop.
        """
        from . import closing  # a send never stops or closes: it does not load this

        await closing.stop(self.delivery, await self._read(), turn)

    async def close(self) -> Closing:
        """Close the conversation's workflow: queued sends are answered `conversation-closed`, running
        turns stop, and the run ends; the records stay, and the next send reopens it.

        With no worker to do that, the run is terminated instead (`forced`): its queued sends are then
        answered by Temporal's termination, not by the workflow. Its schedules are deleted.

        Raises:
            ThreadlineError: `conversation-not-found` when there are neither records, a workflow nor schedules.
        """
        from . import closing

        return await closing.close(self.delivery, await self._read())

    async def purge(self, *, force: bool = False) -> Purged:
        """Close the conversation and remove it for good: its records, its turns' streams and call-log
        lines, from its store; a later read finds nothing, and its id can be used again (a new
        conversation). The records' contract keeps everything (`close()`); this is the deletion the
        article's service makes, asked for by name (docs/http.md, *Deleting a conversation*).

        Raises:
            ThreadlineError: `conversation-running` when a turn runs or waits for a person (`force`
                stops it and goes on); `conversation-not-found` when there is nothing to remove.
        """
        from . import purging  # the call log and its stores load only for a purge

        return await purging.purge(self.tl, self.delivery, self.tl.log(self.config.store, self.id), force=force)

    def continue_from(self, turn: str | Turn | None) -> Conversation:
        """A handle whose next send continues after exactly `turn` (a branch when it is not the head)."""
        tid = turn.id if isinstance(turn, Turn) else turn
        return Conversation(self.tl, self.config, View(pinned=tid, exact=True))

    async def head(self, turn: str | Turn) -> None:
        """Move the conversation's head to `turn` (a `head` record every reader follows)."""
        tid = turn.id if isinstance(turn, Turn) else turn
        find_turn(await self._read(), tid, self.id)
        await self.delivery.update_with_start("head", tid, type(None))
        self.view = View(pinned=tid, exact=True)
