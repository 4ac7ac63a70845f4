"""Running one try at a turn: its lifecycle, whatever the turn's steps are.

Temporal's heartbeat timeout and retry policy are the turn's lease inside Temporal: a worker
that dies is noticed within seconds and the activity runs again elsewhere. The record log keeps
functai readers informed: a `lease` every 5 s while the steps run, and the turn ends with
exactly one `ended` record, appended conditionally so a zombie attempt or another writer that
took over can never add a second one.

A try Temporal gave up on may still run (its worker was frozen, not dead, and wakes up later), and
one may even start late (a task its worker took just before freezing). So a retry takes the turn
over (a lease of the next attempt) before anything else, and every try looks at the log again
before each write that matters: before its stream starts, before each model call, before each
append. A try that finds the turn ended or taken writes nothing more and asks the model nothing.

`TurnRun` owns all of that (the claim, the watch, the lease, the stream, the `ended` record, the
outcome); what the turn does meanwhile is the `steps.TurnSteps` it is given.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import Literal

import structlog
from temporalio import activity

from core.deadlines import ApprovalDeadline, first_calls
from core.errors import ErrorCode, ThreadlineError
from core.models import Ended, HelperMemory, Paused, RunInput, RunResult, Yielded
from store.backends.reader import ConversationLog, now
from store.backends.streams import Streams, StreamWriting
from store.log.rules import Shown
from store.log.state import Log, Turn
from store.log.steers import Steer, arrived, steered_record, taken
from store.log.turns import claim_records, failed_record
from store.programs.approvals import Approve, check_approve
from store.programs.code import CodeProgram
from store.records import LEASE_RENEW_SECONDS, STOP_POLL_SECONDS, Record, lease_record, stopped_record

from .heartbeats import beat, carry
from .helpertools import Halt
from .language_model import Message, ModelReply, ModelRequest, Provider
from .outcomes import outcome_of
from .plan import rule_of, shown_for_run
from .steps import Reply, TurnSteps

logger = structlog.get_logger(__name__)

Interruption = Literal["stop", "taken", "ended", "steer"]
LOOK_AGAIN_S = 0.05
"""A look at the log taken this recently stands for the next (a fifth of `STOP_POLL_SECONDS`): a turn
asks the model right after it was placed, and ends right after the model answered, without reading
again what it has just read."""
REPLY_KEPT_S = 300.0
"""How long a reply in hand waits for a store that cannot be written (an outage): the turn then ends
with it once the store is back, instead of every retry asking the model again."""
_KEPT_PAUSE_S = 2.0
"""The longest pause between tries meanwhile: soon after the store is back."""
_Builder = Callable[[Turn], Record]


class TurnRun:
    """One attempt at running a begun turn, doing `steps`."""

    def __init__(
        self,
        conversation: ConversationLog,
        input: RunInput,
        steps: TurnSteps,
        *,
        streams: Streams | None = None,
        shown: Shown | None = None,
    ) -> None:
        self.conversation = conversation
        self.input = input
        self.steps = steps
        self.program = steps.program
        self.streams = streams
        self.stream: StreamWriting | None = None
        self.streamed = 0
        self.turn = input.turn
        self.owned = max(input.attempt, _heartbeat_attempt())
        self.shown = Shown(turns=[], saw=[], rows=[])
        """What the turn is shown (nothing until it runs: a turn stopped before then saw nothing)."""
        self._placed_shown = shown
        """What placing the turn in this try decided it is shown: `shown_for_run` would read the same
        from the log (the turns its rule picks are done ancestors, and the rest is recorded)."""
        self.ending = False
        """Whether this try appended (or tried to append) the turn's `ended` record."""
        self._restart = False
        """Whether the text streamed so far is void once the model is asked again (a repair, a steer)."""
        self._said: list[str] = []
        """The text the model call under way streamed so far (kept when a steer cuts it short)."""
        self.asked = 0
        """The model calls this try made."""
        self.on_end: Callable[[Turn], Awaitable[None]] | None = None
        """Called once this attempt appended the turn's `ended` record (its call is logged then)."""

    @property
    def saw(self) -> list[Record]:
        """What the turn was shown, as its `ended` record keeps it."""
        return self.shown.saw

    @property
    def approve(self) -> Approve:
        """The `approve` rule of this turn: its own (recorded), the send's, the conversation's, else the program's."""
        settings = self.conversation.log.turns[self.turn].record.get("settings") or {}
        chosen = first_calls(settings.get("approve"), self.input.send.approve, self.input.config.approve)
        return self.program.approve if chosen is None else check_approve(chosen)

    @property
    def deadline(self) -> ApprovalDeadline | None:
        """The deadline of the rule that asks in this turn: the send's, the conversation's, else the program's."""
        for chosen in (self.input.send.approve, self.input.config.approve, self.program.approve):
            if chosen is not None:
                return chosen if isinstance(chosen, ApprovalDeadline) else None
        return None

    def deadline_of(self, approvals: Sequence[Record]) -> ApprovalDeadline | None:
        """The deadline of the rule that asked `approvals`: the turn's (`deadline`), else, in a program with
        code whose turn names no rule, that of the helper that asked (its own `approve`)."""
        if self.deadline is not None or self.approve is not None or not isinstance(self.program, CodeProgram):
            return self.deadline
        for item in approvals:
            path = str(item.get("path") or "").split("/")  # <program>/<helper>/<tool> (`HelperTools._item`)
            helper = self.program.helpers.get(path[1]) if len(path) == 3 else None
            if helper is not None and isinstance(helper.approve, ApprovalDeadline):
                return helper.approve
        return None

    @property
    def remembers(self) -> dict[str, HelperMemory]:
        """What each helper remembers in this turn (its send's setting, else the conversation's)."""
        return self.input.send.memory(self.input.config)

    async def execute(self, provider: Provider, *, model: str, name: str) -> RunResult:
        """Claim the turn if it needs it, run its steps, and end the turn; or yield to another writer."""
        carry(self._details)
        early = await self._settle(await self.conversation.turn(self.turn, within=LOOK_AGAIN_S))
        if early is not None:
            return early
        if self._placed_shown is not None and self.owned == 1:
            self.shown = self._placed_shown
        else:
            rule = rule_of(self.input.config, self.input.send)
            self.shown = shown_for_run(self.conversation.log, self.program, self.turn, rule, now=now())
        await self.steps.prepare(self, provider, model=model, name=name)
        gone = await self._gone(within=LOOK_AGAIN_S)
        if gone is not None:  # it ended (or was taken) meanwhile: no stream run starts
            return gone
        if self.streams is not None:
            self.stream = self.streams.writer(self.turn, self.owned)
        try:
            return await self._run()
        except ThreadlineError as err:
            if err.retryable:
                await self._hold_for_retry(err)
            raise
        finally:
            if self.stream is not None:
                self.stream.close()  # a try that raises (to be retried) leaves no file open

    async def _run(self) -> RunResult:
        """The steps beside the log watch: whichever finishes first decides how the try ends. Steps that
        take steers mid-call (`cut_for_steers`) are cut short by one and run again, which takes it."""
        started = time.monotonic()
        while True:
            call = asyncio.create_task(self.steps.answer())
            watch = asyncio.create_task(self._watch(steers=self.steps.cut_for_steers))
            try:
                await asyncio.wait({call, watch}, return_when=asyncio.FIRST_COMPLETED)
            except asyncio.CancelledError:
                call.cancel()
                watch.cancel()
                if _asked_to_cancel():  # not a shutdown or a timeout, which a retry elsewhere carries on
                    await asyncio.shield(self._end(lambda t: stopped_record(t.id, attempt=self.owned, saw=self.saw)))
                raise
            if call.done():
                watch.cancel()
                return await self._answered(call, time.monotonic() - started)
            call.cancel()
            why = watch.result()
            if why != "steer":
                return await self._interrupted(why)
            await asyncio.gather(call, return_exceptions=True)  # its text so far is complete once it is gone
            gone = await self._cut_for_steers()
            if gone is not None:
                return gone

    async def _cut_for_steers(self) -> RunResult | None:
        """Take the steers that cut the model call short, keeping what it had said; or how the turn stands."""
        said = "".join(self._said)
        logger.info("turn.cut_for_steer", turn=self.turn, attempt=self.owned, said_chars=len(said))
        try:
            await self.take_steers(self.asked, said=said)
        except Halt as halt:
            return halt.result or _result(await self.conversation.turn(self.turn), self.input.send.request_id)
        self._restart = True  # the stream's text is void: the model is asked again
        return None

    async def fail(self, err: ThreadlineError) -> RunResult:
        """End the turn `failed` with `err` (a refusal no retry can fix)."""
        error = self.steps.error(err)
        return await self._end(lambda t: failed_record(t.id, error, attempt=self.owned, saw=self.saw))

    async def _settle(self, turn: Turn) -> RunResult | None:
        """Before any step: return at once if the turn ended, was taken over, waits for a person or was
        asked to stop; claim it (attempt + 1) if it reads interrupted."""
        outcome = outcome_of(turn, self.input.send.request_id)
        if outcome is not None:
            return Ended(outcome=outcome, attempt=turn.attempt)
        if turn.attempt > self.owned:
            logger.info("turn.yielded", turn=self.turn, attempt=turn.attempt, owned=self.owned)
            return Yielded(attempt=turn.attempt)
        paused = self.steps.waits(turn)
        if paused is not None:
            return paused
        if turn.stops:
            return await self._end(lambda t: stopped_record(t.id, attempt=self.owned, saw=[]))
        if turn.state(now()) == "interrupted" or _retried():
            claimed = await self.conversation.append_if(self.turn, self._claim)
            if claimed.ended is not None or claimed.attempt != self.owned:
                return _result(claimed, self.input.send.request_id)
        if self.owned > 1:  # a retry must learn of the claim even if this try dies at once
            beat()
        return None

    def _details(self) -> dict[str, int]:
        """What the try's heartbeats carry: the log attempt it holds (read back by a retry), what it streamed."""
        return {"attempt": self.owned, "streamed": self.streamed}

    def _claim(self, log: Log, turn: Turn) -> list[Record] | None:
        """Resume an interrupted turn; or, in a retry, take over from the try Temporal gave up on: it may
        still run (a frozen worker), and the next attempt's lease makes it yield at its next look."""
        if turn.ended or turn.attempt > self.owned:
            return None
        state = turn.state(now())
        if state == "interrupted":
            records = claim_records(log, turn.id, now=now())
        elif state == "running" and _retried():
            records = [lease_record(turn.id, attempt=turn.attempt + 1, now=now())]
        else:
            return None
        self.owned = turn.attempt + 1
        return records

    async def _gone(self, *, within: float = 0.0) -> Ended | Yielded | None:
        """How the turn stands if this try may write no more (it ended, or a later attempt holds it); else None.
        `within`: a look taken that long ago stands for this one (only right after the try's first look:
        before a later model call the log is read again, since the turn may have ended meanwhile)."""
        turn = await self.conversation.turn(self.turn, within=within)
        if turn.ended is not None or turn.attempt > self.owned:
            return _result(turn, self.input.send.request_id)
        return None

    async def _renew(self) -> None:
        """Append a lease of this try's attempt, unless the turn ended or another try took it."""

        def decide(_: Log, turn: Turn) -> list[Record] | None:
            if turn.ended is not None or turn.attempt > self.owned:
                return None
            return [lease_record(self.turn, attempt=self.owned, now=now())]

        await self.conversation.append_if(self.turn, decide)

    async def _hold_for_retry(self, err: ThreadlineError) -> None:
        """Renew the lease before Temporal's wait for the next try (at most `RETRY_WAIT_MOST_SECONDS`,
        well inside the lease), so the turn reads `running` across it for every reader."""
        try:
            await self._renew()
        except ThreadlineError as failed:  # the store may be what failed: the retry's claim renews it then
            logger.warning("turn.lease_not_renewed", turn=self.turn, code=str(failed.code), cause=str(err.code))

    async def _watch(self, *, steers: bool = False) -> Interruption:
        """Every 0.25 s: look for a stop, an end, a takeover (and, with `steers`, a steer that arrived
        while a model call runs); every 5 s: renew the lease. It does not heartbeat: the try's ticker
        does (`heartbeats`), so a look that waits on a slow store leaves the try alive."""
        renewed = time.monotonic()
        while True:
            await asyncio.sleep(STOP_POLL_SECONDS)
            turn = await self.conversation.turn(self.turn)
            if turn.ended is not None:
                return "ended"
            if turn.attempt > self.owned:
                logger.warning("turn.taken_over", turn=self.turn, attempt=turn.attempt, owned=self.owned)
                return "taken"
            if turn.stops:
                return "stop"
            if steers and turn.steers and arrived(turn):
                return "steer"
            if time.monotonic() - renewed >= LEASE_RENEW_SECONDS:
                await self._renew()
                renewed = time.monotonic()

    async def _answered(self, call: asyncio.Task[Reply], seconds: float) -> RunResult:
        try:
            reply: Reply | RunResult = call.result()
        except Halt as halt:  # the turn ended or was taken before a model call: nothing was asked
            reply = halt.result or _result(await self.conversation.turn(self.turn), self.input.send.request_id)
        except ThreadlineError as err:
            if err.retryable:
                raise
            return await self.fail(err)
        if not isinstance(reply, ModelReply):  # a turn with tools goes on, waits for a person, or is gone
            if self.stream is not None:
                self.stream.end("waiting" if isinstance(reply, Paused) else "yielded")
            return reply
        result = await self._end_kept(lambda t: self.steps.ended(t, reply, seconds))
        logger.info(
            "turn.completed",
            turn=self.turn,
            attempt=self.owned,
            model=reply.model,
            latency_ms=round(seconds * 1000),
            **reply.usage,
        )
        return result

    async def _interrupted(self, why: Interruption) -> RunResult:
        if why != "stop" and self.stream is not None:
            self.stream.end("yielded")
        if why == "taken":
            return Yielded(attempt=self.conversation.log.turns[self.turn].attempt)
        if why == "stop":
            logger.info("turn.stopped", turn=self.turn, attempt=self.owned)
            return await self._end(lambda t: stopped_record(t.id, attempt=self.owned, saw=self.saw))
        return _result(await self.conversation.turn(self.turn), self.input.send.request_id)

    async def _end_kept(self, build: _Builder) -> RunResult:
        """`_end`, tried again while the store cannot be written, for up to `REPLY_KEPT_S` (the try's ticker
        heartbeats meanwhile)."""
        deadline, pause = time.monotonic() + REPLY_KEPT_S, 0.25
        while True:
            try:
                return await self._end(build)
            except ThreadlineError as err:
                if err.code != ErrorCode.STORE_UNAVAILABLE or time.monotonic() > deadline:
                    raise
                if pause == 0.25:
                    logger.warning("turn.end_deferred", turn=self.turn, attempt=self.owned, code=str(err.code))
            await asyncio.sleep(pause)
            pause = min(pause * 2, _KEPT_PAUSE_S)

    async def _end(self, build: _Builder) -> RunResult:
        """Append the turn's one `ended` record unless it ended already or another writer holds it."""

        def decide(_: Log, turn: Turn) -> list[Record] | None:
            if turn.ended is not None or turn.attempt > self.owned:
                return None
            self.ending = True  # (an append that failed may have landed: a retried `_end` then finds it)
            return [build(turn)]

        turn = await self.conversation.append_if(self.turn, decide, within=LOOK_AGAIN_S)
        ours = turn.ended is not None and turn.ended.get("attempt") == self.owned
        if self.on_end is not None and ours:
            await self.on_end(turn)
        result = _result(turn, self.input.send.request_id)
        if self.stream is not None:  # only the try that ended the turn ends its stream so: its text is the answer
            self.stream.end(result.outcome.state if ours and self.ending and isinstance(result, Ended) else "yielded")
            await self.stream.written()  # stored before the answer, so nothing of it lands after a purge
        return result

    # ----- what the steps use of the try

    async def call_model(self, provider: Provider, request: ModelRequest, model: str) -> ModelReply:
        """Ask the model, its text streamed into the turn's stream; unless the turn ended or another try
        took it (`Halt`: nothing is asked)."""
        gone = await self._gone(within=LOOK_AGAIN_S if self.asked == 0 else 0.0)
        if gone is not None:
            raise Halt(gone)
        if self._restart and self.stream is not None:
            self.stream.write({"restart": True})
        self._restart = False
        self._said = []
        self.asked += 1
        logger.info("model.requested", turn=self.turn, attempt=self.owned, model=model)
        return await provider.complete(request, self._on_text)

    def repaired(self, request: ModelRequest, err: ThreadlineError) -> ModelRequest:
        """`request` asked again after a reply that did not fit: it says what was wrong."""
        logger.info("model.repair_requested", turn=self.turn, attempt=self.owned, reason=err.message)
        self._restart = True  # the stream's text is void once the model is asked again (if it is)
        repair = Message("user", f"Your reply could not be used: {err.message}. Reply again, exactly as asked.")
        return replace(request, messages=(*request.messages, repair))

    async def record(self, *records: Record) -> Ended | Yielded | None:
        """Append `records` unless the turn ended or another writer took it (then how it stands)."""

        def decide(_: Log, turn: Turn) -> list[Record] | None:
            return None if turn.ended is not None or turn.attempt > self.owned else list(records)

        turn = await self.conversation.append_if(self.turn, decide)
        if turn.ended is not None or turn.attempt > self.owned:
            return _result(turn, self.input.send.request_id)
        return None

    def steered(self) -> list[Steer]:
        """The steers the turn took so far (as the log last read holds them), in the order it took them."""
        turn = self.conversation.log.turns.get(self.turn)
        return taken(turn) if turn is not None and turn.steers else []

    async def take_steers(self, step: int, *, said: str = "") -> list[Steer]:
        """Take the steers that arrived and no try took yet, joining model step `step` (`said`: what the
        call they cut short had streamed); the ones taken now. Raises `Halt` when the turn ended or was
        taken over: a steer is taken only while the turn runs, so a later one becomes a turn of its own.

        It looks at the log as last read (the watch and every model call read it again): a steer that
        lands just after is cut in by the watch (`cut_for_steers`), or taken at the next step."""
        cached = self.conversation.log.turns.get(self.turn)
        if cached is None or not cached.steers or not arrived(cached):
            return []
        new: list[str] = []

        def decide(_: Log, turn: Turn) -> list[Record] | None:
            new.clear()
            if turn.ended is not None or turn.attempt > self.owned:
                return None
            new.extend(str((e.get("data") or {}).get("request_id")) for e in arrived(turn))
            at = now()
            return [
                steered_record(self.turn, rid, step=step, said=said if i == 0 else "", now=at)
                for i, rid in enumerate(new)
            ] or None

        turn = await self.conversation.append_if(self.turn, decide)
        if turn.ended is not None or turn.attempt > self.owned:
            raise Halt(_result(turn, self.input.send.request_id))
        if new:
            logger.info("turn.steers_taken", turn=self.turn, attempt=self.owned, step=step, count=len(new))
        return [steer for steer in taken(turn) if steer.request_id in new]

    async def _on_text(self, piece: str) -> None:
        self._said.append(piece)
        self.streamed += len(piece)
        if self.stream is not None:
            self.stream.text(piece)


def _result(turn: Turn, request_id: str) -> Ended | Yielded:
    """`Ended` with its outcome if the turn ended, else `Yielded` to whoever holds it."""
    outcome = outcome_of(turn, request_id)
    return Yielded(attempt=turn.attempt) if outcome is None else Ended(outcome=outcome, attempt=turn.attempt)


def _asked_to_cancel() -> bool:
    """Whether this try was cancelled on purpose (a cancel request), rather than because its worker
    is shutting down, its heartbeat timed out, or it was paused or reset: only then is the turn over."""
    details = activity.cancellation_details()
    return details is not None and details.cancel_requested and not details.worker_shutdown


def _retried() -> bool:
    """Whether this try is a retry of the activity (Temporal gave up on, or saw fail, an earlier one)."""
    try:
        return activity.info().attempt > 1
    except RuntimeError:
        return False


def _heartbeat_attempt() -> int:
    """The log attempt an earlier try of this activity had claimed, if its heartbeat got out."""
    try:
        details = activity.info().heartbeat_details
    except RuntimeError:
        return 1
    for detail in details:
        if isinstance(detail, dict) and isinstance(detail.get("attempt"), int):
            return int(detail["attempt"])
    return 1
