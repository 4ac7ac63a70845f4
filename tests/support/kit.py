"""Small helpers the tests share (fixtures live in conftest.py)."""

from __future__ import annotations

import dataclasses

from core.settings import Settings


def slow(settings: Settings, delay: float) -> Settings:
    """`settings` whose offline model takes `delay` seconds per reply."""
    return dataclasses.replace(settings, offline_delay_s=delay)
