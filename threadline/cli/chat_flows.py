"""Guided flows in `threadline chat`: `/flow NAME` starts one, `/flow` shows it, `/flow stop` stops
it; what a flow collected is printed when it completes, and a reminder or an expiry that arrives
while the chat waits for a line is printed as it comes."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Protocol, TypeGuard

from core.errors import ErrorCode, ThreadlineError

from . import output
from .common import Chat, note
from .flow_commands import flow_text
from .output import Output

if TYPE_CHECKING:
    from threadline.client import Conversation


class ChatSession(Protocol):
    """What these need of `chat.ChatSession`: its conversation and where it prints."""

    chat: Chat
    out: Output


def _is_local(chat: Chat) -> TypeGuard[Conversation]:
    """Whether `chat` goes through Temporal and the store, not the HTTP service (THREADLINE_URL)."""
    from threadline.client import Conversation

    return isinstance(chat, Conversation)


def _local(session: ChatSession) -> Conversation:
    """The session's conversation through Temporal and the store: flows are not served over THREADLINE_URL."""
    if not _is_local(session.chat):
        raise ThreadlineError(ErrorCode.INVALID_REQUEST, "guided flows need Temporal: unset THREADLINE_URL")
    return session.chat


HELP = """\
/flow NAME     start the guided flow NAME (its prompts come as answers; your lines answer them)
/flow          where the flow stands: its step, what it said last, what it collected
/flow stop     stop the active flow (the conversation goes on freely)"""
FOLLOW_WAIT_S = 1.0


async def flow_command(session: ChatSession, arg: str) -> None:
    """`/flow`, `/flow stop` or `/flow NAME`."""
    chat, out = _local(session), session.out
    if not arg:
        view = await chat.flow()
        out.emit({"event": "flow", **view.as_dict()}, flow_text(view) or "No flow has run here.")
    elif arg == "stop":
        await chat.stop_flow()
        out.emit({"event": "flow-stop"}, "Asked to stop the flow.")
    else:
        reply = await chat.start_flow(arg)
        out.emit(
            {"event": "flow-start", "flow": arg, "prompt": reply.response, "turn": reply.turn}, str(reply.response)
        )


async def print_collected(session: ChatSession, request_id: str) -> None:
    """After a flow's turn: print what the flow collected, when that turn completed it (or handed it on)."""
    if not _is_local(session.chat):
        return  # over THREADLINE_URL a send is never a flow's
    outcome = await session.chat.outcome(request_id)
    flow = outcome.flow
    if flow is None or flow.flow_data is None:
        return
    data = {"event": "flow-data", "flow": flow.flow, "state": flow.state, "data": flow.flow_data}
    session.out.emit(data, output.fields([("collected", output.dumps(flow.flow_data))]))


@contextlib.contextmanager
def following(session: ChatSession) -> Iterator[None]:
    """While the block runs, print reminders and expiries as they are recorded (`follow_reminders`)."""
    task = asyncio.create_task(follow_reminders(session))
    try:
        yield
    finally:
        task.cancel()


async def follow_reminders(session: ChatSession) -> None:
    """Until cancelled: print each reminder or expiry of a flow as it is recorded (a durable timer's
    work, which arrives while nobody sends anything). A store that cannot be read ends it quietly:
    the chat itself reports such errors."""
    if _is_local(session.chat):  # over THREADLINE_URL there is no store to follow
        with contextlib.suppress(ThreadlineError):
            await _follow(session.chat, session)


async def _follow(chat: Conversation, session: ChatSession) -> None:
    from store.flows.progress import flow_entries

    conversation = chat.tl.log(chat.config.store, chat.id)
    seen = len(flow_entries(await conversation.read()))
    while True:
        log = await conversation.read()
        for entry in flow_entries(log)[seen:]:
            data, kind = entry["data"], entry.get("entry")
            if kind == "reminded":
                _say(
                    session,
                    {"event": "flow-reminder", "prompt": data.get("prompt")},
                    f"[reminder] {data.get('prompt')}",
                )
            elif kind == "abandoned" and data.get("reason") == "expired":
                _say(
                    session,
                    {"event": "flow-expired", "flow": data.get("flow")},
                    f"[the {data.get('flow')} flow expired]",
                )
        seen = len(flow_entries(log))
        await conversation.wait(log.n, FOLLOW_WAIT_S)
        await asyncio.sleep(0)


def _say(session: ChatSession, data: dict[str, object], text: str) -> None:
    if session.out.json:
        session.out.emit(data, "")
    else:
        note(f"\n{text}\n")
