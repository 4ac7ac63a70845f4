"""The conversation service of the article "Multi-turn Conversation Design: Building Natural Dialogue
Systems with LLMs" (dataa.dev), on the same core; docs/http.md, "The article's service", says which
of its parts live where.

The article ends with a FastAPI service over its conversation manager; these are its routes:
messages routed to an active guided flow first (its `process_message`), starting, reading and
stopping flows (its `FlowManager`, over flows built with its `FlowBuilder`: `store.flows`), importing
a transcript without a model call (its `add_user_message` and `add_assistant_message`), and listing
conversations from Temporal visibility (its `list_active`). Creating a conversation with a system
prompt and metadata, reading it and its history, deleting it and `/health` are the native routes
(`routes`), which answer the article's keys too. Thin adapters over the Python API, like `routes`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query, Request, Security
from fastapi.security import HTTPBearer

from threadline.client import Conversation
from threadline.listing import MAX_LIMIT, ListedState
from threadline.transcript import program_of, user_count

from . import article_bodies as a
from . import bodies as m
from .routes import Known, _allow, _log, _tl

router = APIRouter(
    prefix="/v1/conversations",
    tags=["the article's service"],
    responses={"4XX": {"model": m.ErrorBody}},
    dependencies=[Security(HTTPBearer(auto_error=False))],
)


async def _as_recorded(chat: Conversation) -> Conversation:
    """A handle with the conversation's own program (its setup's, else its newest turn's)."""
    program = program_of(await _log(chat))
    return chat.tl.conversation(program, chat.id, store=chat.config.store)


@router.get("")
async def list_conversations(
    request: Request,
    store: str = "default",
    program: str | None = None,
    state: ListedState | None = None,
    updated_after: datetime | None = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = 100,
    cursor: str | None = None,
) -> a.ConversationList:
    """Conversations from Temporal visibility (the article's `list_active(max_age_hours)` is
    `?state=idle&updated_after=<now - hours>`), newest runs first; `cursor` gives the next page."""
    _allow(request, store)
    page = await _tl(request).conversations(
        store=store, program=program, state=state, updated_after=updated_after, limit=limit, cursor=cursor
    )
    return a.ConversationList(conversations=[c.as_dict() for c in page.conversations], cursor=page.cursor)


@router.post("/{conversation_id}/messages")
async def send_message(chat: Known, body: a.MessageRequest) -> a.MessageReply:
    """Send a message and wait for the reply: the active flow takes it first (its next prompt, a
    re-prompt, or its closing words with `flow_data`), else the conversation's program answers it."""
    mine = await _as_recorded(chat)
    reply = await mine.message(body.message, request_id=body.request_id, lm=body.lm, metadata=body.metadata)
    request_id = reply.outcome.request_id if reply.outcome else ""
    return a.MessageReply(
        response=reply.response,
        turn_count=reply.turn_count,
        in_flow=reply.in_flow,
        flow_completed=reply.flow_completed,
        flow_data=reply.flow_data,
        turn=reply.turn,
        request_id=request_id,
    )


@router.post("/{conversation_id}/flows", responses={400: {"model": m.ErrorBody}})
async def start_flow(chat: Known, body: a.FlowStartRequest) -> a.FlowStarted:
    """Start a guided flow (400 `flow-unknown` for a flow the worker does not have); its first prompt
    is the answer. Messages then go to the flow until it completes, is abandoned or is stopped."""
    mine = await _as_recorded(chat)
    reply = await mine.start_flow(body.flow_name, body.message, request_id=body.request_id)
    request_id = reply.outcome.request_id if reply.outcome else ""
    return a.FlowStarted(
        flow_started=body.flow_name,
        prompt=str(reply.response),
        flow=body.flow_name,
        turn=reply.turn,
        request_id=request_id,
    )


@router.get("/{conversation_id}/flows")
async def get_flow(chat: Known) -> a.FlowState:
    """Where the latest guided flow stands (its step, what it said last, a reminder, what it collected),
    and what every flow of the conversation counted."""
    return a.FlowState(**(await chat.flow()).as_dict())


@router.post("/{conversation_id}/flows/stop", status_code=202)
async def stop_flow(chat: Known) -> a.FlowStopped:
    """Stop the active guided flow: it is abandoned (`stopped`), and messages go to the program again."""
    await chat.stop_flow()
    return a.FlowStopped()


@router.post("/{conversation_id}/transcript", status_code=201)
async def import_transcript(chat: Known, body: a.TranscriptRequest) -> a.Imported:
    """Record messages without a model call (importing an existing transcript): each user message and
    the assistant message after it become one done turn, after the head (409 while a turn runs)."""
    mine = await _as_recorded(chat)
    messages = [{"role": msg.role, "content": msg.content} for msg in body.messages]
    turns = await mine.add_messages(messages, request_id=body.request_id)
    log = await _log(mine)
    return a.Imported(turns=turns, turn_count=user_count(log, turns[-1] if turns else log.head))
