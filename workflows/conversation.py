"""The Conversation workflow: one per conversation, deterministic orchestration only.

Signals deliver turns and stops (durable even while no worker runs); handlers only enqueue and
the main loop decides. Activities read and append the record log themselves, so the workflow
keeps only its small state (`RunState`, carried as a `ConversationState`: the queue, recent
outcomes, a counter) and its history per turn stays the same however long the conversation grows.
Callers that want an answer wait with the `wait` update; refusals reach them as coded errors.
"""

from __future__ import annotations

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from core.again_models import AskAgain, AskedAgain
    from core.errors import ErrorCode
    from core.models import (
        MAX_REQUEST_ID,
        Begun,
        ConversationSettings,
        ConversationState,
        ConversationStatus,
        FlowStatus,
        RenderResult,
        SettingsSend,
        StopSend,
        TurnOutcome,
        TurnSend,
    )
    from core.records_models import ImportResult, ImportSend, SetupResult, SetupSend
    from core.temporal import CONVERSATION_WORKFLOW
    from core.toolmodels import ActResult, TurnAction

    from ._admission import Admission
    from ._flows import Flows
    from ._merges import Merges
    from ._observed import run_began, run_ended
    from ._patches import lean, leaner, opens, since
    from ._records import import_messages, set_up
    from ._start import settle
    from ._state import RunState
    from ._turns import Turns
    from ._upkeep import Upkeep


CLOSED_ENDS = "closed-ends-before-continuing"
"""Runs from before it continued as new when closed while draining a full run."""
CONFIGURED = "conversation-settings"
"""Runs from before it had no `configure` update: their settings never changed mid-run."""


