"""Programs the merge and evaluation tests register on their workers (THREADLINE_PROGRAMS)."""

from __future__ import annotations

import threadline


@threadline.program
def pick(answers: list[dict[str, str]]) -> str:
    """Pick the best answer."""
    raise NotImplementedError("the model answers for it")


@threadline.program
def count(answers: list[dict[str, str]]) -> int:
    """Count the answers."""
    raise NotImplementedError("the model answers for it")
