"""The send policies: what a send does while the head runs (no pydantic here: the command line's
parser offers them as choices before it loads anything a command runs with)."""

from __future__ import annotations

from typing import Literal

Sends = Literal["queue", "refuse", "branch", "interrupt", "steer"]
"""What a send does while the head runs: wait for it, be refused `conversation-busy`, go beside it,
stop it and continue from its parent (`interrupt`), or join it at its next step (`steer`)."""
SENDS: tuple[Sends, ...] = ("queue", "refuse", "branch", "interrupt", "steer")
