"""Listing conversations from Temporal visibility: by the search attributes every conversation's
workflow keeps (store, program, state, turns, when it last did something, its latest flow; never
content), a page at a time (the article's `list_active(max_age_hours)`).

    page = await tl.conversations(state="idle", updated_after=datetime.now(UTC) - timedelta(hours=1))
    while page.cursor:
        page = await tl.conversations(state="idle", cursor=page.cursor)

Each conversation is listed once, by its newest run: a conversation that closed and was reopened
has an older closed run too, which is left out (a page may then hold fewer than `limit`).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

from temporalio.client import Client, WorkflowExecution, WorkflowExecutionStatus

from core.errors import ErrorCode, ThreadlineError
from core.settings import Settings
from workflows.attributes import (
    CONVERSATION_KEY,
    FLOW_KEY,
    FLOW_STATE_KEY,
    PROGRAM_KEY,
    STATE_KEY,
    STORE_KEY,
    TURNS_KEY,
    UPDATED_KEY,
)

from .crossing import crossing

ListedState = Literal["running", "idle", "closed"]
STATES: tuple[ListedState, ...] = ("running", "idle", "closed")
MAX_LIMIT = 1000
"""The most conversations one page holds."""
_NAME = re.compile(r"[A-Za-z0-9._:-]{1,200}")
_STATE_QUERIES = {
    "running": "ExecutionStatus = 'Running' AND (ThreadlineState = 'running' OR ThreadlineState IS NULL)",
    "idle": "ExecutionStatus = 'Running' AND ThreadlineState = 'idle'",
    "closed": "ExecutionStatus != 'Running'",
}


@dataclass(frozen=True, slots=True)
class ConversationInfo:
    """One conversation as Temporal visibility shows it (what its search attributes say)."""

    conversation: str
    store: str
    program: str | None
    state: str
    """`running` (a turn runs or a send waits), `idle` (its workflow waits for the next send) or
    `closed` (its workflow closed; the next send reopens it)."""
    turns: int | None
    started_at: str | None
    """When this run of its workflow started."""
    updated_at: str | None
    """When it last did something (a turn ended), to within the attribute interval (10 s)."""
    flow: str | None = None
    flow_state: str | None = None
    workflow_id: str = ""

    def as_dict(self) -> dict[str, Any]:
        """As JSON-able data."""
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


@dataclass(frozen=True, slots=True)
class ConversationPage:
    """A page of conversations, and the cursor of the next one (None: this was the last)."""

    conversations: list[ConversationInfo]
    cursor: str | None


def visibility_query(*, store: str, program: str | None, state: str | None, updated_after: datetime | None) -> str:
    """The visibility query for the filters (every value checked, so nothing can be injected).

    Raises:
        ThreadlineError: `invalid-request` for a state that is not one of `STATES`, a name with other
            characters than `A-Za-z0-9._:-`, or a naive `updated_after`.
    """
    parts = [
        "WorkflowType = 'Conversation'",
        "ExecutionStatus != 'ContinuedAsNew'",
        f"ThreadlineStore = '{_name(store)}'",
    ]
    if program is not None:
        parts.append(f"ThreadlineProgram = '{_name(program)}'")
    if state is not None:
        if state not in _STATE_QUERIES:
            raise ThreadlineError(ErrorCode.INVALID_REQUEST, f"state is one of {', '.join(STATES)}, not {state!r}")
        parts.append(f"({_STATE_QUERIES[state]})")
    if updated_after is not None:
        if updated_after.tzinfo is None:
            raise ThreadlineError(
                ErrorCode.INVALID_REQUEST, "updated_after needs a time zone (e.g. 2026-01-31T12:00:00Z)"
            )
        parts.append(f"ThreadlineUpdated > '{updated_after.astimezone(UTC).isoformat().replace('+00:00', 'Z')}'")
    return " AND ".join(parts)


def _name(value: str) -> str:
    if not _NAME.fullmatch(value):
        raise ThreadlineError(ErrorCode.INVALID_REQUEST, f"{value!r} is not a store or program name")
    return value


async def list_conversations(
    client: Client,
    query: str,
    *,
    limit: int = 100,
    cursor: str | None = None,
) -> ConversationPage:
    """One page of the conversations `query` selects, newest runs only.

    Raises:
        ThreadlineError: `invalid-request` for a bad limit or cursor; `server-unavailable` when
            visibility cannot be asked.
    """
    if not 0 < limit <= MAX_LIMIT:
        raise ThreadlineError(ErrorCode.INVALID_REQUEST, f"limit must be from 1 to {MAX_LIMIT}")
    token = _token(cursor)
    with crossing():
        found = client.list_workflows(query, page_size=limit, next_page_token=token)
        await found.fetch_next_page(page_size=limit)
        rows = await _newest_runs(client, list(found.current_page or []))
    following = found.next_page_token
    return ConversationPage([info_of(row) for row in rows], _cursor(following) if following else None)


async def _newest_runs(client: Client, rows: Sequence[WorkflowExecution]) -> list[WorkflowExecution]:
    """`rows` without closed runs of conversations that have a newer run (they were reopened)."""
    closed = sorted({row.id for row in rows if row.status != WorkflowExecutionStatus.RUNNING})
    if not closed:
        return list(rows)
    ids = ", ".join("'" + wid.replace("'", "") + "'" for wid in closed)
    newest: dict[str, WorkflowExecution] = {}
    async for run in client.list_workflows(f"WorkflowId IN ({ids}) AND ExecutionStatus != 'ContinuedAsNew'"):
        held = newest.get(run.id)
        if held is None or run.start_time > held.start_time:
            newest[run.id] = run
    return [row for row in rows if row.id not in newest or newest[row.id].run_id == row.run_id]


def info_of(row: WorkflowExecution) -> ConversationInfo:
    """A visibility row as a conversation."""
    attributes = row.typed_search_attributes
    running = row.status == WorkflowExecutionStatus.RUNNING
    updated = attributes.get(UPDATED_KEY) or row.close_time or row.start_time
    _, store, conversation = [*row.id.split("/", 2), "", ""][:3]
    return ConversationInfo(
        conversation=attributes.get(CONVERSATION_KEY) or conversation,
        store=attributes.get(STORE_KEY) or store,
        program=attributes.get(PROGRAM_KEY),
        state=(attributes.get(STATE_KEY) or "running") if running else "closed",
        turns=attributes.get(TURNS_KEY),
        started_at=_iso(row.start_time),
        updated_at=_iso(updated),
        flow=attributes.get(FLOW_KEY) or None,
        flow_state=attributes.get(FLOW_STATE_KEY) or None,
        workflow_id=row.id,
    )


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


_CHECK_BYTES = 4
"""A cursor ends with this much of its token's SHA-256, so one no listing gave is refused here, not
sent to the server (which fails on a token it cannot parse, and is asked again and again)."""


def _token(cursor: str | None) -> bytes | None:
    if not cursor:
        return None
    try:
        data = base64.b64decode(cursor + "=" * (-len(cursor) % 4), altchars=b"-_", validate=True)
    except (binascii.Error, ValueError):
        data = b""
    token, check = data[:-_CHECK_BYTES], data[-_CHECK_BYTES:]
    if not token or hashlib.sha256(token).digest()[:_CHECK_BYTES] != check:
        raise ThreadlineError(ErrorCode.INVALID_REQUEST, "cursor is not one a listing gave; start again without it")
    return token


def _cursor(token: bytes) -> str:
    check = hashlib.sha256(token).digest()[:_CHECK_BYTES]
    return base64.urlsafe_b64encode(token + check).decode().rstrip("=")


class Listing:
    """What `Threadline` adds: listing its conversations."""

    settings: Settings
    search_attributes: bool | None

    if TYPE_CHECKING:

        async def temporal(self) -> Client: ...

    async def conversations(
        self,
        *,
        store: str = "default",
        program: str | None = None,
        state: str | None = None,
        updated_after: datetime | None = None,
        limit: int = 100,
        cursor: str | None = None,
    ) -> ConversationPage:
        """A page of conversations by store (and program, state, last update), from Temporal visibility.

        Raises:
            ThreadlineError: `server-unavailable` when the server lacks Threadline's search attributes
                (`threadline dev` registers them), `invalid-request` for a bad filter, limit or cursor.
        """
        client = await self.temporal()
        if not self.search_attributes:
            raise ThreadlineError(
                ErrorCode.SERVER_UNAVAILABLE,
                "listing needs Threadline's search attributes on the server; `threadline dev` registers them",
            )
        query = visibility_query(store=store, program=program, state=state, updated_after=updated_after)
        return await list_conversations(client, query, limit=limit, cursor=cursor)
