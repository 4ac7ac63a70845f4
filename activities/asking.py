"""Asking a program's model once, outside a conversation turn: a merge's merging program, an
evaluation's rows. The reply is checked against the program's outputs (one repair request when it
does not fit, as a turn gets). The activity's ticker heartbeats while it waits (`heartbeats`), so a
worker that dies is noticed in seconds and a stop reaches it."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from core.errors import ErrorCode, ThreadlineError
from store.programs.program import Program

from .language_model import Message, Providers, build_request


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
    (the turn's own steers).

    Raises:
        ThreadlineError: `provider-unconfigured`, the provider's errors, or `parse-failed` when the
            repaired reply does not fit either.
    """
    provider, name = providers.resolve(lm)
    request = build_request(program, earlier, inputs, model=name, sections=sections, steps=steps)
    started = time.monotonic()
    try:
        reply = await _checked(provider.complete(request), program)
    except ThreadlineError as err:
        if err.code != ErrorCode.PARSE_FAILED:
            raise
        repair = Message("user", f"Your reply could not be used: {err.message}. Reply again, exactly as asked.")
        again = replace(request, messages=(*request.messages, repair))
        reply = await _checked(provider.complete(again), program)
    outputs, model, usage = reply
    return Asked(outputs, model, usage, round(time.monotonic() - started, 6))


async def _checked(answer: Awaitable[Any], program: Program) -> tuple[dict[str, Any], str | None, dict[str, int]]:
    reply = await answer
    return program.validate_outputs(reply.outputs), reply.model, dict(reply.usage)
