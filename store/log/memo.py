"""What a long branch shows, kept in its `Log` so the next turn after it pays only for its parent.

Under format 1's default rule a turn is shown every done turn of its branch. Worked out from the
log each time, that costs a turn time linear in the conversation (about 4 ms at 1,000 turns, 30 ms
at 3,000, on these machines). The turns a branch shows are done, and a done turn no longer changes
(its first `ended` record wins), so what a branch of done turns shows is kept here, and the branch
one turn longer shows that and its newest turn (`store.log.rules.shown`).

What is kept grows in place, one turn at a time; the `Shown` results made from it hold copies of its
lists but share their entries, which are never to be changed.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

from store.records import Record

KEPT_FROM = 64
"""The shortest branch whose showing is kept (a shorter one is cheap to work out, and most
conversations are short: they keep nothing more)."""


@dataclass(slots=True)
class ShownMemo:
    """What a turn after `tip` is shown under format 1's default rule, by a program with `key`."""

    key: Hashable
    """The program's fields and signature as the showing depends on them (`rules.shown`)."""
    generation: int
    """The log's `generation` when kept: a record that changes what a done turn shows moves it on."""
    tip: str
    turns: list[str]
    saw: list[Record]
    """The `saw` entries before compression (`saw.compress`)."""
    rows: list[dict[str, Any]]
    exchanges: list[dict[str, Any]]
    versions: set[str]
    """The program versions of the branch's turns (`turns.check_program`)."""
    compresses: bool
    """Whether `saw` compresses to `[{"saw_of": tip}, saw[-1]]`."""
    renders: list[Any] = field(default_factory=list)
    """Kept for whoever renders `exchanges` (the model request's messages: `Shown.renders`): what it
    derived of each exchange, so the next turn derives only its own."""
