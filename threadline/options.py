"""The choices a caller makes: a conversation's (`ConversationOptions`) and one send's (`SendOptions`).

    shop = threadline.ConversationOptions(store="shops", approve="changes", lm="offline")
    chat = tl.conversation("shop", id="alex", options=shop)     # the same as the keywords
    chat = tl.conversation("shop", id="alex", store="shops", approve="changes", lm="offline")

Each is built once at the public call (`tl.conversation(...)`, `chat(...)`, `chat.send(...)`, ...)
and travels inside as itself, so the keywords are spelt out in one place.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict, Unpack

from core.context import ContextRule
from core.deadlines import parse_approve
from core.errors import ErrorCode, ThreadlineError
from core.models import MAX_REQUEST_ID, ApproveRule, Budget, ConversationConfig, Sends
from core.settings import Settings

from .coding import remembers_of


def approve_rule(approve: ApproveRule | list[str] | Mapping[str, Any]) -> ApproveRule:
    """An `approve` rule as it crosses the wire (a list of names becomes a tuple; the object form with a
    deadline is checked, `invalid-request` when it is wrong)."""
    parsed = parse_approve(dict(approve) if isinstance(approve, Mapping) else approve)
    return tuple(parsed) if isinstance(parsed, list) else typing.cast(ApproveRule, parsed)


def budget_of(budget: Budget | Mapping[str, Any] | None) -> Budget | None:
    """A budget as it crosses the wire (`invalid-request` when it is not `{"tokens": N, "cost": X}`)."""
    if budget is None or isinstance(budget, Budget):
        return budget
    unknown = sorted(set(budget) - set(Budget.model_fields))
    try:
        if unknown:
            raise ValueError(f"a budget has no field {', '.join(map(repr, unknown))}")
        return Budget.model_validate(dict(budget))
    except ValueError as err:
        raise ThreadlineError(
            ErrorCode.INVALID_REQUEST, f'a budget is {{"tokens": N, "cost": X}} of 0 or more: {err}'
        ) from None


@dataclass(frozen=True, slots=True)
class SendOptions:
    """One send's choices, given as keywords to `chat(...)`, `predict`, `send`, `deliver` and `stream`."""

    request_id: str | None = None
    """The send's idempotency key: the same one again is the same turn (None: a new UUIDv7)."""
    lm: str | None = None
    """This turn's model (None: the conversation's)."""
    approve: ApproveRule | list[str] | Mapping[str, Any] = None
    """This turn's `approve` rule (None: the conversation's)."""
    metadata: Mapping[str, Any] | None = None
    """The message's own metadata, kept with its turn and returned with the message."""
    tools: Sequence[Mapping[str, Any]] = ()
    """Functions the caller runs itself, each `{name, description, parameters}`: the model may call them,
    and the turn then waits until `turn.resume(results={call_id: output})` gives their outputs."""

    def __post_init__(self) -> None:
        if self.request_id is not None and not 0 < len(self.request_id) <= MAX_REQUEST_ID:
            raise ThreadlineError(ErrorCode.INVALID_REQUEST, f"a request id has 1 to {MAX_REQUEST_ID} characters")


class ConversationKeywords(TypedDict, total=False):
    """`tl.conversation(...)`'s keywords: the fields of `ConversationOptions`."""

    store: object
    sends: Sends
    context: ContextRule | Mapping[str, Any] | None
    lm: str | None
    idle_timeout_s: float | None
    approve: ApproveRule | list[str] | Mapping[str, Any]
    approval_timeout_s: float | None
    waiting_check_s: float | None
    remembers: Mapping[Any, Any] | None
    earlier_without: Sequence[str]
    budget: Budget | Mapping[str, Any] | None


@dataclass(frozen=True, slots=True)
class ConversationOptions:
    """A conversation handle's choices, which travel with each of its sends (`tl.conversation(...)`)."""

    store: object = "default"
    """The store the conversation lives in: a name from `THREADLINE_STORES`; `None` or `"memory"` this
    process's memory (with `connect(embedded=True)`); `True` functai's default folder; or a store object
    with `append` and `read` (functai's shape)."""
    sends: Sends = "queue"
    """What a send does while the head runs: `queue`, `refuse`, `branch` or `interrupt`."""
    context: ContextRule | Mapping[str, Any] | None = None
    """What each turn is shown of the earlier ones (`{"last": 4}`, `{"summary": {...}}`; None: all)."""
    lm: str | None = None
    """The model (None: the worker's `THREADLINE_MODEL`)."""
    idle_timeout_s: float | None = None
    """The workflow closes after this long without a send (None: `THREADLINE_IDLE_TIMEOUT_S`)."""
    approve: ApproveRule | list[str] | Mapping[str, Any] = None
    """The tool calls a person is asked about first (`"changes"`, `"all"`, tool names and paths; None:
    the program's rule), or the object form with a deadline (`{"calls": ..., "within": "PT1H", "then":
    "deny"}`, docs/programs.md)."""
    approval_timeout_s: float | None = None
    """A turn nobody answers within this is abandoned (None: it waits as long as it takes)."""
    waiting_check_s: float | None = None
    """How soon a waiting turn's log is first read for answers recorded elsewhere (None: 300 s)."""
    remembers: Mapping[Any, Any] | None = None
    """A program with code's helpers' memory: `{answer: "conversation"}`, `"turn"`,
    `threadline.remember(..., steps=True)`, or `"own"` for a conversation its code uses."""
    earlier_without: Sequence[str] = ()
    """Outputs the program now writes that earlier turns lack (`["reasoning"]`)."""
    budget: Budget | Mapping[str, Any] | None = None
    """What the conversation may spend in all, `{"tokens": N, "cost": X}` (`cost` in `THREADLINE_PRICES`'
    currency): a turn that would exceed it is refused `budget-exceeded` before its model is asked."""

    def replace(self, **given: Unpack[ConversationKeywords]) -> ConversationOptions:
        """These options with the fields `given` changed."""
        return dataclasses.replace(self, **given) if given else self

    def config(self, program: str, conversation: str, settings: Settings, *, search: bool) -> ConversationConfig:
        """The config a workflow starts with: these options over `settings`' defaults (`search`: the
        server has Threadline's search attributes)."""
        rule = self.context if isinstance(self.context, ContextRule) else ContextRule.model_validate(self.context or {})
        if not isinstance(self.store, str):  # `Threadline.conversation` names the store first
            raise ThreadlineError(ErrorCode.STORE_KIND, f"a store is named here, not given as {self.store!r}")
        return ConversationConfig(
            store=self.store,
            conversation=conversation,
            program=program,
            sends=self.sends,
            context=rule,
            lm=self.lm,
            idle_timeout_s=settings.idle_timeout_s if self.idle_timeout_s is None else self.idle_timeout_s,
            search_attributes=search,
            attributes_every_s=settings.attributes_every_s,
            turns_per_run=settings.turns_per_run,
            approve=approve_rule(self.approve),
            approval_timeout_s=self.approval_timeout_s,
            remembers=remembers_of(self.remembers),
            earlier_without=tuple(self.earlier_without),
            budget=budget_of(self.budget),
            **({} if self.waiting_check_s is None else {"waiting_check_s": self.waiting_check_s}),
        )
