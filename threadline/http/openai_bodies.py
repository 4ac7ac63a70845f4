"""Bodies of the OpenAI Conversations and Responses protocol (`/openai/v1`), as the official client sends
and reads them. Requests are strict (see `bodies.RequestBody`): a field this service does not map
answers 400 naming it, so nothing is silently ignored. docs/openai.md maps every field.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from core.models import Sends

from .bodies import RequestBody

_TURN = "0199a1b2-0000-7000-8000-000000000001"
_RESPONSE = f"{_TURN}~alex"
Metadata = Annotated[dict[str, Annotated[str, Field(max_length=512)]], Field(max_length=16)]
"""The protocol's metadata: at most 16 keys, each value a string of at most 512 characters."""


class TextPart(RequestBody):
    """A text part of a message's content."""

    type: Literal["input_text", "output_text", "text"] = "input_text"
    text: str


class InputMessage(RequestBody):
    """A message item: its text as a string or as text parts."""

    type: Literal["message"] = "message"
    role: Literal["user", "assistant", "system", "developer"]
    content: str | list[TextPart]
    id: str | None = None
    status: str | None = None

    @property
    def text(self) -> str:
        """The message's text, its parts joined."""
        return self.content if isinstance(self.content, str) else "".join(p.text for p in self.content)


Items = Annotated[list[InputMessage], Field(max_length=20)]


class CallItem(RequestBody):
    """A function call or its output, as the client sends them back in `input`: outputs answer the calls
    a response waits for (given to its turn when it resumes); a call is one the response made."""

    type: Literal["function_call", "function_call_output"]
    call_id: str
    output: str | list[dict[str, Any]] | None = None
    name: str | None = None
    arguments: str | None = None
    id: str | None = None
    status: str | None = None


ResponseItems = Annotated[list[InputMessage | CallItem], Field(max_length=64)]


class FunctionTool(RequestBody):
    """A function the caller runs itself: offered to the model; a call of it waits for the caller's output."""

    type: Literal["function"]
    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    description: str | None = Field(default=None, max_length=4000)
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class CreateConversation(RequestBody):
    """A new conversation, with messages to record first (no model call) and metadata."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {"items": [{"role": "user", "content": "Hi, I'm Alex."}], "metadata": {"topic": "fractions"}},
                {"metadata": {"user": "u-42"}, "sends": "refuse"},
            ]
        }
    )

    items: Items | None = None
    metadata: Metadata | None = None
    sends: Sends | None = None
    """Extension: what a send does while another turn runs (`queue`, `refuse`, `branch`); default `queue`."""


class UpdateConversation(RequestBody):
    """New metadata for a conversation (it replaces the old)."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"metadata": {"topic": "geometry"}}]})

    metadata: Metadata


class CreateItems(RequestBody):
    """Messages recorded after the head without a model call: each user message and the assistant
    message after it are one turn."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "items": [
                        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hello"}]},
                        {"type": "message", "role": "assistant", "content": "Hi! How can I help?"},
                    ]
                }
            ]
        }
    )

    items: Annotated[list[InputMessage], Field(min_length=1, max_length=20)]


class ConversationRef(RequestBody):
    """A conversation named by an object, as the client may send it."""

    id: str


class CreateResponse(RequestBody):
    """A response: one turn of a conversation."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {"model": "offline", "input": "What is 1/2 + 1/3?", "conversation": "alex"},
                {"input": "And 1/4?", "previous_response_id": _RESPONSE, "stream": True},
                {"input": [{"role": "user", "content": "Hi"}], "instructions": "Be brief.", "background": True},
                {
                    "input": "Weather in Paris?",
                    "conversation": "alex",
                    "tools": [
                        {
                            "type": "function",
                            "name": "get_weather",
                            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
                        }
                    ],
                },
                {
                    "previous_response_id": _RESPONSE,
                    "input": [{"type": "function_call_output", "call_id": "call_1", "output": "Sunny, 21 C"}],
                },
            ]
        }
    )

    model: str | None = None
    input: str | ResponseItems | None = None
    instructions: str | None = None
    conversation: str | ConversationRef | None = None
    previous_response_id: str | None = None
    metadata: Metadata | None = None
    stream: bool | None = None
    background: bool | None = None
    store: bool | None = None
    tools: Annotated[list[FunctionTool], Field(max_length=64)] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    temperature: float | None = None
    top_p: float | None = None
    max_output_tokens: int | None = None
    truncation: Literal["auto", "disabled"] | None = None
    user: str | None = None
    sends: Sends | None = None
    """Extension: this send's policy while another turn runs (default: the conversation's)."""


class ConversationObject(BaseModel):
    """A conversation as the protocol shows it."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [{"id": "alex", "object": "conversation", "created_at": 1764547200, "metadata": {}}]
        }
    )

    id: str
    object: Literal["conversation"] = "conversation"
    created_at: int
    metadata: dict[str, str] = {}


class ConversationDeleted(BaseModel):
    """A deleted conversation: the protocol no longer shows it; its records are kept."""

    model_config = ConfigDict(
        json_schema_extra={"examples": [{"id": "alex", "object": "conversation.deleted", "deleted": True}]}
    )

    id: str
    object: Literal["conversation.deleted"] = "conversation.deleted"
    deleted: bool = True


_ITEM: dict[str, Any] = {
    "id": f"msg-out-{_TURN}",
    "type": "message",
    "role": "assistant",
    "status": "completed",
    "content": [{"type": "output_text", "text": "5/6", "annotations": []}],
}


class ItemList(BaseModel):
    """A page of a conversation's items."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {"object": "list", "data": [_ITEM], "first_id": _ITEM["id"], "last_id": _ITEM["id"], "has_more": False}
            ]
        }
    )

    object: Literal["list"] = "list"
    data: list[dict[str, Any]]
    first_id: str | None = None
    last_id: str | None = None
    has_more: bool = False


class ResponseObject(BaseModel):
    """A response: a turn, its answer as output items, its usage as recorded."""

    model_config = ConfigDict(
        extra="allow",
        json_schema_extra={
            "examples": [
                {
                    "id": _RESPONSE,
                    "object": "response",
                    "created_at": 1764547200,
                    "status": "completed",
                    "model": "offline",
                    "output": [_ITEM],
                    "conversation": {"id": "alex"},
                    "usage": {"input_tokens": 12, "output_tokens": 3, "total_tokens": 15},
                }
            ]
        },
    )

    id: str
    object: Literal["response"] = "response"
    created_at: float
    status: str
    model: str
    output: list[dict[str, Any]]


class ProtocolError(BaseModel):
    """An error of the protocol."""

    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ProtocolErrorBody(BaseModel):
    """Every error answer of the protocol."""

    error: ProtocolError
