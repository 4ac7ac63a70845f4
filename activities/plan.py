"""One plan of a turn, shared by placing it, running it and rendering it.

`plan_turn` decides, from the log alone, where a send goes (its parent under the `sends`
policy, the request-id rule first), what it is shown (the context rule, a summary, recorded
context) and the request its model call makes. `begin_turn` appends what it decided,
`run_turn` builds the same request again from what was recorded, and `render` shows it without
appending anything: the three cannot disagree.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from core.context import ContextRule
from core.deadlines import first_calls
from core.models import ConversationConfig, TurnSend
from store.log.rules import Shown, View, shown
from store.log.state import Log
from store.log.turns import Begin, Busy, Existing, Steered, TurnRequest, begin_turn
from store.programs.program import Program

from .language_model import Message, ModelRequest, build_request, exchange_messages


@dataclass(frozen=True, slots=True)
class Plan:
    """What a send does now: `Begin` (with the request its model call makes), `Existing`, `Busy` or `Steered`."""

    decided: Begin | Existing | Busy | Steered
    request: ModelRequest | None = None


def rule_of(config: ConversationConfig, send: TurnSend) -> ContextRule:
    """The context rule a send is shown under (with its summary rule): its own, else the conversation's."""
    return send.context or config.context


def view_of(send: TurnSend) -> View:
    """Where a send continues: after exactly a turn, a new root, or the branch it follows."""
    if send.continue_from:
        return View(pinned=send.continue_from, exact=True)
    return View(pinned=None, exact=True) if send.root else View(pinned=send.follow)


def turn_request(config: ConversationConfig, send: TurnSend, inputs: Mapping[str, Any]) -> TurnRequest:
    """How `send` asks to be placed: its validated `inputs`, view, policy and rules."""
    lm, approve = send.lm or config.lm, first_calls(send.approve, config.approve)
    settings: dict[str, Any] = {"lm": lm} if lm else {}
    if approve is not None:  # recorded with the turn, so a resume anywhere asks about the same calls
        settings["approve"] = approve if isinstance(approve, str) else list(approve)
    if send.tools:  # recorded with the turn, so a resume anywhere offers the model the same functions
        settings["tools"] = [t.model_dump() for t in send.tools]
    earlier_without = send.earlier_without if send.earlier_without is not None else config.earlier_without
    return TurnRequest(
        inputs,
        earlier_without=earlier_without,
        request_id=send.request_id,
        view=view_of(send),
        sends=send.sends or config.sends,
        rule=rule_of(config, send),
        settings=settings,
        metadata=send.metadata,
    )


def plan_turn(log: Log, program: Program, request: TurnRequest, *, model: str, now: float) -> Plan:
    """Decide a send on `log` and, when it begins a turn, the request its model call makes.

    Raises:
        ThreadlineError: `conversation-busy` (refused) or `conversation-signature`.
    """
    decided = begin_turn(log, program, request, now=now)
    if not isinstance(decided, Begin) or program.kind == "module":  # a program's code asks its own requests
        return Plan(decided)
    return Plan(decided, request_of(program, decided.shown, request.inputs, model=model))


def shown_for_run(log: Log, program: Program, turn: str, rule: ContextRule, *, now: float) -> Shown:
    """What a placed turn is shown when it runs: what it recorded (`context`), else its rule again.

    Equal to what placing it decided: the turns its rule picks are done ancestors, which no
    longer change, and anything else (a summary, a topic's sections) was recorded as `context`.
    """
    placed = log.turns[turn]
    return shown(
        log,
        placed.parent,
        fields=program.field_records(),
        signature=program.signature,
        now=now,
        rule=rule,
        context=placed.record.get("context"),
        module=program.kind == "module",
    )


def request_of(
    program: Program, seen: Shown, inputs: Mapping[str, Any], *, model: str, steps: Sequence[Message] = ()
) -> ModelRequest:
    """The model request of a turn shown `seen` with `inputs` (then `steps`); `model` is the provider's model name."""
    return build_request(
        program, seen.exchanges, inputs, model=model, sections=seen.sections, steps=steps, renders=seen.renders
    )


def prepare_next(log: Log, programs: Mapping[str, Program], *, now: float) -> bool:
    """Work out what a next turn after the log's head is shown under the default context rule, and the
    messages of its request, so they are kept beside the log (a long branch's showing,
    `store.log.memo`) and that turn adds only its parent's part: what a worker that starts does for
    the logs it reads (`reader.LogCache.warm`). False: nothing kept (no head, a program not registered
    here or one with code, a branch too short or still changing)."""
    head = log.turns.get(log.head) if log.head is not None else None
    version = log.programs.get(str(head.record.get("program"))) if head is not None else None
    program = programs.get(str(version.get("name"))) if version is not None else None
    if head is None or program is None or program.kind == "module":
        return False
    seen = shown(log, head.id, fields=program.field_records(), signature=program.signature, now=now)
    if seen.renders is None:
        return False
    exchange_messages(seen.exchanges, seen.renders)
    return True
