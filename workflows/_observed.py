"""A turn seen from outside: its span (the GenAI `invoke_agent` convention) and its metrics.

Both are made in workflow code, and both are replay-safe: the span comes from the replay-safe
tracer (`core.telemetry`: deterministic ids, not ended while history replays, not ended when an
evicted run's coroutines are torn down), and the metrics from `workflow.metric_meter()`, which
records nothing while history replays. So a turn has one span and counts once however often its
run is replayed, on this worker or on one that took over after a crash.

A send's span is a child of the context it arrived with (the caller's trace, through the Temporal
plugin's headers), kept in memory only: a replay rebuilds it from the same headers.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from core import telemetry
    from core.errors import ErrorCode
    from core.models import ConversationConfig, StopSend, TurnOutcome, TurnSend

TURNS = "threadline_turns"
TURN_SECONDS = "threadline_turn_duration_seconds"
WAITS = "threadline_approval_waits"
WAIT_SECONDS = "threadline_approval_wait_seconds"
SENDS = "threadline_busy_sends"
SENDS_HELP = "Sends that came while a turn of the conversation ran, by program and what they did (`queued`, ...)."
STOPS = "threadline_stops"
RUNS = "threadline_conversation_runs"
RUNS_HELP = "Conversation runs that started or ended on workers (open now: started minus ended)."


WAITS_HELP = "Turns that began or ended waiting for a person, and what their approval deadlines did."


@contextmanager
def waiting(config: ConversationConfig, turn: str, program: str) -> Iterator[None]:
    """Count a turn waiting for a person (waiting now: started minus ended) and time the wait, inside its
    span. A wait cut short by eviction is neither counted nor ended: the replay that follows does both."""
    meter, began = workflow.metric_meter(), workflow.now()
    meter.create_counter(WAITS, WAITS_HELP).add(1, {"program": program, "event": "started"})
    tracer = telemetry.tracer(__name__)
    attributes = {
        "gen_ai.conversation.id": config.conversation,
        "threadline.turn.id": turn,
        "threadline.program": program,
    }
    span = None if tracer is None else tracer.start_span("wait_for_person", attributes=attributes)
    with _current(span) if span is not None else contextlib.nullcontext():
        try:
            yield
        except ApplicationError:
            _wait_ended(meter, program, began, span)
            raise
    _wait_ended(meter, program, began, span)


def _wait_ended(meter: Any, program: str, began: Any, span: Any) -> None:
    meter.create_counter(WAITS, WAITS_HELP).add(1, {"program": program, "event": "ended"})
    seconds = (workflow.now() - began).total_seconds()
    meter.create_histogram_float(WAIT_SECONDS, "How long turns waited for a person.", "s").record(
        seconds, {"program": program}
    )
    if span is not None:
        span.end()


def deadline_event(program: str, event: str) -> None:
    """Count what an approval deadline did to a waiting turn: `reminded`, `escalated`, `denied` or `approved`."""
    workflow.metric_meter().create_counter(WAITS, WAITS_HELP).add(1, {"program": program, "event": event})


def run_began() -> None:
    """Count a conversation run that started (a new conversation, one reopened, or continued as new)."""
    workflow.metric_meter().create_counter(RUNS, RUNS_HELP).add(1, {"event": "started"})


def run_ended() -> None:
    """Count a conversation run that ended (closed, idle, or continuing as new)."""
    workflow.metric_meter().create_counter(RUNS, RUNS_HELP).add(1, {"event": "ended"})


@contextmanager
def stopping(config: ConversationConfig, stop: StopSend) -> Iterator[None]:
    """Count a stop carried out, inside its span (the turns it stops are named on the turn spans' ends)."""
    scope = "turn" if stop.turn is not None else "request" if stop.request_id is not None else "all"
    workflow.metric_meter().create_counter(STOPS, "Stops carried out, by what they named.").add(1, {"scope": scope})
    tracer = telemetry.tracer(__name__)
    if tracer is None:
        yield
        return
    attributes = {"gen_ai.conversation.id": config.conversation, "threadline.stop.scope": scope}
    if stop.turn is not None:
        attributes["threadline.turn.id"] = stop.turn
    span = tracer.start_span("stop", attributes=attributes)
    with _current(span):
        yield  # evicted or failed: the replay that follows ends it (as a turn's span)
        span.end()


class Observed:
    """The turns' spans and metrics of one conversation run."""

    def __init__(self) -> None:
        self._origins: dict[str, Any] = {}
        """The tracing context each send came in with, by request id (only while traces are on)."""
        self._parents: dict[str, str | None] = {}
        self._queued: set[str] = set()
        """The request ids counted as queued (a send waits behind a turn, maybe more than once)."""
        self._instruments: dict[str, Any] = {}
        """This run's metric instruments, made on first use (a replay-safe meter's, with the run's labels)."""
        self._dropped: set[Any] = set()
        """Spans of sends placed at once that began no turn there: never ended, so never exported."""

    def arrived(self, request_id: str) -> None:
        """Keep the caller's context of a send that just came (a signal's or an update's handler)."""
        if telemetry.tracer(__name__) is not None and request_id not in self._origins:
            from opentelemetry import context

            self._origins[request_id] = context.get_current()

    def placed(self, turn: str, parent: str | None) -> None:
        """The turn a send placed continues `parent` (an attribute of its span)."""
        if telemetry.tracer(__name__) is not None:
            self._parents[turn] = parent

    @contextmanager
    def turn(self, config: ConversationConfig, send: TurnSend, turn: str | None) -> Iterator[Any]:
        """The turn's span, current while the turn runs (its activities' spans are its children); a send
        placed and run at once has its span before its turn is known (`named` then names it)."""
        tracer = telemetry.tracer(__name__)
        if tracer is None:
            yield None
            return
        program = send.program or config.program
        attributes: dict[str, str] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": program,
            "gen_ai.conversation.id": config.conversation,
            "threadline.store": config.store,
            "threadline.request.id": send.request_id,
        }
        if model := send.lm or config.lm:
            attributes["gen_ai.request.model"] = model
        origin = self._origins.get(send.request_id)
        span = tracer.start_span(f"invoke_agent {program}", context=origin, attributes=attributes)
        if turn is not None:
            self.named(span, turn)
        with _current(span):
            try:
                yield span
            except BaseException:
                # Evicted (its coroutines torn down) or its task failed: the replay that follows ends it.
                raise
            if span in self._dropped:  # its send goes back to the queue: its span begins again when placed
                self._dropped.discard(span)
                return
            self._origins.pop(send.request_id, None)
            span.end()

    def named(self, span: Any, turn: str) -> None:
        """The span's turn is `turn` (and its parent, if known by now)."""
        if span is None:
            return
        span.set_attribute("threadline.turn.id", turn)
        if parent := self._parents.pop(turn, None):
            span.set_attribute("threadline.turn.parent", parent)

    def drop(self, span: Any) -> None:
        """The send of `span`, placed at once, began no turn there: its span is never ended."""
        if span is not None:
            self._dropped.add(span)

    def ended(
        self, span: Any, config: ConversationConfig, send: TurnSend, outcome: TurnOutcome, *, seconds: float
    ) -> None:
        """Count the turn by how it ended, time it (placed to ended), and put its end on its span."""
        labels = {"program": send.program or config.program, "state": outcome.state}
        self._counter(TURNS, "Turns ended, by program and how they ended.").add(1, labels)
        self._histogram(TURN_SECONDS, "How long turns took, placed to ended.").record(seconds, labels)
        if span is not None:
            span.set_attribute("threadline.turn.state", outcome.state)
            if outcome.error is not None:
                from opentelemetry.trace import Status, StatusCode

                span.set_attribute("error.type", outcome.error.code)
                span.set_status(Status(StatusCode.ERROR, outcome.error.code))

    def refused(self, config: ConversationConfig, send: TurnSend, code: str) -> None:
        """Count a send refused before it became a turn (with `conversation-busy`: one that met a running turn)."""
        self._origins.pop(send.request_id, None)
        labels = {"program": send.program or config.program, "state": "refused"}
        self._counter(TURNS, "Turns ended, by program and how they ended.").add(1, labels)
        if code == ErrorCode.CONVERSATION_BUSY:
            self._busy(config, send, "refused")

    def queued(self, config: ConversationConfig, send: TurnSend) -> None:
        """Count a send that waits behind a running turn (once, however often it finds the turn running)."""
        if send.request_id not in self._queued:
            self._queued.add(send.request_id)
            self._busy(config, send, "queued")

    def steered(self, config: ConversationConfig, send: TurnSend) -> None:
        """Count a send that joined the running turn (`steer`)."""
        self._queued.discard(send.request_id)
        self._busy(config, send, "steered")

    def beside(self, config: ConversationConfig, send: TurnSend, running: bool) -> None:
        """Count a send that began its turn while this run drove another one (`branch` or `interrupt`)."""
        self._queued.discard(send.request_id)
        policy = send.sends or config.sends
        if running and policy in ("branch", "interrupt"):
            self._busy(config, send, "branched" if policy == "branch" else "interrupted")

    def _busy(self, config: ConversationConfig, send: TurnSend, outcome: str) -> None:
        labels = {"program": send.program or config.program, "outcome": outcome}
        self._counter(SENDS, SENDS_HELP).add(1, labels)

    def _counter(self, name: str, description: str) -> Any:
        if name not in self._instruments:
            self._instruments[name] = workflow.metric_meter().create_counter(name, description)
        return self._instruments[name]

    def _histogram(self, name: str, description: str) -> Any:
        if name not in self._instruments:
            self._instruments[name] = workflow.metric_meter().create_histogram_float(name, description, "s")
        return self._instruments[name]


@contextmanager
def _current(span: Any) -> Iterator[None]:
    """`span` is the current one in this task (so the activities it starts are its children).

    Not `use_span`: an evicted run's coroutines are closed in another context, where detaching
    fails loudly; there is nothing to detach there, so that failure is ignored.
    """
    from opentelemetry import context, trace

    token = context.attach(trace.set_span_in_context(span))
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):  # the token belongs to the context the run started in, now gone
            token.var.reset(token)
