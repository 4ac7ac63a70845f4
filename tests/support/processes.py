"""A Threadline worker run as a separate process, so a test can kill it like a crash would."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from core.settings import Settings

ROOT = Path(__file__).resolve().parents[2]


class WorkerProcess:
    """`python worker.py` for the test's server, task queue and data folder; its JSON logs go to a file.

    `prefix` runs it under another command (`ip netns exec HOST`: on a test host of its own).
    """

    def __init__(
        self,
        settings: Settings,
        log: Path,
        *,
        delay: float = 0.0,
        env: dict[str, str] | None = None,
        prefix: Sequence[str] = (),
    ) -> None:
        environment = {
            **os.environ,
            "THREADLINE_TEMPORAL_ADDRESS": settings.address,
            "THREADLINE_TASK_QUEUE": settings.task_queue,
            "THREADLINE_DATA": str(settings.data),
            "THREADLINE_OFFLINE_DELAY_S": str(delay),
            "THREADLINE_PAYLOADS": str(settings.payloads_spec()),
            **(env or {}),
        }
        self.log = log
        self._out = log.open("ab")
        self.process = subprocess.Popen(
            [*prefix, sys.executable, "worker.py"], cwd=ROOT, env=environment, stdout=self._out, stderr=self._out
        )

    def wait_ready(self, timeout: float = 20.0) -> None:
        """Block until the worker logged that it started polling; one that did not in `timeout` is
        killed (a test that fails here leaves no worker behind polling its task queue)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(e.get("event") == "worker.started" for e in self.events()):
                return
            if self.process.poll() is not None:
                raise RuntimeError(f"the worker exited with {self.process.returncode}: {self.log.read_text()}")
            time.sleep(0.05)
        self.kill()
        raise TimeoutError(f"the worker did not start in {timeout:.0f} s: {self.log.read_text()[-2000:]}")

    def events(self) -> list[dict[str, object]]:
        """The JSON log lines it wrote so far."""
        out = []
        for line in self.log.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if isinstance(event, dict):
                out.append(event)
        return out

    def kill(self) -> None:
        """`kill -9`: no cleanup, no goodbye to the server."""
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)
        self._out.close()

    def stop(self) -> int:
        """SIGTERM, then wait for the graceful exit."""
        terminate(self.process)
        self._out.close()
        return self.process.returncode


def terminate(process: subprocess.Popen[bytes], timeout: float = 15.0) -> None:
    """SIGTERM a child process still running, wait `timeout` seconds for its exit, then SIGKILL it."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def model_requests(log: Path, turn: str | None = None) -> int:
    """How many model calls the workers logging to `log` made (for `turn`)."""
    count = 0
    for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict) and event.get("event") == "model.requested" and turn in (None, event.get("turn")):
            count += 1
    return count
