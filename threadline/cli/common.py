"""What the `threadline` subcommands share: their types, conversation handles, MESSAGE as a program's
inputs, the branch tree, notes on stderr (a long wait, a prompt), and standard input line by line."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TextIO, TypeAlias

from core.errors import ErrorCode, ThreadlineError

from . import output
from .output import Output

if TYPE_CHECKING:  # imported where used: parsing the command line needs none of them (see cli/__init__.py)
    from core.models import ConversationConfig, ConversationSettings, TurnOutcome
    from core.settings import Settings
    from threadline.client import Conversation
    from threadline.closing import Closing
    from threadline.purging import Purged
    from threadline.reading import Turn
    from threadline.turnstream import Piece

Command = Callable[[argparse.Namespace, Output], Coroutine[Any, Any, int]]
Subcommands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"  # not subscriptable at run time

PROGRESS_AFTER_S = 1.0
"""How long a wait with nothing printed lasts before `waiting for turn …` is said on a terminal."""
_RESERVED_INPUTS = frozenset({"request_id", "lm"})


def add_conversation(parser: argparse.ArgumentParser, *, program: bool = False) -> None:
    """Add `ID`, `--store` and (for commands that send or render) `--program`."""
    parser.add_argument("id", metavar="ID", help="the conversation id")
    if program:
        parser.add_argument("--program", default="tutor", help="the conversation's program (default tutor)")
    add_store(parser)


def add_store(parser: argparse.ArgumentParser) -> None:
    """Add `--store`."""
    parser.add_argument("--store", default="default", help="the store (default; others from THREADLINE_STORES)")


class Placed(Protocol):
    """A placed turn, as the commands use it (`threadline.client.TurnHandle`, or one placed over HTTP)."""

    @property
    def id(self) -> str | None: ...
    @property
    def parent(self) -> str | None: ...
    @property
    def request_id(self) -> str: ...
    async def result(self) -> Turn: ...


class Chat(Protocol):
    """A conversation, as the commands use it: `threadline.client.Conversation`, or
    `remote.RemoteConversation` through the HTTP service when THREADLINE_URL is set."""

    @property
    def id(self) -> str: ...
    @property
    def config(self) -> ConversationConfig: ...
    def continue_from(self, turn: str | None) -> Chat: ...
    async def send(
        self, *args: Any, request_id: str | None = None, lm: str | None = None, approve: Any = None, **inputs: Any
    ) -> Placed: ...
    async def outcome(self, request_id: str) -> TurnOutcome: ...
    def watch(self, turn: str) -> AsyncIterator[Piece]: ...
    async def turns(
        self, all: bool = False, *, limit: int | None = None, after: str | None = None, before: str | None = None
    ) -> Sequence[Turn]: ...
    async def turn(self, turn: str) -> Turn: ...
    async def current_head(self) -> str | None: ...
    async def history(self) -> dict[str, Any]: ...
    async def stop(self, turn: str | None = None) -> None: ...
    async def head(self, turn: str) -> None: ...
    async def close(self) -> Closing: ...
    async def purge(self, *, force: bool = False) -> Purged: ...
    async def configure(self, *, budget: Any = None) -> ConversationSettings: ...
    async def settings(self) -> ConversationSettings | None: ...


def env_settings() -> Settings:
    """The settings from the environment (`Settings.from_env()`, imported only once a command runs)."""
    from core.settings import Settings

    return Settings.from_env()


_OPENED: list[Callable[[], Awaitable[None]]] = []
"""How to close what this command opened (stores, HTTP clients), called by `close_opened`."""


async def open_conversation(args: argparse.Namespace, settings: Settings, **options: Any) -> Chat:
    """A handle on conversation `args.id`: through the HTTP service when THREADLINE_URL is set, else
    through Temporal and the store (see `open_local`)."""
    from core.models import ConversationConfig
    from store.backends.base import check_id

    check_id(args.id)
    if not through_service():
        return await open_local(args, settings, **options)
    from .remote import RemoteConversation, Service

    service = Service.from_env()
    close_at_end(service.close)
    config = ConversationConfig(
        store=args.store, conversation=args.id, program=getattr(args, "program", "tutor"), **options
    )
    return RemoteConversation(service, config)


def through_service() -> bool:
    """Whether THREADLINE_URL is set: conversations are then reached through the HTTP service
    (`remote.service_url`, read without loading httpx)."""
    return bool((os.environ.get("THREADLINE_URL") or "").strip())


async def open_local(args: argparse.Namespace, settings: Settings, **options: Any) -> Conversation:
    """A handle on conversation `args.id`; a bad id or store fails before Temporal is asked anything,
    and commands that only read the store never connect to it."""
    from store.backends.base import check_id
    from threadline.client import connect

    check_id(args.id)
    settings.store_spec(args.store)
    threadline = await connect(settings, lazy=True)
    close_at_end(threadline.close)
    return threadline.conversation(getattr(args, "program", "tutor"), args.id, store=args.store, **options)


def close_at_end(close: Callable[[], Awaitable[None]]) -> None:
    """Have `close_opened` call `close` when the command ends (what the command opened, last first)."""
    _OPENED.append(close)


async def close_opened() -> None:
    """Close what `open_conversation` opened (database connections, HTTP clients)."""
    while _OPENED:
        await _OPENED.pop()()


def message_inputs(message: str, program: str, settings: Settings) -> dict[str, Any]:
    """MESSAGE as the inputs of `program`: its one input, or a JSON object of several."""
    from store.programs.program import load_programs

    known = load_programs(settings.programs).get(program)
    if known is not None and len(known.inputs) == 1:
        return {known.inputs[0][0]: message}
    inputs = _json_object(message)
    if inputs is None:
        wanted = ", ".join(name for name, _ in known.inputs) if known else "its inputs"
        raise ThreadlineError(ErrorCode.INPUTS_INVALID, f"{program} takes {wanted}: give MESSAGE as a JSON object")
    if clash := sorted(_RESERVED_INPUTS & inputs.keys()):
        raise ThreadlineError(ErrorCode.INPUTS_INVALID, f"inputs named {', '.join(clash)} cannot be sent from here")
    return inputs


def _json_object(text: str) -> dict[str, Any] | None:
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


async def branch_tree(chat: Chat) -> dict[str, Any]:
    """Every turn as a tree by parent links (`output.tree`), and the conversation's head."""
    turns = await chat.turns(all=True)
    # The log's head, not the handle's view: the tree shows the conversation as every reader finds it.
    head = await chat.current_head()
    return {"conversation": chat.id, "store": chat.config.store, "head": head, "turns": output.tree(turns)}


