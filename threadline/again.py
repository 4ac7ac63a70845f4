"""Asking a turn again from Python (`turn.ask_again()`): the exact request the turn sent, once more.

    again = await turn.ask_again()                 # the answer now; nothing is recorded
    again = await turn.ask_again(lm="openai:gpt-4o")   # the same request to another model
    kept = await turn.ask_again(record=True)       # a new turn beside it (same parent, same inputs)

The request is asked through the conversation's workflow (the `ask_again` update), so it runs on a
worker with the turn's program and the providers; `record=True` sends the turn's inputs again as a
branch beside it, an ordinary turn placed under the same parent.
"""

from __future__ import annotations

from typing import Any, Protocol

from core.again_models import AskAgain, AskedAgain
from core.limits import check_text
from core.models import ConversationConfig, TurnError, TurnOutcome, TurnSend

from .delivery import Delivery
from .options import SendOptions


class Conversation(Protocol):
    """What asking again needs of a conversation handle (`threadline.client.Conversation`)."""

    @property
    def config(self) -> ConversationConfig:
        """The conversation's settings."""
        ...

    @property
    def delivery(self) -> Delivery:
        """How it reaches its workflow."""
        ...

    def sent(self, inputs: dict[str, Any], options: SendOptions | None = None) -> TurnSend:
        """The send the handle makes with `inputs`."""
        ...

    async def submit(self, send: TurnSend) -> TurnOutcome:
        """Deliver a prepared send and wait for how it ends."""
        ...


async def ask_again(
    chat: Conversation, turn: str, *, parent: str | None, inputs: dict[str, Any], lm: str | None, record: bool
) -> AskedAgain:
    """Ask turn `turn` again (see the module); with `record`, as a new turn beside it whose answer is returned.

    Raises:
        ThreadlineError: `turn-unknown`, `turn-state` (see the `ask_again` update), and a send's codes.
    """
    check_text(turn, "a turn id")
    check_text(lm, "a model")
    if not record:
        return await chat.delivery.update_with_start("ask_again", AskAgain(turn=turn, lm=lm), AskedAgain)
    send = chat.sent(inputs, SendOptions(lm=lm))
    beside = send.model_copy(update={"continue_from": parent, "follow": None, "root": parent is None})
    outcome = await chat.submit(beside)
    if outcome.state != "done":
        raise (
            outcome.error or TurnError(code="turn-state", message=f"turn {outcome.turn} ended {outcome.state}")
        ).to_error()
    outputs = dict(outcome.outputs or {})
    model = outcome.model or lm or chat.config.lm or ""
    return AskedAgain(turn=turn, model=model, outputs=outputs, result=outcome.result, branch=outcome.turn)