@workflow.defn(name=CONVERSATION_WORKFLOW)
class ConversationWorkflow:
    """A conversation: turns arrive as signals, run as activities, and end in the record log."""

    @workflow.init
    def __init__(self, input: ConversationState) -> None:
        lean()  # asked in the run's first task, before any older patch (`_patches`)
        self.reads_earlier = leaner()
        """A `wait` or `begun` for a send this run never saw is answered from the record log."""
        self.state = RunState(input, on_end=lambda o, i: self.upkeep.ended(o, i, self.state.attributes))
        self.turns = Turns(self.state)
        self.merges = Merges(self.state)
        self.guided = Flows(self.state)
        """The guided flow alone (`flow` and `flows` already name the signal and the query)."""
        self.admission = Admission(self.guided, self.merges, self.turns)
        self.upkeep = Upkeep(input.config)
        self._quiet = lambda: self._idle() and not self.guided.armed()  # may close: no flow timer would be lost

    @workflow.signal(name="turn")
    def turn(self, send: TurnSend) -> None:
        """Queue a send; the main loop places it."""
        self.turns.observed.arrived(send.request_id)
        self.state.enqueue(send)

    @workflow.signal(name="flow")
    def flow(self, send: TurnSend) -> None:
        """Queue the start of the guided flow `send.flow`, in order with the sends (answered like one)."""
        self.turn(send)

    @workflow.signal(name="stop")
    def stop(self, stop: StopSend) -> None:
        """Queue a stop; the main loop carries it out."""
        self.state.stop_came(stop)

    @workflow.update(name="wait")
    async def wait(self, request_id: str) -> TurnOutcome:
        """Wait for how the send `request_id` ends; a refusal raises its coded error."""
        if not self.state.known(request_id):  # a send of an earlier run: its outcome is in the log
            return await self.turns.earlier_outcome(request_id)
        outcome = await self.state.outcome(request_id)
        if self.reads_earlier and self.state.carried_answerless(outcome):  # its answer is in the log
            found = await self.turns.earlier_outcome(request_id)
            return found.model_copy(update={"flow": outcome.flow}) if outcome.flow else found
        return outcome

    @workflow.update(name="begun")
    async def begun(self, request_id: str) -> Begun:
        """Wait until the send `request_id` is placed: its turn id and parent (the model is asked next)."""
        if not self.state.known(request_id):
            return await self.turns.earlier_placed(request_id)
        return await self.turns.placed(request_id)

    @workflow.update(name="send")
    async def send(self, send: TurnSend) -> TurnOutcome:
        """Queue `send` (once per request id) and wait for how it ends: what signal and `wait` do, in one."""
        self.turns.observed.arrived(send.request_id)
        return await self.state.outcome(self.state.enqueue_once(send))

    @workflow.update(name="place")
    async def place(self, send: TurnSend) -> Begun:
        """Queue `send` (once per request id) and wait until it is placed: signal and `begun` in one."""
        self.turns.observed.arrived(send.request_id)
        return await self.turns.placed(self.state.enqueue_once(send))

    @wait.validator
    def _known(self, request_id: str) -> None:
        _check_known(self.reads_earlier or self.state.known(request_id), request_id)

    begun.validator(_known)

    @workflow.update(name="head")
    async def head(self, turn: str) -> None:
        """Move the conversation's head to `turn` (a `head` record)."""
        await self.turns.move_head(turn)

    @workflow.update(name="close")
    async def close(self) -> int:
        """Close: queued sends are answered `conversation-closed`, running turns stop, the run ends."""
        return await self.turns.close()

    @workflow.update(name="act")
    async def act(self, action: TurnAction) -> ActResult:
        """Answer, resume or abandon a turn that waits for a person or was interrupted."""
        return await self.turns.acting.act(action)

    @workflow.update(name="render")
    async def render(self, send: TurnSend) -> RenderResult:
        """The exact request `send` would make now; nothing is sent to the model or recorded."""
        return await self.turns.render(send)

    @workflow.update(name="ask_again")
    async def ask_again(self, ask: AskAgain) -> AskedAgain:
        """A turn's exact request sent to its model again; the answer is returned, nothing is recorded."""
        return await self.turns.ask_again(ask)

    @workflow.update(name="configure")
    def configure(self, change: SettingsSend) -> ConversationSettings:
        """Change the settings the next turns run with (`budget`); a turn running now keeps its own."""
        workflow.patched(CONFIGURED)  # so a later change of how settings apply can tell these runs apart
        return self.state.configure(change)

    @configure.validator
    def _changes_something(self, change: SettingsSend) -> None:
        if change.budget is None:
            raise ApplicationError("name a setting to change: budget", type=ErrorCode.INVALID_REQUEST)

    @workflow.update(name="setup")
    async def setup(self, setup: SetupSend) -> SetupResult:
        """Record the conversation's system prompt and metadata (an `entry` every later turn is shown)."""
        return await set_up(self.state.config, setup)

    @workflow.update(name="append")
    async def append(self, send: ImportSend) -> ImportResult:
        """Record messages as done turns after the head, without asking a model (importing a transcript)."""
        return await import_messages(self.state.config, send)

    @workflow.query(name="flows")
    def flows(self) -> FlowStatus:
        """The conversation's guided flow (its latest response: a prompt or a reminder) and the counts."""
        return self.guided.status()

    @workflow.query(name="status")
    def status(self) -> ConversationStatus:
        """What the conversation is doing now."""
        status = self.state.status()
        clocks = self.turns.acting.deadlines.clocks()
        return status.model_copy(update={"deadlines": clocks}) if clocks else status

    @workflow.run
    async def run(self, input: ConversationState) -> str:
        """Place sends in order, carry out stops, and close when idle (reopened by the next signal)."""
        if (config := await settle(self.state.config)) is not self.state.config:
            self.state.settle(config)
            self.upkeep = Upkeep(config)
        upkeep = self.upkeep
        run_began()
        self.turns.acting.restore(input.waiting)  # turns the run before left waiting on a deadline
        # what the run before handed over, in a run of this code (one a worker from before began
        # looked and read, and must replay so)
        handed = input if self.reads_earlier else ConversationState(config=input.config)
        if not handed.accounted and handed.flow is None and opens() and self._opens_now():
            self.turns.defer_opening()  # the first send's step looks at the log (`_patches.OPENS`)
            self.guided.defer()
        else:
            if not handed.accounted:
                await self.turns.orphans.look()  # turns a lost task of an earlier run placed
            await self.guided.begin(handed.flow)
        upkeep.restart_clock(self._quiet)
        while True:
            await upkeep.publish_when_quiet(self.state.attributes, is_idle=self._idle, has_work=self._has_work)
            await workflow.wait_condition(self._wakes)
            if self.turns.opening is not None:
                await self._open()
            if self.state.closed or (upkeep.closing and self._idle() and not self._has_work()):
                if ended := await self._ending():
                    run_ended()
                    return ended
                continue
            if upkeep.clock_fired():  # it fired while work arrived: keep counting from now
                upkeep.restart_clock(self._quiet)
            if self.state.stops:
                await self.admission.stop(*self.state.next_stop())
            elif self.guided.due:
                await self.guided.fire()
            elif self.turns.ready():
                await self.admission.admit(self.state.pending[0])
            elif self._time_to_continue() and await self._drained(waits=True):
                if self.state.closed and since(CLOSED_ENDS):
                    continue  # closed while draining: the run ends (at the top), it does not go on as new
                attributes = upkeep.handed_on(self.state.attributes())
                run_ended()
                carried = self.state.carried(waiting=self.turns.acting.carried(), flow=self.guided.carried())
                workflow.continue_as_new(carried, search_attributes=attributes)

    def _opens_now(self) -> bool:
        """Whether the run's next step places its first queued send at once, nothing before it."""
        pending = self.state.pending
        first = not (self.state.stops or self.state.closed) and bool(pending)
        return first and self.turns.opens_with(pending[0])

    async def _open(self) -> None:
        """The run's first look at the log, left to its first send's step: taken there (`clean`: no lost
        turn and no flow), or taken here the usual way when the step did not place the send, or when
        something else comes first."""
        due = self.turns.opening_due(self._opens_now())
        if due == "clean":
            self.guided.opened()
        elif due == "look":
            await self.turns.orphans.look()
            await self.guided.begin()

    def _wakes(self) -> bool:
        idle = self._idle()
        stale = self.upkeep.stale(self.state.attributes(), idle=idle)
        opened = self.turns.opening in ("clean", "owed")  # the first send's step answered: take its look in
        return self._has_work() or self.state.closed or (self.upkeep.closing and idle) or stale or opened

    async def _ending(self) -> str | None:
        """End the run, closed or idle long enough, unless sends came meanwhile (then it goes on)."""
        why = "closed" if self.state.closed else "idle"
        if why == "idle" and await self.turns.orphans.look():  # a lost turn runs first
            self.upkeep.restart_clock(self._quiet)
            return None
        if await self._drained():
            workflow.logger.info("conversation ended", extra={"why": why})
            self.upkeep.publish(self.state.attributes(), force=True)
            return why
        if why == "idle":
            self.upkeep.restart_clock(self._quiet)
        self.state.reopen()  # sent after the close: the conversation reopened, serve them
        return None

    def _idle(self) -> bool:
        return self.state.idle() and self.merges.idle()

    def _has_work(self) -> bool:
        return bool(self.state.stops or self.guided.due) or self.turns.ready() or self._time_to_continue()

    def _time_to_continue(self) -> bool:
        # never leave a turn, a send or a summary behind; turns waiting on a deadline are carried
        return (self._idle() or self._waits_only()) and self.state.run_full()

    def _waits_only(self) -> bool:
        """Nothing runs but turns waiting under a deadline, parked on their timers (they can be carried)."""
        quiet = not (self.state.pending or self.state.unplaced or self.state.stops or self.state.background)
        return quiet and self.merges.idle() and self.turns.acting.only_parked()

    async def _drained(self, *, waits: bool = False) -> bool:
        await self.upkeep.drained(arrived=lambda: bool(self.state.pending or self.state.stops))
        return self._idle() or (waits and self._waits_only())


def _check_known(known: bool, request_id: str) -> None:
    if len(request_id) > MAX_REQUEST_ID:
        raise ApplicationError(f"a request id has at most {MAX_REQUEST_ID} characters", type=ErrorCode.INVALID_REQUEST)
    if not known:
        raise ApplicationError(f"no send with request id {request_id} is known", type=ErrorCode.TURN_UNKNOWN)
