"""The CLI through a Threadline HTTP service (`THREADLINE_URL`), for operators with no Temporal or
database access: a conversation handle shaped like `threadline.client.Conversation` whose calls are
the service's routes.

    THREADLINE_URL=https://threadline.internal THREADLINE_API_KEY=... threadline send alex "Hi"

`send`, `chat`, `turns`, `show`, `history`, `stop`, `head` and `settings` work this way; `render` and the
serving commands need Temporal (and `store` the stores themselves), so they refuse while it is set.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from core.errors import ErrorCode, ThreadlineError
from core.models import ConversationConfig, ConversationSettings, Sends, TurnOutcome
from store.backends.base import check_id
from threadline.closing import Closing
from threadline.purging import Purged
from threadline.reading import Turn
from threadline.remote import answer_error
from threadline.turnstream import Piece

TIMEOUT_S = 30.0
WAIT_S = 3600.0
"""How long a request that waits for a turn to end may take."""


def service_url(env: Mapping[str, str] | None = None) -> str | None:
    """`THREADLINE_URL`: the HTTP service the CLI talks to instead of Temporal and the stores (None: unset)."""
    return ((os.environ if env is None else env).get("THREADLINE_URL") or "").strip() or None


def refuse_remote(command: str) -> None:
    """Refuse `command` while `THREADLINE_URL` is set: it needs Temporal or the stores themselves.

    Raises:
        ThreadlineError: `invalid-request`.
    """
    if service_url() is not None:
        raise ThreadlineError(
            ErrorCode.INVALID_REQUEST,
            f"`threadline {command}` needs Temporal and the stores, not the HTTP service: unset THREADLINE_URL "
            "(send, chat, turns, show, history, stop, head and settings work through it)",
        )


class Service:
    """An HTTP client of the service (`THREADLINE_URL`, with `THREADLINE_API_KEY` as its bearer key)."""

    def __init__(self, url: str, *, api_key: str | None = None) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.url = url.rstrip("/")
        self._http = httpx.AsyncClient(base_url=self.url, headers=headers, timeout=TIMEOUT_S)

    @classmethod
    def from_env(cls) -> Service:
        """The service `THREADLINE_URL` names."""
        url = service_url()
        assert url is not None, "only called when THREADLINE_URL is set"
        return cls(url, api_key=os.environ.get("THREADLINE_API_KEY") or None)

    async def close(self) -> None:
        """Close the connections."""
        await self._http.aclose()

    async def call(self, method: str, path: str, *, wait: bool = False, **options: Any) -> Any:
        """Send a request; return its JSON answer, or raise the coded error the service answered."""
        timeout = httpx.Timeout(TIMEOUT_S, read=WAIT_S if wait else TIMEOUT_S)
        try:
            answer = await self._http.request(method, path, timeout=timeout, **options)
        except httpx.TransportError as err:
            raise self._unreachable(err) from None
        if not answer.is_success:
            raise answer_error(answer)
        return answer.json()

    async def events(self, path: str, *, store: str) -> AsyncIterator[tuple[str, str | None, dict[str, Any]]]:
        """The server-sent events of `path`: (name, id, data) each."""
        fields: dict[str, str] = {}
        timeout = httpx.Timeout(TIMEOUT_S, read=WAIT_S)
        try:
            async with self._http.stream("GET", path, params={"store": store}, timeout=timeout) as answer:
                if not answer.is_success:
                    await answer.aread()
                    raise answer_error(answer)
                async for line in answer.aiter_lines():
                    if line:
                        name, _, value = line.partition(": ")
                        fields[name] = value
                    elif "event" in fields:
                        yield fields["event"], fields.get("id"), json.loads(fields.get("data") or "{}")
                        fields = {}
        except httpx.TransportError as err:
            raise self._unreachable(err) from None

    def _unreachable(self, err: httpx.TransportError) -> ThreadlineError:
        return ThreadlineError(
            ErrorCode.SERVER_UNAVAILABLE,
            f"the Threadline service at {self.url} did not answer ({type(err).__name__}): check THREADLINE_URL",
            retryable=True,
        )


@dataclass(slots=True)
class RemotePlaced:
    """A turn placed through the service: its id and parent known; `result()` waits for its end."""

    id: str | None
    parent: str | None
    request_id: str
    conversation: RemoteConversation

    async def result(self) -> Turn:
        """Wait for the turn to end; return it as the log holds it."""
        outcome = await self.conversation.outcome(self.request_id)
        if outcome.turn is None:
            return Turn(id="", parent=None, state=outcome.state, inputs={}, request_id=self.request_id)
        return await self.conversation.turn(outcome.turn)


@dataclass(slots=True)
class RemoteConversation:
    """One conversation through the service: what the CLI asks of a `Conversation`."""

    service: Service
    config: ConversationConfig
    continue_after: str | None = None
    _sent: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def id(self) -> str:
        """The conversation id."""
        return self.config.conversation

    def _path(self, rest: str = "") -> str:
        return f"/v1/conversations/{check_id(self.id)}{rest}"

    def _query(self, **more: Any) -> dict[str, Any]:
        return {"store": self.config.store, **more}

    def continue_from(self, turn: str | None) -> RemoteConversation:
        """A handle whose next send continues after exactly `turn`."""
        return RemoteConversation(self.service, self.config, turn)

    async def send(
        self,
        *args: Any,
        request_id: str | None = None,
        lm: str | None = None,
        approve: Any = None,
        **inputs: Any,
    ) -> RemotePlaced:
        """Send a turn; return once it is placed (`approve`: the send's rule, as the HTTP body takes it)."""
        if args:
            raise ThreadlineError(ErrorCode.INPUTS_INVALID, "name the inputs of a turn sent through the service")
        body = {"inputs": inputs, "request_id": request_id, "lm": lm, **self._choices()}
        if approve is not None:
            body["approve"] = approve
        placed = await self.service.call("POST", self._path("/turns"), params=self._query(), json=body)
        self._sent[placed["request_id"]] = body
        return RemotePlaced(placed["turn"], placed["parent"], placed["request_id"], self)

    def _choices(self) -> dict[str, Any]:
        sends: Sends = self.config.sends
        config = self.config
        code: dict[str, Any] = {"earlier_without": list(config.earlier_without) or None, "remembers": None}
        if config.remembers:
            code["remembers"] = {name: memory.model_dump() for name, memory in config.remembers.items()}
        if config.budget is not None:
            code["budget"] = config.budget.model_dump()
        return {"program": config.program, "sends": sends, "continue_from": self.continue_after, **code}

    async def outcome(self, request_id: str) -> TurnOutcome:
        """Wait for how the send `request_id` ended (the same send again, waiting: one turn per request id)."""
        body = {**self._sent.get(request_id, {"inputs": {}, **self._choices()}), "request_id": request_id, "wait": True}
        found = await self.service.call("POST", self._path("/turns"), params=self._query(), json=body, wait=True)
        return TurnOutcome.model_validate(found)

    async def watch(self, turn: str) -> AsyncIterator[Piece]:
        """Yield what `turn`'s model writes, until the turn ends."""
        async for name, offset, data in self.service.events(
            self._path(f"/turns/{turn}/events"), store=self.config.store
        ):
            if name == "end":
                return
            yield Piece(int(offset or 0), None if name == "restart" else str(data.get("text", "")))

    async def turns(
        self, all: bool = False, *, limit: int | None = None, after: str | None = None, before: str | None = None
    ) -> list[Turn]:
        """The turns from the first to the head (`all`: every turn), a page of them with `limit`, `after`, `before`."""
        page = {k: v for k, v in {"limit": limit, "after": after, "before": before}.items() if v is not None}
        found = await self.service.call("GET", self._path("/turns"), params={**self._query(all=all), **page})
        return [Turn(**turn) for turn in found]

    async def turn(self, turn: str) -> Turn:
        """One turn by id."""
        return Turn(**await self.service.call("GET", self._path(f"/turns/{turn}"), params=self._query()))

    async def current_head(self) -> str | None:
        """The conversation's head."""
        head: str | None = (await self.service.call("GET", self._path(), params=self._query()))["head"]
        return head

    async def history(self) -> dict[str, Any]:
        """The branch as the model sees it, in the shape `Conversation.history` gives."""
        found = await self.service.call("GET", self._path("/history"), params=self._query(recent=0))
        names = ("head", "done_turns", "summarised_turns", "verbatim_turns", "summary", "facts", "topics")
        return {"conversation": self.id, "branch_turns": found["turns"], **{name: found.get(name) for name in names}}

    async def stop(self, turn: str | None = None) -> None:
        """Stop `turn`, or every running and queued turn."""
        await self.service.call("POST", self._path(f"/turns/{turn}/stop" if turn else "/stop"), params=self._query())

    async def close(self) -> Closing:
        """Close the conversation's workflow; its records stay (`DELETE`)."""
        return _closing(await self.service.call("DELETE", self._path(), params=self._query()))

    async def purge(self, *, force: bool = False) -> Purged:
        """Close the conversation and remove it from its store (`DELETE ...?purge=true`)."""
        params = self._query(purge="true", force="true" if force else "false")
        found = await self.service.call("DELETE", self._path(), params=params)
        removed = found.get("removed") or {}
        counts = {name: int(removed.get(name) or 0) for name in ("records", "streams", "calls")}
        return Purged(closing=_closing(found), **counts)

    async def configure(self, *, budget: Any = None) -> ConversationSettings:
        """Change the settings its next turns run with (`PATCH .../settings`); None leaves it as it is."""
        body = {} if budget is None else {"budget": budget.model_dump(exclude_none=True)}
        found = await self.service.call("PATCH", self._path("/settings"), params=self._query(), json=body)
        return ConversationSettings.model_validate(found)

    async def settings(self) -> ConversationSettings | None:
        """The settings its next turns run with (None: its workflow is not running)."""
        found = await self.service.call("GET", self._path("/settings"), params=self._query())
        return ConversationSettings.model_validate(found) if found["open"] else None

    async def head(self, turn: str | Turn) -> None:
        """Move the conversation's head to `turn`."""
        tid = turn.id if isinstance(turn, Turn) else turn
        await self.service.call("POST", self._path("/head"), params=self._query(), json={"turn": tid})
        self.continue_after = tid


def _closing(found: Mapping[str, Any]) -> Closing:
    """How a close went, from the service's answer."""
    return Closing(
        was_open=bool(found.get("was_open")),
        forced=bool(found.get("forced")),
        answered=int(found.get("answered") or 0),
        schedules=int(found.get("schedules") or 0),
    )
