"""What every conversation handle is built on: which conversation, where its view continues, how it
reaches the workflow (a `Delivery` it holds) and reads the record log.

`threadline.guided.FlowMethods` adds guided flows to it, and `threadline.client.Conversation` the
rest of the public face; both send through `sent(...)` and `submit(...)` here.
"""

from __future__ import annotations

from typing import Any, Protocol

from core.errors import ErrorCode, ThreadlineError
from core.limits import check_send
from core.models import CallerTool, ConversationConfig, StopSend, TurnOutcome, TurnSend, check_inputs
from store.backends.opening import StoreSet
from store.backends.reader import ConversationLog
from store.log.rules import View
from store.log.state import Log
from store.programs.program import Program
from store.records import uuid7

from . import delivery
from .acting import LiveTurn, Waiting
from .coding import refuse_nested
from .delivery import Delivery
from .options import SendOptions, approve_rule


class Connection(delivery.Connection, Protocol):
    """What a handle needs of its connection (`threadline.client.Threadline`)."""

    stores: StoreSet

    def programs(self) -> dict[str, Program]:
        """The programs the connection knows."""
        ...

    def log(self, store: str, conversation: str) -> ConversationLog:
        """The record log of `conversation` in `store`."""
        ...


def finished(turn: LiveTurn) -> LiveTurn:
    """`turn` when it is done, else what it ended as, raised (`Waiting` when it waits for a person)."""
    if turn.state == "waiting":
        raise Waiting(turn)
    if turn.state != "done":
        code = ErrorCode.parse((turn.error or {}).get("code") or ErrorCode.TURN_STATE)
        raise ThreadlineError(code, f"turn {turn.id} ended {turn.state}", turn=turn.id)
    return turn


class Handle:
    """A handle on one conversation, seen from a view of its tree (`continue_from` makes others)."""

    def __init__(self, tl: Connection, config: ConversationConfig, view: View | None = None) -> None:
        self.tl = tl
        self.delivery = Delivery(tl, config)
        """How the handle reaches its workflow; it holds the config, which reaching it settles."""
        self.view = view or View()

    @property
    def config(self) -> ConversationConfig:
        """The conversation's settings, as its workflow starts with them."""
        return self.delivery.config

    @property
    def id(self) -> str:
        """The conversation id."""
        return self.config.conversation

    async def signal(self, send: TurnSend | StopSend) -> None:
        """Deliver a `turn` or `stop` with signal-with-start (the conversation reopens if it had closed)."""
        await self.delivery.signal(send)

    async def outcome(self, request_id: str) -> TurnOutcome:
        """Wait for how the send `request_id` ended."""
        return await self.delivery.outcome(request_id)

    def sent(self, inputs: dict[str, Any], options: SendOptions | None = None) -> TurnSend:
        """The send this view makes with `inputs` (checked), placed where the view continues."""
        options = options or SendOptions()
        refuse_nested(self.config)  # before anything is sent or recorded
        config, pinned = self.config, self.view.pinned
        send = TurnSend(
            request_id=options.request_id or uuid7(),
            inputs=inputs,
            program=config.program,
            continue_from=pinned if self.view.exact else None,
            follow=None if self.view.exact else pinned,
            # The handle's choices travel with each send: the workflow may have been started by another.
            sends=config.sends,
            context=config.context,
            lm=options.lm or config.lm,
            approve=approve_rule(options.approve) if options.approve is not None else config.approve,
            remembers=config.remembers,
            earlier_without=config.earlier_without,
            budget=config.budget,
            metadata=dict(options.metadata or {}),
            tools=[CallerTool.model_validate(t) for t in options.tools],
        )
        check_send(send)  # its names within their limits, before anything is sent or recorded
        return send

    async def submit(self, send: TurnSend, *, keep_waiting: bool = True) -> TurnOutcome:
        """Deliver a prepared send (`sent(...)`, perhaps with a merge or flow) and wait for how it ends;
        with `keep_waiting=False`, a send no worker took in time is answered `Queued` at once (`Delivery.ask`)."""
        return await self.delivery.ask("send", send, TurnOutcome, keep_waiting=keep_waiting)

    async def _read(self) -> Log:
        return await self.tl.log(self.config.store, self.id).read()

    def _follow(self, turn: str) -> None:
        """A view that sent follows its own branch (docs/format-1.md 4.3)."""
        self.view = View(pinned=turn)

    def _inputs(self, args: tuple[Any, ...], inputs: dict[str, Any]) -> dict[str, Any]:
        """The inputs of a send by name: positional ones take the program's input names in order."""
        if args:
            program = self.tl.programs().get(self.config.program)
            if program is None:
                raise ThreadlineError(
                    ErrorCode.PROGRAM_UNKNOWN, f"name the inputs of {self.config.program!r}: it is not known here"
                )
            names = [name for name, _ in program.inputs]
            if len(args) > len(names):
                raise ThreadlineError(ErrorCode.INPUTS_INVALID, f"{program.name} takes {len(names)} input(s)")
            inputs = {**dict(zip(names, args, strict=False)), **inputs}
        check_inputs(inputs)  # before anything is sent (the worker checks again: signals come from anywhere)
        return inputs
