"""The HTTP service's routes: conversations under `/v1/conversations`, and the `/health` and `/ready` probes.

Each route is a thin adapter over the Python API (`threadline.client`); reads go through the
connection's `ConversationLog`s (incremental, off the event loop), so nothing of the transcript
passes through Temporal.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, Depends, Header, Query, Request, Response, Security
from fastapi.responses import StreamingResponse
from fastapi.security import HTTPBearer
from pydantic import BaseModel

from activities.plan import rule_of
from core.errors import ErrorCode, ThreadlineError
from core.models import TurnOutcome, TurnSend
from core.temporal import workflow_id
from store.backends.reader import now
from store.log.state import Log
from threadline.client import Conversation, Threadline
from threadline.closing import Closing
from threadline.delivery import Queued
from threadline.reading import MAX_PAGE, Turn, history, state_of, to_turn
from threadline.transcript import DEFAULT_PROGRAM, article_view

from . import bodies as m
from .middleware import APIKey

T = TypeVar("T")

_RESERVED_INPUTS = frozenset({"request_id", "lm", "approve"})
MAX_OFFSET_DIGITS = 18
"""A stream offset is a byte count: more digits than this is no offset the stream gave."""


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


async def _known(chat: Chat) -> Conversation:
    """The conversation, when it exists: it has records, or an open workflow (404 `conversation-not-found`)."""
    if (await _log(chat)).n:
        return chat
    if not await chat.delivery.is_open():
        raise ThreadlineError(ErrorCode.CONVERSATION_NOT_FOUND, f"conversation {chat.id} has no records or workflow")
    return chat


Known = Annotated[Conversation, Depends(_known)]
"""A conversation that exists (every read, and every route but the first send, which starts one)."""


async def _log(chat: Conversation) -> Log:
    """The conversation's record log, brought up to date (only what was appended since is parsed)."""
    return await chat.tl.log(chat.config.store, chat.id).read()


@router.post("", status_code=201)
async def create_conversation(request: Request, body: m.CreateConversationRequest) -> m.ConversationHandle:
    """Create a conversation. With `program` alone, validate it and return its handle (nothing is started
    or recorded until its first turn); with the article's body (`system_prompt`, `metadata`, or no
    `program`: the general `chat`), also record its setup, which every turn is shown."""
    _allow(request, body.store)
    chat = _tl(request).conversation(
        body.program or DEFAULT_PROGRAM,
        body.id,
        store=body.store,
        sends=body.sends,
        context=body.context,
        lm=body.lm,
        budget=body.budget.model_dump() if body.budget is not None else None,
    )
    created = None
    if body.program is None or body.system_prompt is not None or body.metadata is not None:
        created = await chat.setup(body.system_prompt, metadata=body.metadata)
    c = chat.config
    ids = {"conversation": c.conversation, "conversation_id": c.conversation, "created_at": created}
    return m.ConversationHandle(
        **ids,
        workflow_id=workflow_id(c.store, c.conversation),
        store=c.store,
        program=c.program,
        sends=c.sends,
        context=c.context,
        lm=c.lm,
        started=created is not None,
    )


@router.post("/{conversation_id}/turns", status_code=202, responses={200: {"model": TurnOutcome}})
async def send_turn(chat: Chat, body: m.TurnRequest, response: Response) -> m.Placed | TurnOutcome:
    """Send a turn: 202 once placed (its id known before the model answers), or 200 with its outcome (`wait`);
    202 `queued` when no worker took it within seconds (kept: it runs once one does; the same send again
    with its `request_id` and `wait` answers its outcome)."""
    chat = chat.tl.conversation(
        body.program, chat.id, store=chat.config.store, sends=body.sends, context=body.context, **_code_settings(body)
    )
    target = chat.continue_from(body.continue_from) if body.continue_from else chat
    try:
        if body.wait:
            response.status_code = 200
            return await _send(target.deliver, body)
        placed = await _send(target.send, body)
    except Queued as kept:  # no worker took it in time: kept, and answered now rather than never
        response.status_code = 202
        return m.Placed(turn=None, parent=None, request_id=kept.request_id, state="queued")
    if placed.id is not None:
        response.headers["Location"] = f"/v1/conversations/{chat.id}/turns/{placed.id}?store={chat.config.store}"
    return m.Placed(turn=placed.id, parent=placed.parent, request_id=placed.request_id)


def _code_settings(body: m.TurnRequest) -> dict[str, Any]:
    """The send's `earlier_without` and `remembers`, as `Threadline.conversation` takes them."""
    remembers = {k: v if isinstance(v, str) else v.model_dump() for k, v in (body.remembers or {}).items()}
    budget = body.budget.model_dump() if body.budget is not None else None
    return {"earlier_without": tuple(body.earlier_without or ()), "remembers": remembers, "budget": budget}


async def _send(how: Callable[..., Awaitable[T]], body: m.TurnRequest) -> T:
    """`how` (a conversation's `send` or `deliver`) with the body's message or inputs."""
    approve = body.approve.model_dump(exclude_none=True) if isinstance(body.approve, BaseModel) else body.approve
    if body.message is not None:
        return await how(body.message, request_id=body.request_id, lm=body.lm, approve=approve)
    inputs = body.inputs or {}
    if clash := sorted(_RESERVED_INPUTS & inputs.keys()):
        raise ThreadlineError(ErrorCode.INPUTS_INVALID, f"inputs named {', '.join(clash)} cannot be sent over HTTP")
    return await how(request_id=body.request_id, lm=body.lm, approve=approve, **inputs)


