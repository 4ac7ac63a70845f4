"""What the tests of other clients (tests/clients/) share: the TypeScript client of tests/clients/node
(its packages installed from its package-lock.json, `npm ci` once when node_modules is missing, and
its sources compiled with its TypeScript), and waiting for the listing to show a conversation."""

from __future__ import annotations

import asyncio
import fcntl
import shutil
import subprocess
from pathlib import Path

import pytest

from threadline.client import Threadline
from threadline.listing import ConversationInfo

NODE_CLIENT = Path(__file__).resolve().parents[1] / "clients" / "node"
_INSTALL_TIMEOUT_S = 600


def built_client() -> Path:
    """The compiled client's folder (`build/`), installed and compiled first; the test is skipped when
    this machine has no Node.js. Test processes running at once take turns (a lock file)."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("Node.js is not installed: the TypeScript client cannot run")
    with (NODE_CLIENT / ".setup.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (NODE_CLIENT / "node_modules" / ".package-lock.json").exists():
            _run(["npm", "ci", "--no-audit", "--no-fund"])
        _run(["node", "node_modules/typescript/bin/tsc", "-p", "."])
    return NODE_CLIENT / "build"


def _run(command: list[str]) -> None:
    done = subprocess.run(command, cwd=NODE_CLIENT, capture_output=True, text=True, timeout=_INSTALL_TIMEOUT_S)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed in {NODE_CLIENT}:\n{done.stdout}\n{done.stderr}")


async def listed_idle(tl: Threadline, cid: str, *, turns: int | None = None) -> ConversationInfo:
    """The conversation as `threadline list` shows it, once visibility shows it idle (with `turns` turns)."""
    for _ in range(150):
        found = [c for c in (await tl.conversations(limit=1000)).conversations if c.conversation == cid]
        if found and found[0].state == "idle" and turns in (None, found[0].turns):
            return found[0]
        await asyncio.sleep(0.2)
    raise AssertionError(f"{cid} was never listed idle")
