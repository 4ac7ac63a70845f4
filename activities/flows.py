"""Guided flows' steps: starting a flow, taking an answer, reminding, abandoning, reading one.

Each reads the conversation's log itself, runs the step's checks (user code, and a model call for
an AI check, kept in the log before it is used), and appends the exchange (`program?`, `turn`,
`ended` and the flow's `entry` records) in one conditional append: a retry finds its request id in
the log and writes nothing again; a conflict reads again and decides again. Workflows get a small
`FlowResult`: what to say, where the flow stands, and the timers to set.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

import structlog
from temporalio import activity

from core.errors import ErrorCode, ThreadlineError
from core.limits import check_text
from core.models import (
    MAX_REQUEST_ID,
    ConversationRef,
    FlowAnswer,
    FlowCount,
    FlowRef,
    FlowResult,
    FlowStart,
    FlowStatus,
    check_inputs,
)
from core.temporal import coded
from store.backends.reader import ConversationLog, LogCache, now
from store.flows.manager import WAY_OUT, Exchange, Flow, FlowManager, failure
from store.flows.progress import Progress, checked, counts_of, failed_by, progress_of
from store.flows.steps import Ask, Asked, Judgement, Role, Step, judge
from store.log.collected import PLUGIN
from store.log.state import Log
from store.records import entry_record, iso

from .context import Preparer
from .language_model import Providers

logger = structlog.get_logger(__name__)

_LOGGED = {"invalid": "flow.rejected"}
"""Log event names where the entry's kind is not a past verb (`noun.past_verb`)."""


