"""The record-keeping steps of a conversation: placing a send, following another writer's turn,
stopping, moving the head, ending a turn whose runner gave up, and watching the log.

Each reads the log itself (transcripts never pass through workflow history) and is idempotent:
a retry finds what its earlier try appended, and every append that decides something is
conditional on the log it was decided on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import structlog
from temporalio import activity

from core.budgets import Prices
from core.errors import ErrorCode, ThreadlineError
from core.limits import check_turn
from core.models import (
    BeginInput,
    BeginResult,
    Budget,
    ConversationConfig,
    Ended,
    Interrupted,
    OpenTurn,
    OwnedInput,
    RunResult,
    TurnOutcome,
    TurnRef,
    TurnSend,
    WatchInput,
    check_inputs,
)
from core.temporal import coded
from store.backends.reader import LogCache, now
from store.log.state import Log, Turn
from store.log.turns import Begin, Busy, Existing, Steered, failed_record, stop_records, unowned
from store.log.turns import begin_turn as decide_turn
from store.programs.code import refuse
from store.programs.program import Program
from store.records import Record, head_record, iso

from .budget import check_budget, quote
from .calls import CallWriter
from .language_model import split_model
from .outcomes import outcome_of
from .plan import request_of, turn_request

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

    def program(self, name: str) -> Program:
        """The program named `name` (`program-unknown` if it is not registered on this worker)."""
        return find_program(self.programs, name)

    @activity.defn(name="begin_turn")
    @coded
    async def begin_turn(self, input: BeginInput) -> BeginResult:
        """Place a send: the request-id rule, the parent under `sends`, then `program?`, `turn` and
        its first `lease` in one conditional append (decided again on conflict)."""
        config, send = input.config, input.send
        check_turn(config, send)  # a signal may come from any SDK or the Temporal CLI, not only our client
        program = self.program(send.program or config.program)
        check_inputs(send.inputs)  # a signal may come from any SDK or the Temporal CLI, not only our client
        owner = placer()
        request = replace(turn_request(config, send, program.validate_inputs(send.inputs)), placed_by=owner)
        refuse_conversation(program, config, send)  # before anything is recorded
        conversation = await self.logs.open(config.store, config.conversation, config.store_id)
        store_id = await self.logs.stores.identity(config.store)
        while True:
            log = await conversation.read()
            if owner and (lost := unowned(log, owner, input.holding)):  # before a send goes beside them
                orphans = [self.open_turn(turn) for turn in lost]
                return BeginResult(kind="orphans", turn=lost[0].id, orphans=orphans, store_id=store_id)
            if send.continue_from and send.continue_from not in log.turns:
                raise ThreadlineError(ErrorCode.TURN_UNKNOWN, f"turn {send.continue_from} is not in this conversation")
            decided = decide_turn(log, program, request, now=now())  # no model request: `run_turn` builds it
            if isinstance(decided, Busy) or (isinstance(decided, Steered) and decided.turn not in input.holding):
                # a steer joins only a turn this workflow drives: it alone knows to place the steer again
                return BeginResult(kind="busy", turn=decided.turn, records=log.n, store_id=store_id)
            if isinstance(decided, Existing):
                existing = log.turns[decided.turn]
                outcome = outcome_of(existing, send.request_id)
                return BeginResult(
                    kind="existing", turn=existing.id, parent=existing.parent, outcome=outcome, store_id=store_id
                )
            if isinstance(decided, Begin):  # before the model is asked and before anything is recorded
                budgets = (send.limit(config), self.budgets.get(config.store))
                self.check_budget(log, program, decided, request.inputs, budgets=budgets, lm=send.lm or config.lm)
            try:
                await conversation.append(decided.records, expect=decided.expect)
            except ThreadlineError as err:
                if err.code != ErrorCode.STORE_CONFLICT:
                    raise
                continue
            if isinstance(decided, Steered):
                logger.info("turn.steered", conversation=config.conversation, turn=decided.turn)
                return BeginResult(
                    kind="steered", turn=decided.turn, parent=decided.parent, records=log.n, store_id=store_id
                )
            logger.info("turn.begun", conversation=config.conversation, turn=decided.turn, parent=decided.parent)
            return BeginResult(kind="begun", turn=decided.turn, parent=decided.parent, records=log.n, store_id=store_id)

    def check_budget(
        self,
        log: Log,
        program: Program,
        decided: Begin,
        inputs: Mapping[str, Any],
        *,
        budgets: Sequence[Budget | None],
        lm: str | None,
    ) -> None:
        """Refuse `budget-exceeded` when the conversation's spending plus the request `decided` makes would
        exceed one of `budgets` (its own, its store's): the same request `run_turn` builds from the log."""
        if not any(budgets):
            return
        model = lm or self.default_model
        made = (
            None
            if program.kind == "module"
            else request_of(program, decided.shown, inputs, model=split_model(model)[1])
        )
        asked = quote(made, inputs, self.prices, model)
        for budget in budgets:
            check_budget(budget, log, asked, self.prices, model=model, default=self.default_model)

    @activity.defn(name="owned_turns")
    @coded
    async def owned_turns(self, input: OwnedInput) -> list[OpenTurn]:
        """The open turns the calling workflow placed and does not drive (`input.holding`)."""
        owner = placer()
        if owner is None:
            return []
        conversation = await self.logs.open(input.store, input.conversation, input.store_id)
        log = await conversation.read()
        return [self.open_turn(turn) for turn in unowned(log, owner, input.holding)]

    def open_turn(self, turn: Turn) -> OpenTurn:
        """What driving `turn` needs, from its record: the registered program of its version."""
        record = turn.record
        version = record.get("program")
        names = [name for name, program in self.programs.items() if program.version == version]
        lm = (record.get("settings") or {}).get("lm")
        return OpenTurn(
            turn=turn.id,
            request_id=str(record.get("request_id") or ""),
            parent=turn.parent,
            program=names[0] if names else None,
            inputs=dict(record.get("inputs") or {}),
            lm=lm if isinstance(lm, str) else None,
        )

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
            activity.heartbeat()
            await asyncio.sleep(FOLLOW_POLL_S)

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


def placer() -> str | None:
    """Who places turns here: the conversation's workflow whose activity this is (None outside one)."""
    return activity.info().workflow_id if activity.in_activity() else None


def find_program(programs: Mapping[str, Program], name: str) -> Program:
    """The program named `name`.

    Raises:
        ThreadlineError: `program-unknown` when it is not registered here.
    """
    found = programs.get(name)
    if found is None:
        known = ", ".join(sorted(programs))
        message = f"no program named {name!r} is registered on this worker (registered: {known})"
        raise ThreadlineError(ErrorCode.PROGRAM_UNKNOWN, message)
    return found


def refuse_conversation(program: Program, config: ConversationConfig, send: TurnSend) -> None:
    """Refuse a conversation that cannot keep `program`'s turns (`store.programs.code.refuse`); every store a
    worker writes keeps its records."""
    refuse(program, remembers=send.memory(config), persistent=True, within=config)


def _stop(log: Log, turn: Turn) -> list[Record] | None:
    if turn.stops and not turn.ended:
        return None  # already asked: one stop record is enough
    return stop_records(log, turn.id, now=now()) or None
