"""The OpenAI Conversations protocol under `/openai/v1/conversations`, over Threadline conversations.

    POST   /conversations                 {items, metadata}: a conversation (its messages recorded, no model call)
    GET    /conversations/{id}            POST /conversations/{id} {metadata}      DELETE /conversations/{id}
    GET    /conversations/{id}/items      the branch to the head as items (after, limit, order)
    POST   /conversations/{id}/items      {items}: messages recorded after the head (no model call)

Thin adapters over the Python API, like the native routes; `openai_items` says how turns are items.
"""

from __future__ import annotations

from typing import Annotated, Literal, get_args

from fastapi import APIRouter, Query, Request, Security
from fastapi.security import HTTPBearer

from core.errors import ErrorCode, ThreadlineError
from core.models import Sends
from store.backends.reader import now
from store.log.state import Log
from threadline.client import Conversation, Threadline
from threadline.reading import to_turn
from threadline.transcript import DEFAULT_PROGRAM, program_of

from . import openai_bodies as o
from . import openai_items as items
from .middleware import APIKey
from .openai_errors import PREFIX, bad_request

SENDS: frozenset[str] = frozenset(get_args(Sends))

router = APIRouter(
    prefix=f"{PREFIX}/conversations",
    tags=["OpenAI protocol"],
    responses={"4XX": {"model": o.ProtocolErrorBody}},
    dependencies=[Security(HTTPBearer(auto_error=False))],
)


def store_of(request: Request) -> str:
    """The store the caller's key reaches: its only store when it is scoped to one, else `default`."""
    key: APIKey | None = getattr(request.state, "key", None)
    if key is not None and key.stores is not None and len(key.stores) == 1:
        return next(iter(key.stores))
    if key is not None and not key.allows("default"):
        raise ThreadlineError(
            ErrorCode.FORBIDDEN, "this API key may not use store 'default'; use a key scoped to one store"
        )
    return "default"


def connection(request: Request) -> Threadline:
    """The service's connection."""
    tl: Threadline = request.app.state.tl
    return tl


async def read_log(request: Request, conversation: str) -> Log:
    """The conversation's log, brought up to date."""
    return await connection(request).log(store_of(request), conversation).read()


async def existing(request: Request, conversation: str, *, sends: Sends | None = None) -> tuple[Conversation, Log]:
    """A handle on `conversation` with its own program, and its log.

    Raises:
        ThreadlineError: `conversation-not-found` (404) when it has no records or was deleted here.
    """
    log = await read_log(request, conversation)
    if not log.n or items.protocol_entry(log, "conversation").get("deleted"):
        raise ThreadlineError(
            ErrorCode.CONVERSATION_NOT_FOUND, f"no conversation has id {conversation!r}", param="conversation_id"
        )
    own = items.protocol_entry(log, "conversation").get("sends")
    chosen: Sends = sends or (own if own in SENDS else "queue")
    return connection(request).conversation(program_of(log), conversation, store=store_of(request), sends=chosen), log


def conversation_object(conversation: str, log: Log) -> o.ConversationObject:
    """The conversation as the protocol shows it."""
    metadata = items.protocol_entry(log, "conversation").get("metadata") or {}
    return o.ConversationObject(id=conversation, created_at=items.created_at(log), metadata=metadata)


def messages(given: list[o.InputMessage]) -> list[dict[str, str]]:
    """Items to record as `{"role", "content"}` messages (user and assistant only)."""
    out = []
    for i, item in enumerate(given):
        if item.role not in ("user", "assistant"):
            raise bad_request(f"items[{i}] is a {item.role} message: give instructions with responses.create", "items")
        out.append({"role": item.role, "content": item.text})
    return out


@router.post("")
async def create_conversation(request: Request, body: o.CreateConversation) -> o.ConversationObject:
    """A new conversation (a Threadline conversation of the general `chat` program); `items` are
    recorded as turns without a model call, `metadata` beside them."""
    imported = messages(body.items or [])
    chat = connection(request).conversation(DEFAULT_PROGRAM, store=store_of(request), sends=body.sends or "queue")
    log = connection(request).log(chat.config.store, chat.id)
    await log.append([items.conversation_record(dict(body.metadata or {}), body.sends)])
    if imported:
        await chat.add_messages(imported)
    return conversation_object(chat.id, await log.read())


@router.get("/{conversation_id}")
async def get_conversation(request: Request, conversation_id: str) -> o.ConversationObject:
    """The conversation: its id, when it was created, its metadata."""
    _, log = await existing(request, conversation_id)
    return conversation_object(conversation_id, log)


@router.post("/{conversation_id}")
async def update_conversation(
    request: Request, conversation_id: str, body: o.UpdateConversation
) -> o.ConversationObject:
    """Replace the conversation's metadata."""
    chat, log = await existing(request, conversation_id)
    sends = items.protocol_entry(log, "conversation").get("sends")
    handle = connection(request).log(chat.config.store, chat.id)
    await handle.append([items.conversation_record(dict(body.metadata), sends)])
    return conversation_object(conversation_id, await handle.read())


@router.delete("/{conversation_id}")
async def delete_conversation(request: Request, conversation_id: str) -> o.ConversationDeleted:
    """Delete the conversation from the protocol's view: its workflow is closed and the protocol answers
    404 for it since; its records are kept (the Python API, the CLI and functai still read them)."""
    chat, log = await existing(request, conversation_id)
    entry = items.protocol_entry(log, "conversation")
    record = items.conversation_record(dict(entry.get("metadata") or {}), entry.get("sends"), deleted=True)
    await connection(request).log(chat.config.store, chat.id).append([record])
    if log.order:
        await chat.close()
    return o.ConversationDeleted(id=conversation_id)


@router.get("/{conversation_id}/items")
async def list_items(
    request: Request,
    conversation_id: str,
    after: str | None = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
    order: Literal["asc", "desc"] = "desc",
) -> o.ItemList:
    """The branch from the first turn to the head as items: each turn's input, then its answer."""
    _, log = await existing(request, conversation_id)
    moment = now()
    found = [item for turn in log.branch(log.head) for item in items.turn_items(to_turn(log, turn, moment))]
    chosen, more = items.page(found, after, limit, order)
    first, last = (chosen[0]["id"], chosen[-1]["id"]) if chosen else (None, None)
    return o.ItemList(data=chosen, first_id=first, last_id=last, has_more=more)


@router.post("/{conversation_id}/items")
async def create_items(request: Request, conversation_id: str, body: o.CreateItems) -> o.ItemList:
    """Record messages after the head without a model call (409 while a turn runs); answer their items."""
    chat, _ = await existing(request, conversation_id)
    turns = await chat.add_messages(messages(body.items))
    log, moment = await read_log(request, conversation_id), now()
    made = [item for tid in turns for item in items.turn_items(to_turn(log, log.turns[tid], moment))]
    first, last = (made[0]["id"], made[-1]["id"]) if made else (None, None)
    return o.ItemList(data=made, first_id=first, last_id=last)
