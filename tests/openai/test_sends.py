"""Two responses at once on one conversation, through the official client: under `queue` (the default)
the second waits and continues after the first; under `branch` (an extension) it branches from the
same turn at once; and more responses at once than the service holds open is the protocol's 429,
the client's `RateLimitError`."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from openai import AsyncOpenAI, RateLimitError
from temporalio.client import Client

from activities.language_model import OfflineModel, Provider
from core.settings import Settings
from tests.openai.kit import KEY, protocol_client
from tests.support.kit import slow
from tests.support.service_kit import serving
from threadline.client import Threadline
from threadline.http import create_app
from threadline.http.openai_responses import MAX_IN_FLIGHT
from worker import build_worker


async def test_two_responses_at_once_queue(tl: Threadline, client: Client, settings: Settings) -> None:
    """The default `queue`: both complete, one after the other, the second shown the first."""
    async with build_worker(client, slow(settings, 1.0)), protocol_client(tl) as openai:
        conversation = await openai.conversations.create()
        both = await asyncio.gather(
            *(openai.responses.create(input=text, conversation=conversation.id) for text in ("one", "two"))
        )

    assert ["completed", "completed"] == [r.status for r in both]
    first, second = sorted(both, key=lambda r: r.previous_response_id is not None)
    assert (None, first.id) == (first.previous_response_id, second.previous_response_id)
    assert "I was shown 1 earlier turn(s)" in second.output_text


async def test_two_responses_at_once_branch(tl: Threadline, client: Client, settings: Settings) -> None:
    """`sends: branch`: the second does not wait; both continue after the same response, side by side."""
    async with build_worker(client, slow(settings, 1.5)), protocol_client(tl) as openai:
        conversation = await openai.conversations.create(extra_body={"sends": "branch"})
        base = await openai.responses.create(input="base", conversation=conversation.id)
        began = time.monotonic()
        both = await asyncio.gather(
            *(openai.responses.create(input=text, conversation=conversation.id) for text in ("left", "right"))
        )
        took = time.monotonic() - began

    assert [base.id, base.id] == [r.previous_response_id for r in both]
    assert all("I was shown 1 earlier turn(s)" in r.output_text for r in both)
    assert took < 2 * 1.5  # side by side, not one after the other


async def test_more_responses_at_once_than_held_open_is_a_rate_limit(
    tl: Threadline, client: Client, settings: Settings
) -> None:
    """With `MAX_IN_FLIGHT` responses of a conversation waiting, one more is 429 `rate_limit_exceeded`
    with `Retry-After`, recorded nowhere; the others complete once the model answers."""
    hold = asyncio.Event()
    providers: dict[str, Provider] = {"offline": OfflineModel(hold=hold)}
    app = create_app(tl, keys=(KEY,))
    async with build_worker(client, settings, providers=providers), serving(app) as http:
        async with AsyncOpenAI(
            base_url=f"{str(http.base_url).rstrip('/')}/openai/v1", api_key=KEY, max_retries=0
        ) as openai:
            conversation = await openai.conversations.create()
            waiting = [
                asyncio.create_task(openai.responses.create(input=f"n{i}", conversation=conversation.id))
                for i in range(MAX_IN_FLIGHT)
            ]
            await until_held(app.state, conversation.id)
            with pytest.raises(RateLimitError) as refused:
                await openai.responses.create(input="one too many", conversation=conversation.id)
            hold.set()
            done = await asyncio.gather(*waiting)
        turns = await tl.conversation("chat", id=conversation.id).turns(all=True)

    assert ("rate_limit_exceeded", "rate_limit_error") == (refused.value.code, refused.value.type)
    assert "1" == refused.value.response.headers["retry-after"]
    assert ["completed"] * MAX_IN_FLIGHT == [r.status for r in done]
    assert MAX_IN_FLIGHT == len(turns)


async def until_held(state: Any, conversation: str) -> None:
    """Wait until the service holds `MAX_IN_FLIGHT` responses of `conversation` open."""
    deadline = time.monotonic() + 30
    while getattr(state, "openai_in_flight", {}).get(conversation, 0) < MAX_IN_FLIGHT:
        assert time.monotonic() < deadline, "the responses never were all in flight"
        await asyncio.sleep(0.05)
