"""The OpenAI Responses protocol under `/openai/v1/responses`: a response is a turn.

    POST /responses                  a turn: at the head of `conversation`, after `previous_response_id`
                                     (a branch when it is not the head), or of a new conversation
    GET  /responses/{id}             the response as the record log holds it (`?stream=true&starting_after=N`:
                                     its events after number N)
    POST /responses/{id}/cancel      stop the turn

`background` answers once the turn is placed; `stream` answers with its events; otherwise the answer
waits for the turn's end. Function `tools` are the caller's: a turn whose model calls one waits, its
response holding the `function_call` items, and `function_call_output` items sent after it resume
that same turn with the outputs (`act`, as a person resumes a turn). An `Idempotency-Key` header is
the send's request id, so a retried POST is the same turn. Thin adapters over the Python API, like
the native routes.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Request, Security
from fastapi.responses import StreamingResponse
from fastapi.security import HTTPBearer

from core.errors import ErrorCode, ThreadlineError
from store.log.preamble import setup_of
from store.log.state import Turn
from store.records import uuid7
from threadline.acting import act
from threadline.client import Conversation

from . import openai_bodies as o
from . import openai_items as items
from .openai_conversations import connection, existing, read_log, store_of
from .openai_errors import PREFIX, bad_request
from .openai_events import response_events
from .openai_models import model_of

MAX_IN_FLIGHT = 8
"""Responses this process holds open on one conversation at once: one more is answered 429 (under the
10 updates Temporal lets one workflow hold in flight, so this service never runs into that limit)."""
CANCEL_WAIT_S = 10.0
"""How long a cancel waits for the stopped turn to end before it answers the response as it is."""
_SSE = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}

router = APIRouter(
    prefix=f"{PREFIX}/responses",
    tags=["OpenAI protocol"],
    responses={"4XX": {"model": o.ProtocolErrorBody}},
    dependencies=[Security(HTTPBearer(auto_error=False))],
)


@contextlib.contextmanager
def admitted(request: Request, conversation: str) -> Iterator[None]:
    """Hold one of the conversation's `MAX_IN_FLIGHT` places in this process while a response is made.

    Raises:
        ThreadlineError: `too-many-requests` (429) when every place is taken.
    """
    state = request.app.state
    if not hasattr(state, "openai_in_flight"):
        state.openai_in_flight = {}
    held: dict[str, int] = state.openai_in_flight
    if held.get(conversation, 0) >= MAX_IN_FLIGHT:
        message = f"{MAX_IN_FLIGHT} responses of this conversation are being made already; try again shortly"
        raise ThreadlineError(ErrorCode.TOO_MANY_REQUESTS, message, retryable=True)
    held[conversation] = held.get(conversation, 0) + 1
    try:
        yield
    finally:
        held[conversation] -= 1
        if not held[conversation]:
            del held[conversation]


IdempotencyKey = Annotated[str | None, Header(alias="Idempotency-Key", max_length=200)]


def asked(body: o.CreateResponse) -> tuple[str, str | None]:
    """The turn's message and the instructions, from `input` and `instructions`.

    Raises:
        ThreadlineError: 400 for what this service does not take: no input, an assistant message (send
            it with `conversations.items.create`), a function call item beside messages, `store: false`.
    """
    if body.store is False:
        raise bad_request(
            "every response is recorded (that is what makes it durable); leave out `store: false`", "store"
        )
    if body.input is None or body.input == "" or body.input == []:
        raise bad_request("give `input`: a string or message items", "input")
    if isinstance(body.input, str):
        return body.input, body.instructions
    said: list[str] = []
    told = [body.instructions] if body.instructions else []
    for i, item in enumerate(body.input):
        if isinstance(item, o.CallItem):
            raise bad_request(
                f"input[{i}] is a {item.type} item: send a response's function_call_output items alone,"
                " and messages in the next request",
                "input",
            )
        if item.role == "assistant":
            raise bad_request(f"input[{i}] is an assistant message: record it with conversations.items.create", "input")
        (said if item.role == "user" else told).append(item.text)
    if not "".join(said):
        raise bad_request("`input` holds no user message", "input")
    return "\n\n".join(said), "\n\n".join(told) or None


async def target(request: Request, body: o.CreateResponse) -> tuple[Conversation, str | None]:
    """The conversation the turn goes to, continued after the previous response's turn when one is named;
    and the head to put back afterwards (a branch leaves the head where it was)."""
    if body.conversation is not None and body.previous_response_id is not None:
        raise bad_request("give `conversation` or `previous_response_id`, not both", "previous_response_id")
    if body.previous_response_id is not None:
        cid, turn = items.parse_response_id(body.previous_response_id, "previous_response_id")
        chat, log = await existing(request, cid, sends=body.sends)
        if turn not in log.turns:
            raise ThreadlineError(
                ErrorCode.TURN_UNKNOWN,
                f"no response has id {body.previous_response_id[:80]!r}",
                param="previous_response_id",
            )
        return chat.continue_from(turn), (log.head if log.head != turn else None)
    if body.conversation is not None:
        cid = body.conversation if isinstance(body.conversation, str) else body.conversation.id
        chat, _ = await existing(request, cid, sends=body.sends)
        return chat, None
    tl = connection(request)
    return tl.conversation("chat", uuid7(), store=store_of(request), sends=body.sends or "queue"), None


@router.post("", responses={200: {"model": o.ResponseObject, "content": {"text/event-stream": {}}}})
async def create_response(request: Request, body: o.CreateResponse, idempotency_key: IdempotencyKey = None) -> Any:
    """A turn: its response once it ended (`background`: once placed; `stream`: its events); or, for
    `function_call_output` items, the turn that waits for them, once it goes on and ends."""
    given = call_outputs(body)
    if given is not None:
        return await _answer_calls(request, body, given)
    text, instructions = asked(body)
    lm = model_of(body.model)
    tools = functions(body)
    chat, head = await target(request, body)
    if instructions is not None:
        await _instruct(request, chat, instructions)
    request_id = idempotency_key or uuid7()
    with admitted(request, chat.id):
        if not (body.background or body.stream or head):
            outcome = await chat.deliver(text, request_id=request_id, lm=lm, tools=tools)
            turn = str(outcome.turn)
        else:
            placed = await chat.send(text, request_id=request_id, lm=lm, tools=tools)
            turn = str(placed.id)
        if body.metadata or body.background:
            log = connection(request).log(chat.config.store, chat.id)
            await log.append([items.response_record(turn, dict(body.metadata or {}), bool(body.background))])
        if head is not None:
            await chat.head(head)  # a branch: the conversation goes on where it was until its head is moved
        if body.stream:
            return StreamingResponse(response_events(chat, turn), media_type="text/event-stream", headers=_SSE)
        if not body.background and head is not None:
            await chat.outcome(request_id)
    return await _response(request, chat.id, turn, body.model)


def functions(body: o.CreateResponse) -> list[dict[str, Any]]:
    """The caller's functions of `tools`, as the turn records them (`stream` is refused beside them)."""
    if not body.tools:
        return []
    if body.stream:
        raise bad_request("a response offering function tools is not streamed here; leave out `stream`", "stream")
    names = [t.name for t in body.tools]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise bad_request(f"two tools are named {twice[0]!r}: the model could not tell them apart", "tools")
    return [{"name": t.name, "description": t.description or "", "parameters": t.parameters or {}} for t in body.tools]


