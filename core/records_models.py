"""Wire models of what a conversation records besides its turns' model calls: its setup (a system
prompt and metadata, `store.log.preamble`) and messages imported without a model call (`store.log.imports`).

Each travels as an update of the conversation's workflow, which hands it with the conversation's
config to an activity; each carries a request id, so a retry records nothing again.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from .models import ConversationConfig, Model

MAX_SYSTEM_PROMPT = 64 * 1024
"""The longest system prompt, in characters (it is shown to every turn)."""


class SetupSend(Model):
    """The `setup` update: the conversation's system prompt and metadata, shown to every later turn."""

    request_id: str
    system_prompt: str | None = Field(default=None, max_length=MAX_SYSTEM_PROMPT)
    metadata: dict[str, Any] = Field(default_factory=dict)


class SetupInput(Model):
    """Record a conversation's setup (an `entry`)."""

    config: ConversationConfig
    setup: SetupSend


class SetupResult(Model):
    """When the setup was recorded, and whether an earlier call with its request id already had."""

    created_at: str
    existing: bool = False


class ImportedMessage(Model):
    """One message of a transcript: who said it and what."""

    role: Literal["user", "assistant"]
    content: str


class ImportSend(Model):
    """The `append` update: messages recorded as done turns without a model call."""

    request_id: str
    messages: list[ImportedMessage]


class ImportInput(Model):
    """Record imported messages as turns of the conversation's program."""

    config: ConversationConfig
    send: ImportSend


class ImportResult(Model):
    """The turns the messages became, in order."""

    turns: list[str]
    existing: bool = False
