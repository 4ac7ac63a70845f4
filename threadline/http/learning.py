"""The HTTP service's learning routes: merge branches, rate turns (adapters over `threadline.learning`)."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Security
from fastapi.security import HTTPBearer
from pydantic import ConfigDict, Field

from threadline.reading import Turn

from .bodies import ErrorBody, RequestBody
from .routes import Chat

router = APIRouter(
    prefix="/v1/conversations",
    tags=["learning"],
    responses={"4XX": {"model": ErrorBody}},
    dependencies=[Security(HTTPBearer(auto_error=False))],
)


class MergeRequest(RequestBody):
    """Merge branches: `with` (a program registered on the worker) combines the `turns`, done children
    of `continue_from` (default: the conversation's head)."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "turns": ["0199a1b2-0000-7000-8000-000000000002", "0199a1b2-0000-7000-8000-000000000003"],
                    "with": "pick_best",
                }
            ]
        },
    )

    turns: list[str]
    merging: str = Field(alias="with")
    """The merging program (the JSON key is `with`)."""
    inputs: dict[str, Any] | None = None
    """The merging program's inputs; none: its one input gets the branches' answers."""
    continue_from: str | None = None
    program: str = "tutor"
    """The conversation's program, whose turn the merge is."""
    request_id: str | None = None
    lm: str | None = None


class RatingRequest(RequestBody):
    """A person's judgement of a turn's answer, as functai rates a call."""

    model_config = ConfigDict(
        json_schema_extra={"examples": [{"verdict": "wrong", "answer": "5/6", "note": "added the bottoms"}]}
    )

    verdict: Literal["right", "wrong"] | None
    """`right`, `wrong`, or null to withdraw `by`'s rating."""
    answer: Any = None
    """With `wrong`: the right answer, when known."""
    outputs: dict[str, Any] | None = None
    note: str | None = None
    reasons: list[str] = Field(default_factory=list)
    by: str | None = None
    """The person judging; null rates under the service's account."""


@router.post("/{conversation_id}/merges", status_code=201)
async def merge_turns(chat: Chat, body: MergeRequest) -> Turn:
    """Ask `with` to combine branches: its answer becomes a turn of the conversation's program after
    `continue_from`, with `reads` and `made_by`, written as functai writes a merge (409 `turn-state`
    when a turn is not a done child of it: nothing is recorded)."""
    view = chat.tl.conversation(body.program, chat.id, store=chat.config.store)
    if body.continue_from is not None:
        view = view.continue_from(body.continue_from)
    inputs = body.inputs or {}
    return await view.merge(body.turns, body.merging, request_id=body.request_id, lm=body.lm, **inputs)


@router.post("/{conversation_id}/turns/{turn}/ratings", status_code=201)
async def rate_turn(chat: Chat, turn: str, body: RatingRequest) -> dict[str, Any]:
    """Rate a turn: functai's rating record, written to the store's call log next to the turn's call
    (a person's later rating replaces their earlier one; a merge's goes to its merging call)."""
    fields = body.model_dump(exclude={"verdict"})
    return await chat.rate(turn, body.verdict, **fields)
