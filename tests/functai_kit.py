"""The functai side of the interop tests: its `tutor`, offline replies, and a model that takes time."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import functai
from functai import _ai, ai
from lm15.testing import FakeLM


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
