"""Asking a program's model once, outside a conversation turn: a merge's merging program, an
evaluation's rows. The reply is checked against the program's outputs (one repair request when it
does not fit, as a turn gets), and the activity heartbeats while it waits, so a worker that dies is
noticed in seconds and a stop reaches it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from temporalio import activity

from core.errors import ErrorCode, ThreadlineError
from store.programs.program import Program
from store.records import STOP_POLL_SECONDS

from .language_model import Message, Providers, build_request

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Asked:
    """What one question to a program's model gave: its outputs, checked, and what it cost."""

    outputs: dict[str, Any]
    model: str | None
    usage: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0


async def ask(
    providers: Providers,
    program: Program,
    inputs: Mapping[str, Any],
    *,
    lm: str,
    earlier: Sequence[Mapping[str, Any]] = (),
    sections: Sequence[str] = (),
    steps: Sequence[Message] = (),
) -> Asked:
    """Ask `program`'s model `inputs` after the `earlier` exchanges (`{inputs, outputs}`), then `steps`
    (the turn's own steers), heartbeating.

    Raises:
        ThreadlineError: `provider-unconfigured`, the provider's errors, or `parse-failed` when the
            repaired reply does not fit either.
    """
    provider, name = providers.resolve(lm)
    request = build_request(program, earlier, inputs, model=name, sections=sections, steps=steps)
    started = time.monotonic()
    try:
        reply = await heartbeating(_checked(provider.complete(request), program))
    except ThreadlineError as err:
        if err.code != ErrorCode.PARSE_FAILED:
            raise
        repair = Message("user", f"Your reply could not be used: {err.message}. Reply again, exactly as asked.")
        again = replace(request, messages=(*request.messages, repair))
        reply = await heartbeating(_checked(provider.complete(again), program))
    outputs, model, usage = reply
    return Asked(outputs, model, usage, round(time.monotonic() - started, 6))


async def _checked(answer: Awaitable[Any], program: Program) -> tuple[dict[str, Any], str | None, dict[str, int]]:
    reply = await answer
    return program.validate_outputs(reply.outputs), reply.model, dict(reply.usage)


async def heartbeating(work: Awaitable[T], *, every: float = STOP_POLL_SECONDS) -> T:
    """Await `work`, heartbeating the activity every `every` seconds meanwhile (a cancel arrives
    with a heartbeat's answer, and a silent worker is presumed dead)."""
    task: asyncio.Future[T] = asyncio.ensure_future(work)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=every)
            if done:
                return task.result()
            activity.heartbeat()
    finally:
        task.cancel()
