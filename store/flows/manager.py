"""Guided flows over the record log: the article's `FlowManager`, made durable.

A flow's prompts and answers are ordinary turns of the built-in program `flow_step`
(`store.flows.turns`); its progress is `entry` records of plugin `flow` (`store.flows.progress` documents
them). Each call decides from a conversation's log alone and gives an `Exchange`: the records to
append with `expect`, and what they mean.

`FlowBuilder`, `Flow`, `FlowState` and `Step` are the article's API (`store.flows.definition`,
`store.flows.steps`); `load_flows` finds flows in modules as `store.programs.program.load_programs` finds
programs; the article's `create_order_flow` is the built-in flow `order`
(and release 0.2.0's shorter order flow is `checkout`).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Mapping
from typing import Any

from core.errors import ErrorCode, ThreadlineError
from store.log.collected import sections
from store.log.state import Log
from store.records import uuid7

from .definition import Flow, FlowBuilder, abandon, answer, remind, start
from .progress import Progress, progress_of, written_by
from .steps import Ask, FlowState, Judgement, Step, judge
from .turns import FLOW_STEP, Exchange, entries_only, exchange

__all__ = [
    "CHECKOUT",
    "FLOW_STEP",
    "ORDER",
    "Exchange",
    "Flow",
    "FlowBuilder",
    "FlowManager",
    "FlowState",
    "Progress",
    "Step",
    "create_checkout_flow",
    "create_order_flow",
    "load_flows",
    "sections",
]


class FlowManager:
    """The article's registry of flows, over the durable state.

    Each call reads one conversation's `Log` (the conversation is the log's) and returns an
    `Exchange`; the caller appends its records with `expect` and decides again on `store-conflict`.
    """

    def __init__(self, flows: Iterable[Flow] = ()) -> None:
        self.flows: dict[str, Flow] = {}
        for flow in flows:
            self.register_flow(flow)

    def register_flow(self, flow: Flow) -> None:
        """Register `flow` under its name (a later one of the same name replaces it)."""
        self.flows[flow.name] = flow

    def get_flow(self, name: str) -> Flow:
        """The flow named `name` (`flow-unknown` when none is registered)."""
        found = self.flows.get(name)
        if found is None:
            known = ", ".join(sorted(self.flows)) or "none"
            raise ThreadlineError(ErrorCode.FLOW_UNKNOWN, f"no flow named {name!r} is registered here (known: {known})")
        return found

    def current(self, log: Log) -> tuple[Flow, Step] | None:
        """The flow and step asking now, if a registered flow is active."""
        progress = progress_of(log)
        flow = self.flows.get(progress.flow or "") if progress.active else None
        step = flow.step(progress.step) if flow is not None else None
        return (flow, step) if flow is not None and step is not None else None

    def start_flow(
        self, log: Log, flow_name: str, *, request_id: str, now: float, message: str = "", turn_id: str | None = None
    ) -> Exchange:
        """Start `flow_name`: a turn whose input is `message` (what started it) and whose answer is
        the first prompt. A flow still active is abandoned first (`replaced`)."""
        found = self.recorded(log, request_id)
        if found is not None:
            return found
        flow = self.get_flow(flow_name)
        tid = turn_id or uuid7()
        moved = start(flow, progress_of(log), run=tid, request_id=request_id)
        return exchange(log, flow, moved, (message, tid, request_id), now)

    def process_message(
        self,
        log: Log,
        message: str,
        *,
        request_id: str,
        now: float,
        judgement: Judgement | None = None,
        flow: str | None = None,
    ) -> Exchange:
        """Take `message` as the active flow's answer: the article's `(in_flow, response, data)` as
        `Exchange.in_flow`, `.response` and `.flow_data`.

        `judgement` is the answer's check made beforehand (needed when a check asks a model);
        without it the step's checks are applied here. With `flow`, only that flow takes it.

        Raises:
            ThreadlineError: `invalid-request` without a `judgement` for a check that asks a model.
        """
        found = self.recorded(log, request_id)
        if found is not None:
            return found
        progress = progress_of(log)
        if not progress.active or flow not in (None, progress.flow):
            return Exchange(in_flow=False, progress=progress, expect=log.n)
        current = self.current(log)
        if current is None:  # the flow or its step is no longer registered: end it, the message goes on
            gone = abandon(progress, run=str(progress.run), moves=None, reason="changed", request_id=request_id)
            return entries_only(log, gone, now, in_flow=False) if gone else Exchange(False, progress, log.n)
        judged = _judge_here(current, message) if judgement is None else judgement
        moved = answer(current[0], progress, judged, request_id=request_id)
        return exchange(log, current[0], moved, (message, uuid7(), request_id), now)

    def remind(self, log: Log, *, run: str, moves: int | None, request_id: str, now: float) -> Exchange:
        """Send the prompt again, once, if the run is still where a timer left it."""
        found = self.recorded(log, request_id)
        if found is not None:
            return found
        current, progress = self.current(log), progress_of(log)
        moved = remind(current[0], progress, run=run, moves=moves, request_id=request_id) if current else None
        return entries_only(log, moved, now) if moved else Exchange(in_flow=False, progress=progress, expect=log.n)

    def abandon(self, log: Log, *, run: str, moves: int | None, reason: str, request_id: str, now: float) -> Exchange:
        """Abandon the run (`expired`, `stopped`) if it is still active (and at `moves`, when given)."""
        found = self.recorded(log, request_id)
        if found is not None:
            return found
        progress = progress_of(log)
        moved = abandon(progress, run=run, moves=moves, reason=reason, request_id=request_id)
        return entries_only(log, moved, now) if moved else Exchange(in_flow=False, progress=progress, expect=log.n)

    def fail(self, log: Log, *, run: str, request_id: str, error: str, now: float) -> Exchange:
        """End the run whose own code failed taking an answer: `abandoned`, reason `failed`, with the
        exception's type as `error` (no turn: the answer was never taken). Nothing if it is no longer active."""
        progress = progress_of(log)
        moved = abandon(progress, run=run, moves=None, reason="failed", request_id=request_id, error=error)
        return entries_only(log, moved, now) if moved else Exchange(in_flow=False, progress=progress, expect=log.n)

    def recorded(self, log: Log, request_id: str) -> Exchange | None:
        """The exchange already recorded under `request_id`, read back from the log (None: none is)."""
        tid = log.request_ids.get(request_id)
        if tid is not None and log.turns[tid].record.get("program") != FLOW_STEP.version:
            return Exchange(in_flow=False, progress=progress_of(log), expect=log.n, turn=tid, existing=True)
        made = [e for e in written_by(log, request_id) if e.get("entry") != "checked"]
        if tid is None and not made:
            return None
        events = tuple(str(e.get("entry")) for e in made)
        progress = progress_of(log, through=request_id)
        reminded = [e["data"].get("prompt") for e in made if e.get("entry") == "reminded"]
        response = log.turns[tid].outputs.get("result") if tid is not None else (reminded or [None])[0]
        return Exchange(
            in_flow=True,
            progress=progress,
            expect=log.n,
            response=response if isinstance(response, str) else None,
            valid=_valid(events),
            flow_data=dict(progress.data) if {"completed", "handed_off"} & set(events) else None,
            events=events,
            turn=tid,
            existing=True,
            parent=log.turns[tid].parent if tid is not None else None,
        )


