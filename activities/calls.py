"""Every ended turn in its store's call log, as functai logs its own turns' calls.

A functai turn that was shown a Threadline turn can be rated (`functai.rated`) only when that turn
has a call record too, so each turn's call is written once its `ended` record is in the log. The
call log never stands in a turn's way: one that cannot be written is a warning (`store.calls.log`),
and `threadline backfill-calls` writes whatever is missing later.
"""

from __future__ import annotations

from collections.abc import Mapping

from store.backends.reader import ConversationLog, in_store_thread
from store.calls.lines import CallLog
from store.calls.log import write_call
from store.log.state import Turn


class CallWriter:
    """Writes the calls of ended turns to each store's call log.

    Args:
        logs: The call log of each store, by store name (a store with none logs no calls).
    """

    def __init__(self, logs: Mapping[str, CallLog]) -> None:
        self.logs = dict(logs)

    def __call__(self, store: str) -> CallLog | None:
        """The call log of the store named `store`, if it has one."""
        return self.logs.get(store)

    async def ended(self, store: str, conversation: ConversationLog, turn: Turn) -> None:
        """Log `turn`'s call, once its `ended` record is in `conversation`'s log: on the event loop into a
        folder (one unfsynced write, as a turn's stream is written), in a thread into a database."""
        calls = self.logs.get(store)
        if calls is None or turn.ended is None:
            return
        caller = {"kind": "threadline", "store": store}
        if calls.local:
            write_call(calls, conversation.conversation, conversation.log, turn.id, caller=caller)
            return
        await in_store_thread(write_call, calls, conversation.conversation, conversation.log, turn.id, caller=caller)
