"""The service on loopback driven by the official `openai` client, unchanged, with a Threadline key."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from openai import AsyncOpenAI

from tests.support.service_kit import serving
from threadline.client import Threadline
from threadline.http import create_app

KEY = "tl-openai-key"


@asynccontextmanager
async def protocol_client(tl: Threadline, *, keys: tuple[str, ...] = (KEY,)) -> AsyncIterator[AsyncOpenAI]:
    """The official client of a service serving `tl` (keys `keys`), at `/openai/v1`, retries off."""
    async with serving(create_app(tl, keys=keys)) as http:
        base = f"{str(http.base_url).rstrip('/')}/openai/v1"
        async with AsyncOpenAI(base_url=base, api_key=KEY, max_retries=0, timeout=60) as client:
            yield client


def text_of(item: Any) -> str:
    """The text of a message item (the client types items as a union of every item kind)."""
    return str(item.content[0].text)


def turn_of(response_id: str) -> str:
    """The turn of a response id (`<turn>~<conversation>`)."""
    return response_id.split("~")[0]
