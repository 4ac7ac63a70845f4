"""The HTTP service's routes: conversations under `/v1/conversations`, and the `/health` and `/ready` probes.

Each route is a thin adapter over the Python API (`threadline.client`); reads go through the
connection's `ConversationLog`s (incremental, off the event loop), so nothing of the transcript
passes through Temporal.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Annotated

from fastapi import APIRouter, Depends, Header, Query, Request, Response, Security
from fastapi.responses import StreamingResponse
from fastapi.security import HTTPBearer
from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from activities.plan import rule_of
from core.errors import ErrorCode, ThreadlineError
from core.models import TurnOutcome, TurnSend
from core.temporal import workflow_id
from store.log import Log
from store.reader import now
from threadline.client import Conversation, Threadline, TurnHandle
from threadline.reading import MAX_PAGE, Turn, history, state_of, to_turn

from . import bodies as m
from .middleware import APIKey

READY_TIMEOUT = timedelta(seconds=2)
"""How long `/ready` waits for Temporal before answering 503."""
_RESERVED_INPUTS = frozenset({"request_id", "lm", "approve"})


# ----- conversations

router = APIRouter(
    prefix="/v1/conversations",
    tags=["conversations"],
    responses={"4XX": {"model": m.ErrorBody}},
    # Enforced by the Auth middleware (before the body is read); declared here so /docs can send a key.
    dependencies=[Security(HTTPBearer(auto_error=False))],
)


def _tl(request: Request) -> Threadline:
    tl: Threadline = request.app.state.tl
    return tl


def _allow(request: Request, store: str) -> None:
    key: APIKey | None = getattr(request.state, "key", None)
    if key is not None and not key.allows(store):
        raise ThreadlineError(ErrorCode.FORBIDDEN, f"this API key may not use store {store!r}; use a key scoped to it")


async def _chat(request: Request, conversation_id: str, store: Annotated[str, Query()] = "default") -> Conversation:
    _allow(request, store)
    return _tl(request).conversation(id=conversation_id, store=store)


Chat = Annotated[Conversation, Depends(_chat)]


async def _log(chat: Conversation) -> Log:
    """The conversation's record log, brought up to date (only what was appended since is parsed)."""
    return await chat.tl.log(chat.config.store, chat.id).read()


@router.post("", status_code=201)
async def create_conversation(request: Request, body: m.CreateConversationRequest) -> m.ConversationHandle:
    """Validate a conversation and return its handle: nothing is started or recorded until its first turn."""
    _allow(request, body.store)
    context = body.context.to_rule() if body.context else None
    chat = _tl(request).conversation(
        body.program, body.id, store=body.store, sends=body.sends, context=context, lm=body.lm
    )
    c = chat.config
    ids = {"conversation": c.conversation, "workflow_id": workflow_id(c.store, c.conversation)}
    return m.ConversationHandle(**ids, store=c.store, program=c.program, sends=c.sends, context=c.context, lm=c.lm)


@router.post("/{conversation_id}/turns", status_code=202, responses={200: {"model": TurnOutcome}})
async def send_turn(chat: Chat, body: m.TurnRequest, response: Response) -> m.Placed | TurnOutcome:
    """Send a turn: 202 once placed (its id known before the model answers), or 200 with its outcome (`wait`)."""
    context = body.context.to_rule() if body.context else None
    chat = chat.tl.conversation(body.program, chat.id, store=chat.config.store, sends=body.sends, context=context)
    placed = await _send(chat.continue_from(body.continue_from) if body.continue_from else chat, body)
    if body.wait:
        response.status_code = 200
        return await chat.outcome(placed.request_id)
    if placed.id is not None:
        response.headers["Location"] = f"/v1/conversations/{chat.id}/turns/{placed.id}?store={chat.config.store}"
    return m.Placed(turn=placed.id, parent=placed.parent, request_id=placed.request_id)


async def _send(chat: Conversation, body: m.TurnRequest) -> TurnHandle:
    if body.message is not None:
        return await chat.send(body.message, request_id=body.request_id, lm=body.lm, approve=body.approve)
    inputs = body.inputs or {}
    if clash := sorted(_RESERVED_INPUTS & inputs.keys()):
        raise ThreadlineError(ErrorCode.INPUTS_INVALID, f"inputs named {', '.join(clash)} cannot be sent over HTTP")
    return await chat.send(request_id=body.request_id, lm=body.lm, approve=body.approve, **inputs)


@router.get("/{conversation_id}")
async def get_conversation(chat: Chat) -> m.ConversationState:
    """What the record log says: the head, how many turns, and whether one is running (`empty` before any)."""
    state = state_of(await _log(chat), now())
    return m.ConversationState(conversation=chat.id, store=chat.config.store, **state)


@router.get("/{conversation_id}/turns")
async def list_turns(
    chat: Chat,
    all: bool = False,
    limit: Annotated[int | None, Query(ge=1, le=MAX_PAGE)] = None,
    after: str | None = None,
    before: str | None = None,
) -> list[Turn]:
    """The turns from the first to the head (`all`: every turn of every branch, in the order they were
    sent); `limit` with `after` or `before` (a turn id of the list) pages through a long one."""
    found: list[Turn] = list(await chat.turns(all, limit=limit, after=after, before=before))
    return found


