"""The program the tests of other clients drive (tests/clients/): it answers with the message itself,
so a large message makes a large answer, and one that starts with `wait` runs until it is stopped."""

from __future__ import annotations

import asyncio

import threadline


@threadline.program
async def echo(message: str) -> str:
    """Say the message back, word for word."""
    if message.startswith("wait"):
        await asyncio.sleep(60)
    return message
