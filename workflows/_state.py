"""The running state of one conversation run, and the one object that writes it.

Placing and driving turns (`_turns`), merges, guided flows, acting on waiting turns, stops and
closing all read these fields and change them only through the methods here: a send leaves the
queue, is placed, blocks the queue, waits, or ends in one place each, whoever asked. What
continue-as-new carries is built from it (`carried`). Deterministic; no activity runs here.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from core.errors import ErrorCode
    from core.models import (
        MAX_REQUEST_ID,
        Begun,
        ConversationConfig,
        ConversationSettings,
        ConversationState,
        ConversationStatus,
        FlowStatus,
        PrepareResult,
        SettingsSend,
        StopSend,
        TurnOutcome,
        TurnSend,
        WaitingTurn,
    )
    from core.temporal import to_failure

    from ._details import answerless, bare, slim
    from ._patches import lean, leaner
    from ._upkeep import Attributes

KEPT_OUTCOMES = 200
CARRIED_OUTCOMES = 20
"""Recent outcomes continue-as-new carries, without outputs (`carried`): all of them in runs from before
`LEANER`, else the newest and those that did not end `done`; older request ids are found in the log."""

OnEnd = Callable[[TurnOutcome, Mapping[str, object] | None], None]


def _answer(outcome: TurnOutcome) -> TurnOutcome:
    """`outcome`, or its coded error raised when the send was refused."""
    if outcome.state == "refused" and outcome.error is not None:
        raise to_failure(outcome.error.to_error())
    return outcome


class RunState:
    """What one run keeps: the queue and its stops, what was placed, what runs, what ended, the counters."""

    def __init__(self, carried: ConversationState, on_end: OnEnd) -> None:
        self.config = carried.config
        """The conversation's settings; the store's identity is bound at the first placed send."""
        self.pending: list[TurnSend] = list(carried.pending)
        self.stops: deque[tuple[StopSend, int]] = deque()
        """Each stop with how many sends were queued when it came: it drops those, never a later send."""
        self.outcomes: OrderedDict[str, TurnOutcome] = OrderedDict((o.request_id, o) for o in carried.outcomes)
        self.carried_ids = dict(self.outcomes)
        """The outcomes the run before carried, as carried (a later `finish` of the same id replaces it)."""
        self.begun: dict[str, Begun] = {}
        self.prepared: dict[str, PrepareResult] = {}
        """Where the topic policy placed a queued send, kept while it waits to be placed."""
        self.tasks: dict[str, asyncio.Task[None]] = {}
        """The turns this run drives, by turn id."""
        self.steering: dict[str, list[TurnSend]] = {}
        """The sends that steer each running turn (`sends="steer"`), in the order they were placed."""
        self.background: set[asyncio.Task[None]] = set()
        """Summaries being made after their turns."""
        self.blocked_on: str | None = None
        """The running turn (or merge) the first queued send waits for."""
        self.unplaced: TurnSend | None = None
        """The send being placed and run in one step (`place_and_run`) whose turn this run does not know yet:
        out of the queue, not yet placed as far as the run knows."""
        self.wanting: set[str] = set()
        """Request ids whose callers wait for their placing (`place`, `begun`): placed on their own first."""
        self.turns = carried.turns
        self.this_run = 0
        self.closed = False
        """A close was asked for and carried out: the run ends once its handlers are done."""
        self.last: TurnOutcome | None = carried.outcomes[-1] if carried.outcomes else None
        self.looked = carried.accounted
        """No turn lost before is left open: the run before handed over none (`accounted`), or a look for
        them adopted every one (`_orphans.Orphans.look`)."""
        self.unsure = False
        """Something in this run may have left a turn it placed open and undriven (`may_have_lost`)."""
        self._on_end = on_end

    # ----- the queue and the stops

    def enqueue(self, send: TurnSend) -> None:
        """Queue a send. One with an over-long request id is dropped: no caller can wait for it (`wait`
        refuses such ids), and it must not swell what the run carries."""
        if len(send.request_id) <= MAX_REQUEST_ID:
            self.pending.append(send)
        else:
            workflow.logger.warning("send dropped", extra={"reason": "request id too long"})

    def enqueue_once(self, send: TurnSend) -> str:
        """Queue `send` unless its request id is known here already (a caller asking again); its id."""
        if len(send.request_id) > MAX_REQUEST_ID:
            too_long = f"a request id has at most {MAX_REQUEST_ID} characters"
            raise ApplicationError(too_long, type=ErrorCode.INVALID_REQUEST)
        if not self.known(send.request_id):
            self.enqueue(send)
        return send.request_id

    def drop_first(self) -> None:
        """The first queued send leaves the queue (placed, taken, refused or a repeat)."""
        self.pending.pop(0)

    def drop(self, send: TurnSend) -> None:
        """A queued send leaves the queue unplaced (a stop dropped it)."""
        self.pending.remove(send)

    def take_queued(self) -> list[TurnSend]:
        """Empty the queue; the sends that were in it."""
        queued = list(self.pending)
        self.pending.clear()
        return queued

    def hand_back(self, send: TurnSend) -> None:
        """The send placed in one step did not begin its turn there: first in the queue again, ahead of
        every send and counted by every stop that came since it left the queue."""
        if self.unplaced is send:
            self.unplaced = None
        self.pending.insert(0, send)
        self.stops = deque((stop, queued + 1) for stop, queued in self.stops)

    def stop_came(self, stop: StopSend) -> None:
        """Queue a stop, with how many sends were queued before it."""
        self.stops.append((stop, len(self.pending)))

    def next_stop(self) -> tuple[StopSend, int]:
        """The oldest queued stop, out of the queue."""
        return self.stops.popleft()

    def close(self) -> None:
        """The close was carried out: the run ends once its handlers are done."""
        self.closed = True

    def reopen(self) -> None:
        """Sends came after the close: the conversation goes on serving them."""
        self.closed = False

    # ----- placing and running

    def settle(self, config: ConversationConfig) -> None:
        """Take the config a minimal start was completed to (the worker's defaults filled in), keeping
        the settings a `configure` update changed while it was being completed."""
        changed = {name: getattr(self.config, name) for name in self.config.configured}
        self.config = config.model_copy(update={**changed, "configured": self.config.configured}) if changed else config

    def configure(self, change: SettingsSend) -> ConversationSettings:
        """Change the settings the next placed sends run with; continue-as-new carries them in the config."""
        self.config = self.config.configure(change)
        return self.config.settings()

    def bind_store(self, store_id: str | None) -> None:
        """Bind the store's identity the first placed send reported (later ones leave it)."""
        if self.config.store_id is None and store_id is not None:
            self.config = self.config.model_copy(update={"store_id": store_id})

    def prepare(self, request_id: str, prepared: PrepareResult) -> None:
        """Keep where the topic policy places a queued send, however often it waits."""
        self.prepared[request_id] = prepared

    def place(self, begun: Begun) -> None:
        """A send was placed (or its request id's turn found): callers of `begun` learn its turn."""
        self.begun[begun.request_id] = begun
        self.wanting.discard(begun.request_id)
        if self.unplaced is not None and self.unplaced.request_id == begun.request_id:
            self.unplaced = None

    def placing(self, send: TurnSend) -> None:
        """`send` left the queue to be placed and run in one step; its turn is not known here yet."""
        self.drop_first()
        self.unplaced = send

    def block(self, turn: str) -> None:
        """The queue waits for `turn`, running here, to end."""
        self.blocked_on = turn

    def unblock(self, turn: str | None) -> None:
        """The queue no longer waits for `turn` (it ended, or waits for a person)."""
        if turn is not None and self.blocked_on == turn:
            self.blocked_on = None

    def steer(self, turn: str, send: TurnSend) -> None:
        """`send` joined the running `turn` (a `steer` entry): it ends when that turn does, or, if the turn
        never took it, is placed again as a queued send (`settle_steers`)."""
        self.steering.setdefault(turn, []).append(send)

    def settle_steers(self, outcome: TurnOutcome) -> None:
        """The turn of `outcome` ended: each steer it took ends with it (the outcome under its own request
        id); the others go back to the front of the queue, in order, as queued sends after it."""
        sends = self.steering.pop(outcome.turn or "", [])
        again = [s for s in sends if s.request_id not in outcome.steers]
        for send in sends:
            if send.request_id in outcome.steers:
                self.finish(outcome.model_copy(update={"request_id": send.request_id}))
        for send in again:
            self.begun.pop(send.request_id, None)
        self.pending[0:0] = [s.model_copy(update={"sends": "queue"}) for s in again]

    def looked_for_lost(self) -> None:
        """A look for the turns this workflow placed and lost adopted every one the log held."""
        self.looked = True

    def may_have_lost(self) -> None:
        """A turn this run placed may be left open with nothing of its own driving it (a placing refused
        after its records may have landed, a turn whose end could not be written): the next run looks
        for lost turns at its start."""
        self.unsure = True

    def running(self, turn: str, task: asyncio.Task[None]) -> None:
        """`task` drives `turn` to its end."""
        self.tasks[turn] = task

    def summarising(self, task: asyncio.Task[None]) -> None:
        """`task` makes a summary in the background; it is forgotten once done."""
        self.background.add(task)
        task.add_done_callback(self.background.discard)

    def note(self, outcome: TurnOutcome) -> None:
        """Callers waiting for the send learn that its turn waits (not an end: `unnote` takes it back)."""
        self.outcomes[outcome.request_id] = outcome
        self.last = outcome

    def unnote(self, request_id: str) -> None:
        """The turn no longer waits: callers wait for its end again."""
        noted = self.outcomes.get(request_id)
        if noted is not None and noted.state == "waiting":
            del self.outcomes[request_id]

    def finish(self, outcome: TurnOutcome, *, new: bool = False, inputs: Mapping[str, object] | None = None) -> None:
        """Record how a send ended; `new` when it made a turn of its own (not a repeated request id)."""
        self.outcomes[outcome.request_id] = outcome
        self.prepared.pop(outcome.request_id, None)
        self.wanting.discard(outcome.request_id)
        while len(self.outcomes) > KEPT_OUTCOMES:
            self.outcomes.popitem(last=False)
        if outcome.turn is not None:
            self.tasks.pop(outcome.turn, None)
        self.unblock(outcome.turn)
        if new:
            self.turns += 1
            self.this_run += 1
        self.last = outcome
        self._on_end(outcome, inputs)

    # ----- reading it

    def seen(self, request_id: str) -> bool:
        """Whether a send with this request id was placed or answered in this run (a repeat is one turn)."""
        return request_id in self.outcomes or request_id in self.begun

    def carried_answerless(self, outcome: TurnOutcome) -> bool:
        """Whether `outcome` is a done one the run before carried without its answer (`answerless`)."""
        return (
            outcome.state == "done"
            and outcome.outputs is None
            and outcome.turn is not None
            and (self.carried_ids.get(outcome.request_id) is outcome)
        )

    def known(self, request_id: str) -> bool:
        """Whether a send with this request id was queued, placed or answered in this run."""
        queued = [*self.pending, *([self.unplaced] if self.unplaced else [])]
        return self.seen(request_id) or any(send.request_id == request_id for send in queued)

    def idle(self) -> bool:
        """Nothing queued, being placed, stopping, running or being summarised."""
        return not (self.pending or self.unplaced or self.stops or self.tasks or self.background)

    def ready(self) -> bool:
        """A queued send can be placed now (the queue is not waiting for a running turn)."""
        return bool(self.pending) and self.blocked_on is None

    def run_full(self) -> bool:
        """Whether this run has served its share of turns, or its history asks to continue as new."""
        return self.this_run >= self.config.turns_per_run or workflow.info().is_continue_as_new_suggested()

    def attributes(self) -> Attributes:
        """What the search attributes show: `running` while a turn runs or a send waits, and the turn count."""
        return ("running" if self.tasks or self.pending or self.unplaced else "idle"), self.turns

    def status(self) -> ConversationStatus:
        """The `status` query: what the conversation is doing now."""
        return ConversationStatus(
            store=self.config.store,
            conversation=self.config.conversation,
            program=self.config.program,
            running=sorted(self.tasks),
            pending=len(self.pending) + (self.unplaced is not None),
            turns=self.turns,
            turns_this_run=self.this_run,
            summarising=len(self.background),
            last=self.last,
            settings=self.config.settings(),
        )

    def carried(self, *, waiting: list[WaitingTurn] | None = None, flow: FlowStatus | None = None) -> ConversationState:
        """What continue-as-new carries: the queue, the recent outcomes without outputs (but the newest,
        which `status` shows, only what a late caller needs), the counter, the turns waiting on a
        deadline (their waiting outcomes stay with them), whether no turn is left lost (`accounted`),
        and the flow as the log has it (`flow`, when the flows know it): the next run reads neither back."""
        held = {w.request_id for w in waiting or ()}
        recent = [o for o in list(self.outcomes.values())[-CARRIED_OUTCOMES:] if o.request_id not in held]
        if leaner():  # a done send's outcome is in the log (`wait` reads it there); the rest stay here
            recent = [*(o for o in recent[:-1] if o.state != "done"), *recent[-1:]]
        older, newest = (bare if lean() else slim), (answerless if leaner() else slim)
        recent = [*map(older, recent[:-1]), *map(newest, recent[-1:])]
        return ConversationState(
            config=self.config,
            pending=list(self.pending),
            outcomes=recent,
            turns=self.turns,
            waiting=waiting or [],
            accounted=self.looked and not self.unsure,
            flow=flow,
        )

    # ----- answering the updates

    async def outcome(self, request_id: str) -> TurnOutcome:
        """Wait for how the send `request_id` ends; a refusal raises its coded error."""
        await workflow.wait_condition(lambda: request_id in self.outcomes)
        return _answer(self.outcomes[request_id])

    async def placed(self, request_id: str) -> Begun:
        """Wait until the send `request_id` is placed: its turn and parent (the model is asked next)."""
        if request_id not in self.begun and request_id not in self.outcomes:
            self.wanting.add(request_id)
        await workflow.wait_condition(lambda: request_id in self.begun or request_id in self.outcomes)
        if request_id in self.begun:
            return self.begun[request_id]
        outcome = _answer(self.outcomes[request_id])
        return Begun(request_id=request_id, turn=outcome.turn, parent=outcome.parent, existing=True)
