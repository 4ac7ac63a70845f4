"""Programs called on their own, outside any conversation (as functai's are): the model answers, a program
with code runs its body with its helpers, and nothing is recorded anywhere."""

from __future__ import annotations

from pathlib import Path

import pytest

import threadline
from core.errors import ErrorCode, ThreadlineError
from tests.support import support_programs

OFFLINE = "(offline) You said: {}. I was shown 0 earlier turn(s)."


@pytest.fixture(autouse=True)
def _offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The offline model, and a data folder that must stay empty."""
    monkeypatch.setenv("THREADLINE_MODEL", "offline")
    monkeypatch.setenv("THREADLINE_DATA", str(tmp_path / "data"))
    return tmp_path / "data"


@threadline.program
def tutor(message: str) -> str:
    """Tutor."""
    raise NotImplementedError  # the model answers


def test_a_program_answers_on_its_own(tmp_path: Path) -> None:
    """The seed's `tutor("Hi")` outside any conversation answers as the program would; nothing is kept."""
    assert OFFLINE.format("Hi") == tutor("Hi")
    assert not (tmp_path / "data").exists()


async def test_a_program_answers_on_its_own_on_an_event_loop() -> None:
    """Called plainly where an event loop runs (a notebook's cell), it still answers; `acall` awaits."""
    assert OFFLINE.format("Hi") == tutor("Hi")
    assert OFFLINE.format("Ho") == await tutor.acall("Ho")


def test_a_helper_answers_on_its_own() -> None:
    """An `@threadline.ai` helper called outside a turn answers with its typed answer."""
    assert "shipping" == support_programs.topic("Where is my parcel? shipping")
    assert OFFLINE.format("message: hello\ntopic: shipping") == support_programs.answer("hello", "shipping")


def test_a_program_with_code_runs_its_body_on_its_own(tmp_path: Path) -> None:
    """`support(...)` runs its body: its helpers answer, `earlier()` is `[]`, its code's effects happen."""
    handoffs = len(support_programs.HANDOFFS)

    shipping = support_programs.support("Where is my parcel? shipping")
    other = support_programs.support("Something other: I want to speak to a person")

    assert shipping.startswith("(offline) You said:")
    assert "A person from our team will write to you shortly." == other
    assert handoffs + 1 == len(support_programs.HANDOFFS)
    assert not (tmp_path / "data").exists()


async def test_an_async_program_with_code_runs_its_body_on_its_own() -> None:
    """An async body is awaited; its helpers' `acall` answer on the caller's loop."""
    answered = await support_programs.support_async("Where is my parcel? shipping")

    assert answered.startswith("(offline) You said:")


def test_a_program_with_tools_answers_only_in_a_conversation() -> None:
    """Its tool calls are run (and approved) in a turn: on its own it says so (`turn-state`)."""
    with pytest.raises(ThreadlineError) as refused:
        support_programs.track("Where is order 7?")

    assert ErrorCode.TURN_STATE == refused.value.code


async def test_a_defined_program_and_a_sync_body_answer_on_an_event_loop() -> None:
    """A `Program.define`d program answers its last output; a sync body's `acall` runs on a thread."""
    grader = threadline.Program.define(
        "grader", "Grade the answer.", inputs={"question": str, "answer": str}, outputs={"score": float, "result": str}
    )

    graded = grader("What is 1/2 + 1/3?", answer="5/6")
    answered = await support_programs.support.acall("Where is my parcel? shipping")

    assert graded.startswith("(offline) You said: question: What is 1/2 + 1/3?")
    assert answered.startswith("(offline) You said:")
