"""The functai side of the tool interop tests: the shop's programs as functai 1.2.0 defines them (the
same fields and signature as `tests.support.acting_programs`), and a scripted model that calls tools natively.

Run as `python -m tests.support.functai_tools FOLDER ID AMOUNT`, it is a functai process that starts a `shop`
turn and stops inside its refund (it never returns), so the test can kill it there: the turn is left
`interrupted` with the refund unfinished. Its lease lasts 2 s instead of 30 so the test need not wait.
"""

from __future__ import annotations

import sys
import time
from typing import Any

import functai
import functai.conversations
from functai import _ai, ai
from lm15.testing import FakeLM
from lm15.types import Message, Response, TextPart, ToolCallPart, Usage

from tests.support import acting_programs


@functai.tool(effects="reads")  # type: ignore[untyped-decorator]
def order_status(order: str) -> str:
    """Where an order is."""
    return acting_programs.order_status(order)  # type: ignore[no-any-return]


@functai.tool(effects="changes")  # type: ignore[untyped-decorator]
def refund(order: str, amount: int) -> str:
    """Refund part of an order."""
    return acting_programs.refund(order, amount)  # type: ignore[no-any-return]


@functai.tool(effects="changes", name="refund")  # type: ignore[untyped-decorator]
def stuck_refund(order: str, amount: int) -> str:
    """Refund part of an order."""
    time.sleep(3600)  # the process is killed while it runs
    return "never"


@ai(tools=[order_status, refund])  # type: ignore[untyped-decorator]
def shop(request: str) -> str:
    """Help the customer with their order."""
    return _ai  # type: ignore[no-any-return]


@ai(tools=[order_status, refund])  # type: ignore[untyped-decorator]
def careful_shop(request: str) -> str:
    """Help the customer with their order; refunds need a person's yes."""
    return _ai  # type: ignore[no-any-return]


def asks(request: str, *, amount: int = 0) -> Response:
    """A reply asking for both tools, with the inputs Threadline's offline model gives them for `request`."""
    calls = [
        ToolCallPart("c1", "order_status", {"order": request}),
        ToolCallPart("c2", "refund", {"amount": amount, "order": request}),
    ]
    return Response(
        id="r", model="fake-model", message=Message.assistant(calls), finish_reason="tool_call", usage=Usage()
    )


def answers(text: str) -> Response:
    """A final reply in functai's layout for the shop's `result`."""
    message = Message.assistant(TextPart(f"<result>\n{text}\n</result>"))
    return Response(id="r", model="fake-model", message=message, finish_reason="stop", usage=Usage())


def model(*replies: Response) -> Any:
    """A scripted model functai treats as one that calls tools natively (a `groq` host's)."""
    return FakeLM(provider="groq", responses=list(replies))


def _stuck(folder: str, conversation: str, amount: int) -> None:
    functai.conversations.LEASE = 2.0
    functai.conversations.RENEW = 1.0

    @ai(tools=[order_status, stuck_refund])  # type: ignore[untyped-decorator]
    def shop(request: str) -> str:
        """Help the customer with their order."""
        return _ai  # type: ignore[no-any-return]

    with functai.configure(lm="fake-model", client=model(asks("Refund order 9", amount=amount))):
        shop.conversation(conversation, store=folder)("Refund order 9")


if __name__ == "__main__":
    _stuck(sys.argv[1], sys.argv[2], int(sys.argv[3]))
