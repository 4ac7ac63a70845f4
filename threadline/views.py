"""Read-only views a client computes from the record log: `render` (the exact request the next
turn would send, with nothing sent or recorded) and `history` (the compressed view)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from activities.models import build_request, split_model
from activities.providers import request_body
from activities.sends import rule_of, summary_of, view_of
from core.errors import ErrorCode, ThreadlineError
from core.models import TurnSend
from store.log import Log
from store.program import Program
from store.rules import parent_for, view_head
from store.summary import latest as latest_summary
from store.topics import topics
from store.turns import shown_for

if TYPE_CHECKING:
    from .client import Conversation


def render(chat: Conversation, send: TurnSend, program: Program, log: Log) -> dict[str, Any]:
    """The request a turn sent now would make: placed and shown by the same rules as a real send.

    A topic policy's placement is not applied (it would take a model call); a summary that is due
    but not yet made is not made (the preview shows the newest one the log holds).
    """
    config, now = chat.config, time.time()
    inputs = program.validate_inputs(send.inputs)
    head = view_head(log, view_of(send))
    decided = parent_for(log, head, send.sends or config.sends, now)
    parent = log.nearest_done(decided.waits, now) if decided.waits else decided.parent
    seen = shown_for(log, program, parent, rule_of(config, send), summary_of(config, send), now=now)
    model = send.lm or config.lm or chat.tl.settings.model
    _, name = split_model(model)
    request = build_request(program, seen.exchanges, inputs, model=name, sections=seen.sections)
    return {
        "model": model,
        "parent": parent,
        "waits_for": decided.waits,
        "shown": seen.turns,
        "sections": seen.sections,
        "request": request_body(model, request),
    }


def history(chat: Conversation, log: Log, tip: str | None) -> dict[str, Any]:
    """The branch through `tip` as the model sees it: summary, key facts, turns shown verbatim."""
    now = time.time()
    done = [t for t in log.branch(tip) if t.state(now) == "done"]
    summary = latest_summary(log, tip) or {}
    covered = set(summary.get("turns") or [])
    verbatim = [t.id for t in done if t.id not in covered]
    shown = rule_of(chat.config, TurnSend(request_id="", inputs={})).pick([t for t in done if t.id in verbatim])
    return {
        "conversation": chat.id,
        "head": tip,
        "branch_turns": len(log.branch(tip)),
        "done_turns": len(done),
        "summarised_turns": len(covered),
        "verbatim_turns": len(shown),
        "summary": summary.get("summary"),
        "facts": list(summary.get("facts") or []),
        "topics": [{"label": t["label"], "turns": len(t["turns"]), "latest": t["latest"]} for t in topics(log)],
    }


def require_program(chat: Conversation) -> Program:
    """The conversation's program as this client knows it (built in, or from THREADLINE_PROGRAMS)."""
    program = chat.tl.programs().get(chat.config.program)
    if program is None:
        raise ThreadlineError(
            ErrorCode.PROGRAM_UNKNOWN, f"program {chat.config.program!r} is not known here: set THREADLINE_PROGRAMS"
        )
    return program
