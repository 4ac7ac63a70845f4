"""Wire models of turns that act: running one tool call, and acting on a turn that waits for a person
or was interrupted (answering its approvals, resuming it, abandoning it).

What crosses Temporal stays small: a tool call travels as a reference (`ToolRef`: the `reply` record
that holds it and its place there), never with its input or output, which stay in the record log.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from .models import Model, ToolRef, TurnError

ActKind = Literal["approve", "deny", "resume", "abandon"]


class ToolInput(Model):
    """Run one tool call of a turn (or, with `error`, record that it could not run)."""

    store: str
    conversation: str
    store_id: str | None = None
    program: str
    turn: str
    attempt: int
    call: ToolRef
    error: TurnError | None = None


class ToolDone(Model):
    """How running a tool call came out: `done` (its result is recorded), or the turn `ended`, was
    `taken` over by another writer or asked to `stop` meanwhile (nothing more is recorded)."""

    state: Literal["done", "ended", "taken", "stopped"] = "done"


class TurnAction(Model):
    """Act on one turn by hand: answer its approvals (`approve`/`deny`), `resume` it, or `abandon` it.

    Without `site` and `invocation`, an answer answers every question the turn waits for. `results`
    (by invocation or call id) and `rerun` settle the tools that may have run before it stopped.
    """

    store: str
    conversation: str
    store_id: str | None = None
    program: str = "tutor"
    turn: str
    kind: ActKind
    request_id: str = ""
    """Names the resumed turn's outcome (`wait`) when this conversation's workflow was not holding it."""
    by: str | None = Field(default=None, max_length=200)
    reason: str | None = Field(default=None, max_length=2000)
    site: str | None = Field(default=None, max_length=400)
    invocation: int | None = Field(default=None, ge=1)
    results: dict[str, str] = Field(default_factory=dict)
    rerun: list[str] = Field(default_factory=list)
    resume: bool = True
    """After the last answer, go on at once (as functai's `approve` does)."""


class ActResult(Model):
    """What acting on a turn did: the questions still unanswered, whether it goes on (and the request
    id its outcome is kept under), and the attempt that goes on."""

    turn: str
    state: str
    pending: list[dict[str, Any]] = Field(default_factory=list)
    resumed: bool = False
    request_id: str | None = None
    attempt: int = 1
    parent: str | None = None
    answered: int = 0


class WaitCheck(Model):
    """Look at a turn that waits: answered (claim it again), ended or taken by another writer, or still
    waiting; `expired` abandons it when nobody answered in time."""

    store: str
    conversation: str
    store_id: str | None = None
    turn: str
    request_id: str = ""
    attempt: int = 1
    expired: bool = False
