"""Bad input is refused with a stable code, and nothing is recorded."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client
from temporalio.worker import Worker

from core.errors import ThreadlineError
from core.limits import MAX_NAME, MAX_NAMES, MAX_NOTE
from core.models import TurnSend
from store.backends.folder import FolderStore
from tests.support.service_kit import serving
from threadline.client import Conversation, Threadline
from threadline.http import create_app


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


LONG = "offline" + "o" * MAX_NAME
"""A model name one past every name's limit (a 500,000-character one was once sent to the provider)."""


@pytest.mark.parametrize(
    ("given", "send"),
    [
        ({"lm": LONG}, {}),
        ({}, {"lm": LONG}),
        ({"context": {"topics": "track", "topic_model": LONG}}, {}),
        ({"context": {"summary": {"model": LONG}}}, {}),
        ({"context": {"without": ["x" * (MAX_NAME + 1)]}}, {}),
        ({"approve": ["t"] * (MAX_NAMES + 1)}, {}),
        ({"earlier_without": ["reasoning" * 30]}, {}),
        ({"program": "p" * (MAX_NAME + 1)}, {}),
        ({"store": "s" * (MAX_NAME + 1)}, {}),
    ],
)
async def test_a_name_over_its_limit_is_refused_before_sending(
    tl: Threadline, worker: Worker, folder: Path, cid: str, given: dict[str, Any], send: dict[str, Any]
) -> None:
    """Names (models, programs, outputs, tools, stores) have at most `MAX_NAME` characters and a list of
    them `MAX_NAMES`: `invalid-request`, nothing sent or recorded."""
    with pytest.raises(ThreadlineError) as refused:
        await tl.conversation(id=cid, **given).send("hi", **send)

    assert "invalid-request" == refused.value.code
    assert [] == recorded(folder)


@pytest.mark.parametrize(
    "act",
    [
        lambda chat: chat.start_flow("f" * (MAX_NAME + 1)),
        lambda chat: chat.setup("hi", metadata={"k" * (MAX_NAME + 1): 1}),
        lambda chat: chat.head("t" * (MAX_NAME + 1)),
        lambda chat: chat.merge(["t"], "m" * (MAX_NAME + 1)),
        lambda chat: chat.rate("t", "right", reasons=["r" * (MAX_NAME + 1)]),
        lambda chat: chat.rate("t", "right", note="n" * (MAX_NOTE + 1)),
    ],
    ids=["flow", "metadata-key", "turn-id", "merging-program", "rating-reason", "rating-note"],
)
async def test_other_names_over_their_limit_are_refused(
    tl: Threadline, worker: Worker, folder: Path, cid: str, act: Callable[[Conversation], Awaitable[Any]]
) -> None:
    """Flow names, metadata keys, turn ids, a rating's reasons and note: `invalid-request`, nothing recorded."""
    with pytest.raises(ThreadlineError) as refused:
        await act(tl.conversation("tutor", id=cid))

    assert "invalid-request" == refused.value.code
    assert [] == recorded(folder)


async def test_a_long_model_name_signalled_from_elsewhere_is_refused_by_the_worker(
    tl: Threadline, worker: Worker, folder: Path, cid: str
) -> None:
    """A send from another SDK skips the client's checks: the worker refuses its model name too, before
    anything is appended, and the conversation takes the next send."""
    chat = tl.conversation("tutor", id=cid)

    await chat.signal(TurnSend(request_id="long-lm", inputs={"message": "hi"}, program="tutor", lm=LONG))
    with pytest.raises(ThreadlineError) as refused:
        await chat.outcome("long-lm")
    assert [] == recorded(folder)
    after = await chat.predict("after")

    assert "invalid-request" == refused.value.code
    assert "done" == after.state


async def test_a_long_model_name_is_refused_by_the_service(
    tl: Threadline, worker: Worker, folder: Path, cid: str
) -> None:
    """The same refusal over HTTP: 422 `invalid-request`, nothing recorded."""
    async with serving(create_app(tl)) as http:
        answer = await http.post(f"/v1/conversations/{cid}/turns", json={"message": "hi", "lm": LONG})

    assert (422, "invalid-request") == (answer.status_code, answer.json()["error"]["code"])
    assert [] == recorded(folder)
