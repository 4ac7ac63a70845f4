"""What every chaos test checks of a conversation after the fault: the log is whole and numbered,
every accepted send ended once (or was answered with a coded error), history stayed bounded, and
the conversation takes the next send."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Mapping
from pathlib import Path

from temporalio.api.common.v1 import Payload
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client

from core.errors import ErrorCode, ThreadlineError
from core.temporal import CLAIM_CHECK_ENCODING, workflow_id
from store.backends.folder import FolderStore
from store.log.state import Log
from store.records import uuid7
from threadline.client import Conversation

PER_SEND_HISTORY = 8 * 1024
"""The most history bytes one send may add, whatever its input size (the claim check's promise)."""

Answer = str | ThreadlineError | None
"""How a send was answered: the id of the turn it made, the coded error its caller got, or None: a
stop dropped it while it was queued (it records nothing)."""


def check_log(folder: Path, conversation: str) -> Log:
    """Every line's seq is its position, every turn ended at most once, no ended before its turn, and
    no request id made two turns."""
    records = FolderStore(folder).read(conversation)
    assert list(range(1, len(records) + 1)) == [r.get("seq") for r in records]
    ended = Counter(r["turn"] for r in records if r.get("kind") == "ended")
    assert [] == [turn for turn, count in ended.items() if count > 1]
    asked = Counter(r["request_id"] for r in records if r.get("kind") == "turn" and r.get("request_id"))
    assert [] == [request for request, count in asked.items() if count > 1]
    log = Log(records)
    assert set(ended) <= set(log.turns)
    return log


def check_ended_once(log: Log, turns: list[str]) -> None:
    """Each of `turns` is in the log and ended exactly once."""
    assert [] == [turn for turn in turns if turn not in log.turns or log.turns[turn].ended is None]


def check_answered(log: Log, answers: Mapping[str, Answer]) -> None:
    """Every send (by request id) made a turn that ended, or its caller got a coded error (never
    `internal`); and no turn in the log came from a send nobody made.

    A send answered with an error may still have run (a `server-unavailable` send is kept): then its
    turn ended once like any other.
    """
    errors = {rid: a.code for rid, a in answers.items() if isinstance(a, ThreadlineError)}
    assert {} == {rid: code for rid, code in errors.items() if code == ErrorCode.INTERNAL}
    made = {rid: turn for rid, turn in answers.items() if isinstance(turn, str)}
    assert set() == {rid for rid, answer in answers.items() if answer is None} & set(log.request_ids)
    assert made == {rid: log.request_ids.get(rid) for rid in made}
    check_ended_once(log, [*made.values(), *(log.request_ids[rid] for rid in errors if rid in log.request_ids)])
    assert set() == set(log.request_ids) - set(answers)


async def history_bytes(client: Client, conversation: str, *, store: str = "default") -> int:
    """The bytes of the conversation's workflow history, every run of it (continue-as-new chains them)."""
    total, run_id = 0, ""
    while True:
        handle = client.get_workflow_handle(workflow_id(store, conversation), run_id=run_id or None)
        events = (await handle.fetch_history()).events
        total += sum(event.ByteSize() for event in events)
        run_id = events[0].workflow_execution_started_event_attributes.continued_execution_run_id
        if not run_id:
            return total


def payload_bytes(payload: Payload) -> int:
    """What a payload weighs before the claim check: a reference counts as the bytes it stands for."""
    if payload.metadata.get("encoding") == CLAIM_CHECK_ENCODING:
        return int(payload.metadata["size"])
    return payload.ByteSize()


def started_input_bytes(first: HistoryEvent) -> int:
    """The size of what a run started with (for a continued run: what continue-as-new carried)."""
    return sum(payload_bytes(p) for p in first.workflow_execution_started_event_attributes.input.payloads)


class Ledger:
    """The sends a test made and how each was answered, for `check_answered`."""

    def __init__(self) -> None:
        self.answers: dict[str, Answer] = {}

    async def predict(self, chat: Conversation, message: str, *, request_id: str | None = None) -> str:
        """Send `message` and wait for its turn to end; record the turn, or the coded error raised."""
        rid = request_id or uuid7()
        try:
            turn = await chat.predict(message, request_id=rid)
        except ThreadlineError as err:
            self.answers[rid] = err
            raise
        self.answers[rid] = turn.id
        return turn.id

    async def send(self, chat: Conversation, message: str, *, request_id: str | None = None) -> str | None:
        """Send `message` and wait until it is placed; record its turn and return its id, or record the
        coded error it was refused with and return None."""
        rid = request_id or uuid7()
        try:
            placed = await chat.send(message, request_id=rid)
        except ThreadlineError as err:
            self.answers[rid] = err
            return None
        self.answers[rid] = placed.id
        return placed.id

    def check(self, folder: Path, conversation: str) -> Log:
        """The log is whole (`check_log`) and every send recorded here was answered (`check_answered`)."""
        log = check_log(folder, conversation)
        check_answered(log, self.answers)
        return log


async def until_ended(folder: Path, conversation: str, request_ids: list[str], patience: float = 60.0) -> None:
    """Wait until the log holds an ended turn for each of `request_ids` (outcomes of earlier runs are
    not carried, so the log, not `wait`, says how older sends ended)."""
    deadline = time.monotonic() + patience
    while True:
        log = Log(FolderStore(folder).read(conversation))
        left = [
            rid for rid in request_ids if rid not in log.request_ids or log.turns[log.request_ids[rid]].ended is None
        ]
        if not left:
            return
        assert time.monotonic() < deadline, f"{len(left)} send(s) never ended"
        await asyncio.sleep(0.1)
