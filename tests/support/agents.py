"""Writers run as separate processes by the interop tests: `python -m tests.support.agents KIND FOLDER ID N NAME`.

Each waits for `FOLDER/go` so that all of them append at the same time.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path


def _wait_for_go(folder: Path) -> None:
    while not (folder / "go").exists():
        time.sleep(0.005)


def run_functai(folder: Path, conversation: str, n: int, name: str) -> None:
    from tests.support.functai_kit import offline, reply, tutor

    with offline([reply(f"{name} answer {k}") for k in range(n)]):
        chat = tutor.conversation(conversation, store=str(folder))
        _wait_for_go(folder)
        for k in range(n):
            chat(f"{name} {k}")


def run_threadline(folder: Path, conversation: str, n: int, name: str) -> None:
    from store.backends.folder import FolderStore
    from store.backends.writer import Writer
    from store.log.turns import Answer, TurnRequest
    from store.programs.program import TUTOR

    writer = Writer(FolderStore(folder), conversation, TUTOR)
    _wait_for_go(folder)
    for k in range(n):
        text = f"{name} {k}"
        writer.send(TurnRequest({"message": text}), lambda _shown, _inputs: Answer({"result": text}))  # noqa: B023


def run_entries(folder: Path, conversation: str, n: int, name: str) -> None:
    from store.backends.folder import FolderStore
    from store.records import entry_record

    store = FolderStore(folder)
    _wait_for_go(folder)
    for k in range(n):
        store.append(conversation, [entry_record("load", name, k) for _ in range(1 + k % 3)])


def run_mixed(folder: Path, conversation: str, n: int, name: str) -> None:
    """Turns, each followed by a stop record for it and an entry: every kind a reader counts."""
    from store.backends.folder import FolderStore
    from store.backends.writer import Writer
    from store.log.turns import Answer, TurnRequest
    from store.programs.program import TUTOR
    from store.records import entry_record, stop_record

    store = FolderStore(folder)
    writer = Writer(store, conversation, TUTOR)
    _wait_for_go(folder)
    for k in range(n):
        text = f"{name} {k}"
        turn = writer.send(TurnRequest({"message": text}), lambda _shown, _inputs: Answer({"result": text}))  # noqa: B023
        store.append(conversation, [stop_record(turn), entry_record("load", name, k)])
        time.sleep(0.01)  # spread over more than half a second: readers overlap it even on a loaded machine


if __name__ == "__main__":
    kind, folder, conversation, count, label = sys.argv[1:6]
    runners = {"functai": run_functai, "threadline": run_threadline, "entries": run_entries, "mixed": run_mixed}
    runner = runners[kind]
    runner(Path(folder), conversation, int(count), label)
