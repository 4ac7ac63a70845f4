"""The HTTP routes that act on one turn: answering the approvals it waits for, resuming it, abandoning it.

    POST /v1/conversations/{id}/turns/{turn}/approvals  {"verdict": "yes"|"no", "reason", "by", "site", "invocation"}
    POST /v1/conversations/{id}/turns/{turn}/resume     {"results": {invocation: output}, "rerun": [invocation]}
    POST /v1/conversations/{id}/turns/{turn}/abandon
    POST /v1/conversations/{id}/turns/{turn}/ask-again  {"lm", "record"}: the turn's request sent again

Each answers with the turn as it is then (with `"wait": true`, once the turn it resumed ended or waits
again). `GET .../turns/{turn}` lists what a waiting turn asks (`approvals`).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Security
from fastapi.security import HTTPBearer
from pydantic import ConfigDict, Field

from core.again_models import AskedAgain
from threadline.acting import act, answer
from threadline.reading import Turn

from . import bodies as m
from .routes import Chat

acting = APIRouter(
    prefix="/v1/conversations",
    tags=["turns that wait"],
    responses={"4XX": {"model": m.ErrorBody}},
    dependencies=[Security(HTTPBearer(auto_error=False))],
)


class ApprovalRequest(m.RequestBody):
    """A person's answer to the approvals a turn waits for (without `site` and `invocation`: every one)."""

    model_config = ConfigDict(
        json_schema_extra={"examples": [{"verdict": "no", "reason": "no receipt", "by": "ops", "wait": True}]}
    )

    verdict: Literal["yes", "no"]
    reason: Annotated[str, Field(max_length=2000)] | None = None
    by: Annotated[str, Field(max_length=200)] | None = None
    site: Annotated[str, Field(max_length=400)] | None = None
    invocation: Annotated[int, Field(ge=1)] | None = None
    wait: bool = False
    """Answer once the turn, going on, ended or waits again (instead of at once)."""


class ResumeRequest(m.RequestBody):
    """Go on with a waiting (every approval answered) or interrupted turn; settle tools that may have run."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"results": {"2": "refunded 20"}, "wait": True}]})

    results: dict[str, str] = Field(default_factory=dict)
    """What a tool that may have run returned, by its invocation (or call id)."""
    rerun: list[str] = Field(default_factory=list)
    """The invocations (or call ids) of tools that may have run, to run again."""
    wait: bool = False


class AskAgainRequest(m.RequestBody):
    """Send a turn's exact request again: the answer, recorded only with `record` (a new turn beside it)."""

    model_config = ConfigDict(json_schema_extra={"examples": [{}, {"lm": "offline", "record": True}]})

    lm: Annotated[str, Field(max_length=200)] | None = None
    """Another model (default: the one the turn asked)."""
    record: bool = False
    """Record it as a new turn beside the turn (same parent), whose answer is returned."""


@acting.post("/{conversation_id}/turns/{turn}/ask-again")
async def ask_again(chat: Chat, turn: str, body: AskAgainRequest) -> AskedAgain:
    """The turn's request (its program, what its `saw` records, its model unless `lm`) sent again.

    Nothing is recorded unless `record`; 409 `turn-state` for a turn that has not ended or made no model
    call of its own, 404 `turn-unknown`.
    """
    found = await chat.turn(turn)
    return await found.ask_again(lm=body.lm, record=body.record)


@acting.post("/{conversation_id}/turns/{turn}/approvals")
async def answer_approvals(chat: Chat, turn: str, body: ApprovalRequest) -> Turn:
    """Approve or deny what the turn waits for; once nothing is left unanswered it goes on by itself.

    409 `turn-state` when it waits for no answer (or that one was given), 404 `approval-unknown` when
    it asks nothing at that site and invocation; nothing is recorded then.
    """
    kind: Any = "approve" if body.verdict == "yes" else "deny"
    given = {"site": body.site, "invocation": body.invocation, "by": body.by, "reason": body.reason}
    return await answer(chat, turn, kind, wait=body.wait, **given)


@acting.post("/{conversation_id}/turns/{turn}/resume")
async def resume_turn(chat: Chat, turn: str, body: ResumeRequest) -> Turn:
    """Resume a waiting or interrupted turn (functai's too): 409 `turn-state` or `turn-unfinished` otherwise."""
    found = await chat.turn(turn)
    return await found.resume(results=body.results, rerun=body.rerun, wait=body.wait)


@acting.post("/{conversation_id}/turns/{turn}/abandon")
async def abandon_turn(chat: Chat, turn: str) -> Turn:
    """End a waiting or interrupted turn `abandoned`: 409 `turn-state` for a turn in another state."""
    await act(chat, turn, "abandon")
    return await chat.turn(turn)
