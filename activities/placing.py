"""Placing a send: the request-id rule, the parent under `sends`, the program's fields, the budgets,
then `program?`, `turn` and its first `lease` in one conditional, fsynced append (decided again on
conflict). `begin_turn` places a send alone; `place_and_run` places it and runs its turn in the same
activity. Both decide with this one `Placing`, so they cannot disagree.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import structlog
from temporalio import activity

from core.budgets import Prices
from core.errors import ErrorCode, ThreadlineError
from core.limits import check_turn
from core.models import BeginInput, BeginResult, Budget, ConversationConfig, OpenTurn, TurnSend, check_inputs
from store.backends.reader import LogCache, now
from store.flows.progress import holds_flows
from store.log.rules import Shown
from store.log.state import Log, Turn
from store.log.turns import Begin, Busy, Existing, Steered, unowned
from store.log.turns import begin_turn as decide_turn
from store.programs.code import refuse
from store.programs.program import Program

from .budget import check_budget, quote
from .language_model import split_model
from .outcomes import outcome_of
from .plan import request_of, turn_request

logger = structlog.get_logger(__name__)


class Placing:
    """Placing sends in the conversations of one worker.

    Args:
        logs: The worker's conversation logs, by store.
        programs: The programs by name.
        prices: What each model costs per million tokens, for a budget's `cost`.
        default_model: The model of a send and conversation that name none.
        budgets: The budget of every conversation of a store, by store name.
    """

    def __init__(
        self,
        logs: LogCache,
        programs: Mapping[str, Program],
        *,
        prices: Prices,
        default_model: str,
        budgets: Mapping[str, Budget],
    ) -> None:
        self.logs = logs
        self.programs = programs
        self.prices = prices
        self.default_model = default_model
        self.budgets = budgets

    async def place(self, input: BeginInput) -> BeginResult:
        """Place `input.send`: `begun` (its records appended), `existing`, `busy`, `steered` or `orphans`."""
        placed, _ = await self.place_shown(input)
        return placed

    async def place_shown(self, input: BeginInput) -> tuple[BeginResult, Shown | None]:
        """`place`, and what a turn it began is shown (`begin_turn` decided it before appending; the run
        that follows in the same try takes it instead of reading the branch again). None otherwise.

        With `input.at_once` the send's own open turn (one this workflow placed under its request id)
        is found `existing` before any orphan is looked for: it is the turn of the step that places
        and runs the send, which a retry of that step, or the workflow, placed first.
        """
        config, send = input.config, input.send
        check_turn(config, send)  # a signal may come from any SDK or the Temporal CLI, not only our client
        program = find_program(self.programs, send.program or config.program)
        check_inputs(send.inputs)  # a signal may come from any SDK or the Temporal CLI, not only our client
        owner = placer()
        request = replace(turn_request(config, send, program.validate_inputs(send.inputs)), placed_by=owner)
        refuse_conversation(program, config, send)  # before anything is recorded
        conversation = await self.logs.open(config.store, config.conversation, config.store_id)
        store_id = await self.logs.stores.identity(config.store)
        while True:
            log = await conversation.read()
            if input.at_once and send.request_id in log.request_ids:
                return _existing(log, log.request_ids[send.request_id], send.request_id, store_id), None
            if owner and (lost := unowned(log, owner, input.holding)):  # before a send goes beside them
                orphans = [open_turn(self.programs, turn) for turn in lost]
                return BeginResult(kind="orphans", turn=lost[0].id, orphans=orphans, store_id=store_id), None
            if input.opening and holds_flows(log):  # the flow is offered the send first: read it back
                return BeginResult(kind="flows", turn="", store_id=store_id), None
            if send.continue_from and send.continue_from not in log.turns:
                raise ThreadlineError(ErrorCode.TURN_UNKNOWN, f"turn {send.continue_from} is not in this conversation")
            decided = decide_turn(log, program, request, now=now())  # no model request: `run_turn` builds it
            held = decided.turn in input.holding and not input.at_once
            if isinstance(decided, Busy) or (isinstance(decided, Steered) and not held):
                # a steer joins only a turn this workflow drives: it alone knows to place the steer again;
                # and never a send placed at once, whose step would place it as a turn of its own
                return BeginResult(kind="busy", turn=decided.turn, records=log.n, store_id=store_id), None
            if isinstance(decided, Existing):
                return _existing(log, decided.turn, send.request_id, store_id), None
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
                steered = BeginResult(
                    kind="steered", turn=decided.turn, parent=decided.parent, records=log.n, store_id=store_id
                )
                return steered, None
            logger.info("turn.begun", conversation=config.conversation, turn=decided.turn, parent=decided.parent)
            begun = BeginResult(
                kind="begun", turn=decided.turn, parent=decided.parent, records=log.n, store_id=store_id
            )
            return begun, decided.shown

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


def _existing(log: Log, turn: str, request_id: str, store_id: str) -> BeginResult:
    existing = log.turns[turn]
    outcome = outcome_of(existing, request_id)
    return BeginResult(kind="existing", turn=existing.id, parent=existing.parent, outcome=outcome, store_id=store_id)


def ours(turn: Turn) -> bool:
    """Whether `turn` is open and was placed by the workflow whose activity this is: a step's own turn."""
    owner = placer()
    return turn.ended is None and owner is not None and turn.record.get("placed_by") == owner


def open_turn(programs: Mapping[str, Program], turn: Turn) -> OpenTurn:
    """What driving `turn` needs, from its record: the registered program of its version."""
    record = turn.record
    version = record.get("program")
    names = [name for name, program in programs.items() if program.version == version]
    lm = (record.get("settings") or {}).get("lm")
    return OpenTurn(
        turn=turn.id,
        request_id=str(record.get("request_id") or ""),
        parent=turn.parent,
        program=names[0] if names else None,
        inputs=dict(record.get("inputs") or {}),
        lm=lm if isinstance(lm, str) else None,
    )


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
