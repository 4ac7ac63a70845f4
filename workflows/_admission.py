"""The admission chain of a conversation run: which part takes the first queued send, and which
carries out a stop.

A send is offered in this order, each part taking it or handing it on:

1. the guided flow (`_flows`): it goes first because, while a flow is active, a plain message is
   the flow's answer and never a turn of its own (and `TurnSend.flow` starts a flow);
2. the merges (`_merges`): a send with `merge` asks another program to combine branches, placed and
   recorded as functai writes a merge, never as a turn;
3. the turns (`_turns`): everything else begins a turn, and a repeated request id (which the parts
   above hand on) is answered there once.

A send placed and run at once (`_turns`) goes first: until its turn is known here, the next send
waits while that turn is pinned (found in the log, or placed there), then is offered as above.

A stop goes the same way: a flow's stop (`StopSend.flow`) abandons the flow and nothing else; any
other cancels the merges it names, and stops turns unless it named a merge's turn alone.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from core.models import StopSend, TurnSend

    from ._flows import Flows
    from ._merges import Merges
    from ._turns import Turns


class Admission:
    """Flows, then merges, then turns: the first that takes a send places it."""

    def __init__(self, flows: Flows, merges: Merges, turns: Turns) -> None:
        self.flows = flows
        self.merges = merges
        self.turns = turns

    async def admit(self, send: TurnSend) -> None:
        """Place `send`, the first queued one, in the first part that takes it."""
        if self.turns.state.unplaced is not None:  # the send before it, placed at once: its turn comes first
            await self.turns.pin()
            return
        if not await self.flows.take(send) and not await self.merges.take(send):
            await self.turns.admit(send)

    async def stop(self, stop: StopSend, queued: int) -> None:
        """Carry out `stop`, which came when `queued` sends were queued (it drops only those)."""
        if stop.flow:
            await self.flows.stop()
        elif not self.merges.cancel(stop):
            await self.turns.stop(stop, queued)
