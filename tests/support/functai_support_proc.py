"""A functai 1.2.0 process that starts a `support` turn and stops between its two helpers: `topic` is
answered (its `call` recorded: the conversation remembers it for the turn), then `answer`'s model never
replies, so the test kills the process there and the turn is left `interrupted`. Its lease lasts 2 s
instead of 30, so the test need not wait.

    python -m tests.support.functai_support_proc FOLDER CONVERSATION MESSAGE
"""

from __future__ import annotations

import sys

import functai
import functai.conversations

from tests.support.functai_kit import Responder, support_reply
from tests.support.support_programs import functai_programs

REMEMBERS = {"topic": "turn", "answer": "conversation"}


def main(folder: str, conversation: str, message: str) -> None:
    functai.conversations.LEASE = 2.0
    functai.conversations.RENEW = 1.0
    programs = functai_programs()
    remembers = {programs[name]: mode for name, mode in REMEMBERS.items()}
    with functai.configure(lm="fake-model", client=Responder(support_reply, hold="Answer the customer")):
        programs["support"].conversation(conversation, store=folder, remembers=remembers)(message)


if __name__ == "__main__":
    main(*sys.argv[1:4])
