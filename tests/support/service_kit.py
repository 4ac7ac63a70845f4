"""Serving the HTTP service in tests: uvicorn on a free loopback port, and reading its answers."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from fastapi import FastAPI

from store.backends.folder import FolderStore

Event = tuple[str, str | None, dict[str, Any]]
"""A server-sent event: its name, id and data."""


@asynccontextmanager
async def serving(app: FastAPI, host: str = "127.0.0.1") -> AsyncIterator[httpx.AsyncClient]:
    """Serve `app` with uvicorn on a free port of `host` (loopback); yield a client of it; stop the server after."""
    # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on sockets that say they are TCP, and without it
    # every answer on a kept-alive connection waits ~40 ms for a delayed ACK (Nagle).
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind((host, 0))
    config = uvicorn.Config(app, log_config=None, access_log=False, ws="none", timeout_graceful_shutdown=2)
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:
            if task.done():
                await task  # it failed to start: raise why
            await asyncio.sleep(0.01)
        base = f"http://{host}:{sock.getsockname()[1]}"
        async with httpx.AsyncClient(base_url=base, timeout=30) as http:
            yield http
    finally:
        server.should_exit = True
        await task
        sock.close()


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def recorded(folder: Path) -> list[str]:
    return FolderStore(folder).conversations()


async def send(http: httpx.AsyncClient, cid: str, **body: Any) -> httpx.Response:
    return await http.post(f"/v1/conversations/{cid}/turns", json=body)


async def read_events(
    http: httpx.AsyncClient, url: str, *, last: str | None = None, limit: int | None = None
) -> list[Event]:
    """The server-sent events of `url` until the stream ends, or the first `limit` (then disconnect)."""
    events: list[Event] = []
    fields: dict[str, str] = {}
    async with http.stream("GET", url, headers={"Last-Event-ID": last} if last else {}) as response:
        assert 200 == response.status_code
        async for line in response.aiter_lines():
            if line:
                name, _, value = line.partition(": ")
                fields[name] = value
                continue
            events.append((fields["event"], fields.get("id"), json.loads(fields["data"])))
            fields = {}
            if limit is not None and len(events) >= limit:
                break
    return events


def texts(events: list[Event]) -> str:
    return "".join(data["text"] for name, _, data in events if name == "text")
