"""A merge's three steps: place it, ask the merging program, record it (docs/format-1.md 4.10).

A merge writes no lease: functai appends its `turn` and `ended` records together once the merging
program answered, so no reader ever sees it running. Threadline keeps that shape and makes it
durable through Temporal instead: `place_merge` checks everything and mints the ids (nothing is
recorded), `run_merge` asks the model under a heartbeat (the lease inside Temporal: a worker that
dies is noticed in seconds and the call runs again elsewhere; a stop cancels it and nothing is
recorded), and its answer is kept in history before `end_merge` appends the records in one
conditional batch, which a retry finds by the merge's turn id and never writes twice.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import structlog
from temporalio import activity

from core.errors import ErrorCode, ThreadlineError
from core.learning import MergeAnswer, MergePlan, MergeRun
from core.limits import check_turn
from core.models import BeginInput, MergeSpec, TurnOutcome, check_inputs
from core.temporal import coded
from store.backends.reader import LogCache, now
from store.calls.merges import check_answers, merge_records, merged_turns, merging_call, merging_inputs
from store.calls.record import call_line
from store.log.rules import view_head
from store.log.state import Log
from store.log.turns import check_program
from store.programs.program import Program
from store.records import uuid7

from .asking import ask
from .calls import CallWriter
from .language_model import Providers
from .outcomes import outcome_of
from .placing import find_program
from .plan import view_of

logger = structlog.get_logger(__name__)


class MergeActivities:
    """Merges for every conversation of this worker.

    Args:
        logs: The worker's conversation logs, by store.
        programs: The programs by name (the conversations' and the merging ones).
        providers: The model providers.
        default_model: The model used when neither the conversation nor the merge names one.
        calls: Where the merging program's call is logged.
    """

    def __init__(
        self,
        logs: LogCache,
        programs: Mapping[str, Program],
        providers: Providers,
        *,
        default_model: str = "offline",
        calls: CallWriter | None = None,
    ) -> None:
        self.logs = logs
        self.programs = dict(programs)
        self.providers = providers
        self.default_model = default_model
        self.calls = calls or CallWriter({})

    @activity.defn(name="place_merge")
    @coded
    async def place_merge(self, input: BeginInput) -> MergePlan:
        """Check a merge before anything is asked: its request id (already in the log: that turn),
        the merged turns (done children of the view's head), the programs; mint its ids."""
        config, send = input.config, input.send
        check_turn(config, send)
        program, merging, spec = self._programs(input)
        check_inputs(spec.inputs or {})
        check_answers(program, merging)
        conversation = await self.logs.open(config.store, config.conversation, config.store_id)
        store_id = await self.logs.stores.identity(config.store)
        log = await conversation.read()
        if send.request_id in log.request_ids:
            existing = log.turns[log.request_ids[send.request_id]]
            outcome = outcome_of(existing, send.request_id)
            return MergePlan(kind="existing", turn=existing.id, parent=existing.parent, outcome=outcome)
        head = view_head(log, view_of(send))
        turns = merged_turns(log, spec.turns, head, now=now())
        check_program(log, program, head)
        merging_inputs(merging, turns, spec.inputs)
        return MergePlan(kind="placed", turn=uuid7(), call=uuid7(), parent=head, store_id=store_id)

    @activity.defn(name="run_merge")
    @coded
    async def run_merge(self, input: MergeRun) -> MergeAnswer:
        """Ask the merging program about the merged branches (heartbeating); record nothing."""
        config, send = input.config, input.send
        _, merging, spec = self._programs(input)
        conversation = await self.logs.open(config.store, config.conversation, config.store_id)
        log = await conversation.read()
        inputs = merging_inputs(merging, [log.turns[t] for t in spec.turns], spec.inputs)
        lm = send.lm or config.lm or self.default_model
        logger.info("merge.requested", turn=input.plan.turn, program=merging.name, model=lm)
        asked = await ask(self.providers, merging, inputs, lm=lm)
        return MergeAnswer(outputs=asked.outputs, model=asked.model, usage=asked.usage, seconds=asked.seconds)

    @activity.defn(name="end_merge")
    @coded
    async def end_merge(self, input: MergeRun) -> TurnOutcome:
        """Append the merge's records in one batch (once: a retry finds its turn), then log the
        merging program's call; return how the merge ended."""
        config, send, plan, answer = input.config, input.send, input.plan, input.answer
        if answer is None:
            raise ThreadlineError(ErrorCode.INVALID_REQUEST, "a merge is recorded with its merging program's answer")
        program, merging, spec = self._programs(input)
        conversation = await self.logs.open(config.store, config.conversation, config.store_id)
        made_by = {"name": merging.name, "version": merging.version, "call": plan.call}
        value = answer.outputs.get(merging.answer)
        while True:
            log = await conversation.read()
            written = log.request_ids.get(send.request_id) or (plan.turn if plan.turn in log.turns else None)
            if written is not None:
                break
            records = merge_records(
                log,
                program,
                turn=plan.turn,
                parent=plan.parent,
                reads=spec.turns,
                made_by=made_by,
                value=value,
                request_id=send.request_id,
                now=now(),
            )
            try:
                await conversation.append(records, expect=log.n)
            except ThreadlineError as err:
                if err.code != ErrorCode.STORE_CONFLICT:
                    raise
                continue
            logger.info("merge.recorded", conversation=config.conversation, turn=plan.turn, program=merging.name)
            await self._log_call(config.store, log, input)
            break
        outcome = outcome_of(log.turns[written] if written else await conversation.turn(plan.turn), send.request_id)
        if outcome is None:
            raise ThreadlineError(ErrorCode.INTERNAL, f"merge {plan.turn} has no end", retryable=True)
        return outcome

    async def _log_call(self, store: str, log: Log, input: MergeRun) -> None:
        """The merging program's call, in the store's call log (a rating of the merged turn goes to it)."""
        calls, answer, spec = self.calls(store), input.answer, input.send.merge
        if calls is None or answer is None or spec is None:
            return
        merging = self.programs[spec.program]
        inputs = merging_inputs(merging, [log.turns[t] for t in spec.turns], spec.inputs)
        lm = input.send.lm or input.config.lm or self.default_model
        record = merging_call(
            merging,
            input.plan.call,
            inputs,
            answer.outputs,
            model=lm,
            usage=answer.usage,
            seconds=answer.seconds,
            ended_at=now(),
            caller={"kind": "threadline", "store": store},
        )
        try:
            await asyncio.to_thread(calls.write, [call_line(record)])
        except (OSError, ThreadlineError) as err:
            logger.warning("calls.not_written", turn=input.plan.turn, error=type(err).__name__)

    def _programs(self, input: BeginInput | MergeRun) -> tuple[Program, Program, MergeSpec]:
        """The conversation's program, the merging one, and what the merge reads."""
        config, send = input.config, input.send
        if send.merge is None:
            raise ThreadlineError(ErrorCode.INVALID_REQUEST, "this send is not a merge")
        program = find_program(self.programs, send.program or config.program)
        return program, find_program(self.programs, send.merge.program), send.merge