@router.get("/{conversation_id}/turns/{turn}")
async def get_turn(chat: Chat, turn: str) -> Turn:
    """One turn (404 `turn-unknown` when the log has none)."""
    return await chat.turn(turn)


@router.get("/{conversation_id}/turns/{turn}/events", response_class=StreamingResponse)
async def watch_turn(chat: Chat, turn: str, last_event_id: Annotated[str | None, Header()] = None) -> StreamingResponse:
    """Server-sent events: `text` pieces (`id` is the offset to resume from with Last-Event-ID), `restart`
    when the text so far is void, then `end` with the finished turn."""
    await get_turn(chat, turn)
    offset = last_event_id or "0"
    if not offset.isdigit():
        raise ThreadlineError(ErrorCode.INVALID_REQUEST, "Last-Event-ID must be an offset this stream gave")
    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    return StreamingResponse(_events(chat, turn, int(offset)), media_type="text/event-stream", headers=headers)


async def _events(chat: Conversation, turn: str, offset: int) -> AsyncIterator[str]:
    async for piece in chat.watch(turn, offset=offset):
        name, data = ("restart", {}) if piece.text is None else ("text", {"text": piece.text})
        yield f"event: {name}\nid: {piece.offset}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"
    ended = await get_turn(chat, turn)
    yield f"event: end\ndata: {json.dumps(ended.as_dict(), ensure_ascii=False, default=str)}\n\n"


@router.post("/{conversation_id}/turns/{turn}/stop", status_code=202)
async def stop_turn(chat: Chat, turn: str) -> m.Stopping:
    """Stop one turn: running, it ends `stopped`; waiting or interrupted, it is abandoned."""
    await chat.stop(turn)
    return m.Stopping(turn=turn)


@router.post("/{conversation_id}/stop", status_code=202)
async def stop_all(chat: Chat) -> m.Stopping:
    """Stop every running and queued turn (queued sends are dropped and record nothing)."""
    await chat.stop()
    return m.Stopping(turn=None)


@router.post("/{conversation_id}/head")
async def move_head(chat: Chat, body: m.HeadRequest) -> m.Head:
    """Move the head to a turn: every new send without `continue_from` continues there."""
    await chat.head(body.turn)
    return m.Head(head=body.turn)


@router.get("/{conversation_id}/history")
async def get_history(chat: Chat, recent: Annotated[int, Query(ge=0, le=100)] = 10) -> m.History:
    """The head's branch as the model sees it: the summary and key facts of older turns, how many
    turns are shown verbatim, the branch's and every branch's turn counts, the topics, and its
    `recent` last turns."""
    found, moment = await _log(chat), now()
    branch = found.branch(found.head)
    shown = [to_turn(found, t, moment).as_dict() for t in branch[-recent:]] if recent else []
    view = history(found, found.head, rule_of(chat.config, TurnSend(request_id="history", inputs={})), moment)
    return m.History(
        turns=len(branch),
        total=len(found.order),
        summary=view["summary"],
        facts=view["facts"],
        summarised_turns=view["summarised_turns"],
        verbatim_turns=view["verbatim_turns"],
        topics=view["topics"],
        recent=shown,
    )


@router.delete("/{conversation_id}")
async def close_conversation(chat: Chat) -> m.Closed:
    """Close the conversation's workflow (terminated if open); its records stay, and a new turn reopens it."""
    found = await _log(chat)
    try:
        status = (await chat.handle.describe()).status
    except RPCError as err:
        if err.status != RPCStatusCode.NOT_FOUND:
            raise
        status = None  # never started, or its history is past retention
    if status is None and not found.n:
        raise ThreadlineError(ErrorCode.CONVERSATION_NOT_FOUND, f"conversation {chat.id} has no records or workflow")
    was_open = status == WorkflowExecutionStatus.RUNNING
    if was_open:
        try:
            await chat.handle.terminate(reason="closed over HTTP; its records stay and a new turn reopens it")
        except RPCError as err:
            if err.status != RPCStatusCode.NOT_FOUND:  # it closed on its own meanwhile
                raise
    return m.Closed(conversation=chat.id, was_open=was_open)


# ----- probes

probes = APIRouter(tags=["probes"])


@probes.get("/health")
async def health() -> m.Status:
    """The process answers (nothing else is checked)."""
    return m.Status(status="ok")


@probes.get("/ready", responses={503: {"model": m.ErrorBody}})
async def ready(request: Request) -> m.Status:
    """Temporal answers and a worker polls the task queue; else 503 `server-unavailable`."""
    tl = _tl(request)
    queue = TaskQueue(name=tl.settings.task_queue)
    query = DescribeTaskQueueRequest(
        namespace=tl.client.namespace, task_queue=queue, task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW
    )
    try:
        found = await tl.client.workflow_service.describe_task_queue(query, timeout=READY_TIMEOUT)
    except RPCError as err:
        raise ThreadlineError(ErrorCode.SERVER_UNAVAILABLE, f"Temporal did not answer: {err.message}") from None
    if not found.pollers:
        raise ThreadlineError(
            ErrorCode.SERVER_UNAVAILABLE,
            f"no worker polls task queue {queue.name!r}; start one with `threadline worker`",
        )
    return m.Status(status="ready")
