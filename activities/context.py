"""Preparing a send before it is placed (topic classification) and extending a branch's summary
after a turn: each a model call whose result is kept in the log first, so a retry or a resume
never pays for it again."""

from __future__ import annotations

from typing import Any

import structlog

from core.context import ContextRule
from core.models import ConversationConfig, PrepareResult, TurnSend
from store.backends.reader import ConversationLog, now
from store.log.rules import view_head
from store.log.state import Log, Turn
from store.log.summary import KIND as SUMMARY
from store.log.summary import PLUGIN as THREADLINE
from store.log.summary import SUMMARISER, due, latest, summariser_inputs, summary_data
from store.log.topics import (
    CLASSIFIER,
    RECENT_TURNS,
    SHOWN_TOPICS,
    classified,
    current_label,
    first_topic,
    short_label,
    topic_history,
    topics,
)
from store.programs.program import Program
from store.records import entry_record

from .language_model import OfflineModel, Providers, build_request, render_values
from .plan import rule_of, view_of

logger = structlog.get_logger(__name__)


class Preparer:
    """Topic and summary work for one send."""

    def __init__(self, conversation: ConversationLog, providers: Providers, model: str) -> None:
        self.conversation = conversation
        self.providers = providers
        self.model = model

    async def ask(
        self,
        program: Program,
        inputs: dict[str, Any],
        model: str | None,
        purpose: str,
        *,
        max_tokens: int | None = None,
    ) -> dict[str, Any]:
        """One model call of a built-in program; its outputs, checked."""
        return (await self.ask_counted(program, inputs, model, purpose, max_tokens=max_tokens))[0]

    async def ask_counted(
        self,
        program: Program,
        inputs: dict[str, Any],
        model: str | None,
        purpose: str,
        *,
        max_tokens: int | None = None,
    ) -> tuple[dict[str, Any], dict[str, int]]:
        """`ask`, with the tokens the call used (`max_tokens`: the bound the provider is given)."""
        provider, name = self.providers.resolve(model or self.model)
        logger.info("model.requested", purpose=purpose, model=model or self.model)
        request = build_request(program, [], inputs, model=name, max_tokens=max_tokens)
        reply = await provider.complete(request)  # the activity's ticker heartbeats meanwhile (`heartbeats`)
        return program.validate_outputs(reply.outputs), dict(reply.usage)

    async def prepare(self, config: ConversationConfig, send: TurnSend, *, record: bool) -> PrepareResult:
        """Classify the message's topic, placing it by topic under `branch`.

        With `record`, the classification is kept in the log before it is used (a send); without,
        nothing is appended (a render, which must leave the log as it found it).
        """
        rule = rule_of(config, send)
        result = PrepareResult(continue_from=send.continue_from, root=send.root)
        return await self._topic(rule, send, result, record=record) if rule.topics != "off" else result

    async def summarise(self, config: ConversationConfig, send: TurnSend, turn: str) -> None:
        """After `turn` ended: fold the older turns of its branch into the summary, if one is due.

        Done after the answer, not before the next turn: no turn waits for a summary, and the next
        turn on this branch finds it ready (or, if it comes first, the previous one).
        """
        chosen = rule_of(config, send).summary
        if chosen is None:
            return
        log = await self.conversation.read()
        done = [t for t in log.branch(turn) if t.state(now()) == "done"]
        previous, fold = due(log, done, chosen, turn)
        if not fold:
            return
        model = chosen.model or send.lm or config.lm
        inputs = summariser_inputs(previous, fold)
        outputs = await self.ask(SUMMARISER, inputs, model, "summary", max_tokens=chosen.max_summary_tokens)
        data = summary_data(previous, fold, str(outputs["result"]), [str(f) for f in outputs["facts"]])
        log = await self.conversation.read()
        if latest(log, turn) != previous:
            return  # another worker extended it meanwhile: keep theirs, pay nothing more
        await self.conversation.append([entry_record(THREADLINE, SUMMARY, data, turn=fold[-1].id)])
        logger.info("summary.extended", turns=len(data["turns"]), folded=len(fold), facts=len(data["facts"]))

    async def _topic(self, rule: ContextRule, send: TurnSend, result: PrepareResult, *, record: bool) -> PrepareResult:
        log = await self.conversation.read()
        data = classified(log, send.request_id)
        if data is None:
            data = await self._classify(log, rule, send)
            if record:
                await self.conversation.append([entry_record(THREADLINE, "topic", data)])
        if rule.topics != "branch" or send.continue_from:
            return result.model_copy(update={"topic": data})
        return result.model_copy(update={"topic": data, **_placement(await self.conversation.read(), data)})

    async def _classify(self, log: Log, rule: ContextRule, send: TurnSend) -> dict[str, Any]:
        """The send's topic entry: the first message is a new topic without a model call; later
        ones are classified against the last turns and the last topics of the history."""
        message = render_values(send.inputs)
        if not log.turns:
            return first_topic(send.request_id, message)
        history = topic_history(log)
        head = view_head(log, view_of(send))
        inputs = {
            "message": message,
            "recent": "\n".join(_exchange(t) for t in log.branch(head)[-RECENT_TURNS:]),
            "current": current_label(log, head),
            "topics": history[-SHOWN_TOPICS:],
        }
        model = rule.topic_model or send.lm
        outputs, usage = await self.ask_counted(CLASSIFIER, inputs, model, "topic")
        offline = isinstance(self.providers.resolve(model or self.model)[0], OfflineModel)
        return {
            "request_id": send.request_id,
            "shift": outputs["shift"],
            # the offline model echoes its prompt: its label is the message's own few words
            "label": short_label(message) if offline else outputs["result"],
            "confidence": outputs["confidence"],
            "previous_topic": history[-1] if history else None,
            "usage": usage,  # the turn's `ended` usage counts this call too
        }


def _exchange(turn: Turn) -> str:
    """One earlier turn as the classifier reads it: the user's message, then the answer."""
    lines = [f"user: {render_values(turn.inputs)}"]
    if turn.outputs:
        lines.append(f"assistant: {render_values(turn.outputs)}")
    return "\n".join(lines)


def _placement(log: Log, data: dict[str, Any]) -> dict[str, Any]:
    """Under `branch`: a new topic starts a root; a return continues that topic's latest turn."""
    if data.get("shift") == "new":
        return {"root": True, "continue_from": None}
    if data.get("shift") == "return":
        latest_turn = next((t["latest"] for t in topics(log) if t["label"] == data.get("label")), None)
        if latest_turn is not None and log.turns[latest_turn].state(now()) == "done":
            return {"root": False, "continue_from": latest_turn}
    return {}
