"""A guided flow: its definition (`FlowBuilder(name).add_step(...).build()`), the pure transitions
that move its progress, and, as the article uses a flow, one run of it in memory.

A transition takes the flow, the recorded `Progress` and what happened (an answer's `Judgement`, a
timer) and gives a `Transition`: the entries to record (`(kind, data)`, see `store.flows.progress`), the
progress after them (always `flowlog.apply_all` of those entries, so the progress rebuilt from the
log equals it) and the text to answer with. Nothing here reads the clock, a file or the network;
user code runs only in the checks (`store.flows.steps`) and in a branching `next_step`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from core.errors import ErrorCode, ThreadlineError

from .progress import Progress, apply_all
from .steps import Ask, Check, Exhausted, FlowState, Judgement, NextStep, Step, judge

Made = tuple[tuple[str, dict[str, Any]], ...]

ON_COMPLETE = "Thank you, that is everything I needed."
ON_ABANDON = "Let's leave it there for now; we can start again whenever you like."
ON_HANDOFF = "I'm handing you over to a person who will help you from here."


@dataclass(frozen=True, eq=False)
class Flow:
    """A guided flow: named steps asked in turn, the first one first.

    As the article uses it, a flow is also one run in memory: `get_current_prompt()`,
    `process_response(message)`, `state`, `current_step`, `collected_data`. A worker never uses
    that run: it keeps each conversation's progress in the record log (`store.flows.manager.FlowManager`).

    Args:
        name: The flow's name (`order`).
        steps: The steps by name, in the order they were added.
        on_complete: What the flow says when its last answer is in.
        on_abandon: What it says when it gives up (attempts ran out on an `abandon` step).
        on_handoff: What it says when it hands the conversation to a person.
        expire_after: Seconds without an answer after which the flow is abandoned (None: never).
    """

    name: str
    steps: Mapping[str, Step]
    on_complete: str = ON_COMPLETE
    on_abandon: str = ON_ABANDON
    on_handoff: str = ON_HANDOFF
    expire_after: float | None = None
    _local: list[Progress] = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        problem = _problem(self)
        if problem:
            raise ThreadlineError(ErrorCode.FLOW_INVALID, f"flow {self.name!r}: {problem}; fix its definition")
        self._local[:] = [start(self, Progress(), run="local", request_id="local").progress]

    @property
    def first(self) -> str:
        """The step a run starts at."""
        return next(iter(self.steps))

    def step(self, name: str | None) -> Step | None:
        """The step named `name`, or None."""
        return self.steps.get(name or "")

    # ----- the article's in-memory run

    @property
    def state(self) -> FlowState:
        """Where the in-memory run stands."""
        return self._local[0].state or FlowState.ACTIVE

    @property
    def current_step(self) -> str | None:
        """The step the in-memory run asks now."""
        return self._local[0].step

    @property
    def collected_data(self) -> dict[str, Any]:
        """What the in-memory run collected, by step name."""
        return dict(self._local[0].data)

    def get_current_prompt(self) -> str | None:
        """The prompt of the in-memory run's current step (None once it is over)."""
        found = self.step(self.current_step)
        return found.prompt if found is not None and self._local[0].active else None

    def process_response(self, message: str) -> tuple[bool, str]:
        """Answer the in-memory run's current step: `(valid, the text to answer with)`.

        Raises:
            ThreadlineError: `invalid-request` once the run is over, or for a step whose checks ask a
                model (only a worker can ask it).
        """
        progress = self._local[0]
        found = self.step(progress.step)
        if not progress.active or found is None:
            raise ThreadlineError(ErrorCode.INVALID_REQUEST, f"flow {self.name!r} is {self.state}; start it again")
        judged = judge(found, message)
        if isinstance(judged, Ask):
            raise ThreadlineError(ErrorCode.INVALID_REQUEST, f"flow {self.name!r} asks a model; run it on a worker")
        moved = answer(self, progress, judged, request_id="local")
        self._local[0] = moved.progress
        return bool(moved.valid), moved.response or ""

    def copy(self) -> Flow:
        """The same flow with a new in-memory run (the article's `start_flow` copies it)."""
        return Flow(self.name, self.steps, self.on_complete, self.on_abandon, self.on_handoff, self.expire_after)


