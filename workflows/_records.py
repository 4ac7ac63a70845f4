"""A conversation's own records that no model call makes: its setup and imported messages.

Each is one store step (a local activity, see `_calls`) asked by an update of the workflow; a
refusal fails the update with its code.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from activities.conversations import ConversationActivities
    from core.models import ConversationConfig
    from core.records_models import ImportInput, ImportResult, ImportSend, SetupInput, SetupResult, SetupSend

    from . import _calls


async def set_up(config: ConversationConfig, setup: SetupSend) -> SetupResult:
    """Record the conversation's system prompt and metadata, shown to every later turn."""
    return await _calls.quick(ConversationActivities.setup_conversation, SetupInput(config=config, setup=setup))


async def import_messages(config: ConversationConfig, send: ImportSend) -> ImportResult:
    """Record messages as done turns after the head, without a model call."""
    step = ConversationActivities.import_messages
    return await _calls.quick(step, ImportInput(config=config, send=send), summary=f"import {len(send.messages)}")
