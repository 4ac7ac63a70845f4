"""The seed's `support` program (functai's vignette 6) and programs like it, with code, as a worker loads
them from THREADLINE_PROGRAMS; and `functai_programs()`, the same programs as functai 1.2.0 defines them.

Both engines' helpers are defined in this module under the same names, so functai and Threadline name
them alike (`tests.support.support_programs`): a helper's memory is matched by name and module, and either
engine shows a helper the calls the other recorded. Handoffs are kept in `HANDOFFS`; `slow_support` waits
`THREADLINE_TEST_PAUSE_S` seconds between its helpers (a worker to kill there).
"""

from __future__ import annotations

import os
import time
from typing import Any, Literal

import threadline

HANDOFFS: list[str] = []
LOOKUPS: list[str] = []
EARLIER: list[list[dict[str, Any]]] = []
"""What `probe` was given by `earlier()`, one list per turn."""
PAUSES: list[float] = []
"""How long `slow_support` waits between its helpers, when a test in this process says (else the env)."""
INNER: list[Any] = []
"""A conversation handle a test gives `nesting`, which uses it inside its own turn."""


def notify_staff(summary: str) -> None:
    """Hand the conversation over to a person (kept in `HANDOFFS`)."""
    HANDOFFS.append(summary)


@threadline.ai
def topic(message: str) -> Literal["billing", "shipping", "product", "other"]:
    """What is the customer writing about?"""
    raise NotImplementedError  # the model answers


@threadline.ai
def answer(message: str, topic: str) -> str:
    """Answer the customer kindly, in at most three sentences."""
    raise NotImplementedError


@threadline.ai
def handoff(conversation: list[dict[str, str]]) -> str:
    """Summarize this support conversation for the person who takes it over: the problem, what was
    tried, and what the customer wants."""
    raise NotImplementedError


@threadline.program
def support(message: str) -> str:
    kind = topic(message)
    if kind == "other":
        notify_staff(handoff(threadline.earlier()))
        return "A person from our team will write to you shortly."
    return answer(message, kind)


@threadline.program
async def support_async(message: str) -> str:
    kind = await topic.acall(message)
    return await answer.acall(message, kind)


@threadline.program
def twice(message: str) -> str:
    """Answers twice in one turn: the second call of `answer` is shown the first with `"turn"` memory."""
    answer(message, "first")
    return answer(message, "second")


@threadline.tool(effects="reads")
def order_status(order: str) -> str:
    """Where an order is."""
    LOOKUPS.append(order)
    return f"order {order} is in Leeds"


@threadline.ai(tools=[order_status])
def track(message: str) -> str:
    """Tell the customer where their order is; look it up first."""
    raise NotImplementedError


@threadline.program
def desk(message: str) -> str:
    return track(message)


CANCELLED: list[str] = []


@threadline.tool(effects="changes")
def cancel_order(order: str) -> str:
    """Cancel an order."""
    CANCELLED.append(order)
    return f"order {order} is cancelled"


@threadline.ai(tools=[cancel_order])
def cancel(message: str) -> str:
    """Cancel the customer's order."""
    raise NotImplementedError


@threadline.program
def canceller(message: str) -> str:
    """Sorts the message, then cancels (a tool that changes things: a person may be asked first)."""
    kind = topic(message)
    return cancel(f"{kind}: {message}")


@threadline.program
def broken(message: str) -> str:
    topic(message)
    raise ValueError("the desk is closed")


@threadline.program
def opaque(message, count: int) -> str:
    return answer(message, str(count))


@threadline.program(log_content={"message": False})
def secretive(message: str) -> str:
    return answer(message, "private")


@threadline.program
def slow_support(message: str) -> str:
    """`support` with a pause between its two helpers, long enough to kill its worker there."""
    kind = topic(message)
    time.sleep(PAUSES[-1] if PAUSES else float(os.environ.get("THREADLINE_TEST_PAUSE_S", "0")))
    return answer(message, kind)


@threadline.program
def probe(message: str) -> str:
    """Keeps what `earlier()` gives (one row per earlier turn shown)."""
    EARLIER.append(threadline.earlier())
    return "probed"


@threadline.program
async def nesting(message: str) -> str:
    """Uses another conversation inside its turn (refused unless the conversation declares it `own`)."""
    inner = await INNER[-1](message)
    return str(inner)


@threadline.program(reasoning=True)
def tutor_thinks(message: str) -> str:
    """Tutor."""
    raise NotImplementedError  # the model answers, writing its reasoning first


def functai_programs() -> dict[str, Any]:
    """The same helpers and programs as functai 1.2.0 defines them (functai is imported here only)."""
    import functai
    from functai import _ai, ai, module

    @ai  # type: ignore[untyped-decorator]
    def topic(message: str) -> Literal["billing", "shipping", "product", "other"]:
        """What is the customer writing about?"""
        return _ai  # type: ignore[no-any-return]

    @ai  # type: ignore[untyped-decorator]
    def answer(message: str, topic: str) -> str:
        """Answer the customer kindly, in at most three sentences."""
        return _ai  # type: ignore[no-any-return]

    @ai  # type: ignore[untyped-decorator]
    def handoff(conversation: list[dict[str, str]]) -> str:
        """Summarize this support conversation for the person who takes it over."""
        return _ai  # type: ignore[no-any-return]

    @module  # type: ignore[untyped-decorator]
    def support(message: str) -> str:
        kind = topic(message)
        if kind == "other":
            notify_staff(handoff(functai.earlier()))
            return "A person from our team will write to you shortly."
        return answer(message, kind)  # type: ignore[no-any-return]

    @module  # type: ignore[untyped-decorator]
    def twice(message: str) -> str:
        answer(message, "first")
        return answer(message, "second")  # type: ignore[no-any-return]

    @module  # type: ignore[untyped-decorator]
    def probe(message: str) -> str:
        EARLIER.append(functai.earlier())
        return "probed"

    found = {"topic": topic, "answer": answer, "handoff": handoff, "support": support, "twice": twice}
    return {**found, "probe": probe}
