"""The HTTP service's bodies: strict inbound requests (`extra="forbid"`) and the responses it documents.

Inbound models are strict: a JSON number is not a string, `"yes"` is not a boolean. Everything the
service returns that is not a turn (`Turn.as_dict`) or an outcome (`TurnOutcome`) is described here,
so `/docs` shows it.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from core.context import ContextRule
from core.models import Sends


class RequestBody(BaseModel):
    """Base of the request bodies: unknown fields and loose types are refused (`invalid-request`), and so
    is text no store can keep: a lone surrogate (not Unicode, so not JSON) or a NUL (no PostgreSQL text
    takes it), wherever it is in the body."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
    any_text: ClassVar[bool] = False
    """True for a body whose text goes to the store as it is (records: the store answers for them)."""

    @model_validator(mode="before")
    @classmethod
    def _keepable_text(cls, data: Any) -> Any:
        pending = [] if cls.any_text else [data]
        while pending:  # a loop, not recursion: a body may nest thousands deep
            value = pending.pop()
            if isinstance(value, dict):
                pending += [*value.keys(), *value.values()]
            elif isinstance(value, list):
                pending += value
            elif isinstance(value, str):
                _check_text(value)
        return data


def _check_text(text: str) -> None:
    if "\x00" in text:
        raise ValueError("text holds a NUL character; remove it")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("text holds a lone surrogate, which is not Unicode text") from None


def _known_fields(value: Any) -> Any:
    """Refuse a context rule with a field it does not have (the rule itself ignores them, for rolling deploys)."""
    unknown = sorted(set(value) - set(ContextRule.model_fields)) if isinstance(value, dict) else []
    if unknown:
        raise ValueError(f"a context rule has no field {', '.join(map(repr, unknown))}")
    return value


ContextRequest = Annotated[ContextRule, BeforeValidator(_known_fields)]
"""What a turn is shown of the earlier turns: `ContextRule` itself, with unknown fields refused."""


class BudgetRequest(RequestBody):
    """What a conversation may spend in all: a turn that would exceed it is refused `budget-exceeded` (409)."""

    tokens: int | None = Field(default=None, ge=0)
    """Tokens read and written by every turn (the reported usage), plus the next request's estimate."""
    cost: float | None = Field(default=None, ge=0)
    """Money, in `THREADLINE_PRICES`' currency (every model the conversation uses needs a price)."""


class CreateConversationRequest(RequestBody):
    """A conversation: with `program` alone, only a handle (nothing is started or recorded until its first
    turn); the article's body (`system_prompt`, `metadata`, or no `program`: the general `chat` program)
    also records the setup every turn is shown, so the conversation exists at once."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {"system_prompt": "You are a helpful assistant.", "metadata": {"user": "u-42"}},
                {"program": "tutor", "id": "alex", "context": {"last": 10}},
            ]
        }
    )

    program: str | None = None
    """The conversation's program; omitted: the built-in general `chat`."""
    system_prompt: str | None = None
    """Shown to every turn as part of its instruction (recorded in the log)."""
    metadata: dict[str, Any] | None = None
    """Small facts about the conversation, shown to every turn as JSON (recorded in the log)."""
    id: str | None = None
    """The conversation id (1-200 of `A-Za-z0-9._-`); a new UUIDv7 when omitted."""
    store: str = "default"
    sends: Sends = "queue"
    context: ContextRequest | None = None
    lm: str | None = None
    budget: BudgetRequest | None = None
    """What the conversation may spend; kept while its workflow runs (send it with each turn to keep it
    after the conversation closed for idleness)."""


class RememberRequest(RequestBody):
    """What a helper of a program with code remembers (`threadline.remember`)."""

    mode: Literal["conversation", "turn", "own"] = "conversation"
    steps: bool = False


class EscalationRequest(RequestBody):
    """`then: {"escalate": [...]}`: only these approvers may answer once the deadline passed; with
    `within`, the next deadline."""

    escalate: list[str]
    within: float | int | str | None = None
    then: Literal["deny", "approve"] | EscalationRequest = "deny"
    remind_every: float | int | str | None = None


class DeadlineRequest(RequestBody):
    """An `approve` rule with a deadline: `within` (seconds or an ISO-8601 duration) after a question is
    asked with nobody answering, `then` answers it (`deny`, `approve`) or escalates it."""

    model_config = ConfigDict(
        json_schema_extra={"examples": [{"calls": "changes", "within": "PT1H", "then": "deny", "remind_every": 600}]}
    )

    calls: Literal["changes", "all"] | list[str] | None = None
    """Which tool calls ask first (unset: the program's rule)."""
    within: float | int | str
    then: Literal["deny", "approve"] | EscalationRequest = "deny"
    remind_every: float | int | str | None = None


