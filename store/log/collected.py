"""What later turns on a branch are told of the guided flows completed on it.

A completed flow leaves a `completed` entry of plugin `flow` (`store.flows.progress` says how a flow's
entries read); every later turn on that branch sees the latest data each flow collected as a section
of its instruction, beside the conversation's preamble and summary.
"""

from __future__ import annotations

import json
from typing import Any

from .rules import entries
from .state import Log

PLUGIN = "flow"
"""The plugin name of a guided flow's entries."""


def sections(log: Log, tip: str | None) -> list[str]:
    """What later turns on the branch through `tip` are told of the flows completed on it: the
    latest data each flow collected, as instruction sections."""
    if not any(e.get("plugin") == PLUGIN and e.get("entry") == "completed" for e in log.entries):
        return []  # no flow ever completed here: no branch walk for every turn of every conversation
    latest: dict[str, Any] = {}
    for found in entries(log, PLUGIN, "completed", tip):
        data = found["data"]
        if isinstance(data, dict) and isinstance(data.get("data"), dict):
            latest.pop(str(data.get("flow")), None)
            latest[str(data.get("flow"))] = data["data"]
    return [
        f"Collected by the {name!r} flow: {json.dumps(collected, ensure_ascii=False, sort_keys=True)}"
        for name, collected in latest.items()
    ]
