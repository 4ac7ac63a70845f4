"""How long the free-text settings a caller gives may be, checked before anything is sent or recorded.

A name (a model, program, flow, tool, helper, output, store, turn id, metadata key, approver, a
rating's reason) has at most `MAX_NAME` characters, a list of names at most `MAX_NAMES` of them,
and a reason or note at most `MAX_NOTE` characters. The client checks them before it sends, and the
worker again before it records or calls a model with them: a signal may come from any SDK.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .context import ContextRule
from .deadlines import ApprovalDeadline, Escalation
from .errors import ErrorCode, ThreadlineError
from .models import MAX_REQUEST_ID, ApproveRule, ConversationConfig, TurnSend

MAX_NAME = 200
"""The longest name, in characters."""
MAX_NAMES = 100
"""The most names one list (or mapping, by its keys) holds."""
MAX_NOTE = 2000
"""The longest reason or note, in characters."""


def check_text(value: object, what: str, *, limit: int = MAX_NAME) -> None:
    """Refuse text over `limit` characters (other values are left to their own checks).

    Raises:
        ThreadlineError: `invalid-request`, naming `what` and the limit (never the text).
    """
    if isinstance(value, str) and len(value) > limit:
        message = f"{what} has {len(value)} characters; at most {limit} are accepted"
        raise ThreadlineError(ErrorCode.INVALID_REQUEST, message, limit=limit)


def check_names(values: Iterable[Any] | None, what: str) -> None:
    """Refuse more than `MAX_NAMES` names, or one over `MAX_NAME` characters (keys, for a mapping)."""
    names = list(values or ())
    if len(names) > MAX_NAMES:
        message = f"{len(names)} {what}s were given; at most {MAX_NAMES} are accepted"
        raise ThreadlineError(ErrorCode.INVALID_REQUEST, message, limit=MAX_NAMES)
    for name in names:
        check_text(name, f"a {what}")


def check_rule(rule: ContextRule | None) -> None:
    """A context rule's names: the outputs it leaves out and the models it asks."""
    if rule is None:
        return
    check_names(rule.without, "left-out output")
    check_text(rule.topic_model, "the topic model")
    check_text(rule.summary.model if rule.summary else None, "the summary model")


def check_config(config: ConversationConfig) -> None:
    """A conversation's settings: its program, model, rule, approvals, helpers and earlier outputs."""
    check_text(config.program, "a program name")
    check_text(config.lm, "a model name")
    check_rule(config.context)
    check_approve(config.approve)
    check_names(config.remembers, "helper name")
    check_names(config.earlier_without, "output name")


def check_send(send: TurnSend) -> None:
    """One send's settings; its inputs are `check_inputs`'s."""
    check_text(send.request_id, "a request id", limit=MAX_REQUEST_ID)
    for what, value in (("program", send.program), ("model", send.lm), ("flow", send.flow)):
        check_text(value, f"a {what} name")
    check_text(send.continue_from, "a turn id")
    check_text(send.follow, "a turn id")
    check_rule(send.context)
    check_approve(send.approve)
    check_names(send.remembers, "helper name")
    check_names(send.earlier_without, "output name")
    if send.merge is not None:
        check_names(send.merge.turns, "merged turn")
        check_text(send.merge.program, "a program name")


def check_approve(rule: ApproveRule | list[str]) -> None:
    """An `approve` rule's tool names and paths, and the approvers its deadline escalates to."""
    if isinstance(rule, ApprovalDeadline):
        check_approve(rule.calls)
        then = rule.then
        while isinstance(then, Escalation):
            check_names(then.escalate, "approver")
            then = then.then
    elif isinstance(rule, tuple | list):
        check_names(rule, "tool name")


def check_keys(values: Mapping[str, Any] | None, what: str) -> None:
    """The keys of a mapping (metadata), each a name; how many is bounded by the mapping's size."""
    for key in values or {}:
        check_text(key, f"a {what} key")


def check_turn(config: ConversationConfig, send: TurnSend) -> None:
    """What a worker checks of a send before it looks anything up: the conversation's and the send's names."""
    check_config(config)
    check_send(send)
