"""The fake provider's side of the support programs' tests: which helper a request is from, and the
replies it gets (tests/support/fakeprovider.py speaks OpenAI's wire)."""

from __future__ import annotations

from typing import Any

from tests.support.fakeprovider import Call, FakeProvider, Received, Reply

MODEL = "openai:gpt-test"
INSTRUCTIONS = {
    "topic": "writing about",
    "answer": "Answer the customer",
    "handoff": "Summarize",
    "track": "where their order is",
}
"""Each helper by words of its instruction."""


def helper_of(received: Received) -> str:
    """Which helper a request is from, by its instruction (the system message)."""
    system = received.body["messages"][0]["content"]
    return next(name for name, words in INSTRUCTIONS.items() if words in system)


def answer_for(received: Received) -> Reply:
    """`topic` sorts as shipping; `answer` says how many messages it was sent; `track` looks the order up
    once, then answers; `handoff` summarises."""
    helper, messages = helper_of(received), received.body["messages"]
    if helper == "topic":
        return Reply(outputs={"result": "shipping"})
    if helper == "track" and messages[-1]["role"] == "user":
        return Reply(calls=(Call(f"call_{len(messages)}", "order_status", {"order": "7"}),))
    return Reply(f"{helper} after {len(messages) - 1} messages")


def sent(fake: FakeProvider, helper: str) -> list[list[dict[str, Any]]]:
    """The messages (the system message left out) of each request `helper` made, in order."""
    return [r.body["messages"][1:] for r in fake.requests if helper_of(r) == helper]


def provider_env(fake: FakeProvider) -> dict[str, str]:
    """A worker's environment for the fake provider (OpenAI's wire)."""
    return {"OPENAI_API_KEY": "sk-test-code-programs", "OPENAI_BASE_URL": fake.openai_url}
