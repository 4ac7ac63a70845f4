"""The search attributes a conversation workflow keeps: small, never content (they are not encrypted)."""

from __future__ import annotations

from typing import Any

from temporalio.common import SearchAttributeKey

CONVERSATION_KEY = SearchAttributeKey.for_keyword("ThreadlineConversation")
STORE_KEY = SearchAttributeKey.for_keyword("ThreadlineStore")
PROGRAM_KEY = SearchAttributeKey.for_keyword("ThreadlineProgram")
STATE_KEY = SearchAttributeKey.for_keyword("ThreadlineState")
TURNS_KEY = SearchAttributeKey.for_int("ThreadlineTurns")
UPDATED_KEY = SearchAttributeKey.for_datetime("ThreadlineUpdated")
"""When the conversation last did something (a turn ended): what listings filter `updated_after` on."""
FLOW_KEY = SearchAttributeKey.for_keyword("ThreadlineFlow")
"""The conversation's latest guided flow, by name."""
FLOW_STATE_KEY = SearchAttributeKey.for_keyword("ThreadlineFlowState")
"""Where that flow stands: `active`, `completed`, `abandoned` or `handed_off`."""

SEARCH_ATTRIBUTE_KEYS: tuple[SearchAttributeKey[Any], ...] = (
    CONVERSATION_KEY,
    STORE_KEY,
    PROGRAM_KEY,
    STATE_KEY,
    TURNS_KEY,
    UPDATED_KEY,
    FLOW_KEY,
    FLOW_STATE_KEY,
)
