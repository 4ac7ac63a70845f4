"""A turn watched while it is made: placed at once, then its text as the model writes it.

    stream = await chat.stream("Tell me a story.")
    print(stream.turn)                 # its id, known before the model answers
    async for piece in stream:         # text pieces, None (the text so far is void), then the Turn
        ...

A turn stopped meanwhile raises `Cancelled` (as functai's stream does); one that waits for a
person raises `Waiting`. `TurnHandle` is a placed turn (what `chat.send(...)` returns), and
`TextWatch` reads any turn's text from its store's stream (`chat.watch(...)`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Generator
from dataclasses import dataclass
from typing import Any, Protocol

from core.errors import ErrorCode, ThreadlineError
from store.backends.reader import ConversationLog, now
from store.backends.streams import StreamReader, Streams

from . import acting
from .acting import Cancelled, LiveTurn, Waiting
from .reading import Turn

_LOG_CHECK_S = 0.25
_END_GRACE_S = 2.0
"""How long a watch waits for a stream's `end` once the log says its turn ended: a PostgreSQL
store's stream is written by a thread of its own, so its last events may land just after."""
_ENDS = ("done", "failed", "stopped", "abandoned", "waiting")


@dataclass(frozen=True, slots=True)
class Piece:
    """A piece of a turn's streamed text."""

    offset: int
    """The stream offset to reconnect from after this piece."""
    text: str | None
    """The text, or None: the text so far is void (the model was asked again)."""


@dataclass(frozen=True, slots=True)
class TextWatch:
    """Where a conversation's turns' text is read: its store's streams, and its log (which tells when
    a turn ended, for a writer that streams nothing here)."""

    streams: Streams
    log: ConversationLog

    async def pieces(self, turn: str, *, offset: int = 0, poll: float = 0.01) -> AsyncIterator[Piece]:
        """Yield what `turn`'s model writes, from byte `offset` of its stream, until the turn ends."""
        reader, checked = StreamReader(), time.monotonic()
        ended_at: float | None = None
        while True:
            events = await asyncio.to_thread(self.streams.read, turn, offset)
            for end, event in events:
                offset = end
                for text in reader.feed([event]):
                    yield Piece(end, text)
            if reader.ended in _ENDS:
                return
            if ended_at is not None and (reader.run is None or time.monotonic() - ended_at > _END_GRACE_S):
                return  # ended by a writer that streams nothing here, or its stream's end is lost
            if not events and ended_at is None and time.monotonic() - checked > _LOG_CHECK_S:
                checked = time.monotonic()
                found = (await self.log.read()).turns.get(turn)
                if found is None or found.ended is not None or found.state(now()) == "waiting":
                    ended_at = time.monotonic()  # ended, or waiting for a person: nothing more streams now
                continue
            await asyncio.sleep(poll)


class Placing(acting.Conversation, Protocol):
    """What a placed turn needs of its conversation: how its send ended, its turn, and its text."""

    def watch(self, turn: str) -> AsyncIterator[Piece]:
        """The turn's text pieces until it ends."""
        ...


@dataclass(slots=True)
class TurnHandle:
    """A placed turn: its id and parent are known; `result()` waits for how it ends."""

    id: str | None
    parent: str | None
    request_id: str
    conversation: Placing

    async def result(self) -> LiveTurn:
        """Wait for the turn to end (or to wait for a person); return it as the log holds it.

        Raises:
            ThreadlineError: the coded error when the send was refused.
        """
        outcome = await self.conversation.outcome(self.request_id)
        if outcome.turn is None:
            bare = Turn(id="", parent=None, state=outcome.state, inputs={}, request_id=self.request_id)
            return LiveTurn.of(bare, self.conversation)
        return await self.conversation.turn(outcome.turn)


class TurnStream:
    """A turn being made: `await` it to place the turn, iterate it for the text and the finished turn."""

    def __init__(self, place: Callable[[], Awaitable[TurnHandle]]) -> None:
        self._place = place
        self._placed: TurnHandle | None = None

    async def start(self) -> TurnStream:
        """Place the turn (once); its id is then `turn`."""
        if self._placed is None:
            self._placed = await self._place()
        return self

    def __await__(self) -> Generator[Any, None, TurnStream]:
        return self.start().__await__()

    @property
    def turn(self) -> str:
        """The turn's id (known once the stream was awaited or iterated)."""
        if self._placed is None or self._placed.id is None:
            raise ThreadlineError(ErrorCode.TURN_STATE, "the turn is not placed yet: await the stream first")
        return self._placed.id

    def __aiter__(self) -> AsyncIterator[str | Turn | None]:
        return self._pieces()

    async def _pieces(self) -> AsyncIterator[str | Turn | None]:
        await self.start()
        placed = self._placed
        assert placed is not None  # placed by start()
        if placed.id is not None:
            async for piece in placed.conversation.watch(placed.id):
                yield piece.text
        turn = await placed.result()
        if turn.state == "stopped":
            raise Cancelled(turn.id)
        if turn.state == "waiting":
            raise Waiting(turn)
        yield turn
