"""The steps of a conversation that ask a model: running a turn (or placing a send and running its
turn in one step), classifying a send's topic, extending a branch's summary, rendering the request
a send would make, and asking a turn again.

Each model answer is kept in the log before it is used (the turn's `ended`, a topic or summary
`entry`), so a retry or a resume never pays for it twice.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

from temporalio import activity

from core.again_models import AskAgainInput, AskedAgain
from core.budgets import Prices
from core.errors import ThreadlineError
from core.limits import check_turn
from core.models import BeginInput, Budget, Paused, PlacedRun, PrepareResult, RenderResult, RunInput, RunResult
from core.temporal import coded
from store.backends.reader import LogCache, now
from store.backends.streams import Streams
from store.log.rules import Shown
from store.log.turns import Begin
from store.programs.program import Program

from . import again
from .again import turn_model
from .budget import check_budget, quote
from .callertools import CallerToolTurn, caller_tools
from .calls import CallWriter
from .codeturn import CodeTurn
from .context import Preparer
from .language_model import Providers, split_model
from .placing import Placing, find_program, ours, refuse_conversation
from .plainturn import PlainTurn
from .plan import plan_turn, turn_request
from .providers import request_body
from .run import TurnRun
from .steps import TurnSteps
from .toolturn import ToolTurn


class LLMActivities:
    """Model calls for every conversation of this worker.

    Args:
        logs: The worker's conversation logs, by store.
        programs: The programs by name.
        providers: The model providers.
        default_model: The model string used when neither the conversation nor the send names one.
        streams: Where each store's turns stream their text (a store without one does not stream).
        calls: Where each ended turn's call is logged (by default nowhere).
        prices: What each model costs per million tokens (`THREADLINE_PRICES`): `render`'s estimate, a `cost` budget.
        budgets: The budget of every conversation of a store, by store name (`THREADLINE_BUDGETS`).
    """

    def __init__(
        self,
        logs: LogCache,
        programs: Mapping[str, Program],
        providers: Providers,
        *,
        default_model: str = "offline",
        streams: Mapping[str, Streams] | None = None,
        calls: CallWriter | None = None,
        prices: Prices | None = None,
        budgets: Mapping[str, Budget] | None = None,
    ) -> None:
        self.logs = logs
        self.programs = dict(programs)
        self.providers = providers
        self.default_model = default_model
        self.streams = dict(streams or {})
        self.calls = calls or CallWriter({})
        self.prices = dict(prices or {})
        self.budgets = dict(budgets or {})
        self.placing = Placing(
            logs, self.programs, prices=self.prices, default_model=default_model, budgets=self.budgets
        )

    @activity.defn(name="run_turn")
    @coded
    async def run_turn(self, input: RunInput) -> RunResult:
        """Run a begun turn's model call while heartbeating, renewing its lease and watching the log
        for a stop or a takeover; end it with exactly one `ended` record."""
        return await self._run(input)

    @activity.defn(name="place_and_run")
    @coded
    async def place_and_run(self, input: BeginInput) -> PlacedRun:
        """Place a send as `begin_turn` does (its records fsynced before the model is asked), then run
        its turn as `run_turn` does, in one activity: one task of the workflow's before the model call.

        A retry finds the turn its earlier try placed (`existing`, its own) and runs it on: claimed
        with the next attempt's lease, its answer never asked for again once recorded. A send that
        did not begin a turn here (busy, orphans, a turn of another writer's) comes back as placed."""
        placed, shown = await self.placing.place_shown(input.model_copy(update={"at_once": True}))
        if placed.kind == "existing" and placed.outcome is None:
            conversation = await self.logs.open(input.config.store, input.config.conversation, input.config.store_id)
            if not ours(conversation.log.turns[placed.turn]):
                return PlacedRun.of(placed)  # another writer's turn under this request id: followed
        elif placed.kind != "begun":
            return PlacedRun.of(placed)
        run = RunInput(config=input.config, send=input.send, turn=placed.turn)
        result = await self._run(run, shown=shown)
        # what the workflow knows already stays out of its history: the store it named, the log's length
        store_id = None if input.config.store_id else placed.store_id
        return PlacedRun.of(placed.model_copy(update={"records": 0, "store_id": store_id}), result)

    async def _run(self, input: RunInput, *, shown: Shown | None = None) -> RunResult:
        """Run the turn; `shown`: what placing it in this try decided it is shown (else read from the log)."""
        config = input.config
        program = find_program(self.programs, input.send.program or config.program)
        lm = input.send.lm or config.lm or self.default_model
        conversation = await self.logs.open(config.store, config.conversation, config.store_id)
        tools: list[dict[str, Any]] = []
        if input.send.tools or input.attempt > 1:  # the caller's functions, as the turn recorded them
            tools = caller_tools(await conversation.turn(input.turn))
        run = TurnRun(
            conversation, input, steps_for(program, tools), streams=self.streams.get(config.store), shown=shown
        )
        run.on_end = functools.partial(self.calls.ended, config.store, conversation)
        try:
            provider, name = self.providers.resolve(lm)
            result = await run.execute(provider, model=lm, name=name)
        except ThreadlineError as err:
            if err.retryable:
                raise
            return await run.fail(err)
        if isinstance(result, Paused) and result.reason == "waiting":
            deadline = run.deadline_of(result.approvals)
            if deadline is not None:
                return result.model_copy(update={"deadline": deadline})  # the workflow keeps its clock
        return result

    @activity.defn(name="prepare_turn")
    @coded
    async def prepare_turn(self, input: BeginInput) -> PrepareResult:
        """Before a send is placed: classify its topic (and place it by topic under `branch`). The
        classification is kept in the log before it is used, so a retry pays for it once."""
        check_turn(input.config, input.send)  # before a model is asked or anything is recorded
        preparer = await self._preparer(input)
        await self._within_budget(input, preparer)  # the classifier is a model call, its topic a record
        return await preparer.prepare(input.config, input.send, record=True)

    async def _within_budget(self, input: BeginInput, preparer: Preparer) -> None:
        """Refuse `budget-exceeded` when the send, placed as it says (its topic not yet known), would
        exceed its conversation's or its store's budget; `begin_turn` checks again once it is placed."""
        config, send = input.config, input.send
        budgets = (send.limit(config), self.budgets.get(config.store))
        if not any(budgets):
            return
        program = find_program(self.programs, send.program or config.program)
        request = turn_request(config, send, program.validate_inputs(send.inputs))
        log = await preparer.conversation.read()
        model = send.lm or config.lm or self.default_model
        plan = plan_turn(log, program, request, model=split_model(model)[1], now=now())
        if isinstance(plan.decided, Begin):
            asked = quote(plan.request, request.inputs, self.prices, model)
            for budget in budgets:
                check_budget(budget, log, asked, self.prices, model=model, default=self.default_model)

    @activity.defn(name="summarise_branch")
    @coded
    async def summarise_branch(self, input: RunInput) -> None:
        """After a turn ended done: extend its branch's summary if one is due (a model call)."""
        await (await self._preparer(input)).summarise(input.config, input.send, input.turn)

    @activity.defn(name="render_turn")
    @coded
    async def render_turn(self, input: BeginInput) -> RenderResult:
        """The request a send would make now, placed and shown as `begin_turn` and `run_turn` would
        (a topic classified, not recorded); nothing is appended."""
        config, send = input.config, input.send
        check_turn(config, send)
        program = find_program(self.programs, send.program or config.program)
        inputs = program.validate_inputs(send.inputs)
        refuse_conversation(program, config, send)
        preparer = await self._preparer(input)
        placement = await preparer.prepare(config, send, record=False)
        request = turn_request(config, placement.applied(send), inputs)
        log = await preparer.conversation.read()
        model = send.lm or config.lm or self.default_model
        plan = plan_turn(log, program, request, model=split_model(model)[1], now=now())
        decided = plan.decided
        if not isinstance(decided, Begin):
            return RenderResult(model=model, parent=None, waits_for=getattr(decided, "turn", None))
        asked = quote(plan.request, request.inputs, self.prices, model)
        return RenderResult(  # a program with code makes its helpers' requests as it runs: no request here
            model=model,
            parent=decided.parent,
            shown=decided.shown.turns,
            sections=decided.shown.sections,
            request=request_body(model, plan.request) if plan.request is not None else None,
            tokens=asked.tokens,
            cost=asked.cost,
        )

    @activity.defn(name="ask_again")
    @coded
    async def ask_again(self, input: AskAgainInput) -> AskedAgain:
        """A turn's request sent again (`activities.again`); nothing is appended."""
        config, ask = input.config, input.ask
        conversation = await self.logs.open(config.store, config.conversation, config.store_id)
        log = await conversation.read()
        found = log.turns.get(ask.turn)
        version = found.record.get("program") if found is not None else None
        program = find_program(self.programs, str(log.programs.get(str(version), {}).get("name") or config.program))
        lm = ask.lm or turn_model(log, ask.turn) or config.lm or self.default_model
        return await again.ask_again(conversation, program, self.providers, config.context, ask, lm=lm)

    async def _preparer(self, input: BeginInput | RunInput) -> Preparer:
        config, send = input.config, input.send
        model = send.lm or config.lm or self.default_model
        conversation = await self.logs.open(config.store, config.conversation, config.store_id)
        return Preparer(conversation, self.providers, model)


def steps_for(program: Program, tools: Sequence[Mapping[str, Any]] = ()) -> TurnSteps:
    """What a turn of `program` does: run its code (a program with code), ask step by step, recorded (a
    program with tools, or a turn offered the caller's functions `tools`), or make one model call."""
    if program.kind == "module":
        return CodeTurn(program)
    if tools:
        return CallerToolTurn(program, tools)
    return ToolTurn(program) if program.tools else PlainTurn(program)
