"""Guided flows and a conversation's own records on the Python API (methods of `Conversation`).

    chat = tl.conversation("chat", id="order-7")
    await chat.setup("You are a friendly shop assistant.", metadata={"shop": "north"})
    print((await chat.start_flow("order")).response)   # Welcome! What product would you like to order?
    reply = await chat.message("Two pizzas, please.")  # a flow's answer while one is active
    print(reply.response, reply.in_flow, reply.flow_data)
    print((await chat.flow()).step)                      # where the flow stands, read from the log

`message` is the article's `process_message`: the active flow takes the message first, else the
conversation's program answers it. Flow state is read from the record log, so `flow()` works while
Temporal is down.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from core.errors import ErrorCode, ThreadlineError
from core.limits import check_keys, check_text
from core.models import StopSend, TurnOutcome
from store.log.rules import view_head
from store.records import uuid7

from .handle import Handle
from .options import SendOptions

# Imported where used: a plain send (`threadline send`) needs neither the flows' log readers nor the
# setup and import models (tests/surfaces/test_cli_imports.py).
if TYPE_CHECKING:
    from .transcript import FlowView


@dataclass(frozen=True, slots=True)
class Reply:
    """The answer to a message, as the article's service gives it."""

    response: Any
    """What the flow said (a prompt, a re-prompt, its closing words), else the program's answer."""
    turn: str | None
    turn_count: int
    """The user messages on the branch, from the first to this one (the article's count)."""
    in_flow: bool = False
    flow_completed: bool = False
    flow_data: dict[str, Any] | None = None
    """What the flow collected, once: on the reply that completed it (or handed it to a person)."""
    outcome: TurnOutcome | None = None


class FlowMethods(Handle):
    """What `Conversation` adds for guided flows, the article's `message`, setups and imports."""

    async def start_flow(self, flow: str, message: str = "", *, request_id: str | None = None) -> Reply:
        """Start the guided flow `flow` (a flow still active is abandoned first); the reply is its first prompt.

        Raises:
            ThreadlineError: `flow-unknown` when the worker has no flow of that name.
        """
        send = self.sent({"message": message}, SendOptions(request_id)).model_copy(update={"flow": flow})
        return await self._reply(await self.submit(send))

    async def message(
        self,
        text: str,
        *,
        request_id: str | None = None,
        lm: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> Reply:
        """Send a message, routed to the active flow first (the article's `process_message`), and wait for the reply.

        Raises:
            ThreadlineError: when the send was refused, or its turn did not end `done` (`turn-state`).
        """
        check_keys(metadata, "metadata")
        send = self.sent(self._inputs((text,), {}), SendOptions(request_id, lm, metadata=metadata))
        return await self._reply(await self.submit(send))

    async def _reply(self, outcome: TurnOutcome) -> Reply:
        if outcome.turn is None or outcome.state != "done":
            code = ErrorCode.parse(outcome.error.code) if outcome.error else ErrorCode.TURN_STATE
            why = f": {outcome.error.message}" if outcome.error else ""
            raise ThreadlineError(code, f"the message ended {outcome.state}{why}")
        from .transcript import user_count

        self._follow(outcome.turn)
        count = user_count(await self._read(), outcome.turn)
        flow = outcome.flow
        if flow is None:
            return Reply(outcome.result, outcome.turn, count, outcome=outcome)
        completed = "completed" in flow.events
        return Reply(flow.response, outcome.turn, count, True, completed, flow.flow_data, outcome)

    async def flow(self) -> FlowView:
        """Where the conversation's latest guided flow stands (read from the log, no Temporal needed)."""
        from .transcript import flow_view

        return flow_view(await self._read())

    async def messages(self) -> list[dict[str, Any]]:
        """The branch to this handle's head as the article's messages: `{"role", "content", "timestamp"}`, a
        turn's tool exchanges as the assistant's `tool_calls` and `role: "tool"` messages."""
        from .transcript import messages_of

        log = await self._read()
        return messages_of(log, view_head(log, self.view))

    async def stop_flow(self) -> None:
        """Stop the active guided flow: it is abandoned (`stopped`); the conversation goes on freely."""
        await self.signal(StopSend(flow=True))

    async def setup(
        self,
        system_prompt: str | None = None,
        *,
        metadata: Mapping[str, Any] | None = None,
        request_id: str | None = None,
    ) -> str:
        """Record the conversation's system prompt and metadata (shown to every later turn); return when it was."""
        from core.records_models import MAX_SYSTEM_PROMPT, SetupResult, SetupSend

        check_text(system_prompt, "the system prompt", limit=MAX_SYSTEM_PROMPT)
        check_keys(metadata, "metadata")
        setup = SetupSend(request_id=request_id or uuid7(), system_prompt=system_prompt, metadata=dict(metadata or {}))
        done: SetupResult = await self.delivery.update_with_start("setup", setup, SetupResult)
        return done.created_at

    async def add_messages(self, messages: Sequence[Mapping[str, str]], *, request_id: str | None = None) -> list[str]:
        """Record `{"role", "content"}` messages as done turns after the head, without a model call.

        Each user message and the assistant message after it are one turn. Returns the turns' ids.
        """
        from core.records_models import ImportedMessage, ImportResult, ImportSend

        parsed = [ImportedMessage.model_validate(dict(m)) for m in messages]
        send = ImportSend(request_id=request_id or uuid7(), messages=parsed)
        done: ImportResult = await self.delivery.update_with_start("append", send, ImportResult)
        if done.turns:
            self._follow(done.turns[-1])
        return done.turns

    async def add_user_message(self, text: str, *, request_id: str | None = None) -> str:
        """Record a user message without asking a model (the article's `add_user_message`): a turn with
        an empty answer."""
        return (await self.add_messages([{"role": "user", "content": text}], request_id=request_id))[0]

    async def add_assistant_message(self, text: str, *, request_id: str | None = None) -> str:
        """Record an assistant message without asking a model (the article's `add_assistant_message`): a
        turn whose message is empty, as a flow's first prompt is."""
        return (await self.add_messages([{"role": "assistant", "content": text}], request_id=request_id))[0]
