"""A user's program module, as a worker loads it from THREADLINE_PROGRAMS."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

import threadline
from store.programs.program import Program


class Verdict(BaseModel):
    """How a reply is judged."""

    label: Literal["correct", "wrong"]
    score: float


GRADER = Program.define(
    "grader",
    "Grade the student's answer to the question.",
    inputs={"question": str, "answer": str},
    outputs={"verdict": Verdict, "result": str},
)


@threadline.program
def summarise(text: str, words: int = 30) -> str:
    """Summarise the text in at most the given number of words."""
    raise NotImplementedError  # the body never runs: a model answers
