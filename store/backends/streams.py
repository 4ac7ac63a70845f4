"""Per-turn text streams: what a model call has said so far, for whoever watches the turn.

    <folder>/streams/<turn>.jsonl    one event per line, appended unfsynced (it is a view, not a record)

Every event names its writer (`run`, random per try) and the turn's log `attempt`:
`{"start": true}` when a try begins (a retried try starts over, so readers drop the text of earlier
tries instead of showing it twice, and ignore late writes of a try that was replaced),
`{"text": s}` for each piece, `{"restart": true}` when a reply that did not fit is asked for
again, and `{"end": state}` when the try ends. A reader keeps the byte offset it
has read up to and reconnects from there, missing nothing. This is not functai's `trees/` format,
so it lives in its own folder.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from core.logs import get_logger

from .base import check_id

logger = get_logger(__name__)


class StreamWriting(Protocol):
    """What a model call writes its text through (a folder's `StreamWriter`, a PostgreSQL one)."""

    def write(self, event: dict[str, Any]) -> None:
        """Append `event` for this try."""
        ...

    def text(self, piece: str) -> None:
        """Append a piece of text."""
        ...

    def end(self, state: str) -> None:
        """Mark the try's end."""
        ...

    def close(self) -> None:
        """Release what the writer holds."""
        ...

    async def written(self) -> None:
        """Return once every event this writer was given is stored (a writer that hands its events to a
        thread waits for it): a turn's answer then never runs ahead of its stream, so a purge that
        follows it finds every row to remove."""
        ...


class Streams(Protocol):
    """The text streams of one store: a writer per try, and reads from an offset."""

    def writer(self, turn: str, attempt: int) -> StreamWriting:
        """A writer for one attempt at `turn`; it marks the attempt's start (a folder's within `LINGER_S`)."""
        ...

    def read(self, turn: str, offset: int = 0) -> list[tuple[int, dict[str, Any]]]:
        """The events after `offset`, each with the offset to resume from after it (blocking)."""
        ...

    def close(self) -> None:
        """Release what the streams hold (blocking)."""
        ...

    def remove(self, turns: Sequence[str]) -> int:
        """Remove the streams of `turns` (a conversation removed); return how many there were (blocking)."""
        ...


class StreamLog:
    """The streams of one store folder."""

    def __init__(self, folder: str | os.PathLike[str]) -> None:
        self.folder = Path(os.fspath(folder)).expanduser().absolute() / "streams"
        self._made = False

    def close(self) -> None:
        """Nothing to release: each writer closes its own file."""

    def path(self, turn: str) -> Path:
        """The stream file of `turn`."""
        return self.folder / f"{check_id(turn)}.jsonl"

    def writer(self, turn: str, attempt: int) -> StreamWriter:
        """A writer for one attempt at `turn`; it marks the attempt's start (within `LINGER_S`, with the text
        that follows). Close it."""
        if not self._made:
            os.makedirs(self.folder, mode=0o700, exist_ok=True)
            self._made = True
        writer = StreamWriter(self.path(turn), attempt, secrets.token_hex(4))
        writer.hold({"start": True})
        return writer

    def read(self, turn: str, offset: int = 0) -> list[tuple[int, dict[str, Any]]]:
        """The complete events after byte `offset`, each with the offset just after it."""
        try:
            with self.path(turn).open("rb") as f:
                f.seek(offset)
                data = f.read()
        except FileNotFoundError:
            return []
        events = []
        for line in data.splitlines(keepends=True):
            if not line.endswith(b"\n"):
                break  # a piece still being written: read it next time
            offset += len(line)
            try:
                events.append((offset, json.loads(line)))
            except ValueError:
                continue
        return events

    def remove(self, turns: Sequence[str]) -> int:
        """Remove the stream files of `turns`; return how many there were."""
        removed = 0
        for turn in turns:
            try:
                self.path(turn).unlink()
            except FileNotFoundError:
                continue
            removed += 1
        return removed


LINGER_S = 0.02
"""How long a piece of text may wait to be written with the pieces after it: a model that streams
tokens in a burst costs a write per burst instead of one per token, and a watcher sees each piece
at most this late."""


@dataclass(slots=True)
class StreamWriter:
    """Appends one attempt's events on an O_APPEND descriptor kept open for the try, whole lines per write."""

    path: Path
    attempt: int
    run: str
    _fd: int | None = None
    _held: list[str] = field(default_factory=list)
    _written: float = 0.0
    _timer: asyncio.TimerHandle | None = None

    def write(self, event: dict[str, Any]) -> None:
        """Append `event` for this try, after the text held back."""
        self._held.append(self._line(event))
        self.flush()

    def hold(self, event: dict[str, Any]) -> None:
        """Append `event` within `LINGER_S`, with what follows it in that time (inside an event loop;
        outside one, at once): a try's start goes with its first text, and a try that ends sooner is
        written in one go (its file made, written once and closed, not written once per event)."""
        self._held.append(self._line(event))
        self._write_within(LINGER_S)

    def text(self, piece: str) -> None:
        """Append a piece of text: at once when the last write is `LINGER_S` old, else with the pieces
        that follow it within that time (inside an event loop; outside one, at once)."""
        if not piece:
            return
        self._held.append(self._line({"text": piece}))
        self._write_within(LINGER_S - (time.monotonic() - self._written))

    def _write_within(self, wait: float) -> None:
        """Write what is held back after `wait` s (at once when none is left, or outside an event loop),
        unless a write is due already."""
        if self._timer is not None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            wait = 0.0
        if wait <= 0:
            self.flush()
        else:
            self._timer = loop.call_later(wait, self._flush_later)

    def flush(self) -> None:
        """Write what is held back, in one write."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._held:
            return
        if self._fd is None:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
        data = memoryview("".join(self._held).encode("utf-8"))
        self._held.clear()
        while data:
            data = data[os.write(self._fd, data) :]
        self._written = time.monotonic()

    def _flush_later(self) -> None:
        try:
            self.flush()
        except OSError as err:  # a stream is a view: the turn goes on, its record log has the answer
            logger.warning("stream.write_failed", turn=self.path.stem, error=err.strerror)

    def close(self) -> None:
        """Write what is held back and release the file; later writes open it again."""
        self.flush()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _line(self, event: dict[str, Any]) -> str:
        stamped = {"attempt": self.attempt, "run": self.run, **event}
        return json.dumps(stamped, ensure_ascii=False, separators=(",", ":")) + "\n"

    def end(self, state: str) -> None:
        """Mark the attempt's end (`done`, `failed`, `stopped`, `yielded`) and close the file."""
        self.write({"end": state})
        self.close()

    async def written(self) -> None:
        """Nothing to wait for: `end` and `close` write what is held back before they return."""


FINAL = frozenset({"done", "failed", "stopped", "abandoned"})
"""The `end` states that end the turn: the text of the try that wrote one is the turn's, and nothing
after it is read (a try that wakes up late, or starts late, writes to a finished stream)."""


@dataclass(slots=True)
class StreamReader:
    """Folds a stream's events: the current attempt's text, and whether it ended.

    `feed` returns what to show for new events: text pieces, or `None` standing for "an attempt
    started over: forget the text shown so far". The text shown is the last started try's, until a
    try ends the turn (a `FINAL` end): its text then, if another try was shown, and nothing after.
    """

    run: str | None = None
    ended: str | None = None
    pieces: list[str] = field(default_factory=list)
    runs: dict[str, list[str]] = field(default_factory=dict)
    """Each try's text so far (by run), so the try that ends the turn can be shown whichever was current."""

    def feed(self, events: list[dict[str, Any]]) -> list[str | None]:
        """Apply `events`; return the pieces to show (None: the text so far is void)."""
        shown: list[str | None] = []
        for event in events:
            if self.ended in FINAL:
                break  # the turn ended: later events are a stale try's
            run = event.get("run")
            if event.get("start"):
                if self.pieces:
                    shown.append(None)
                self.run, self.ended, self.pieces = run, None, []
                self.runs[str(run)] = self.pieces
                continue
            if run != self.run and self.run is not None:
                self._other(str(run), event, shown)
                continue
            if event.get("restart"):  # the reply was refused and asked for again
                if self.pieces:
                    shown.append(None)
                self.pieces.clear()
            elif isinstance(event.get("text"), str):
                self.pieces.append(event["text"])
                shown.append(event["text"])
            elif event.get("end"):
                self.ended = str(event["end"])
        return shown

    def _other(self, run: str, event: dict[str, Any], shown: list[str | None]) -> None:
        """An event of a try that is not the one shown: kept, and shown if that try ends the turn."""
        pieces = self.runs.setdefault(run, [])
        if event.get("restart"):
            pieces.clear()
        elif isinstance(event.get("text"), str):
            pieces.append(event["text"])
        elif event.get("end") in FINAL:
            if self.pieces:
                shown.append(None)
            shown.extend(pieces)
            self.run, self.pieces, self.ended = run, pieces, str(event["end"])

    @property
    def text(self) -> str:
        """The current try's text so far."""
        return "".join(self.pieces)
