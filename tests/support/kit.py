"""Small helpers the tests share (fixtures live in conftest.py)."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from core.settings import Settings
from store.backends.folder import FolderStore
from store.log.state import Log
from store.records import parse_time


def slow(settings: Settings, delay: float) -> Settings:
    """`settings` whose offline model takes `delay` seconds per reply."""
    return dataclasses.replace(settings, offline_delay_s=delay)


def lease_ran_out(folder: Path, conversation: str, turn: str) -> bool:
    """Whether functai, which reads a lease as its `until` alone, reads `turn` as run out now."""
    lease = Log(FolderStore(folder).read(conversation)).turns[turn].lease
    return lease is None or parse_time(lease.get("until")) < time.time()
