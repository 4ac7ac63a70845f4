"""An evaluation's steps: check it, then ask one row again and score the answer.

A row is asked as the turn it came from was: its earlier turns (`earlier`, as functai's rated rows
hold them) shown before its inputs, its `sections` added to the instruction. Nothing is read from
or written to any store: an evaluation records nothing in a conversation or a call log. A failure
no retry can fix (a refused request, an answer that does not fit, a metric that cannot score the
row) is that row's result; a passing one is raised, for Temporal to retry.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import structlog
from temporalio import activity

from core.errors import ErrorCode, ThreadlineError
from core.learning import EvaluationCheck, RowInput, RowResult
from core.models import TurnError
from core.temporal import coded
from store.calls.metrics import Metric, find_metric
from store.programs.program import Program

from .asking import ask
from .language_model import Providers
from .placing import find_program

logger = structlog.get_logger(__name__)


class EvaluationActivities:
    """Evaluations on this worker.

    Args:
        programs: The programs by name.
        metrics: The metrics by name.
        providers: The model providers.
        default_model: The model used when the evaluation names none.
    """

    def __init__(
        self,
        programs: Mapping[str, Program],
        metrics: Mapping[str, Metric],
        providers: Providers,
        *,
        default_model: str = "offline",
    ) -> None:
        self.programs = dict(programs)
        self.metrics = dict(metrics)
        self.providers = providers
        self.default_model = default_model

    @activity.defn(name="check_evaluation")
    @coded
    async def check_evaluation(self, input: EvaluationCheck) -> int:
        """Refuse an evaluation no row of which could be scored; return how many rows it has."""
        program = find_program(self.programs, input.program)
        find_metric(self.metrics, input.metric)
        if not input.rows:
            raise ThreadlineError(ErrorCode.INVALID_REQUEST, "the evaluation has no rows")
        required = [name for name, _ in program.inputs if name not in dict(program.defaults)]
        for index, row in enumerate(input.rows):
            missing = [name for name in required if name not in row]
            if missing:
                message = f"row {index} has no {missing[0]!r}, which {program.name} takes"
                raise ThreadlineError(ErrorCode.INPUTS_INVALID, message, row=index)
        return len(input.rows)

    @activity.defn(name="evaluate_row")
    @coded
    async def evaluate_row(self, input: RowInput) -> RowResult:
        """Ask the row again with its earlier turns (heartbeating) and score the new answer."""
        program = find_program(self.programs, input.program)
        metric = find_metric(self.metrics, input.metric)
        row, lm = input.row, input.lm or self.default_model
        base = RowResult(index=input.index, conversation=_text(row.get("conversation")))
        try:
            inputs = program.validate_inputs({name: row[name] for name, _ in program.inputs if name in row})
            logger.info("evaluation.row_asked", row=input.index, program=program.name, model=lm)
            asked = await ask(self.providers, program, inputs, lm=lm, earlier=_earlier(row), sections=_sections(row))
            score = metric.score(row, asked.outputs)
        except ThreadlineError as err:
            if err.retryable:
                raise
            return base.model_copy(update={"error": TurnError.of(err)})
        update = {"score": score, "outputs": asked.outputs, "model": asked.model, "usage": asked.usage}
        return base.model_copy(update={**update, "seconds": asked.seconds})


def _earlier(row: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    earlier = row.get("earlier") or []
    if not isinstance(earlier, list) or not all(isinstance(t, Mapping) for t in earlier):
        raise ThreadlineError(ErrorCode.INPUTS_INVALID, "a row's `earlier` is a list of turns ({inputs, outputs})")
    return earlier


def _sections(row: Mapping[str, Any]) -> list[str]:
    sections = row.get("sections") or []
    return [str(s) for s in sections] if isinstance(sections, list) else []


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None