class Progress:
    """Says `waiting for turn <id>…` on stderr when a wait passes `PROGRESS_AFTER_S` with nothing printed.

    Only on a terminal: piped stderr is read by programs, which have the turn id from stdout.
    """

    def __init__(self) -> None:
        self.turn: str | None = None
        """The turn waited for, once the send is placed."""
        self._task: asyncio.Task[None] | None = None

    @classmethod
    @contextlib.asynccontextmanager
    async def on_stderr(cls) -> AsyncIterator[Progress]:
        """A `Progress` running until the block ends or `quiet()` is called."""
        progress = cls()
        if sys.stderr.isatty():
            progress._task = asyncio.create_task(progress._note())
        try:
            yield progress
        finally:
            progress.quiet()

    @property
    def noting(self) -> bool:
        """Whether it will say something if the wait goes on (on a terminal, and not quieted)."""
        return self._task is not None

    def quiet(self) -> None:
        """Say nothing more: text is arriving, or the wait is over."""
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def _note(self) -> None:
        said: set[str | None] = set()
        while True:
            await asyncio.sleep(PROGRESS_AFTER_S)
            if self.turn not in said:  # once while queued, once more when placed
                said.add(self.turn)
                what = f"turn {self.turn}" if self.turn else "the send to be placed"
                note(f"waiting for {what}…\n")


def note(text: str) -> None:
    """Write `text` on stderr at once: prompts and notes stay out of stdout, which carries the results."""
    sys.stderr.write(text)
    sys.stderr.flush()


class InputLines:
    """Lines of `stream`, read on a daemon thread and handed to the loop, with a prompt on a terminal.

    Not `asyncio.to_thread`: a read blocked at the prompt would hold up the loop's shutdown after
    Ctrl-C until Enter is pressed.
    """

    def __init__(self, stream: TextIO) -> None:
        self.interactive = stream.isatty()
        self._queue: asyncio.Queue[str | None] = asyncio.Queue()
        loop = asyncio.get_running_loop()
        threading.Thread(target=self._read, args=(stream, loop), name="threadline-input", daemon=True).start()

    def _read(self, stream: TextIO, loop: asyncio.AbstractEventLoop) -> None:
        put: Callable[[Any], object] = self._queue.put_nowait
        with contextlib.suppress(RuntimeError):  # the loop closed first: nobody is reading any more
            try:
                for line in iter(stream.readline, ""):
                    loop.call_soon_threadsafe(put, line)
            except (OSError, ValueError):  # closed, or not text: the input ends here
                pass
            loop.call_soon_threadsafe(put, None)

    async def get(self) -> str | None:
        """The next line (without its newline), or None once the input ended."""
        if self.interactive:
            note("> ")
        line = await self._queue.get()
        if line is None and self.interactive:
            note("\n")  # Ctrl-D: the shell's prompt on a line of its own
        return None if line is None else line.rstrip("\r\n")
