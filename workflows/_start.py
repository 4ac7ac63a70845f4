"""A run's start for a starter that is not Threadline's Python client: the worker's defaults for what
it left out of the config (`core.starting`), and the search attributes it did not set, so the
conversation is listed like any other. Deterministic: what the worker knows arrives as an activity's
result, what the starter set is in the run's info."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from temporalio import workflow
from temporalio.common import SearchAttributeKey, SearchAttributeUpdate
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from activities.starting import StartActivities
    from core.models import ConversationConfig, ConversationRef
    from core.starting import unlearned

    from . import _calls
    from ._patches import since
    from .attributes import CONVERSATION_KEY, PROGRAM_KEY, STORE_KEY, UPDATED_KEY

SELF_LISTED = "lists-itself"
"""Runs from before it kept the config as started, and unlisted when started without attributes."""


async def settle(config: ConversationConfig) -> ConversationConfig:
    """`config` with the worker's defaults for the fields its starter left out; the conversation's own
    search attributes upserted when the namespace has them and the starter did not set them."""
    if not (unlearned(config) or _unlisted(config)) or not since(SELF_LISTED):
        return config
    if unlearned(config):
        ref = ConversationRef(store=config.store, conversation=config.conversation, store_id=config.store_id)
        try:
            defaults = await _calls.quick(StartActivities.worker_defaults, ref, summary="worker defaults")
        except ApplicationError as err:  # the run goes on with the model's defaults
            workflow.logger.warning("asking the worker's defaults failed", extra={"code": err.type})
        else:
            config = defaults.fill(config)
    if _unlisted(config):
        workflow.upsert_search_attributes(_identity(config, workflow.now()))
    return config


def _unlisted(config: ConversationConfig) -> bool:
    return config.search_attributes and workflow.info().typed_search_attributes.get(CONVERSATION_KEY) is None


def _identity(config: ConversationConfig, now: datetime) -> list[SearchAttributeUpdate[Any]]:
    pairs: list[tuple[SearchAttributeKey[Any], Any]] = [
        (CONVERSATION_KEY, config.conversation),
        (STORE_KEY, config.store),
        (PROGRAM_KEY, config.program),
        (UPDATED_KEY, now),
    ]
    return [key.value_set(value) for key, value in pairs]
