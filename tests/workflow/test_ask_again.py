"""`turn.ask_again()`: the exact request a turn sent, sent once more; nothing recorded unless asked (then
as a branch beside the turn)."""

from __future__ import annotations

from typing import Any

import pytest
from temporalio.worker import Worker

from core.errors import ErrorCode, ThreadlineError
from store.backends.folder import FolderStore
from threadline import again
from threadline.client import Threadline

OFFLINE = "(offline) You said: {}. I was shown {} earlier turn(s)."


def records(tl: Threadline, cid: str) -> list[dict[str, Any]]:
    return FolderStore(tl.settings.store_folder("default")).read(cid)


async def test_a_turn_asked_again_sends_its_request_and_records_nothing(
    tl: Threadline, worker: Worker, cid: str
) -> None:
    """The second turn asked again is shown the first again (its `saw`), with its inputs; the log is unchanged."""
    chat = tl.conversation("tutor", id=cid)
    await chat.predict("Hi")
    second = await chat.predict("Again")
    before = records(tl, cid)

    again = await second.ask_again()
    preview = await chat.continue_from(second.parent).render("Again")

    assert OFFLINE.format("Again", 1) == again.result
    assert {"result": again.result} == again.outputs
    assert (second.id, "offline", None) == (again.turn, again.model, again.branch)
    assert preview.request == again.request  # the request a turn after the same parent sends
    assert before == records(tl, cid)


async def test_a_turn_asked_again_with_record_is_a_branch_beside_it(tl: Threadline, worker: Worker, cid: str) -> None:
    """`record=True`: the turn's inputs are sent again under its parent; the head is the new turn."""
    chat = tl.conversation("tutor", id=cid)
    first = await chat.predict("Hi")
    second = await chat.predict("Again")

    kept = await second.ask_again(record=True)
    branch = await chat.turn(str(kept.branch))
    root = await (await chat.turn(first.id)).ask_again(record=True)

    assert OFFLINE.format("Again", 1) == kept.result
    assert (first.id, {"message": "Again"}) == (branch.parent, branch.inputs)
    assert kept.branch not in (first.id, second.id)
    assert (await chat.turn(str(root.branch))).parent is None
    assert 4 == sum(r["kind"] == "turn" for r in records(tl, cid))


async def test_asking_again_what_cannot_be_asked_is_refused(tl: Threadline, worker: Worker, cid: str) -> None:
    """An unknown turn: `turn-unknown`; an imported message (no model answered it): `turn-state`."""
    chat = tl.conversation("tutor", id=cid)
    first = await chat.predict("Hi")
    imported = await chat.add_assistant_message("Hello from a transcript")
    found = await chat.turn(imported)

    with pytest.raises(ThreadlineError) as unknown:
        await again.ask_again(chat, "no-such-turn", parent=first.id, inputs={}, lm=None, record=False)
    with pytest.raises(ThreadlineError) as state:
        await found.ask_again()

    assert ErrorCode.TURN_UNKNOWN == unknown.value.code
    assert ErrorCode.TURN_STATE == state.value.code
