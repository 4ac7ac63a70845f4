"""Bodies of the conversation service of the article "Multi-turn Conversation Design: Building Natural
Dialogue Systems with LLMs" (dataa.dev; the routes are `article`'s): a message routed to a flow first
and its reply with the article's keys (`response`, `turn_count`, `in_flow`, `flow_completed`,
`flow_data`), starting a flow (`flow_name`) and reading or stopping it, importing a transcript (the
article's `messages` of `role` and `content`), and listing conversations. Requests are strict (see
`bodies.RequestBody`)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from .bodies import RequestBody

_TURN = "0199a1b2-0000-7000-8000-000000000007"


class MessageRequest(RequestBody):
    """A message: the active guided flow takes it first, else the conversation's program answers it."""

    model_config = ConfigDict(
        json_schema_extra={"examples": [{"message": "3"}, {"message": "Hi!", "request_id": "m-1"}]}
    )

    message: str
    request_id: str | None = None
    """An idempotency key: sending the same one again is the same message, answered the same way."""
    lm: str | None = None
    """The model for this message (and for a flow step's AI check)."""
    metadata: dict[str, Any] = Field(default_factory=dict)
    """The message's own metadata: kept with its turn, returned with the message (`GET .../{id}`)."""


class MessageReply(BaseModel):
    """The reply, with the article's keys."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "response": "What's your email address for the confirmation?",
                    "turn_count": 4,
                    "in_flow": True,
                    "flow_completed": False,
                    "flow_data": None,
                    "turn": _TURN,
                    "request_id": "m-1",
                }
            ]
        }
    )

    response: Any
    """The flow's words (a prompt, a re-prompt, its closing words), else the program's answer."""
    turn_count: int
    """Turns on the branch, from the first to this one."""
    in_flow: bool
    flow_completed: bool
    flow_data: dict[str, Any] | None = None
    """Everything the flow collected, once: on the reply that completed it (or handed it to a person)."""
    turn: str | None
    request_id: str


class FlowStartRequest(RequestBody):
    """Start a guided flow by name (a flow still active is abandoned first)."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"flow_name": "order"}]})

    flow_name: str
    message: str = ""
    """What started it (recorded as the input of the turn whose answer is the first prompt)."""
    request_id: str | None = None


class FlowStarted(BaseModel):
    """The flow started: its first prompt."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {"flow_started": "order", "prompt": "Welcome! What product would you like to order?", "flow": "order"}
            ]
        }
    )

    flow_started: str
    """The flow's name, as the article answers it."""
    prompt: str
    flow: str
    turn: str | None = None
    request_id: str = ""


class FlowState(BaseModel):
    """Where the conversation's latest guided flow stands, as its record log says."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "flow": "order",
                    "state": "active",
                    "step": "email",
                    "prompt": "Please enter a valid email address.",
                    "data": {"welcome": "Two pizzas, please.", "quantity": 3},
                    "reminded": False,
                    "attempts": 1,
                    "run": _TURN,
                    "counts": {"order": {"started": 1, "completed": 0, "abandoned": 0, "handed_off": 0, "invalid": {}}},
                }
            ]
        }
    )

    flow: str | None = None
    state: str | None = None
    """`active`, `completed`, `abandoned` or `handed_off`; null when no flow ever ran."""
    step: str | None = None
    prompt: str | None = None
    """The latest thing it said: its prompt, a re-prompt, a reminder, its closing words."""
    data: dict[str, Any] = {}
    reminded: bool = False
    """Whether its prompt was sent again (a reminder) since the last answer."""
    attempts: int = 0
    run: str | None = None
    counts: dict[str, dict[str, Any]] = {}
    """Starts, completions, abandonments, hand-offs and invalid answers by step, per flow."""


class FlowStopped(BaseModel):
    """A stop was sent: the active flow is abandoned (`stopped`) and the conversation goes on freely."""

    requested: bool = True


class TranscriptMessage(RequestBody):
    """One message of an existing transcript."""

    role: Literal["user", "assistant"]
    content: str


class TranscriptRequest(RequestBody):
    """Messages recorded without a model call: each user message and the assistant message after it are one turn."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "messages": [
                        {"role": "user", "content": "Hi, I'm Alex."},
                        {"role": "assistant", "content": "Hello Alex! How can I help?"},
                    ],
                    "request_id": "import-1",
                }
            ]
        }
    )

    messages: list[TranscriptMessage] = Field(min_length=1, max_length=1000)
    request_id: str | None = None


class Imported(BaseModel):
    """The turns the messages became, in order."""

    turns: list[str]
    turn_count: int


class ConversationList(BaseModel):
    """A page of conversations from Temporal visibility, and the cursor of the next (null: the last)."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "conversations": [
                        {
                            "conversation": "alex",
                            "store": "default",
                            "program": "chat",
                            "state": "idle",
                            "turns": 4,
                            "started_at": "2026-01-31T12:00:00.000000Z",
                            "updated_at": "2026-01-31T12:03:10.000000Z",
                            "flow": "order",
                            "flow_state": "completed",
                            "workflow_id": "conversation/default/alex",
                        }
                    ],
                    "cursor": None,
                }
            ]
        }
    )

    conversations: list[dict[str, Any]]
    cursor: str | None