class FlowActivities:
    """Guided flows for every conversation of this worker.

    Args:
        logs: The worker's conversation logs, by store.
        flows: The flows by name (`store.flows.manager.load_flows`), or a `FlowManager`.
        providers: The model providers, for AI checks.
        default_model: The model an AI check asks when the answer names none.
    """

    def __init__(
        self,
        logs: LogCache,
        flows: Mapping[str, Flow] | FlowManager,
        providers: Providers,
        *,
        default_model: str = "offline",
    ) -> None:
        self.logs = logs
        self.manager = flows if isinstance(flows, FlowManager) else FlowManager(flows.values())
        self.providers = providers
        self.default_model = default_model

    @activity.defn(name="start_flow")
    @coded
    async def start_flow(self, input: FlowStart) -> FlowResult:
        """Start a flow: a turn answering `input.message` with the first prompt, and a `started`
        entry (a flow still active is abandoned first, `replaced`)."""
        _check(input.message, input.request_id, flow=input.flow)
        conversation = await self.logs.open(input.store, input.conversation, input.store_id)

        def decide(log: Log) -> Exchange:
            return self.manager.start_flow(
                log, input.flow, request_id=input.request_id, message=input.message, now=now()
            )

        return await self._record(conversation, decide)

    @activity.defn(name="flow_step")
    @coded
    async def flow_step(self, input: FlowAnswer) -> FlowResult:
        """Take a message as the active flow's answer: check it, then record the turn (the answer in,
        the next prompt, a re-prompt or the closing words out) and the flow's entries. With no
        flow active nothing is recorded (`in_flow` False).

        When the flow's own code raises (a validator, an extractor, a `next_step`), the flow ends
        (`abandoned`, reason `failed`) and the send is refused `flow-invalid`: the conversation takes
        the next message as usual."""
        _check(input.message, input.request_id, flow=input.flow, lm=input.lm)
        conversation = await self.logs.open(input.store, input.conversation, input.store_id)
        while True:
            log = await conversation.read()
            failed = failed_by(log, input.request_id)
            if failed is not None:  # a retry of a send the flow failed on: the same refusal
                raise failure(failed["data"])
            run = progress_of(log).run
            try:
                exchange = await self._take(conversation, log, input)
            except ThreadlineError as err:
                if err.code != ErrorCode.FLOW_INVALID or run is None:
                    raise
                await self._fail(conversation, run, input.request_id, err)  # raises, unless the store conflicted
                continue
            if exchange is not None and await self._append(conversation, exchange):
                return self._result(exchange)

    async def _take(self, conversation: ConversationLog, log: Log, input: FlowAnswer) -> Exchange | None:
        """The exchange taking `input` as the active flow's answer (None: the flow moved meanwhile, decide again)."""
        judged: Judgement | None = None
        current = self.manager.current(log)
        taken = current is not None and input.flow in (None, current[0].name)
        if current is not None and taken and self.manager.recorded(log, input.request_id) is None:
            before = _position(progress_of(log))
            judged = await self._judge(conversation, current, input)
            log = await conversation.read()  # the checks took time (and may have kept a model's answer)
            if _position(progress_of(log)) != before:
                return None  # someone else moved the flow meanwhile: judge against where it is now
        return self.manager.process_message(
            log, input.message, request_id=input.request_id, now=now(), judgement=judged, flow=input.flow
        )

    async def _fail(self, conversation: ConversationLog, run: str, request_id: str, err: ThreadlineError) -> None:
        """End run `run`, whose own code failed (`abandoned`, reason `failed`), then refuse the send.

        Returns only on a store conflict (decide again). The failure is logged by type, never content.
        """
        cause = err.__cause__
        error = type(cause).__name__ if cause is not None else "FlowInvalid"
        ended = self.manager.fail(await conversation.read(), run=run, request_id=request_id, error=error, now=now())
        if not await self._append(conversation, ended):
            return
        facts = {"flow": ended.progress.flow, "step": ended.progress.step, "error": error}
        logger.warning("flow.failed", conversation=conversation.conversation, **facts)
        raise ThreadlineError(ErrorCode.FLOW_INVALID, f"{err.message}. {WAY_OUT}")

    @activity.defn(name="remind_flow")
    @coded
    async def remind_flow(self, input: FlowRef) -> FlowResult:
        """A remind timer fired: send the prompt again (a `reminded` entry, the prompt as `response`)
        if the run is still at `input.moves` and was not reminded there; else nothing."""
        _check("", input.request_id)
        conversation = await self.logs.open(input.store, input.conversation, input.store_id)

        def decide(log: Log) -> Exchange:
            return self.manager.remind(log, run=input.run, moves=input.moves, request_id=input.request_id, now=now())

        return await self._record(conversation, decide)

    @activity.defn(name="abandon_flow")
    @coded
    async def abandon_flow(self, input: FlowRef) -> FlowResult:
        """An expiry timer fired, or someone stopped the flow: abandon the run if it is still active
        (and still at `input.moves`, when given); else nothing."""
        _check("", input.request_id)
        conversation = await self.logs.open(input.store, input.conversation, input.store_id)

        def decide(log: Log) -> Exchange:
            return self.manager.abandon(
                log, run=input.run, moves=input.moves, reason=input.reason, request_id=input.request_id, now=now()
            )

        return await self._record(conversation, decide)

    @activity.defn(name="read_flow")
    @coded
    async def read_flow(self, input: ConversationRef) -> FlowStatus:
        """The conversation's flow as its log says now, with its counts: what a reopened workflow
        needs to set its timers and answer its queries again."""
        log = await (await self.logs.open(input.store, input.conversation, input.store_id)).read()
        progress = progress_of(log)
        current = self._result(Exchange(in_flow=progress.active, progress=progress, expect=log.n))
        counts = {name: FlowCount(**dataclasses.asdict(count)) for name, count in counts_of(log).items()}
        return FlowStatus(current=current, counts=counts)

    async def _record(self, conversation: ConversationLog, decide: Callable[[Log], Exchange]) -> FlowResult:
        while True:
            exchange = decide(await conversation.read())
            if await self._append(conversation, exchange):
                return self._result(exchange)

    async def _append(self, conversation: ConversationLog, exchange: Exchange) -> bool:
        """Append the exchange's records on the log it was decided on; False on a conflict (decide again)."""
        if exchange.records:
            try:
                await conversation.append(exchange.records, expect=exchange.expect)
            except ThreadlineError as err:
                if err.code != ErrorCode.STORE_CONFLICT:
                    raise
                return False
            _log_events(exchange, conversation.conversation)
        return True

    async def _judge(self, conversation: ConversationLog, current: tuple[Flow, Step], input: FlowAnswer) -> Judgement:
        """Apply the step's checks, asking the model for its AI checks (each answer kept in the log first)."""
        asked: dict[Role, Asked] = {}
        while True:
            judged = judge(current[1], input.message, asked)
            if not isinstance(judged, Ask):
                return judged
            asked[judged.role] = await self._ask(conversation, current[1], judged, input)

    async def _ask(self, conversation: ConversationLog, step: Step, ask: Ask, input: FlowAnswer) -> Asked:
        """The model's answer to an AI check: the one kept for this request id, else asked now and kept."""
        kept = checked(await conversation.read(), input.request_id, ask.role, step.name)
        if kept is not None:
            return Asked(bool(kept["data"].get("ok")), kept["data"].get("value"))
        program = ask.program
        model = input.lm or self.default_model
        try:
            outputs = await Preparer(conversation, self.providers, model).ask(
                program, {program.inputs[0][0]: input.message}, None, f"flow {ask.role}"
            )
            asked = Asked(True, outputs[program.answer])
        except ThreadlineError as err:
            if err.code not in (ErrorCode.PARSE_FAILED, ErrorCode.INPUTS_INVALID):
                raise
            asked = Asked(False)  # the model found nothing that fits: the answer does not stand
        return await self._keep(conversation, step, ask.role, asked, input.request_id)

    async def _keep(
        self, conversation: ConversationLog, step: Step, role: Role, asked: Asked, request_id: str
    ) -> Asked:
        """Keep the model's answer in the log before it is used; a first one kept by another attempt wins."""
        while True:
            log = await conversation.read()
            progress = progress_of(log)
            kept = checked(log, request_id, role, step.name)
            if kept is not None:  # another attempt kept one first: the first one counts
                return Asked(bool(kept["data"].get("ok")), kept["data"].get("value"))
            about = {"flow": progress.flow, "run": progress.run, "step": step.name, "request_id": request_id}
            data = {**about, "check": role, "ok": asked.ok, "value": asked.value}
            try:
                await conversation.append([entry_record(PLUGIN, "checked", data, at=iso(now()))], expect=log.n)
            except ThreadlineError as err:
                if err.code != ErrorCode.STORE_CONFLICT:
                    raise
                continue
            return asked

    def _result(self, exchange: Exchange) -> FlowResult:
        progress = exchange.progress
        flow = self.manager.flows.get(progress.flow or "")
        step = flow.step(progress.step) if flow is not None else None
        active = progress.active and flow is not None
        return FlowResult(
            in_flow=exchange.in_flow,
            flow=progress.flow,
            run=progress.run,
            state=progress.state.value if progress.state is not None else None,
            step=progress.step,
            response=exchange.response,
            valid=exchange.valid,
            flow_data=exchange.flow_data,
            turn=exchange.turn,
            parent=exchange.parent,
            events=list(exchange.events),
            moves=progress.moves,
            remind_after_s=step.remind_after if active and step is not None and not progress.reminded else None,
            expire_after_s=flow.expire_after if active and flow is not None else None,
            existing=exchange.existing,
        )


def _check(message: str, request_id: str, *, flow: str | None = None, lm: str | None = None) -> None:
    """Refuse a message over the size limit, a request id a retry could not find again, and names over
    theirs (a signal may come from any SDK)."""
    check_text(flow, "a flow name")
    check_text(lm, "a model name")
    check_inputs({"message": message})
    if not 0 < len(request_id) <= MAX_REQUEST_ID:
        raise ThreadlineError(ErrorCode.INVALID_REQUEST, f"a request id has 1 to {MAX_REQUEST_ID} characters")


def _position(progress: Progress) -> tuple[str | None, int]:
    return progress.run, progress.moves


def _log_events(exchange: Exchange, conversation: str) -> None:
    """One line per flow entry written: names, steps, attempts and reasons, never an answer's content."""
    for record in exchange.records:
        if record.get("kind") != "entry" or record.get("entry") == "checked":
            continue
        data, kind = record["data"], str(record.get("entry"))
        facts = {k: data[k] for k in ("flow", "run", "step", "attempt", "reason") if k in data}
        logger.info(_LOGGED.get(kind, f"flow.{kind}"), conversation=conversation, **facts)
