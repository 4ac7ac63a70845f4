"""A synchronous conversation writer over any store: the send loop of docs/format-1.md 4.5.

The Temporal activities decide turns with the same functions (`store.log.turns`); this class is
for code that writes a conversation directly (tests, benchmarks, tools), as a functai
process would.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace

from core.errors import ErrorCode, ThreadlineError
from store.log.rules import Shown, View
from store.log.state import Log
from store.log.turns import (
    Answer,
    Begin,
    Busy,
    Existing,
    Steered,
    TurnRequest,
    begin_turn,
    done_record,
    failed_record,
    stop_records,
)
from store.programs.program import Program
from store.records import Record, head_record, iso

from .base import Store, check_id, read_batches

Model = Callable[[Shown, dict[str, object]], Answer]


class Writer:
    """One view of one conversation, appending through `store`.

    Args:
        store: Any record log (`FolderStore`, `MemoryStore`, ...).
        conversation: The conversation id.
        program: The program its turns are made with.
        clock: Seconds since the epoch; injected so tests can move time.
    """

    def __init__(
        self, store: Store, conversation: str, program: Program, *, clock: Callable[[], float] = time.time
    ) -> None:
        self.store = store
        self.conversation = check_id(conversation)
        self.program = program
        self.clock = clock
        self.view = View()
        self._log = Log()

    def read(self) -> Log:
        """The conversation as of now (only new records are read, a bounded batch at a time)."""
        for batch in read_batches(self.store, self.conversation, self._log.n):
            self._log.apply(batch)
        return self._log

    def begin(self, request: TurnRequest, *, patience: float = 60.0) -> Begin | Existing:
        """Append a new turn's records, deciding again after every conflict; wait while the head runs.

        Raises:
            ThreadlineError: `conversation-busy` after `patience` seconds of waiting, or as refused.
        """
        deadline = time.monotonic() + patience
        while True:
            log = self.read()
            decided = begin_turn(log, self.program, replace(request, view=self.view), now=self.clock())
            if isinstance(decided, Busy | Steered):  # nothing here takes a steer: it waits as a queued send
                if time.monotonic() > deadline:
                    raise ThreadlineError(ErrorCode.CONVERSATION_BUSY, f"turn {decided.turn} is still running")
                self.store.wait(self.conversation, log.n, 0.25)
                continue
            if isinstance(decided, Existing):
                return decided
            try:
                self.store.append(self.conversation, decided.records, expect=decided.expect)
            except ThreadlineError as err:
                if err.code != ErrorCode.STORE_CONFLICT:
                    raise
                continue
            self.view = View(pinned=decided.turn)
            return decided

    def send(self, request: TurnRequest, model: Model) -> str:
        """Make one turn: begin it, ask `model`, append its `ended` record; return the turn id."""
        begun = self.begin(request)
        if isinstance(begun, Existing):
            return begun.turn
        log = self.read()
        try:
            answer = model(begun.shown, dict(request.inputs))
            ended = done_record(log, self.program, begun.turn, answer, attempt=1, saw=begun.shown.saw)
        except ThreadlineError as err:
            ended = failed_record(begun.turn, err, attempt=1, saw=begun.shown.saw)
        self.store.append(self.conversation, [ended])
        return begun.turn

    def continue_from(self, turn: str | None) -> None:
        """Continue after exactly `turn` with the next send."""
        self.view = View(pinned=turn, exact=True)

    def move_head(self, turn: str) -> None:
        """Append a `head` record: every view opened by id continues from `turn`."""
        if turn not in self.read().turns:
            raise ThreadlineError(ErrorCode.TURN_UNKNOWN, f"turn {turn} is not in this conversation")
        self.store.append(self.conversation, [head_record(turn, at=iso(self.clock()))])
        self.view = View(pinned=turn, exact=True)

    def stop(self, turn: str) -> list[Record]:
        """Ask `turn` to stop (or abandon it if nothing runs it); return what was appended."""
        records = stop_records(self.read(), turn, now=self.clock())
        if records:
            self.store.append(self.conversation, records)
        return records
