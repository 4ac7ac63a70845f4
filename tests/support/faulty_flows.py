"""Flows whose own code fails while taking an answer, as a worker loads them: a validator, an extractor
and a `next_step` that raise (the exceptions carry text that must never reach a log)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from store.flows.manager import FlowBuilder

SECRET = "SECRET-IN-THE-EXCEPTION"


def _raises(text: object) -> Any:
    raise RuntimeError(f"{SECRET} {text}")


def _no_next(data: Mapping[str, Any]) -> str:
    raise KeyError(f"{SECRET} {dict(data)}")


VALIDATOR = FlowBuilder("faulty-validator").add_step("a", "Say anything.", validator=_raises).build()
EXTRACTOR = FlowBuilder("faulty-extractor").add_step("a", "Say anything.", extractor=_raises).build()
NEXT_STEP = (
    FlowBuilder("faulty-next").add_step("a", "Say anything.", next_step=_no_next).add_step("b", "Again.").build()
)
