"""THREADLINE_WORKER_GC: the process's garbage collector, tuned while a worker runs (core/collector.py)."""

from __future__ import annotations

import asyncio
import dataclasses
import gc

import pytest
from temporalio.client import Client

from core.collector import YOUNG
from core.errors import ErrorCode, ThreadlineError
from core.settings import Settings
from threadline.client import connect
from worker import build_worker


def test_the_setting_is_tuned_unless_it_says_python() -> None:
    """Unset or empty: `tuned`; `python` (any case) leaves the interpreter's collector alone."""
    assert "tuned" == Settings.from_env({}).worker_gc
    assert "tuned" == Settings.from_env({"THREADLINE_WORKER_GC": ""}).worker_gc
    assert "python" == Settings.from_env({"THREADLINE_WORKER_GC": "Python"}).worker_gc


def test_another_value_is_refused() -> None:
    """A value that is neither stops the worker with `invalid-request`, naming both."""
    with pytest.raises(ThreadlineError) as raised:
        Settings.from_env({"THREADLINE_WORKER_GC": "off"})

    assert ErrorCode.INVALID_REQUEST == raised.value.code
    assert "tuned, python" in raised.value.message


async def running(want: int) -> None:
    """Until the young generation's threshold is `want` (a worker applies it once it runs)."""
    for _ in range(200):
        if gc.get_threshold()[0] == want:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"the young threshold stayed {gc.get_threshold()[0]}, not {want}")


async def test_a_running_worker_tunes_the_collector_and_puts_it_back(
    client: Client, settings: Settings, cid: str
) -> None:
    """While a worker runs, what existed at its start is frozen and young collections are rarer; a turn
    runs; once it stops, the thresholds and the frozen count are what they were."""
    found, frozen = gc.get_threshold(), gc.get_freeze_count()
    assert found[0] != YOUNG

    async with build_worker(client, settings):
        await running(YOUNG)
        assert gc.get_freeze_count() > frozen
        assert found[1:] == gc.get_threshold()[1:]
        tl = await connect(settings, client=client)
        assert (await tl.conversation("tutor", id=cid)("hello")).strip()

    assert found == gc.get_threshold()
    assert frozen == gc.get_freeze_count()


async def test_the_last_of_two_workers_to_stop_puts_it_back(client: Client, settings: Settings) -> None:
    """Two workers in one process: the collector stays tuned until both have stopped."""
    found = gc.get_threshold()
    other = dataclasses.replace(settings, task_queue=f"{settings.task_queue}-other")

    async with build_worker(client, settings):
        await running(YOUNG)
        async with build_worker(client, other):
            await asyncio.sleep(0.1)
        assert YOUNG == gc.get_threshold()[0]

    assert found == gc.get_threshold()


async def test_python_leaves_the_collector_alone(client: Client, settings: Settings, cid: str) -> None:
    """With `python`, a running worker changes neither the thresholds nor what is frozen."""
    found, frozen = gc.get_threshold(), gc.get_freeze_count()

    async with build_worker(client, dataclasses.replace(settings, worker_gc="python")):
        tl = await connect(settings, client=client)
        assert (await tl.conversation("tutor", id=cid)("hello")).strip()
        assert found == gc.get_threshold()
        assert frozen == gc.get_freeze_count()
