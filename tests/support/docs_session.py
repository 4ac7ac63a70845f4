"""Run a docs page's Python blocks in one namespace, in order, as `python -m asyncio` would.

tests/surfaces/test_docs.py starts this as a process of its own per page and feeds it one block per line on
stdin, as JSON `{"path", "line", "code"}`. Top-level `await` works; a block that calls
`asyncio.run(...)` (a whole script) works too, between the others. Each block is answered with one
stdout line: the record separator, then JSON `{"out": what it printed, "error": a traceback or
null}`. Tracebacks name the page and its line numbers.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import inspect
import io
import json
import os
import sys
import traceback
from typing import Any

SEPARATOR = "\x1e"
"""Starts every answer line, so that stray output (a task printing after its block) is told apart."""


def run_block(block: dict[str, Any], namespace: dict[str, Any], loop: asyncio.AbstractEventLoop) -> None:
    """Run one block in `namespace`, awaiting it on `loop` when it awaits at the top level."""
    # Blank lines before the code put its lines where they are in the page, for tracebacks.
    source = "\n" * int(block["line"]) + str(block["code"])
    code = compile(source, str(block["path"]), "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    result = eval(code, namespace)
    if inspect.iscoroutine(result):
        loop.run_until_complete(result)


def main() -> None:
    """Answer every block read from stdin, then exit without interpreter teardown."""
    loop = asyncio.new_event_loop()
    namespace: dict[str, Any] = {"__name__": "__main__"}
    answers = sys.stdout
    for line in sys.stdin:
        printed, error = io.StringIO(), None
        try:
            with contextlib.redirect_stdout(printed):
                run_block(json.loads(line), namespace, loop)
        except BaseException:  # noqa: BLE001 - any failure, SystemExit too, is the block's result
            error = traceback.format_exc()
        answers.write(SEPARATOR + json.dumps({"out": printed.getvalue(), "error": error}) + "\n")
        answers.flush()
    # Skip teardown: the Temporal client's Rust threads can abort a finalizing interpreter (sdk-python#300).
    os._exit(0)


if __name__ == "__main__":
    main()