@router.get("/{conversation_id}")
async def get_conversation(chat: Known) -> m.ConversationState:
    """What the record log says: the head, how many turns, whether one is running (`empty` before any),
    and the article's keys: `turn_count`, `created_at`, `updated_at`, `messages`, the setup, the flow."""
    found = await _log(chat)
    state = state_of(found, now())
    return m.ConversationState(conversation=chat.id, store=chat.config.store, **state, **article_view(found, chat.id))


@router.get("/{conversation_id}/turns")
async def list_turns(
    chat: Known,
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
async def get_turn(chat: Known, turn: str) -> Turn:
    """One turn (404 `turn-unknown` when the log has none)."""
    return await chat.turn(turn)


@router.get("/{conversation_id}/turns/{turn}/events", response_class=StreamingResponse)
async def watch_turn(
    chat: Known, turn: str, last_event_id: Annotated[str | None, Header()] = None
) -> StreamingResponse:
    """Server-sent events: `text` pieces (`id` is the offset to resume from with Last-Event-ID), `restart`
    when the text so far is void, then `end` with the finished turn."""
    await get_turn(chat, turn)
    offset = last_event_id or "0"
    if not (offset.isascii() and offset.isdigit() and len(offset) <= MAX_OFFSET_DIGITS):
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
async def stop_turn(chat: Known, turn: str) -> m.Stopping:
    """Stop one turn: running, it ends `stopped`; waiting or interrupted, it is abandoned."""
    await chat.stop(turn)
    return m.Stopping(turn=turn)


@router.post("/{conversation_id}/stop", status_code=202)
async def stop_all(chat: Known) -> m.Stopping:
    """Stop every running and queued turn (queued sends are dropped and record nothing)."""
    await chat.stop()
    return m.Stopping(turn=None)


@router.post("/{conversation_id}/head")
async def move_head(chat: Known, body: m.HeadRequest) -> m.Head:
    """Move the head to a turn: every new send without `continue_from` continues there."""
    await chat.head(body.turn)
    return m.Head(head=body.turn)


@router.get("/{conversation_id}/history")
async def get_history(chat: Known, recent: Annotated[int, Query(ge=0, le=100)] = 10) -> m.History:
    """The head's branch as the model sees it: the summary and key facts of older turns, how many
    turns are shown verbatim, the branch's and every branch's turn counts, the topics, and its
    `recent` last turns; beside them, the article's `key_facts`, `recent_turn_count` and `original_turn_count`."""
    found, moment = await _log(chat), now()
    branch = found.branch(found.head)
    shown = [to_turn(found, t, moment).as_dict() for t in branch[-recent:]] if recent else []
    view = history(found, found.head, rule_of(chat.config, TurnSend(request_id="history", inputs={})), moment)
    return m.History(
        turns=len(branch),
        total=len(found.order),
        head=found.head,
        done_turns=view["done_turns"],
        summary=view["summary"],
        facts=view["facts"],
        summarised_turns=view["summarised_turns"],
        verbatim_turns=view["verbatim_turns"],
        topics=view["topics"],
        recent=shown,
        key_facts=view["facts"],
        recent_turn_count=view["verbatim_turns"],
        original_turn_count=len(branch),
    )


@router.delete("/{conversation_id}", responses={409: {"model": m.ErrorBody}}, response_model_exclude_none=True)
async def close_conversation(
    chat: Chat, purge: Annotated[bool, Query()] = False, force: Annotated[bool, Query()] = False
) -> m.Closed:
    """Close the conversation's workflow: queued sends are answered `conversation-closed` and running
    turns stop (terminated only when no worker runs). Answers the article's `{"status": "deleted"}`: its
    records are kept all the same (`records_kept`), and a new turn reopens it. Its schedules are deleted.

    With `?purge=true` it is also removed from its store (records, its turns' streams and call-log
    lines): a later GET answers 404 and the id can be used again. A turn that runs or waits refuses
    that (409 `conversation-running`) unless `&force=true`, which stops it first."""
    if not purge:
        return _closed(chat.id, await chat.close())
    purged = await chat.purge(force=force)
    removed = m.Removed(records=purged.records, streams=purged.streams, calls=purged.calls)
    return _closed(chat.id, purged.closing).model_copy(update={"records_kept": False, "removed": removed})


def _closed(conversation: str, closing: Closing) -> m.Closed:
    return m.Closed(
        conversation=conversation,
        was_open=closing.was_open,
        forced=closing.forced,
        answered=closing.answered,
        schedules=closing.schedules,
    )


# ----- probes

probes = APIRouter(tags=["probes"])


@probes.get("/health")
async def health() -> m.Status:
    """The process answers (nothing else is checked): `{"status": "healthy"}`, as the article's service says."""
    return m.Status(status="healthy")


@probes.get("/ready", responses={503: {"model": m.ErrorBody}})
async def ready(request: Request) -> m.Status:
    """Temporal answers and a worker polls the task queue; else 503 `server-unavailable`."""
    tl = _tl(request)
    if not await tl.workers_poll():
        raise ThreadlineError(
            ErrorCode.SERVER_UNAVAILABLE,
            f"no worker polls task queue {tl.settings.task_queue!r}; start one with `threadline worker`",
        )
    return m.Status(status="ready")