WAY_OUT = (
    "The flow was ended (abandoned, reason `failed`) and the conversation takes the next message as usual;"
    " start the flow again once its code is fixed"
)
"""What a send the flow's own code failed on is told (after what failed)."""


def failure(data: Mapping[str, Any]) -> ThreadlineError:
    """The refusal a send whose flow failed gets again (a retry), from the `failed` entry it wrote."""
    where = f"flow {data.get('flow')!r}, step {data.get('step')!r}: its code failed ({data.get('error')})"
    return ThreadlineError(ErrorCode.FLOW_INVALID, f"{where}. {WAY_OUT}")


def _valid(events: tuple[str, ...]) -> bool | None:
    return True if "answered" in events else False if "invalid" in events else None


def _judge_here(current: tuple[Flow, Step], message: str) -> Judgement:
    judged = judge(current[1], message)
    if isinstance(judged, Ask):
        text = f"flow {current[0].name!r} asks a model to check answers; judge the answer first"
        raise ThreadlineError(ErrorCode.INVALID_REQUEST, text)
    return judged


def _positive_whole_number(text: str) -> bool:
    return text.strip().isdigit() and int(text) > 0


def _email_like(text: str) -> bool:
    return "@" in text and "." in text


ARTICLE_ON_COMPLETE = "Flow completed"
"""What the article's `FlowManager` answers when a flow's last answer is in."""


def create_order_flow() -> Flow:
    """The article's `create_order_flow()`, word for word: a product, a quantity (a positive whole
    number), an e-mail address, and a confirmation whose answer completes the flow ("Flow completed")."""
    return (
        FlowBuilder("order", on_complete=ARTICLE_ON_COMPLETE)
        .add_step("welcome", "Welcome! What product would you like to order?", next_step="quantity")
        .add_step(
            "quantity",
            "How many would you like?",
            validator=_positive_whole_number,
            extractor=int,
            next_step="email",
            on_invalid="Please enter a valid number.",
        )
        .add_step(
            "email",
            "What's your email address for the confirmation?",
            validator=_email_like,
            next_step="confirm",
            on_invalid="Please enter a valid email address.",
        )
        .add_step("confirm", "Great! I'll send the confirmation to your email. Is there anything else?")
        .build()
    )


def create_checkout_flow() -> Flow:
    """A shorter order: a greeting, a quantity, an e-mail address, closing with the project's own words."""
    return (
        FlowBuilder("checkout")
        .add_step("greeting", "Hello! What would you like to order?", next_step="quantity")
        .add_step(
            "quantity",
            "How many would you like?",
            validator=_positive_whole_number,
            extractor=int,
            next_step="email",
            on_invalid="Please enter a valid number.",
        )
        .add_step(
            "email",
            "What e-mail address should the confirmation go to?",
            validator=_email_like,
            on_invalid="Please enter a valid email address.",
        )
        .build()
    )


ORDER = create_order_flow()
"""The built-in flow `order` (the article's `create_order_flow()`)."""

CHECKOUT = create_checkout_flow()
"""The built-in flow `checkout` (the order flow of release 0.2.0, under its own name)."""


def load_flows(modules: Iterable[str]) -> dict[str, Flow]:
    """The built-in flows plus every `Flow` defined at the top level of `modules`, by name.

    Raises:
        ThreadlineError: `flow-invalid` for a module that cannot be imported.
    """
    flows = {ORDER.name: ORDER, CHECKOUT.name: CHECKOUT}
    for name in modules:
        try:
            module = importlib.import_module(name)
        except ImportError as err:
            raise ThreadlineError(ErrorCode.FLOW_INVALID, f"cannot import flow module {name!r}: {err}") from None
        flows.update({f.name: f for f in vars(module).values() if isinstance(f, Flow)})
    return flows
