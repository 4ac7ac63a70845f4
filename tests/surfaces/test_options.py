"""A handle's choices and a send's: `ConversationOptions` and `SendOptions`, and the keywords that
build them, make the same config and the same sends."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from core.errors import ThreadlineError
from threadline import ConversationOptions, SendOptions
from threadline.client import Threadline
from threadline.options import ConversationKeywords

CHOICES: dict[str, Any] = {
    "sends": "branch",
    "context": {"last": 2},
    "lm": "offline",
    "idle_timeout_s": 60.0,
    "approve": ["refund"],
    "approval_timeout_s": 5.0,
    "waiting_check_s": 2.0,
    "remembers": {"answer": "conversation"},
    "earlier_without": ["reasoning"],
    "budget": {"tokens": 1000, "cost": 0.5},
}


def test_the_keywords_are_the_fields_of_the_options() -> None:
    """`tl.conversation(...)`'s typed keywords name exactly `ConversationOptions`' fields."""
    fields = {field.name for field in dataclasses.fields(ConversationOptions)}

    assert fields == set(ConversationKeywords.__annotations__)
    assert fields - {"store"} == set(CHOICES)


def test_options_make_the_config_their_keywords_make(tl: Threadline, cid: str) -> None:
    """`options=ConversationOptions(...)` is `tl.conversation(...)` with the same keywords."""
    by_keywords = tl.conversation("tutor", cid, **CHOICES)

    by_options = tl.conversation("tutor", cid, options=ConversationOptions(**CHOICES))

    assert by_keywords.config == by_options.config
    assert ("refund",) == by_options.config.approve
    assert 2.0 == by_options.config.waiting_check_s


def test_keywords_beside_options_change_their_fields(tl: Threadline, cid: str) -> None:
    """A keyword given with `options` wins over that field; the other fields stay the options'."""
    shared = ConversationOptions(sends="refuse", lm="offline")

    chat = tl.conversation("tutor", cid, options=shared, sends="branch")

    assert ("branch", "offline") == (chat.config.sends, chat.config.lm)
    assert "refuse" == shared.sends


def test_defaults_come_from_the_settings(tl: Threadline, cid: str) -> None:
    """Unset, the idle timeout is the settings' and the waiting check the config's own default."""
    chat = tl.conversation("tutor", cid, options=ConversationOptions())

    assert tl.settings.idle_timeout_s == chat.config.idle_timeout_s
    assert 300.0 == chat.config.waiting_check_s


def test_a_send_carries_its_options_over_the_conversations(tl: Threadline, cid: str) -> None:
    """A send's `lm` and `approve` are that send's; without them it carries the handle's."""
    chat = tl.conversation("tutor", cid, lm="offline", approve="changes")

    own = chat.sent({"message": "hi"}, SendOptions(request_id="r-1", lm="other", approve=["refund"]))
    plain = chat.sent({"message": "hi"})

    assert ("r-1", "other", ("refund",)) == (own.request_id, own.lm, own.approve)
    assert ("offline", "changes") == (plain.lm, plain.approve)
    assert plain.request_id != own.request_id


@pytest.mark.parametrize("request_id", ["", "x" * 201])
async def test_a_request_id_out_of_bounds_is_refused_before_anything_is_sent(
    tl: Threadline, cid: str, request_id: str
) -> None:
    """1 to 200 characters, or `invalid-request` at the call, with no workflow started."""
    with pytest.raises(ThreadlineError) as refused:
        await tl.conversation("tutor", cid).send("hi", request_id=request_id)

    assert "invalid-request" == refused.value.code
    with pytest.raises(ThreadlineError) as closed:
        await tl.conversation("tutor", cid).close()
    assert "conversation-not-found" == closed.value.code
