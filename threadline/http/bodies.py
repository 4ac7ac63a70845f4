"""The HTTP service's bodies: strict inbound requests (`extra="forbid"`) and the responses it documents.

Inbound models are strict: a JSON number is not a string, `"yes"` is not a boolean. Everything the
service returns that is not a turn (`Turn.as_dict`) or an outcome (`TurnOutcome`) is described here,
so `/docs` shows it.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, model_validator

from core.models import ContextRule, Sends


class RequestBody(BaseModel):
    """Base of the request bodies: unknown fields and loose types are refused (`invalid-request`)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class ContextRequest(ContextRule):
    """What a turn is shown of the earlier turns (the fields of `ContextRule`); unknown fields are refused."""

    # Not strict: ContextRule's tuples would then refuse JSON arrays.
    model_config = ConfigDict(extra="forbid", frozen=True)

    def to_rule(self) -> ContextRule:
        """The rule as the conversation workflow takes it (the wire model, which tolerates new fields)."""
        return ContextRule.model_validate(self.model_dump())


class CreateConversationRequest(RequestBody):
    """A conversation handle: nothing is started or recorded until its first turn."""

    program: str
    id: str | None = None
    """The conversation id (1-200 of `A-Za-z0-9._-`); a new UUIDv7 when omitted."""
    store: str = "default"
    sends: Sends = "queue"
    context: ContextRequest | None = None
    lm: str | None = None


class TurnRequest(RequestBody):
    """One turn: `inputs` by name, or `message` for a program with one text input (`tutor`)."""

    inputs: dict[str, Any] | None = None
    message: str | None = None
    request_id: str | None = None
    """An idempotency key: sending the same one again is the same turn."""
    continue_from: str | None = None
    """Continue after exactly this turn (a branch when it is not the head)."""
    sends: Sends = "queue"
    """What to do while another turn runs: wait (`queue`), refuse (409), or go beside it (`branch`)."""
    lm: str | None = None
    program: str = "tutor"
    context: ContextRequest | None = None
    approve: Literal["changes", "all"] | list[str] | None = None
    """Which tool calls ask a person first, for this turn only (`[]`: none; unset: the program's rule)."""
    wait: bool = False
    """Answer 200 with the outcome once the turn ended (or waits for a person), instead of 202 once placed."""

    @model_validator(mode="after")
    def _one_input(self) -> TurnRequest:
        if (self.inputs is None) == (self.message is None):
            raise ValueError("give either `inputs` (an object) or `message` (a string), not both or neither")
        return self


class HeadRequest(RequestBody):
    """Where the conversation's head moves."""

    turn: str


class ConversationHandle(BaseModel):
    """A conversation handle."""

    conversation: str
    store: str
    program: str
    sends: Sends
    context: ContextRule
    lm: str | None
    workflow_id: str
    started: bool = False
    """Always false: the workflow starts, and the first records are written, with the first turn."""


class ConversationState(BaseModel):
    """What the store's record log says of a conversation."""

    conversation: str
    store: str
    program: str | None
    """The program of the head turn (null before the first turn)."""
    head: str | None
    turns: int
    """Turns from the first to the head."""
    total: int
    """Turns of every branch."""
    state: str
    """`empty` (no turns), `running` (a turn has not ended) or `idle`."""


class Placed(BaseModel):
    """A placed turn: its id and parent are known before the model answers."""

    turn: str | None
    parent: str | None
    request_id: str


class History(BaseModel):
    """The head's branch as the model sees it: summary, key facts, counts, topics, recent turns."""

    turns: int
    total: int
    summary: str | None = None
    facts: list[str] = []
    summarised_turns: int = 0
    verbatim_turns: int = 0
    topics: list[dict[str, Any]] = []
    recent: list[dict[str, Any]]


class Stopping(BaseModel):
    """A stop was sent: running turns end `stopped`, waiting ones are abandoned, queued sends dropped."""

    turn: str | None
    requested: bool = True


class Head(BaseModel):
    """Where the head now is."""

    head: str


class Closed(BaseModel):
    """The conversation's workflow is closed; its records stay and a new turn reopens it."""

    conversation: str
    closed: bool = True
    records_kept: bool = True
    was_open: bool


class Status(BaseModel):
    """`/health` and `/ready`."""

    status: str


class ErrorDetail(BaseModel):
    """A coded error."""

    code: str
    message: str


class ErrorBody(BaseModel):
    """Every error answer."""

    error: ErrorDetail
