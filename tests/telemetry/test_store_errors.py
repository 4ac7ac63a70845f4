"""A real store outage on `/metrics`: appends that fail on a read-only (or immutable) log folder are
counted by the worker process, as Prometheus scrapes it."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from core.models import TurnSend
from core.settings import Settings
from store.backends.folder import FolderStore
from store.records import uuid7
from tests.chaos.outage import Immutable, Outage, ReadOnlyMount, can_chattr, can_mount
from tests.support.otlp import Receiver
from tests.telemetry.kit import free_port, sample, scrape, telemetry_env, worker
from threadline.client import Threadline

ERRORS = "threadline_store_append_errors_total"


def real_outage(folder: Path) -> Outage:
    """The log folder made unwritable in the file system itself: no wrapper can fake it in another process."""
    folder.mkdir(parents=True, exist_ok=True)
    if can_mount():
        return ReadOnlyMount(folder)
    if can_chattr(folder):
        return Immutable(folder)
    pytest.skip("a real store outage needs root (a bind mount, or chattr)")


async def test_appends_failing_on_a_read_only_store_are_counted_on_metrics(
    tl: Threadline, settings: Settings, tmp_path: Path, cid: str
) -> None:
    """While the log's folder cannot be written, the worker's appends fail `store-unavailable` and its
    `/metrics` counts each; none was counted before, and once the folder is back the turn ends."""
    folder = settings.store_folder("default")
    outage = real_outage(folder)
    port, log = free_port(), tmp_path / "worker.log"
    with Receiver() as receiver:
        running = worker(settings, log, telemetry_env(receiver, "tl-worker", port))
        try:
            before = sample(scrape(port), ERRORS, code="store-unavailable")
            outage.begin()
            try:
                await tl.conversation("tutor", id=cid).signal(TurnSend(request_id=uuid7(), inputs={"message": "Hi"}))
                deadline, text = time.monotonic() + 120, ""
                while sample(text, ERRORS, code="store-unavailable") < 1:
                    assert time.monotonic() < deadline, text
                    await asyncio.sleep(0.5)
                    text = scrape(port)
            finally:
                outage.end()
            while not any(r.get("kind") == "ended" for r in FolderStore(folder).read(cid)):
                assert time.monotonic() < deadline, "the turn did not end once the store was back"
                await asyncio.sleep(0.5)
        finally:
            running.stop()

    assert 0 == before
    assert sample(text, ERRORS, code="store-unavailable") >= 1
    assert cid not in text
