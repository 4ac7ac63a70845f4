"""Bad input is refused with a stable code, and nothing is recorded."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client
from temporalio.worker import Worker

from core.errors import ThreadlineError
from core.models import TurnSend
from store.backends.folder import FolderStore
from threadline.client import Threadline


def recorded(folder: Path) -> list[str]:
    return FolderStore(folder).conversations()


async def test_unknown_program_is_refused(tl: Threadline, worker: Worker, folder: Path, cid: str) -> None:
    """A program the worker does not have: `program-unknown`."""
    with pytest.raises(ThreadlineError) as refused:
        await tl.conversation("no-such-program", id=cid).send(message="hi")

    assert "program-unknown" == refused.value.code
    assert [] == recorded(folder)


@pytest.mark.parametrize(
    ("inputs", "code"),
    [({"wrong": "name"}, "inputs-invalid"), ({"message": 42}, "inputs-invalid"), ({}, "inputs-invalid")],
)
async def test_inputs_that_do_not_match_are_refused(
    tl: Threadline, worker: Worker, folder: Path, cid: str, inputs: dict[str, Any], code: str
) -> None:
    """Missing, extra or mistyped inputs: `inputs-invalid`, before anything is appended."""
    with pytest.raises(ThreadlineError) as refused:
        await tl.conversation("tutor", id=cid).send(**inputs)

    assert code == refused.value.code
    assert [] == recorded(folder)


async def test_an_input_over_one_megabyte_is_refused_before_sending(tl: Threadline, folder: Path, cid: str) -> None:
    """Inputs over 1 MB are refused by the client: nothing reaches Temporal or the log."""
    with pytest.raises(ThreadlineError) as refused:
        await tl.conversation("tutor", id=cid).send("x" * (1 << 20))

    assert "input-too-large" == refused.value.code
    assert [] == recorded(folder)


@pytest.mark.parametrize("bad", ["../escape", "a/b", "", "-leading-dash", "x" * 201])
def test_an_invalid_conversation_id_is_refused(tl: Threadline, bad: str) -> None:
    """Conversation ids are file names, never paths: `conversation-id`."""
    with pytest.raises(ThreadlineError) as refused:
        tl.conversation("tutor", id=bad)

    assert "conversation-id" == refused.value.code


def test_an_unknown_store_is_refused(tl: Threadline, cid: str) -> None:
    """A store no setting names: `store-unknown`."""
    with pytest.raises(ThreadlineError) as refused:
        tl.conversation("tutor", id=cid, store="elsewhere")

    assert "store-unknown" == refused.value.code


async def test_continuing_an_unknown_turn_is_refused(tl: Threadline, worker: Worker, folder: Path, cid: str) -> None:
    """continue_from a turn the conversation does not hold: `turn-unknown`, nothing recorded."""
    with pytest.raises(ThreadlineError) as refused:
        await tl.conversation("tutor", id=cid).continue_from("01926d00-0001-7000-8000-000000000000").send("x")

    assert "turn-unknown" == refused.value.code
    assert [] == recorded(folder)


async def test_an_oversized_signal_from_elsewhere_is_refused_by_the_worker(
    tl: Threadline, client: Client, worker: Worker, folder: Path, cid: str
) -> None:
    """A turn signalled by another SDK or the Temporal CLI skips our client's check: the worker
    refuses it too, before anything is appended."""
    chat = tl.conversation("tutor", id=cid)
    send = TurnSend(request_id="big", inputs={"message": "x" * (1 << 20)}, program="tutor")

    await chat.signal(send)
    with pytest.raises(ThreadlineError) as refused:
        await chat.outcome("big")

    assert "input-too-large" == refused.value.code
    assert [] == recorded(folder)