def call_outputs(body: o.CreateResponse) -> dict[str, str] | None:
    """The outputs `input` gives, by call id (None when it gives none: a message turn).

    Raises:
        ThreadlineError: 400 for outputs beside messages, an output given twice, or one that is not text.
    """
    if not isinstance(body.input, list) or not any(
        isinstance(i, o.CallItem) and i.type == "function_call_output" for i in body.input
    ):
        return None
    if body.stream:
        raise bad_request("function_call_output items are answered whole here; leave out `stream`", "stream")
    given: dict[str, str] = {}
    for i, item in enumerate(body.input):
        if not isinstance(item, o.CallItem):
            raise bad_request(f"input[{i}] is a message: send it after the function_call_output items", "input")
        if item.type == "function_call":
            continue  # the call itself, sent back as the client's history holds it
        if item.call_id in given:
            raise bad_request(f"input[{i}] gives call {item.call_id[:80]!r} a second output", "input")
        given[item.call_id] = _output_text(item, i)
    return given


def _output_text(item: o.CallItem, i: int) -> str:
    if isinstance(item.output, str):
        return item.output
    parts = item.output or []
    if any(p.get("type") not in ("input_text", "output_text", "text") for p in parts):
        raise bad_request(f"input[{i}].output: only text is taken as a function's output", "input")
    return "".join(str(p.get("text") or "") for p in parts)