class TurnRequest(RequestBody):
    """One turn: `inputs` by name, or `message` for a program with one text input (`tutor`)."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {"message": "What is 1/2 + 1/3?", "request_id": "q-1", "wait": True},
                {"inputs": {"topic": "fractions", "level": 2}, "program": "quiz"},
            ]
        }
    )

    inputs: dict[str, Any] | None = None
    message: str | None = None
    request_id: str | None = None
    """An idempotency key: sending the same one again is the same turn."""
    continue_from: str | None = None
    """Continue after exactly this turn (a branch when it is not the head)."""
    sends: Sends = "queue"
    """What to do while another turn runs: wait (`queue`), refuse (409), go beside it (`branch`), stop it
    (`interrupt`), or join it at its next step (`steer`)."""
    lm: str | None = None
    program: str = "tutor"
    context: ContextRequest | None = None
    approve: Literal["changes", "all"] | list[str] | DeadlineRequest | None = None
    """Which tool calls ask a person first, for this turn only (`[]`: none; unset: the program's rule),
    or the object form with a deadline (`{"calls": "changes", "within": "PT1H", "then": "deny"}`)."""
    earlier_without: list[str] | None = None
    """Outputs the program now writes that earlier turns lack (`["reasoning"]`): shown without them."""
    remembers: dict[str, Literal["conversation", "turn", "own"] | RememberRequest] | None = None
    """A program with code's helpers' memory by helper name (`{"answer": "conversation"}`)."""
    budget: BudgetRequest | None = None
    """What the conversation may spend (unset: the budget it was created with)."""
    wait: bool = False
    """Answer 200 with the outcome once the turn ended (or waits for a person), instead of 202 once placed."""

    @model_validator(mode="after")
    def _one_input(self) -> TurnRequest:
        if (self.inputs is None) == (self.message is None):
            raise ValueError("give either `inputs` (an object) or `message` (a string), not both or neither")
        return self


class HeadRequest(RequestBody):
    """Where the conversation's head moves."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"turn": "0199a1b2-0000-7000-8000-000000000001"}]})

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
    """Whether its workflow started and its setup was recorded (the article's body); otherwise both
    happen with the first turn."""
    conversation_id: str = ""
    """The conversation id again, under the article's name."""
    created_at: str | None = None
    """When the setup was recorded (None when nothing was)."""


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
    conversation_id: str = ""
    turn_count: int = 0
    """Turns from the first to the head (the article's name for `turns`)."""
    created_at: str | None = None
    updated_at: str | None = None
    system_prompt: str | None = None
    metadata: dict[str, Any] = {}
    messages: list[dict[str, Any]] = []
    """The head's branch as messages: `{"role": "user" | "assistant", "content", "timestamp"}`."""
    flow: dict[str, Any] | None = None
    """Its latest guided flow (`flow`, `state`, `step`, `prompt`, `data`, `reminded`, ...), None if none ran."""


class Placed(BaseModel):
    """A send that was taken: placed (its turn's id and parent known before the model answers), or
    `queued`: no worker took it within seconds, so it is kept and runs once one does (send it again
    with the same `request_id`, with `wait`, for its outcome; that makes no second turn)."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "turn": "0199a1b2-0000-7000-8000-000000000002",
                    "parent": None,
                    "request_id": "q-1",
                    "state": "placed",
                },
                {"turn": None, "parent": None, "request_id": "q-2", "state": "queued"},
            ]
        }
    )

    turn: str | None
    parent: str | None
    request_id: str
    state: Literal["placed", "queued"] = "placed"


class History(BaseModel):
    """The head's branch as the model sees it: summary, key facts, counts, topics, recent turns."""

    turns: int
    total: int
    head: str | None = None
    """The head turn: the branch's tip."""
    done_turns: int = 0
    """Turns of the branch that ended `done` (the ones a rule can show)."""
    summary: str | None = None
    facts: list[str] = []
    summarised_turns: int = 0
    verbatim_turns: int = 0
    topics: list[dict[str, Any]] = []
    recent: list[dict[str, Any]]
    key_facts: list[str] = []
    """The article's name for `facts`."""
    recent_turn_count: int = 0
    """The article's name for `verbatim_turns`: turns shown whole."""
    original_turn_count: int = 0
    """The article's name for `turns`: every turn of the branch, summarised or not."""


class Stopping(BaseModel):
    """A stop was sent: running turns end `stopped`, waiting ones are abandoned, queued sends dropped."""

    turn: str | None
    requested: bool = True


class Head(BaseModel):
    """Where the head now is."""

    head: str


class Removed(BaseModel):
    """What a purge removed from the store: records, turns' streams, call-log lines."""

    records: int
    streams: int
    calls: int


class Closed(BaseModel):
    """The conversation's workflow is closed; its records stay and a new turn reopens it."""

    conversation: str
    closed: bool = True
    records_kept: bool = True
    was_open: bool
    forced: bool = False
    """No worker ran, so the open run was terminated rather than closed by the workflow."""
    answered: int = 0
    """Queued sends answered `conversation-closed`."""
    schedules: int = 0
    """Its schedules, deleted with it."""
    removed: Removed | None = None
    """What a purge (`?purge=true`) removed; left out when the records are kept."""
    status: str = "deleted"
    """The article's answer; unless purged, the records are kept all the same (`records_kept`)."""


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
