"""Removing a conversation for good (`chat.purge()`, `DELETE /v1/conversations/{id}?purge=true`).

The format's contract keeps every record (a branch, never a deletion); the article's service
deletes. A close keeps the records; a purge is the deletion, asked for by name: the workflow is
closed and its run waited for, then the call-log lines of its turns, their streams and last its
records go, so a purge that fails part-way can be asked again (the records still name the turns).
The id can then be used again: a new conversation, its turns numbered from 1. What stays: the
claim check's payloads (shared by content with any conversation that sent the same bytes) and the
closed runs' Temporal histories, until the namespace's retention removes them (docs/http.md).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Protocol

from core.errors import ErrorCode, ThreadlineError
from core.settings import Settings
from store.backends.opening import StoreSet
from store.backends.reader import ConversationLog, LogCache, Purging, now
from store.calls.log import store_call_log

from .closing import Closing, close
from .delivery import Delivery

ENDED_WAIT_S = 60.0
"""How long a purge waits for the closed run to end before it gives up (`server-unavailable`)."""
_LIVE = frozenset({"running", "waiting"})


class Owner(Protocol):
    """What a purge uses of the connection (`client.Threadline`): its settings, stores and cached logs."""

    settings: Settings
    stores: StoreSet
    logs: LogCache


@dataclass(frozen=True, slots=True)
class Purged:
    """What a purge removed: how the close went, then how many records, streams and call-log lines."""

    closing: Closing
    records: int
    streams: int
    calls: int


async def purge(tl: Owner, delivery: Delivery, log: ConversationLog, *, force: bool = False) -> Purged:
    """Close the conversation, wait for its run to end, and remove everything the store keeps of it.

    Raises:
        ThreadlineError: `conversation-running` when a turn runs or waits (and not `force`);
            `conversation-not-found` when there is nothing to remove; `store-kind` for a store object
            that cannot remove a conversation.
    """
    store = log.store
    if not isinstance(store, Purging):
        raise ThreadlineError(ErrorCode.STORE_KIND, f"store {delivery.config.store!r} cannot remove a conversation")
    held = await log.read()
    live = [tid for tid, state in held.states(now()).items() if state in _LIVE]
    if live and not force:
        message = (
            f"turn {live[0]} of conversation {delivery.id} is {held.turns[live[0]].state(now())}: "
            "stop it first, or purge with force"
        )
        raise ThreadlineError(ErrorCode.CONVERSATION_RUNNING, message, turn=live[0])
    closing = await close(delivery, held)
    await _ended(delivery)
    turns = sorted((await log.read()).turns)  # with the records the close added
    calls, streams = await asyncio.to_thread(_remove_beside, tl, delivery.config.store, turns)
    records = await store.purge(delivery.id)
    tl.logs.forget(delivery.config.store, delivery.id)
    return Purged(closing=closing, records=records, streams=streams, calls=calls)


async def _ended(delivery: Delivery) -> None:
    """Wait until the conversation's workflow runs no more (a closed run may still finish its turns)."""
    deadline, pause = time.monotonic() + ENDED_WAIT_S, 0.05
    while await delivery.is_open():
        if time.monotonic() > deadline:
            message = f"the workflow of conversation {delivery.id} did not end in time; nothing was removed, ask again"
            raise ThreadlineError(ErrorCode.SERVER_UNAVAILABLE, message, retryable=True)
        await asyncio.sleep(pause)
        pause = min(pause * 2, 1.0)


def _remove_beside(tl: Owner, name: str, turns: list[str]) -> tuple[int, int]:
    """Remove the call-log lines and the streams of `turns` in store `name` (blocking); return how many of each."""
    calls = store_call_log(tl.settings, tl.stores, name)
    streams = tl.stores.streams.get(name)
    return (
        calls.remove(turns) if calls is not None and turns else 0,
        streams.remove(turns) if streams is not None and turns else 0,
    )


__all__ = ["Purged", "purge"]
