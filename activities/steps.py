"""What a turn's runner and the steps it runs know of each other, each through a Protocol.

`run.TurnRun` owns a turn's lifecycle: the claim, the watch for stops and takeovers, the lease,
the stream, the one `ended` record. A kind of turn is the `TurnSteps` it is given: one model call
(`plainturn.PlainTurn`), model steps with tools between them (`toolturn.ToolTurn`), or a program's
code and the helpers it calls (`codeturn.CodeTurn`). The steps reach the try through `TurnTry`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from core.errors import ThreadlineError
from core.models import Ended, HelperMemory, Paused, RunInput, ToolRound, Yielded
from store.backends.reader import ConversationLog, now
from store.backends.streams import StreamWriting
from store.log.rules import Shown
from store.log.state import Turn
from store.log.steers import Steer
from store.programs.approvals import Approve
from store.programs.program import Program
from store.records import Record, parse_time

from .language_model import Message, ModelReply, ModelRequest, Provider, render_values

Reply = ModelReply | Ended | Yielded | ToolRound | Paused
"""What a turn's steps come to: its answer, or (a turn with tools) a round of tools to run, a wait
for a person, or the turn ended or taken meanwhile."""


class TurnTry(Protocol):
    """What a turn's steps (and a program's helpers) use of the try at the turn (`run.TurnRun`)."""

    conversation: ConversationLog
    program: Program
    input: RunInput
    turn: str
    owned: int
    asked: int
    """The model calls this try made."""
    stream: StreamWriting | None

    @property
    def shown(self) -> Shown:
        """What the turn is shown."""
        ...

    @property
    def saw(self) -> list[Record]:
        """What the turn was shown, as its records keep it."""
        ...

    @property
    def approve(self) -> Approve:
        """The turn's `approve` rule (None: each helper's own)."""
        ...

    @property
    def remembers(self) -> dict[str, HelperMemory]:
        """What each helper remembers in this turn."""
        ...

    async def record(self, *records: Record) -> Ended | Yielded | None:
        """Append `records` unless the turn ended or was taken over (then how it stands)."""
        ...

    async def call_model(self, provider: Provider, request: ModelRequest, model: str) -> ModelReply:
        """Ask the model, streamed into the turn's stream."""
        ...

    def repaired(self, request: ModelRequest, err: ThreadlineError) -> ModelRequest:
        """`request` asked again after a reply that did not fit."""
        ...

    def steered(self) -> list[Steer]:
        """The steers the turn took so far, in the order it took them."""
        ...

    async def take_steers(self, step: int, *, said: str = "") -> list[Steer]:
        """Take the steers that arrived, joining model step `step`; the ones taken now."""
        ...


class TurnSteps(Protocol):
    """What one kind of turn does between its claim and its `ended` record; `run.TurnRun` does the rest."""

    program: Program
    cut_for_steers: bool
    """Whether a steer that arrives while a model call runs cuts it short (the steps then run again and
    take it); otherwise the steps take steers at their own step boundaries."""

    def waits(self, turn: Turn) -> Paused | None:
        """Whether the turn (neither ended nor taken) waits for a person before anything runs again."""
        ...

    async def prepare(self, run: TurnTry, provider: Provider, *, model: str, name: str) -> None:
        """Ready this try before its stream starts: `run` has claimed the turn and knows what it is shown;
        `model` is the model string, `name` its model at `provider`."""
        ...

    async def answer(self) -> Reply:
        """Run the steps: their answer, or how the try ends before one (tools to run, a pause, ended, taken)."""
        ...

    def ended(self, turn: Turn, reply: ModelReply, seconds: float) -> Record:
        """The `ended` record of the turn `reply` answered (`seconds`: how long this try's steps took)."""
        ...

    def error(self, err: ThreadlineError) -> ThreadlineError | Mapping[str, Any]:
        """What the `ended` record of a turn that failed with `err` keeps as its error."""
        ...


def with_steers(messages: Sequence[Message], steers: Sequence[Steer]) -> list[Message]:
    """`messages`, then each steer as the user's message (after what the call it cut short had said)."""
    out = list(messages)
    for steer in steers:
        if steer.said:
            out.append(Message("assistant", steer.said))
        out.append(Message("user", render_values(steer.inputs)))
    return out


def add_usage(*usages: Mapping[str, int]) -> dict[str, int]:
    """Token counts summed over several model calls (a count one call lacks counts as nothing)."""
    out: dict[str, int] = {}
    for usage in usages:
        for name, count in usage.items():
            if isinstance(count, int):
                out[name] = out.get(name, 0) + count
    return out


def since_turn(turn: Turn) -> float:
    """Seconds since the turn was sent (its first attempt's duration, every tool round included)."""
    return max(0.0, now() - parse_time(turn.record.get("at")))


def waits_for_person(turn: Turn) -> Paused | None:
    """How a try at a turn whose tools (or helpers' tools) ask first ends before anything runs: a retry
    after its `waiting` record has nothing more to do, and a tool that may have run, a person settles."""
    state = turn.state(now())
    if state == "waiting":
        return Paused(attempt=turn.attempt, approvals=turn.unanswered())
    if state == "interrupted" and turn.unfinished():
        return Paused(attempt=turn.attempt, reason="unfinished")
    return None
