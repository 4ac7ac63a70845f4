"""The Temporal server frozen (SIGSTOP) for seconds while a send waits to be taken: the questions
Threadline asks about a send not taken within 3 s go unanswered, and that is a server behind, not a
worker gone. Once thawed the send is answered through its own update alone. And frozen through a
fresh client's first call, whose search-attribute lookup it leaves unanswered: asked again.

The fault: a question unanswered within its 0.5 s was read as "no worker is on it", so the send was
also kept as a signal: one more write for a server already behind. At 1,000 conversations at once,
1,115 of 3,000 sends were kept so, and the server spent 1.4x the bare conversation's time per turn.
"""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType

from core.settings import Settings
from core.temporal import connect_temporal
from store.backends.blobs import FolderBlobs
from tests.chaos.test_server_kill import own_server
from threadline.client import LOOKUP_TIMEOUT_S, Threadline, connect
from threadline.delivery import ACCEPT_WAIT_S
from worker import build_worker

FROZEN_S = ACCEPT_WAIT_S + 2.5
"""Past the first look at the send (3 s) and the questions it asks (0.5 s each)."""


@pytest.mark.slow
async def test_a_send_outwaits_a_frozen_server_and_is_not_kept_as_a_signal(
    settings: Settings, tmp_path: Path, cid: str
) -> None:
    own, server, _, _ = await own_server(settings, tmp_path)
    try:
        client = await connect_temporal(own, FolderBlobs(own.payload_folder))
        chat = (await connect(own, client=client)).conversation("tutor", id=cid)
        async with build_worker(client, own):
            await chat("before the freeze")
            await asyncio.sleep(ACCEPT_WAIT_S + 0.5)  # no send was taken lately: the questions are asked
            assert server.pid is not None
            os.killpg(server.pid, signal.SIGSTOP)
            try:
                sent = asyncio.ensure_future(chat("while the server is frozen"))
                await asyncio.sleep(FROZEN_S)
                assert not sent.done()
            finally:
                os.killpg(server.pid, signal.SIGCONT)
            answer = await asyncio.wait_for(sent, 60)
            history = await chat.handle.fetch_history()
    finally:
        await server.stop()

    signals = [e for e in history.events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED]
    assert answer.startswith("(offline)")
    assert [] == [e.workflow_execution_signaled_event_attributes.signal_name for e in signals]


@pytest.mark.slow
async def test_a_first_call_outwaits_a_server_frozen_through_its_lookup(settings: Settings, tmp_path: Path) -> None:
    """A fresh client's first call looks up Threadline's search attributes; a server frozen past that
    try's time is asked again, and the call succeeds once it thaws, instead of failing
    `server-unavailable` (what a send through the HTTP service answered, once, in 20 ms)."""
    own, server, _, _ = await own_server(settings, tmp_path)
    try:
        tl = Threadline(await connect_temporal(own, FolderBlobs(own.payload_folder)), own)
        assert server.pid is not None
        os.killpg(server.pid, signal.SIGSTOP)
        try:
            first = asyncio.ensure_future(tl.temporal())
            await asyncio.sleep(LOOKUP_TIMEOUT_S + 0.5)  # the first try ran out of time
            assert not first.done()
        finally:
            os.killpg(server.pid, signal.SIGCONT)
        await asyncio.wait_for(first, 30)
    finally:
        await server.stop()

    assert tl.search_attributes is True
