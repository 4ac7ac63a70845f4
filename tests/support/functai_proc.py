"""functai 1.2.0 continuing a conversation through `threadline.functai_store`, as a process of its own
(on another host, in the several-hosts test).

    python -m tests.support.functai_proc URL CONVERSATION COUNT [--api-key K] [--store S] [--delay D] [--tag T]

It sends COUNT turns `"<tag> <i>"` with the scripted offline model (each reply takes D seconds), then
prints one JSON line: `{"turns": [ids], "conflicts": n}`, where `conflicts` counts the `store-conflict`
errors functai met (and retried after reading again).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from tests.support.functai_kit import offline, reply, tutor
from threadline.remote import FunctaiStore, functai_store


class CountingStore(FunctaiStore):
    """Counts the conflicts functai is told of, then lets them through."""

    conflicts = 0

    def append(self, conversation: str, records: Any, *, expect: int | None = None) -> int:
        try:
            return super().append(conversation, records, expect=expect)
        except Exception as err:
            if getattr(err, "code", None) == "store-conflict":
                self.conflicts += 1
            raise


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("conversation")
    parser.add_argument("count", type=int)
    parser.add_argument("--api-key")
    parser.add_argument("--store")
    parser.add_argument("--delay", type=float, default=0.0)
    parser.add_argument("--tag", default="functai")
    args = parser.parse_args()
    store = CountingStore(functai_store(args.url, store=args.store, api_key=args.api_key).store)
    turns = []
    replies = [reply(f"{args.tag} answer {i}") for i in range(args.count)]
    with store, offline(replies, delay=args.delay):
        chat = tutor.conversation(args.conversation, store=store)
        for i in range(args.count):
            stream = chat.stream(f"{args.tag} {i}")
            _ = stream.result  # waits for the turn to end
            turns.append(stream.turn_id)
    print(json.dumps({"turns": turns, "conflicts": store.conflicts}), flush=True)


if __name__ == "__main__":
    main()
