"""The HTTP routes of a conversation's settings that may change while it runs (`threadline.configuring`).

    GET   /v1/conversations/{id}/settings
    PATCH /v1/conversations/{id}/settings   {"budget": {"tokens": N, "cost": X} | {} | null}

A change holds from the conversation's next turn on, over the budget each send carries.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Security
from fastapi.security import HTTPBearer
from pydantic import BaseModel, ConfigDict

from core.models import Budget, ConversationSettings

from . import bodies as m
from .routes import Known

configuring = APIRouter(
    prefix="/v1/conversations",
    tags=["conversations"],
    responses={"4XX": {"model": m.ErrorBody}},
    dependencies=[Security(HTTPBearer(auto_error=False))],
)


class SettingsPatch(m.RequestBody):
    """The settings to change; one left out stays as it is."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"budget": {"tokens": 80000}}, {"budget": None}]})

    budget: m.BudgetRequest | None = None
    """What the conversation may spend in all from its next turn on; `{}` or `null`: no limit."""


class Settings(BaseModel):
    """The settings the conversation's next turns run with."""

    conversation: str
    store: str
    open: bool
    """Whether its workflow runs; when not, its next send starts it with that send's settings."""
    budget: Budget | None = None
    """What the conversation may spend in all (null: no limit of its own; the store's still holds)."""
    configured: list[str] = []
    """The settings changed here since its workflow started: they hold over what each send carries."""


@configuring.get("/{conversation_id}/settings")
async def get_settings(chat: Known) -> Settings:
    """The settings the conversation's next turns run with, as its workflow holds them."""
    return _answer(chat.id, chat.config.store, await chat.settings())


@configuring.patch("/{conversation_id}/settings")
async def change_settings(chat: Known, body: SettingsPatch) -> Settings:
    """Change the settings from the conversation's next turn on (a running turn keeps its own); its
    workflow starts if it was not running. 422 `invalid-request` when it names no setting."""
    given: dict[str, Any] = {}
    if "budget" in body.model_fields_set:
        given["budget"] = body.budget.model_dump(exclude_none=True) if body.budget is not None else {}
    return _answer(chat.id, chat.config.store, await chat.configure(**given))


def _answer(conversation: str, store: str, settings: ConversationSettings | None) -> Settings:
    if settings is None:
        return Settings(conversation=conversation, store=store, open=False)
    return Settings(conversation=conversation, store=store, open=True, **settings.model_dump())
