"""What every chaos test checks of a conversation after the fault: the log is whole and numbered,
every accepted send ended once (or was answered with a coded error), and it takes the next send."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from store.folder import FolderStore
from store.log import Log


def check_log(folder: Path, conversation: str) -> Log:
    """Every line's seq is its position, every turn ended at most once, no ended before its turn."""
    records = FolderStore(folder).read(conversation)
    assert list(range(1, len(records) + 1)) == [r.get("seq") for r in records]
    ended = Counter(r["turn"] for r in records if r.get("kind") == "ended")
    assert [] == [turn for turn, count in ended.items() if count > 1]
    log = Log(records)
    assert set(ended) <= set(log.turns)
    return log


def check_ended_once(log: Log, turns: list[str]) -> None:
    """Each of `turns` is in the log and ended exactly once."""
    assert [] == [turn for turn in turns if turn not in log.turns or log.turns[turn].ended is None]
