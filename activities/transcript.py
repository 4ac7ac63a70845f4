"""The record-keeping steps of a conversation: placing a send (`activities.placing`), following
another writer's turn, stopping, moving the head, ending a turn whose runner gave up, and watching
the log.

Each reads the log itself (transcripts never pass through workflow history) and is idempotent:
a retry finds what its earlier try appended, and every append that decides something is
conditional on the log it was decided on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import structlog
from temporalio import activity

from core.budgets import Prices
from core.errors import ErrorCode, ThreadlineError
from core.models import (
    BeginInput,
    BeginResult,
    Budget,
    Ended,
    FoundSend,
    Interrupted,
    OpenTurn,
    OwnedInput,
    RunResult,
    SendRef,
    TurnOutcome,
    TurnRef,
    WatchInput,
)
from core.temporal import coded
from store.backends.reader import LogCache, now
from store.log.state import Log, Turn
from store.log.turns import failed_record, stop_records, unowned
from store.programs.program import Program
from store.records import Record, head_record, iso

from .calls import CallWriter
from .outcomes import outcome_of
from .placing import Placing, find_program, open_turn, placer

logger = structlog.get_logger(__name__)

FOLLOW_POLL_S = 0.25


class TranscriptActivities:
    """Store reads and appends for every conversation of this worker.

    Args:
        logs: The worker's conversation logs, by store.
        programs: The programs by name.
        calls: Where each ended turn's call is logged (by default nowhere).
        prices: What each model costs per million tokens (`THREADLINE_PRICES`), for a budget's `cost`.
        default_model: The model of a send and conversation that name none (`THREADLINE_MODEL`).
        budgets: The budget of every conversation of a store, by store name (`THREADLINE_BUDGETS`).
    """

    def __init__(
        self,
        logs: LogCache,
        programs: Mapping[str, Program],
        *,
        calls: CallWriter | None = None,
        prices: Prices | None = None,
        default_model: str = "offline",
        budgets: Mapping[str, Budget] | None = None,
    ) -> None:
        self.logs = logs
        self.programs = dict(programs)
        self.calls = calls or CallWriter({})
        self.prices = dict(prices or {})
        self.default_model = default_model
        self.budgets = dict(budgets or {})
        self.placing = Placing(
            logs, self.programs, prices=self.prices, default_model=default_model, budgets=self.budgets
        )

    def program(self, name: str) -> Program:
        """The program named `name` (`program-unknown` if it is not registered on this worker)."""
        return find_program(self.programs, name)

    @activity.defn(name="begin_turn")
    @coded
    async def begin_turn(self, input: BeginInput) -> BeginResult:
        """Place a send: the request-id rule, the parent under `sends`, then `program?`, `turn` and
        its first `lease` in one conditional append (decided again on conflict)."""
        return await self.placing.place(input)

    @activity.defn(name="owned_turns")
    @coded
    async def owned_turns(self, input: OwnedInput) -> list[OpenTurn]:
        """The open turns the calling workflow placed and does not drive (`input.holding`)."""
        owner = placer()
        if owner is None:
            return []
        conversation = await self.logs.open(input.store, input.conversation, input.store_id)
        log = await conversation.read()
        return [open_turn(self.programs, turn) for turn in unowned(log, owner, input.holding)]

    @activity.defn(name="find_send")
    @coded
    async def find_send(self, ref: SendRef) -> FoundSend:
        """The turn the log holds for a send of an earlier run (its request id), and how it ended."""
        conversation = await self.logs.open(ref.store, ref.conversation, ref.store_id)
        log = await conversation.read()
        turn_id = log.request_ids.get(ref.request_id)
        if turn_id is None:
            return FoundSend()
        turn = log.turns[turn_id]
        return FoundSend(turn=turn.id, parent=turn.parent, outcome=outcome_of(turn, ref.request_id))

    @activity.defn(name="follow_turn")
    @coded
    async def follow_turn(self, ref: TurnRef) -> RunResult:
        """Wait while another writer runs the turn: until it ends, or reads `interrupted` (claim it then)."""
        conversation = await self.logs.open(ref.store, ref.conversation, ref.store_id)
        while True:
            turn = await conversation.turn(ref.turn)
            outcome = outcome_of(turn, ref.request_id)
            if outcome is not None:
                return Ended(outcome=outcome, attempt=turn.attempt)
            if turn.state(now()) == "interrupted":
                return Interrupted(attempt=turn.attempt)
            await asyncio.sleep(FOLLOW_POLL_S)  # the activity's ticker heartbeats meanwhile (`heartbeats`)

    @activity.defn(name="stop_turn")
    @coded
    async def stop_turn(self, ref: TurnRef) -> None:
        """Append a `stop` for a running turn (its runner ends it), or abandon a waiting or interrupted one."""
        conversation = await self.logs.open(ref.store, ref.conversation, ref.store_id)
        await conversation.append_if(ref.turn, _stop)

    @activity.defn(name="move_head")
    @coded
    async def move_head(self, ref: TurnRef) -> None:
        """Append a `head` record: the conversation continues from `ref.turn`.

        Conditional, and nothing when the head is there already: a retried try writes no second record.
        """
        conversation = await self.logs.open(ref.store, ref.conversation, ref.store_id)

        def build(log: Log, turn: Turn) -> list[Record] | None:
            return None if log.head == turn.id else [head_record(turn.id, at=iso(now()))]

        await conversation.append_if(ref.turn, build)

    @activity.defn(name="end_turn")
    @coded
    async def end_turn(self, ref: TurnRef) -> TurnOutcome:
        """End a turn whose runner gave up (its retries ran out) as `failed`, unless it already ended."""
        failure = ref.error.to_error() if ref.error else ThreadlineError(ErrorCode.INTERNAL, "its runner gave up")

        def build(_: Log, turn: Turn) -> list[Record] | None:
            return None if turn.ended else [failed_record(turn.id, failure, attempt=turn.attempt, saw=[])]

        conversation = await self.logs.open(ref.store, ref.conversation, ref.store_id)
        ended_before = (await conversation.turn(ref.turn)).ended is not None
        turn = await conversation.append_if(ref.turn, build)
        if not ended_before:
            await self.calls.ended(ref.store, conversation, turn)
        outcome = outcome_of(turn, ref.request_id)
        if outcome is None:  # cannot be: the append above ended it, or someone else had
            raise ThreadlineError(ErrorCode.INTERNAL, f"turn {turn.id} did not end", retryable=True)
        return outcome

    @activity.defn(name="watch_log")
    @coded
    async def watch_log(self, input: WatchInput) -> bool:
        """Wait until the conversation holds more than `input.after` records (True) or the timeout passes."""
        conversation = await self.logs.open(input.store, input.conversation, input.store_id)
        return await conversation.wait(input.after, input.timeout_s)


def _stop(log: Log, turn: Turn) -> list[Record] | None:
    if turn.stops and not turn.ended:
        return None  # already asked: one stop record is enough
    return stop_records(log, turn.id, now=now()) or None
