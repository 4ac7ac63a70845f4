"""A turn watched while it is made: placed at once, then its text as the model writes it.

    stream = await chat.stream("Tell me a story.")
    print(stream.turn)                 # its id, known before the model answers
    async for piece in stream:         # text pieces, None (the text so far is void), then the Turn
        ...

A turn stopped meanwhile raises `Cancelled` (as functai's stream does); one that waits for a
person raises `Waiting`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Generator
from typing import Any, Protocol

from core.errors import ErrorCode, ThreadlineError

from .acting import Cancelled, LiveTurn, Waiting
from .reading import Turn


class Watcher(Protocol):
    """What a stream needs of its conversation: its turns' text as it is written."""

    def watch(self, turn: str) -> AsyncIterator[Any]:
        """The turn's text pieces (each with a `text`) until it ends."""
        ...


class TurnHandle(Protocol):
    """A placed turn (`threadline.client.TurnHandle`)."""

    @property
    def id(self) -> str | None:
        """The turn's id (None: the send never became a turn)."""
        ...

    @property
    def conversation(self) -> Watcher:
        """The conversation it was sent to."""
        ...

    async def result(self) -> LiveTurn:
        """Wait for the turn to end (or to wait for a person)."""
        ...


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
