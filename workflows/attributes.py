"""The search attributes a conversation workflow keeps: small, never content (they are not encrypted)."""

from __future__ import annotations

from typing import Any

from temporalio.common import SearchAttributeKey

CONVERSATION_KEY = SearchAttributeKey.for_keyword("ThreadlineConversation")
STORE_KEY = SearchAttributeKey.for_keyword("ThreadlineStore")
PROGRAM_KEY = SearchAttributeKey.for_keyword("ThreadlineProgram")
STATE_KEY = SearchAttributeKey.for_keyword("ThreadlineState")
TURNS_KEY = SearchAttributeKey.for_int("ThreadlineTurns")

SEARCH_ATTRIBUTE_KEYS: tuple[SearchAttributeKey[Any], ...] = (
    CONVERSATION_KEY,
    STORE_KEY,
    PROGRAM_KEY,
    STATE_KEY,
    TURNS_KEY,
)
