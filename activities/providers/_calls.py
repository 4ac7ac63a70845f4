"""Tool calls as they arrive: pieces of one call, by its place in the reply, joined when it ends.

Both wire formats stream a call's input as JSON text in fragments (OpenAI's `delta.tool_calls[i]
.function.arguments`, Anthropic's `input_json_delta`) that mean nothing until the last one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from core.errors import ErrorCode, ThreadlineError
from store.programs.tools import ToolCall


@dataclass(slots=True)
class PendingCall:
    """One tool call being received: its id and name (sent once) and its input's JSON text so far."""

    id: str = ""
    name: str = ""
    pieces: list[str] = field(default_factory=list)

    def finish(self, provider: str) -> ToolCall:
        """The whole call; an input that is not a JSON object is `parse-failed`."""
        text = "".join(self.pieces).strip()
        try:
            value = json.loads(text) if text else {}
        except ValueError:
            value = None
        if not isinstance(value, dict) or not self.name:
            message = f"{provider}'s model asked for a tool call that cannot be read; try again"
            raise ThreadlineError(ErrorCode.PARSE_FAILED, message, tool=self.name)
        return ToolCall(self.id, self.name, value)


@dataclass(slots=True)
class PendingCalls:
    """The calls of one reply, in the order the provider numbered them."""

    by_index: dict[int, PendingCall] = field(default_factory=dict)

    def add(self, index: int | None, *, id: str | None = None, name: str | None = None, piece: str = "") -> None:
        """Add what a fragment says of the call at `index` (a fragment with no index: by its id, else the last)."""
        call = self._slot(index, id)
        call.id = id or call.id
        call.name = name or call.name
        if piece:
            call.pieces.append(piece)

    def _slot(self, index: int | None, id: str | None) -> PendingCall:
        # some compatible servers send each call whole and leave the index out
        if index is None:
            known = [i for i, c in self.by_index.items() if id and c.id == id]
            last = max(self.by_index, default=-1)
            index = known[0] if known else last + 1 if id or last < 0 else last
        return self.by_index.setdefault(index, PendingCall())

    def __bool__(self) -> bool:
        return bool(self.by_index)

    def finish(self, provider: str) -> tuple[ToolCall, ...]:
        """Every call, in index order."""
        return tuple(self.by_index[i].finish(provider) for i in sorted(self.by_index))
