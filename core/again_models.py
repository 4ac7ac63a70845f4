"""Wire models of asking a turn again (`ask_again`): the exact request a turn sent, sent once more.

The answer is returned, never recorded: a caller who wants it kept sends the turn's inputs again as a
branch beside it (`threadline.acting.LiveTurn.ask_again(record=True)`).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from .models import ConversationConfig, Model


class AskAgain(Model):
    """The `ask_again` update: ask a turn's model again with the request the turn sent."""

    turn: str
    """The turn to ask again (one that asked a model: not a merge's, an import's, or a program with code's)."""
    lm: str | None = None
    """Another model to ask (None: the model the turn asked)."""


class AskedAgain(Model):
    """What the model answered this time; nothing of it is recorded."""

    turn: str
    """The turn asked again."""
    model: str
    """The model asked (`provider:name`)."""
    outputs: dict[str, Any] = Field(default_factory=dict)
    """The outputs by name, as the turn's program reads them."""
    result: Any = None
    """The answer (the program's last output)."""
    request: dict[str, Any] | None = None
    """The provider's JSON body, as sent (the turn's own, with another model when `lm` names one)."""
    branch: str | None = None
    """With `record` (the Python API, the CLI and HTTP): the turn recorded beside it, whose answer this is."""


class AskAgainInput(Model):
    """The activity's input: the conversation and what to ask again."""

    config: ConversationConfig
    ask: AskAgain