@dataclass(frozen=True, slots=True)
class Transition:
    """What a transition decided: the entries to record, the progress after them, the answer text."""

    made: Made
    progress: Progress
    response: str | None = None
    valid: bool | None = None

    @property
    def events(self) -> tuple[str, ...]:
        """The kinds of the entries made, in order (what a workflow counts)."""
        return tuple(kind for kind, _ in self.made)


def start(flow: Flow, progress: Progress, *, run: str, request_id: str) -> Transition:
    """Start a run of `flow` (`run`: the id of the turn that holds its first prompt); a run still
    active is abandoned first (`replaced`), as the article's `start_flow` replaces it."""
    made: list[tuple[str, dict[str, Any]]] = []
    if progress.active:
        made.append(("abandoned", _about(progress, request_id, reason="replaced")))
    made.append(("started", {"flow": flow.name, "run": run, "step": flow.first, "request_id": request_id}))
    return _made(progress, made, flow.steps[flow.first].prompt)


def answer(flow: Flow, progress: Progress, judged: Judgement, *, request_id: str) -> Transition:
    """Take an answer to the current step: the next prompt, a re-prompt, or the flow's end.

    Raises:
        ThreadlineError: `flow-invalid` when a branching `next_step` names no step of the flow.
    """
    step = flow.step(progress.step)
    if step is None:  # the definition changed under a running flow
        return _made(progress, [("abandoned", _about(progress, request_id, reason="changed"))], flow.on_abandon)
    if not judged.valid:
        return _invalid(flow, step, progress, request_id)
    collected = {**progress.data, step.name: judged.value}
    following = step.next_of(collected, flow.name)
    if following is not None and following not in flow.steps:
        message = f"flow {flow.name!r}, step {step.name!r}: its next step {following!r} is not one of its steps"
        raise ThreadlineError(ErrorCode.FLOW_INVALID, message)
    made = [("answered", {**_about(progress, request_id), "value": judged.value, "next": following})]
    if following is not None:
        return _made(progress, made, flow.steps[following].prompt, valid=True)
    made.append(("completed", {"flow": flow.name, "run": progress.run, "data": collected, "request_id": request_id}))
    return _made(progress, made, flow.on_complete, valid=True)


def remind(flow: Flow, progress: Progress, *, run: str, moves: int | None, request_id: str) -> Transition | None:
    """Send the current prompt again, once per move, if the run is still at `moves` (any, when None);
    None: nothing to do."""
    step = flow.step(progress.step)
    stale = moves is not None and progress.moves != moves
    if not progress.active or progress.run != run or stale or progress.reminded or step is None:
        return None
    data = {**_about(progress, request_id), "moves": progress.moves, "prompt": step.prompt}
    return _made(progress, [("reminded", data)], step.prompt)


def abandon(
    progress: Progress, *, run: str, moves: int | None, reason: str, request_id: str, **more: Any
) -> Transition | None:
    """Abandon the run (`expired`, `stopped`, `failed`) if it is still active (and at `moves`, when
    given); `more` goes into the entry's data."""
    if not progress.active or progress.run != run or (moves is not None and progress.moves != moves):
        return None
    return _made(progress, [("abandoned", _about(progress, request_id, reason=reason, **more))], None)


def _invalid(flow: Flow, step: Step, progress: Progress, request_id: str) -> Transition:
    attempt = progress.attempts + 1
    made = [("invalid", {**_about(progress, request_id), "attempt": attempt})]
    if step.max_attempts is None or attempt < step.max_attempts:
        return _made(progress, made, step.invalid_text(), valid=False)
    if step.on_exhausted == "person":
        made.append(("handed_off", {**_about(progress, request_id, reason="attempts"), "data": dict(progress.data)}))
        return _made(progress, made, flow.on_handoff, valid=False)
    made.append(("abandoned", _about(progress, request_id, reason="attempts")))
    return _made(progress, made, flow.on_abandon, valid=False)


