"""The functai side of the interop tests: its `tutor`, offline replies, and a model that takes time."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import functai
from functai import _ai, ai
from lm15.testing import FakeLM, _as_response


@ai  # type: ignore[untyped-decorator]
def tutor(message: str) -> str:
    """Tutor."""
    return _ai  # type: ignore[no-any-return]


def reply(text: str) -> str:
    """A model reply in functai's default layout for `tutor`."""
    return f"<result>\n{text}\n</result>"


class SlowLM(FakeLM):  # type: ignore[misc]
    """FakeLM that takes `delay` seconds per reply, so a turn can be seen running and stopped."""

    def __init__(self, responses: list[Any], *, delay: float) -> None:
        super().__init__(responses)
        self.delay = delay

    def complete(self, request: Any) -> Any:
        time.sleep(self.delay)
        return super().complete(request)

    def stream(self, request: Any) -> Any:
        time.sleep(self.delay)
        return super().stream(request)


@contextmanager
def offline(replies: list[Any], *, delay: float = 0.0) -> Iterator[Any]:
    """Run functai with a scripted offline model; yields the model, whose `requests` it received."""
    client = SlowLM(replies, delay=delay) if delay else FakeLM(replies)
    with functai.configure(lm="fake-model", client=client):
        yield client


class Responder(FakeLM):  # type: ignore[misc]
    """FakeLM that answers each request with `answer(request)` (a reply text), so the order of calls
    need not be scripted; `hold` (a helper's instruction text) makes requests whose system prompt holds
    it wait for ever (a process to kill there). `provider` is the provider it stands for (a turn that
    recorded `openai:...` is resumed with an `openai` model)."""

    def __init__(self, answer: Any, *, hold: str | None = None, provider: str = "fake") -> None:
        super().__init__([], provider=provider)
        self.answer = answer
        self.hold = hold

    def _next(self, request: Any) -> Any:
        self.requests.append(request)
        if self.hold is not None and self.hold in str(request.system):
            time.sleep(3600)
        return _as_response(self.answer(request))


def support_reply(request: Any) -> str:
    """functai's model for the support programs: `topic` names the topic the message names (shipping, else
    other), `handoff` summarises, `answer` says how many messages it was sent."""
    system, last = str(request.system), str(request.messages[-1])
    if "writing about" in system:
        return reply("other" if "person" in last else "shipping")
    if "Summarize" in system:
        return reply("summary")
    return reply(f"answer after {len(request.messages)} messages")
