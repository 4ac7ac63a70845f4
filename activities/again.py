"""Asking a turn again: the request the turn sent (what it was shown, as its `saw` records it, under the
conversation's context rule, its program and its model unless another is named; the steers it took,
after its message), sent once more. The answer is returned and nothing is appended.
"""

from __future__ import annotations

from core.again_models import AskAgain, AskedAgain
from core.context import ContextRule
from core.errors import ErrorCode, ThreadlineError
from store.backends.reader import ConversationLog, now
from store.log.imports import MODEL as IMPORTED
from store.log.state import Log, Turn
from store.log.steers import taken
from store.programs.program import Program

from .asking import ask
from .language_model import Providers, split_model, steer_messages
from .plan import request_of, shown_for_run
from .providers import request_body


async def ask_again(
    conversation: ConversationLog, program: Program, providers: Providers, rule: ContextRule, ask_: AskAgain, *, lm: str
) -> AskedAgain:
    """The model's answer to `ask_.turn`'s request again (`lm`: the model to ask).

    Raises:
        ThreadlineError: `turn-unknown`; `turn-state` for a turn that has not ended, or did not make one
            model call of its own (a program with code or tools, a merge, an import), or whose `saw` the
            conversation's context rule no longer gives (ask with the rule it was sent under).
    """
    log = await conversation.read()
    turn = _asked(log, ask_.turn, program)
    seen = shown_for_run(log, program, turn.id, rule, now=now())
    if turn.ended is not None and seen.saw != turn.ended.get("saw"):
        message = f"turn {turn.id} was shown other turns than this conversation's context rule gives now; ask"
        message += " again through a conversation handle with the rule it was sent under"
        raise ThreadlineError(ErrorCode.TURN_STATE, message, turn=turn.id)
    steps = steer_messages({"inputs": s.inputs, "said": s.said} for s in taken(turn)) if turn.steers else []
    request = request_of(program, seen, turn.inputs, model=split_model(lm)[1], steps=steps)
    asked = await ask(
        providers, program, turn.inputs, lm=lm, earlier=seen.exchanges, sections=seen.sections, steps=steps
    )
    return AskedAgain(
        turn=turn.id,
        model=lm,
        outputs=asked.outputs,
        result=asked.outputs.get(program.answer),
        request=request_body(lm, request),
    )


def turn_model(log: Log, turn: str) -> str | None:
    """The model a turn asked, as it recorded it (its settings' `lm`, else its `ended` record's model)."""
    found = log.turns.get(turn)
    if found is None:
        return None
    settings = found.record.get("settings") or {}
    return settings.get("lm") or (found.ended or {}).get("model")


def _asked(log: Log, turn: str, program: Program) -> Turn:
    found = log.turns.get(turn)
    if found is None:
        raise ThreadlineError(ErrorCode.TURN_UNKNOWN, f"turn {turn} is not in this conversation", turn=turn)
    if found.ended is None:
        raise ThreadlineError(ErrorCode.TURN_STATE, f"turn {turn} has not ended: ask again once it has", turn=turn)
    made_here = not found.record.get("reads") and found.ended.get("model") != IMPORTED  # not a merge, nor imported
    if program.kind == "module" or program.tools or not made_here:
        message = (
            f"turn {turn} did not make one model call of its own ({program.name}); only such a turn is asked again"
        )
        raise ThreadlineError(ErrorCode.TURN_STATE, message, turn=turn)
    return found
