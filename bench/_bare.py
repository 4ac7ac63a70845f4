"""The anchors of bench/turns.py: two bare Temporal conversations, in a module of their own.

`BareConversation` takes a turn as a signal (signal-with-start) and answers a `wait` update, the
shape Threadline's design gives a turn. `BestBareConversation` is what a plain Temporal user would
write for the fewest round trips: each turn one update-with-start, whose handler runs the activity
and returns its answer. Both run the same one activity, which appends one fsynced line.

A best bare conversation started `placed` keeps what Threadline promises of a turn's record: the
activity appends a line that places the turn (fsynced) before it works out the answer, then the
answer's line (fsynced), each in its own hand-off to a thread, as a turn placed before its model
call and ended after it is. It is a measure of what that promise costs a bare conversation, not an
anchor the targets are set against.

The workflow sandbox executes a workflow's module again for every new workflow instance, so the
anchors live in this small module (as Threadline's workflow does in `workflows/`): defined inside
the large benchmark module, each instance would pay for re-running all of it, and the anchors
would look slower than a bare conversation is.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections import deque
from dataclasses import dataclass
from datetime import timedelta

from temporalio import activity, workflow


@dataclass(frozen=True, slots=True)
class BareSend:
    """The anchor's `turn` signal."""

    request_id: str
    text: str


@dataclass(frozen=True, slots=True)
class BareAppend:
    """The anchor's activity input: the file of the conversation and the turn to append to it."""

    path: str
    request_id: str
    text: str


def _append_line(path: str, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


@activity.defn(name="bare.append")
async def bare_append(turn: BareAppend) -> str:
    """Answer the turn and append it, as one fsynced JSON line, to the conversation's file."""
    answer = f"(bare) You said: {turn.text}"
    line = {"kind": "turn", "request_id": turn.request_id, "inputs": {"message": turn.text}, "result": answer}
    data = (json.dumps(line, ensure_ascii=False) + "\n").encode()
    await asyncio.to_thread(_append_line, turn.path, data)
    return answer


@activity.defn(name="bare.place_and_append")
async def bare_place_and_append(turn: BareAppend) -> str:
    """Append a line placing the turn (fsynced, in a hand-off of its own), then answer and append it as
    `bare_append` does: the activity of a best bare conversation started `placed`."""
    placing = {"kind": "placed", "request_id": turn.request_id, "inputs": {"message": turn.text}}
    await asyncio.to_thread(_append_line, turn.path, (json.dumps(placing, ensure_ascii=False) + "\n").encode())
    return await bare_append(turn)


@workflow.defn(name="BareConversation")
class BareConversation:
    """Signals queue turns, the main loop runs one activity per turn, `wait` answers the caller."""

    def __init__(self) -> None:
        self.pending: deque[BareSend] = deque()
        self.answers: dict[str, str] = {}

    @workflow.signal(name="turn")
    def turn(self, send: BareSend) -> None:
        self.pending.append(send)

    @workflow.update(name="wait")
    async def wait(self, request_id: str) -> str:
        await workflow.wait_condition(lambda: request_id in self.answers)
        return self.answers[request_id]

    @workflow.run
    async def run(self, path: str) -> None:
        while True:
            await workflow.wait_condition(lambda: bool(self.pending))
            send = self.pending.popleft()
            self.answers[send.request_id] = await workflow.execute_activity(
                bare_append,
                BareAppend(path=path, request_id=send.request_id, text=send.text),
                start_to_close_timeout=timedelta(seconds=30),
            )


@workflow.defn(name="BestBareConversation")
class BestBareConversation:
    """Each turn is one `turn` update (sent with update-with-start): it runs the activity and returns the answer."""

    @workflow.init
    def __init__(self, path: str, placed: bool = False) -> None:
        self.path = path
        self.placed = placed

    @workflow.update(name="turn")
    async def turn(self, send: BareSend) -> str:
        return await workflow.execute_activity(
            bare_place_and_append if self.placed else bare_append,
            BareAppend(path=self.path, request_id=send.request_id, text=send.text),
            start_to_close_timeout=timedelta(seconds=30),
        )

    @workflow.run
    async def run(self, path: str, placed: bool = False) -> None:
        await workflow.wait_condition(lambda: False)  # open for the next turn, as a conversation is
