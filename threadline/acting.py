"""Acting on a turn from Python: answering the approvals it waits for, resuming it, abandoning it.

    turn = (await chat.turns())[-1]
    if turn.state == "waiting":
        print(turn.approvals)                 # [{"name": "refund", "input": {...}, "invocation": 2, ...}]
        turn = await turn.approve()           # every pending approval; the turn goes on, and ends
        turn = await turn.deny(2, reason="not without a receipt")   # or: the model is told no, and why

Answers go through the conversation's workflow (the `act` update): it records them as `approval`
records, functai's own, and the turn goes on by itself once nothing is left unanswered (a new
attempt: approved tools run, a denied one gets the denial as its result). A turn functai left
waiting or interrupted is resumed the same way, here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from core.errors import ErrorCode, ThreadlineError
from core.limits import MAX_NAME, MAX_NOTE, check_text
from core.models import ConversationConfig, TurnOutcome, TurnSend
from store.records import uuid7

from .delivery import Delivery
from .options import SendOptions
from .reading import Turn

# Imported where used: a send (`threadline send`) acts on no turn and asks nothing again.
if TYPE_CHECKING:
    from core.again_models import AskedAgain
    from core.toolmodels import ActKind, ActResult


class Conversation(Protocol):
    """What acting needs of a conversation handle (`threadline.client.Conversation`)."""

    @property
    def config(self) -> ConversationConfig:
        """The conversation's settings."""
        ...

    @property
    def delivery(self) -> Delivery:
        """How it reaches its workflow."""
        ...

    async def outcome(self, request_id: str) -> TurnOutcome:
        """Wait for how the send `request_id` ended."""
        ...

    async def turn(self, turn: str) -> LiveTurn:
        """One turn by id."""
        ...

    def sent(self, inputs: dict[str, Any], options: SendOptions | None = None) -> TurnSend:
        """The send the handle makes with `inputs`."""
        ...

    async def submit(self, send: TurnSend) -> TurnOutcome:
        """Deliver a prepared send and wait for how it ends."""
        ...


class Waiting(ThreadlineError):  # noqa: N818 functai's name for it
    """A turn stopped to wait for a person's answer (code `turn-waiting`, as functai's `Waiting`).

    `turn` is the turn (answer with `await err.turn.approve()` or `deny()`), `approvals` what it asks.
    """

    def __init__(self, turn: LiveTurn) -> None:
        names = ", ".join(str(a.get("name")) for a in turn.approvals) or "a tool call"
        message = f"turn {turn.id} waits for a person's answer about {names}: approve or deny it"
        super().__init__(ErrorCode.TURN_WAITING, message, turn=turn.id)
        self.turn = turn
        self.approvals = list(turn.approvals)


class Cancelled(ThreadlineError):  # noqa: N818 functai's name for it
    """The turn was stopped while it was being made (type `Cancelled` and message as functai's)."""

    def __init__(self, turn: str) -> None:
        super().__init__(ErrorCode.CANCELLED, "the stream was closed", turn=turn)
        self.turn = turn


class LiveTurn(Turn):
    """A turn read through a conversation handle, which can be acted on."""

    _chat: Conversation

    @classmethod
    def of(cls, turn: Turn, chat: Conversation) -> LiveTurn:
        """`turn` bound to `chat`."""
        live = cls(**{name: getattr(turn, name) for name in Turn.__dataclass_fields__})
        object.__setattr__(live, "_chat", chat)
        return live

    async def approve(
        self, invocation: int | None = None, *, site: str | None = None, by: str | None = None, wait: bool = True
    ) -> Turn:
        """Say yes to the approval at `invocation` (None: every one the turn waits for).

        Once nothing is left unanswered the turn goes on; with `wait`, this returns it once it ended or
        waits again, else at once.

        Raises:
            ThreadlineError: `turn-state` when it waits for no answer (or that one was given),
                `approval-unknown` when it asks nothing there.
        """
        return await answer(self._chat, self.id, "approve", invocation=invocation, site=site, by=by, wait=wait)

    async def deny(
        self,
        invocation: int | None = None,
        *,
        reason: str | None = None,
        site: str | None = None,
        by: str | None = None,
        wait: bool = True,
    ) -> LiveTurn:
        """Say no: the model is told the person did not allow the call (and `reason`). See `approve`."""
        return await answer(
            self._chat, self.id, "deny", invocation=invocation, site=site, by=by, reason=reason, wait=wait
        )

    async def resume(
        self, *, results: Mapping[Any, Any] | None = None, rerun: Sequence[Any] = (), wait: bool = True
    ) -> LiveTurn:
        """Go on with a turn that waits (every approval answered) or was interrupted, functai's too.

        A tool that started and has no result may have run: `results={invocation: output}` says what it
        returned, `rerun=[invocation]` runs it again.

        Raises:
            ThreadlineError: `turn-state` for a turn in another state, `turn-unfinished` for a tool that
                may have run and that neither names.
        """
        given = {str(k): v if isinstance(v, str) else str(v) for k, v in (results or {}).items()}
        result = await act(self._chat, self.id, "resume", results=given, rerun=[str(r) for r in rerun])
        return await _settled(self._chat, result, wait)

    async def ask_again(self, *, lm: str | None = None, record: bool = False) -> AskedAgain:
        """Send the exact request this turn sent once more (its program, what it was shown as its `saw`
        records, its model unless `lm` names another): the answer, nothing recorded. With `record`, the
        turn's inputs are sent again as a new turn beside it (same parent), whose answer is returned.

        Raises:
            ThreadlineError: `turn-state` for a turn that has not ended or made no model call of its own.
        """
        from . import again

        return await again.ask_again(
            self._chat, self.id, parent=self.parent, inputs=dict(self.inputs), lm=lm, record=record
        )

    async def abandon(self) -> LiveTurn:
        """End a turn that waits or was interrupted, without going on (`abandoned`)."""
        await act(self._chat, self.id, "abandon")
        return await self._chat.turn(self.id)


async def answer(chat: Conversation, turn: str, kind: ActKind, *, wait: bool = True, **given: Any) -> LiveTurn:
    """Record a person's answer to turn `turn`'s approvals; see `LiveTurn.approve`."""
    result = await act(chat, turn, kind, **given)
    return await _settled(chat, result, wait)


async def act(chat: Conversation, turn: str, kind: ActKind, **given: Any) -> ActResult:
    """Ask the conversation's workflow (started again if it closed) to act on `turn`."""
    from core.toolmodels import ActResult, TurnAction

    check_text(turn, "a turn id")
    check_text(given.get("by"), "an approver name")
    check_text(given.get("site"), "an approval site", limit=2 * MAX_NAME)
    check_text(given.get("reason"), "a reason", limit=MAX_NOTE)
    await chat.delivery.workflow()  # connected, and the config names the store's identity
    config = chat.config
    action = TurnAction(
        store=config.store,
        conversation=config.conversation,
        store_id=config.store_id,
        program=config.program,
        turn=turn,
        kind=kind,
        request_id=uuid7(),
        **given,
    )
    return await chat.delivery.update_with_start("act", action, ActResult)


async def _settled(chat: Conversation, result: ActResult, wait: bool) -> LiveTurn:
    """The turn after acting on it: once it ended or waits again (`wait`, when it goes on), else now."""
    goes_on = not result.pending and result.state not in ("done", "failed", "stopped", "abandoned")
    if wait and goes_on and result.request_id:
        await chat.outcome(result.request_id)
    return await chat.turn(result.turn)
