"""Slow requests against the service as `threadline serve` serves it (uvicorn with its read timeouts):
30 connections sending a body a byte at a time, headers a byte at a time, a connection that sends
nothing, and a body that keeps coming after the request was answered 401. Each is answered 408
`request-timeout` or closed within its timeout, never held open, and the service answers and takes
a conversation's next send meanwhile."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import AsyncIterator

import httpx
import pytest
import uvicorn
from fastapi import FastAPI
from temporalio.worker import Worker

from threadline.client import Threadline
from threadline.http import create_app
from threadline.http.app import server_config
from threadline.http.limits import CUT_OFF_AFTER_S, Limits

LIMITS = Limits(header_timeout_s=1.0, body_timeout_s=1.5)
PATIENCE_S = LIMITS.header_timeout_s + LIMITS.body_timeout_s + CUT_OFF_AFTER_S + 3.0
"""How long a slow connection may stay open at most: both timeouts, the cut-off, and slack for a busy machine."""
SLOW_BODIES = 30
HEAD = b"POST /v1/conversations/slow/turns HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k-1\r\n"
BODY_HEAD = HEAD + b"Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n{"


@contextlib.asynccontextmanager
async def served(app: FastAPI) -> AsyncIterator[int]:
    """Serve `app` as `threadline serve` does (its `server_config`) on a free loopback port; yield the port."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(server_config(app))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:
            if task.done():
                await task
            await asyncio.sleep(0.01)
        yield sock.getsockname()[1]
    finally:
        server.should_exit = True
        await task
        sock.close()


async def trickle(port: int, first: bytes, more: bytes) -> tuple[bytes, float]:
    """Send `first`, then one byte of `more` every 0.2 s (for ever, were it allowed); what the service
    answered and when it closed the connection, in seconds from the start."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    began, answer = time.monotonic(), bytearray()
    writer.write(first)

    async def read() -> None:
        while chunk := await reader.read(65536):
            answer.extend(chunk)

    reading = asyncio.create_task(read())
    with contextlib.suppress(OSError):
        for i in range(int(PATIENCE_S / 0.2) + 10):
            if reading.done():
                break
            if more:
                writer.write(more[i % len(more) : i % len(more) + 1])
                await writer.drain()
            await asyncio.sleep(0.2)
    with contextlib.suppress(OSError, TimeoutError):
        await asyncio.wait_for(reading, timeout=2.0)
    closed = time.monotonic() - began if reading.done() else float("inf")
    writer.close()
    return bytes(answer), closed


@pytest.mark.timeout(120)
async def test_slow_requests_are_cut_off_and_the_service_goes_on(tl: Threadline, worker: Worker, cid: str) -> None:
    """Bodies and headers that take too long get 408 or a closed connection; the service answers meanwhile."""
    app = create_app(tl, keys=["k-1"], limits=LIMITS)
    async with served(app) as port:
        slow = [trickle(port, BODY_HEAD, b" ") for _ in range(SLOW_BODIES)]
        headers = trickle(port, b"GET /health HTTP/1.1\r\n", b"X-Slow: 1\r\n")
        silent = trickle(port, b"", b"")
        unread = trickle(port, BODY_HEAD.replace(b"Bearer k-1", b"Bearer k-wrong"), b" ")
        attacks = asyncio.gather(*slow, headers, silent, unread)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as http:
            await asyncio.sleep(0.5)
            health = await http.get("/health")
            sent = await http.post(
                f"/v1/conversations/{cid}/turns",
                json={"message": "hi", "wait": True},
                headers={"Authorization": "Bearer k-1"},
            )
        *bodies, (head_answer, head_closed), (_, silent_closed), (unread_answer, unread_closed) = await attacks

    assert (200, 200, "done") == (health.status_code, sent.status_code, sent.json()["state"])
    assert all(answer.startswith(b"HTTP/1.1 408 ") and b'"request-timeout"' in answer for answer, _ in bodies)
    assert max(closed for _, closed in bodies) < PATIENCE_S
    assert (b"", b"HTTP/1.1 401 ") == (head_answer, unread_answer[:13])
    assert max(head_closed, silent_closed, unread_closed) < PATIENCE_S
