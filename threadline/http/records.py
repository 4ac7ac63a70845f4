"""The record endpoints: a store's record log over HTTP, for functai processes that cannot reach the
store themselves (`threadline.functai_store("https://...")`), as the store contract of docs/format-1.md 1.6.

    GET  /v1/conversations?store=S                          the ids of the store's conversations
    GET  /v1/conversations/{id}/records?store=S&after=N     the records after position N
    POST /v1/conversations/{id}/records?store=S             {"records": [...], "expect": N?}: append
    GET  /v1/conversations/{id}/records/wait?after=N&timeout=T
                                                            a long poll: {"more": true} once more than
                                                            N records are held, else false after T s

A conditional append whose `expect` is not the count answers 409 `store-conflict` (read again and
retry). Bearer keys and their store scopes apply as on every `/v1/` route; records pass through the
reader seam, whatever the store is.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Security
from fastapi.security import HTTPBearer
from pydantic import BaseModel, ConfigDict, Field

from store.backends.reader import AsyncStore

from . import bodies as m
from .routes import _allow, _tl

MAX_WAIT_S = 30.0
"""The longest a long poll may wait; callers ask again."""

router = APIRouter(
    prefix="/v1/conversations",
    tags=["records"],
    responses={"4XX": {"model": m.ErrorBody}},
    dependencies=[Security(HTTPBearer(auto_error=False))],
)

Store = Annotated[str, Query(description="the store's name")]


class AppendRequest(m.RequestBody):
    """Records to append all or nothing; with `expect`, only if the conversation holds exactly that many."""

    any_text = True

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "records": [
                        {
                            "functai_conversation": 1,
                            "kind": "entry",
                            "at": "2026-11-30T10:00:00.000000Z",
                            "plugin": "notes",
                            "entry": "seen",
                            "data": {"by": "ops"},
                        }
                    ],
                    "expect": 4,
                }
            ]
        }
    )

    records: list[dict[str, Any]]
    expect: int | None = Field(default=None, ge=0)


class Appended(BaseModel):
    """How many records the conversation holds after the append."""

    count: int


class Records(BaseModel):
    """The records after position `after`, in order (each with its `seq`)."""

    after: int
    records: list[dict[str, Any]]


class Waited(BaseModel):
    """Whether the conversation holds more than `after` records (false: the time was up first)."""

    more: bool


class Conversations(BaseModel):
    """The ids of the conversations that hold records, sorted."""

    conversations: list[str]


def _store(request: Request, store: str) -> AsyncStore:
    _allow(request, store)
    return _tl(request).logs.stores.get(store)


@router.get("/records", response_model=Conversations)
async def list_record_logs(request: Request, store: Store = "default") -> Conversations:
    """The ids of the store's conversations that hold records (the store's own list, where
    `GET /v1/conversations` lists conversations from Temporal)."""
    return Conversations(conversations=await _store(request, store).conversations())


@router.get("/{conversation_id}/records", response_model=Records)
async def read_records(
    request: Request, conversation_id: str, store: Store = "default", after: Annotated[int, Query(ge=0)] = 0
) -> Records:
    """The records after position `after` (none for a conversation that holds none)."""
    records = await _store(request, store).read(conversation_id, after)
    return Records(after=after, records=records)


@router.post("/{conversation_id}/records", response_model=Appended)
async def append_records(
    request: Request, conversation_id: str, body: AppendRequest, store: Store = "default"
) -> Appended:
    """Append records, numbered by the store; 409 `store-conflict` when `expect` is not the count."""
    count = await _store(request, store).append(conversation_id, body.records, expect=body.expect)
    return Appended(count=count)


@router.get("/{conversation_id}/records/wait", response_model=Waited)
async def wait_records(
    request: Request,
    conversation_id: str,
    store: Store = "default",
    after: Annotated[int, Query(ge=0)] = 0,
    # The query parameter is the long poll's duration, the store contract's `wait` timeout.
    timeout: Annotated[float, Query(ge=0, le=MAX_WAIT_S)] = 10.0,  # noqa: ASYNC109
) -> Waited:
    """Answer once the conversation holds more than `after` records, or after `timeout` seconds."""
    return Waited(more=await _store(request, store).wait(conversation_id, after, timeout))
