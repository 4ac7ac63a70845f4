"""A user's flow module, as a worker loads it (`store.flows.manager.load_flows`): branching, a person at the
end of the attempts, pydantic types, timers, and an AI extractor."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from pydantic import BaseModel, EmailStr

from store.flows.manager import FlowBuilder
from store.programs.program import Program


class Address(BaseModel):
    """Where to send it."""

    street: str
    city: str


def _billing_or_bug(text: str) -> bool:
    return text.strip().lower() in ("billing", "bug")


def _after_kind(data: Mapping[str, Any]) -> str:
    return "invoice" if data["kind"] == "billing" else "version"


def _looks_like_a_version(text: str) -> bool:
    return text.strip().count(".") == 2


SUPPORT = (
    FlowBuilder("support")
    .add_step(
        "kind",
        "Is this about billing or a bug?",
        validator=_billing_or_bug,
        extractor=lambda text: text.strip().lower(),
        next_step=_after_kind,
    )
    .add_step("invoice", "Which invoice number?", extractor=int, max_attempts=2, on_exhausted="person")
    .add_step("version", "Which version do you run?", validator=_looks_like_a_version, max_attempts=2)
    .build()
)
"""Branches on the kind of problem; an invoice number that never comes hands over to a person, a
version that never comes abandons the flow."""

SIGNUP = (
    FlowBuilder("signup", expire_after=timedelta(minutes=10))
    .add_step("email", "Your e-mail address?", extractor=EmailStr, next_step="address", remind_after=60)
    .add_step("address", "Your address, as JSON with street and city?", extractor=Address)
    .build()
)
"""Pydantic types as extractors, a reminder after a minute, and expiry after ten minutes of silence."""


def count(text: str) -> int:
    """How many items the text asks for, as a whole number."""
    raise NotImplementedError  # the body never runs: a model answers


BULK = (
    FlowBuilder("bulk").add_step("quantity", "How many would you like?", extractor=Program.from_function(count)).build()
)
"""An AI extractor: the conversation's model reads the number out of free text ("two dozen" -> 24)."""
