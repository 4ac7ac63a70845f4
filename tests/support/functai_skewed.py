"""functai 1.2.0 sending one turn from a process whose clock is off by SKEW seconds (another host
whose clock drifted), to a conversation of a folder store:

    python -m tests.support.functai_skewed FOLDER CONVERSATION SKEW [--delay D]

SKEW > 0 runs ahead, < 0 behind: functai reads its clock through `functai.conversations._now`, for
the times it writes (`at`, a lease's `until`) and for deciding whether a lease still runs. The
offline reply takes D seconds. Prints one JSON line: `{"turn": id}` once the turn ended.
"""

from __future__ import annotations

import argparse
import json
import time

import functai.conversations

from tests.support.functai_kit import offline, reply, tutor


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("folder")
    parser.add_argument("conversation")
    parser.add_argument("skew", type=float)
    parser.add_argument("--delay", type=float, default=0.0)
    args = parser.parse_args()
    functai.conversations._now = lambda: time.time() + args.skew
    with offline([reply("functai, clock off")], delay=args.delay):
        chat = tutor.conversation(args.conversation, store=args.folder)
        stream = chat.stream("functai, clock off")
        _ = stream.result  # waits for the turn to end
    print(json.dumps({"turn": stream.turn_id}), flush=True)


if __name__ == "__main__":
    main()
