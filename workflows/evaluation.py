"""The Evaluation workflow: ask a program every row again and score each answer, durably.

One activity per row, at most `concurrency` at a time. A row's result is in history once its
activity completed, so a worker that crashes mid-evaluation costs only the rows in flight: the next
worker replays, asks those again and never a row already scored. Long evaluations continue as new
carrying the scored rows. Nothing is recorded in any conversation or call log; the result is the
rows' scores, which the client turns into a report (`threadline/evaluation.py`).
"""

from __future__ import annotations

import asyncio
from collections import deque

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from activities.evaluations import EvaluationActivities
    from core.learning import EvaluationCheck, EvaluationInput, EvaluationProgress, RowInput, RowResult
    from core.models import TurnError
    from core.temporal import from_failure

    from ._calls import model, quick


@workflow.defn(name="Evaluation")
class EvaluationWorkflow:
    """An evaluation of one program on rows with known answers."""

    @workflow.init
    def __init__(self, input: EvaluationInput) -> None:
        self.input = input
        self.results: dict[int, RowResult] = {r.index: r for r in input.results}

    @workflow.query(name="progress")
    def progress(self) -> EvaluationProgress:
        """Rows scored of all, and the mean so far (a failed row counts 0)."""
        scores = [r.score or 0.0 for r in self.results.values()]
        failed = sum(1 for r in self.results.values() if r.score is None)
        mean = sum(scores) / len(scores) if scores else None
        return EvaluationProgress(done=len(scores), total=len(self.input.rows), failed=failed, mean=mean)

    @workflow.run
    async def run(self, input: EvaluationInput) -> list[RowResult]:
        """Score every row not scored yet, `concurrency` at a time; continue as new when history is long."""
        if not self.results:
            check = EvaluationCheck(program=input.program, metric=input.metric, rows=input.rows)
            await quick(EvaluationActivities.check_evaluation, check, summary="check the evaluation")
        todo = deque(i for i in range(len(input.rows)) if i not in self.results)
        running: dict[int, asyncio.Task[None]] = {}
        while todo or running:
            while todo and len(running) < input.concurrency and not _long():
                index = todo.popleft()
                running[index] = asyncio.create_task(self._row(index))
            await workflow.wait_condition(lambda: any(task.done() for task in running.values()))
            for index in [i for i, task in running.items() if task.done()]:
                del running[index]
            if todo and not running and _long():
                kept = sorted(self.results.values(), key=lambda r: r.index)
                workflow.continue_as_new(input.model_copy(update={"results": kept}))
        return sorted(self.results.values(), key=lambda r: r.index)

    async def _row(self, index: int) -> None:
        """Ask row `index` again; a row whose asking failed for good is scored as failed (it counts 0)."""
        row = RowInput(
            program=self.input.program,
            index=index,
            row=self.input.rows[index],
            metric=self.input.metric,
            lm=self.input.lm,
        )
        try:
            self.results[index] = await model(EvaluationActivities.evaluate_row, row, summary=f"row {index}")
        except ApplicationError as err:
            self.results[index] = RowResult(index=index, error=TurnError.of(from_failure(err)))


def _long() -> bool:
    return workflow.info().is_continue_as_new_suggested()