def _about(progress: Progress, request_id: str, **more: Any) -> dict[str, Any]:
    return {"flow": progress.flow, "run": progress.run, "step": progress.step, "request_id": request_id, **more}


def _made(progress: Progress, made: list[tuple[str, dict[str, Any]]], response: str | None, **more: Any) -> Transition:
    return Transition(tuple(made), apply_all(progress, made), response, **more)


def _problem(flow: Flow) -> str | None:
    steps = list(flow.steps.values())
    unknown = [s.next_step for s in steps if isinstance(s.next_step, str) and s.next_step not in flow.steps]
    checks = [
        (not flow.name, "its name is empty"),
        (not steps, "it has no step"),
        (any(s.name != name for name, s in flow.steps.items()), "a step is filed under another name"),
        (bool(unknown), f"next_step {(unknown or [''])[0]!r} is not one of its steps"),
        (any(s.max_attempts is not None and s.max_attempts < 1 for s in steps), "max_attempts must be at least 1"),
        (any(s.on_exhausted not in ("abandon", "person") for s in steps), "on_exhausted is 'abandon' or 'person'"),
        (flow.expire_after is not None and flow.expire_after <= 0, "expire_after must be positive"),
        (any(s.remind_after is not None and s.remind_after <= 0 for s in steps), "remind_after must be positive"),
    ]
    return next((why for failed, why in checks if failed), None)


def seconds(value: float | timedelta | None) -> float | None:
    """A duration as seconds (None stays None)."""
    return value.total_seconds() if isinstance(value, timedelta) else None if value is None else float(value)


class FlowBuilder:
    """Build a flow step by step, as the article does: `FlowBuilder("order").add_step(...).build()`.

    Args:
        name: The flow's name.
        on_complete, on_abandon, on_handoff: What the flow says at each end (see `Flow`).
        expire_after: Seconds (or a timedelta) without an answer before the flow is abandoned.
    """

    def __init__(
        self,
        name: str,
        *,
        on_complete: str = ON_COMPLETE,
        on_abandon: str = ON_ABANDON,
        on_handoff: str = ON_HANDOFF,
        expire_after: float | timedelta | None = None,
    ) -> None:
        self.name = name
        self.steps: dict[str, Step] = {}
        self.texts = (on_complete, on_abandon, on_handoff)
        self.expire_after = seconds(expire_after)

    def add_step(
        self,
        name: str,
        prompt: str,
        validator: Any = None,
        extractor: Any = None,
        next_step: NextStep = None,
        on_invalid: str | None = None,
        *,
        max_attempts: int | None = None,
        on_exhausted: Exhausted = "abandon",
        remind_after: float | timedelta | None = None,
    ) -> FlowBuilder:
        """Add a step (see `Step` for each argument); the first step added is where a run starts.

        Raises:
            ThreadlineError: `flow-invalid` for a name used twice or a check that cannot be applied.
        """
        if not name or name in self.steps:
            message = f"flow {self.name!r}: step name {name!r} is empty or used twice; give each step its own name"
            raise ThreadlineError(ErrorCode.FLOW_INVALID, message)
        where = f"flow {self.name!r}, step {name!r}"
        self.steps[name] = Step(
            name,
            prompt,
            validator=None if validator is None else Check(validator, "validator", where),
            extractor=None if extractor is None else Check(extractor, "extractor", where),
            next_step=next_step,
            on_invalid=on_invalid,
            max_attempts=max_attempts,
            on_exhausted=on_exhausted,
            remind_after=seconds(remind_after),
        )
        return self

    def build(self) -> Flow:
        """The flow (`flow-invalid` when a step names a next step it does not have)."""
        return Flow(self.name, dict(self.steps), *self.texts, expire_after=self.expire_after)
