"""THREADLINE_WORKFLOW_CACHE: how many conversations a worker keeps in memory between their turns."""

from __future__ import annotations

import dataclasses

import pytest
from temporalio.client import Client

from core.errors import ErrorCode, ThreadlineError
from core.settings import DEFAULT_WORKFLOW_CACHE, Settings
from worker import build_worker


def test_the_cache_size_is_read_from_the_environment() -> None:
    """A whole number is the cache size; unset or empty leaves Temporal's default of 1,000."""
    assert 20000 == Settings.from_env({"THREADLINE_WORKFLOW_CACHE": "20000"}).workflow_cache
    assert 0 == Settings.from_env({"THREADLINE_WORKFLOW_CACHE": "0"}).workflow_cache
    assert DEFAULT_WORKFLOW_CACHE == Settings.from_env({"THREADLINE_WORKFLOW_CACHE": ""}).workflow_cache
    assert 1000 == Settings.from_env({}).workflow_cache


@pytest.mark.parametrize("raw", ["-1", "1e4", "many", "10.5"])
def test_a_cache_size_that_is_not_a_whole_number_is_refused(raw: str) -> None:
    """Anything but a whole number of 0 or more stops the worker with `invalid-request`."""
    with pytest.raises(ThreadlineError) as raised:
        Settings.from_env({"THREADLINE_WORKFLOW_CACHE": raw})

    assert ErrorCode.INVALID_REQUEST == raised.value.code


async def test_the_worker_caches_as_many_conversations_as_the_setting_says(client: Client, settings: Settings) -> None:
    """build_worker gives Temporal's worker the setting as its `max_cached_workflows`."""
    worker = build_worker(client, dataclasses.replace(settings, workflow_cache=12345))

    assert 12345 == worker.config()["max_cached_workflows"]