async def _answer_calls(request: Request, body: o.CreateResponse, given: dict[str, str]) -> Any:
    """Give the outputs to the turn that waits for them; it goes on (the same response), and is answered
    once it ends again (`background`: at once). A retried request whose outputs were given is answered so."""
    chat, turn = await _caller_turn(request, body, set(given))
    waits_for = {str(t.get("id")) for t in turn.unfinished()}
    with admitted(request, chat.id):
        if waits_for:
            if waits_for != set(given):
                missing = sorted(waits_for - set(given)) or sorted(set(given) - waits_for)
                raise bad_request(
                    f"give exactly the outputs of the calls {sorted(waits_for)}; not as sent: {missing[0][:80]!r}",
                    "input",
                )
            acted = await act(chat, turn.id, "resume", results=given)
            request_id = acted.request_id
        else:
            request_id = turn.record.get("request_id")  # outputs given already: the same request again
        if not body.background and request_id:
            await chat.outcome(str(request_id))
    return await _response(request, chat.id, turn.id, body.model)


async def _caller_turn(request: Request, body: o.CreateResponse, ids: set[str]) -> tuple[Conversation, Turn]:
    """The turn whose calls `ids` are: the previous response's, else the one of `conversation` that made them.

    Raises:
        ThreadlineError: 404 for no such response or conversation; 400 for calls it did not make.
    """
    if body.previous_response_id is not None:
        cid, tid = items.parse_response_id(body.previous_response_id, "previous_response_id")
    elif body.conversation is not None:
        cid = body.conversation if isinstance(body.conversation, str) else body.conversation.id
        tid = None
    else:
        raise bad_request("name the response that made the calls: `previous_response_id` or `conversation`", "input")
    chat, log = await existing(request, cid)
    made = {
        t.id: {str(r.get("id")) for r in t.tools if r.get("state") in ("started", "given")}
        for t in log.turns.values()
        if tid is None or t.id == tid
    }
    found = next((t for t, calls in made.items() if ids <= calls), None)
    if found is None:
        if tid is not None and tid not in log.turns:
            raise ThreadlineError(ErrorCode.TURN_UNKNOWN, f"no response has id {body.previous_response_id!r}")
        raise bad_request(f"no response of this conversation made the calls {sorted(ids)[:5]}", "input")
    return chat, log.turns[found]


async def _instruct(request: Request, chat: Conversation, instructions: str) -> None:
    """Record `instructions` as the conversation's system prompt when they differ from the one recorded."""
    log = await read_log(request, chat.id)
    found = setup_of(log) or {}
    if found.get("system_prompt") != instructions:
        await chat.setup(instructions, metadata=found.get("metadata") or {})


async def _response(request: Request, conversation: str, turn: str, model: str | None = None) -> dict[str, Any]:
    chat, log = await existing(request, conversation)
    found = await chat.turn(turn)
    return items.response_of(log, conversation, found, model=model)


@router.get("/{response_id}", responses={200: {"model": o.ResponseObject, "content": {"text/event-stream": {}}}})
async def get_response(
    request: Request,
    response_id: str,
    stream: bool = False,
    starting_after: Annotated[int | None, Query(ge=0)] = None,
) -> Any:
    """The response as the record log holds it, whichever process answered it; with `stream`, its events
    after number `starting_after` (all when omitted), until it ends."""
    cid, turn = items.parse_response_id(response_id)
    chat, _ = await existing(request, cid)
    if stream:
        await chat.turn(turn)  # 404 before the stream starts
        after = -1 if starting_after is None else starting_after
        return StreamingResponse(response_events(chat, turn, after=after), media_type="text/event-stream", headers=_SSE)
    return await _response(request, cid, turn)


@router.post("/{response_id}/cancel")
async def cancel_response(request: Request, response_id: str) -> o.ResponseObject:
    """Stop the turn: it ends `cancelled`; one that already ended is answered as it is."""
    cid, turn = items.parse_response_id(response_id)
    chat, _ = await existing(request, cid)
    found = await chat.turn(turn)
    if found.ended_at is None:
        await chat.stop(turn)
        if found.request_id is not None:  # a turn a functai process sent has none: answered as it is then
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(chat.outcome(found.request_id), CANCEL_WAIT_S)
    return o.ResponseObject.model_validate(await _response(request, cid, turn))
