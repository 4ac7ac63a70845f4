"""The test kit's worker process: a test that gives up on it leaves nothing running."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.settings import Settings
from tests.support.processes import WorkerProcess


def test_a_worker_that_did_not_start_in_time_is_not_left_running(settings: Settings, tmp_path: Path) -> None:
    """Under a loaded machine a worker can miss `wait_ready`'s time: the failing test must not leave
    it polling its task queue (three such workers outlived one CI run, taking the machine's cores)."""
    worker = WorkerProcess(settings, tmp_path / "worker.log")
    with pytest.raises(TimeoutError, match="did not start"):
        worker.wait_ready(timeout=0.01)  # it is still importing
    assert worker.process.poll() is not None
