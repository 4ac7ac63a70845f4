"""Evaluations, client side: start one, follow its progress, and report it.

    rows = threadline.rated("tutor")
    report = await threadline.evaluate("tutor", rows, "exact_match", lm="openai:gpt-4o-mini")
    print(report.table())        # each row, each conversation (mean and spread), the overall mean
    report.chart("scores.png")   # the distribution of the scores (the `charts` extra)

The evaluation runs as an `Evaluation` workflow on the workers (one activity per row), so a crash
loses no scored row; it records nothing in any conversation or call log.
"""

from __future__ import annotations

import asyncio
import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from temporalio.client import WorkflowHandle

from core.errors import ErrorCode, ThreadlineError
from core.learning import EvaluationInput, EvaluationProgress, RowResult
from core.settings import Settings
from store.calls.metrics import Metric
from store.programs.program import Program
from store.programs.shape import canonical_json
from store.records import uuid7
from workflows.evaluation import EvaluationWorkflow

from .client import Threadline, connect
from .crossing import crossed, crossing
from .report import report_text

Progress = Callable[[EvaluationProgress], None]
POLL_S = 0.25
_Z975 = 1.959963984540054


def evaluation_id(program: str) -> str:
    """`evaluation/<program>/<UUIDv7>`: a new evaluation's workflow id."""
    return f"evaluation/{program}/{uuid7()}"


async def evaluate(
    program: str | Program,
    rows: Sequence[Mapping[str, Any]],
    metric: str | Metric = "exact_match",
    lm: str | None = None,
    concurrency: int = 4,
    *,
    tl: Threadline | None = None,
    settings: Settings | None = None,
    id: str | None = None,
    on_progress: Progress | None = None,
) -> Evaluation:
    """Ask `program` every row again, with the earlier turns each row holds, and score the answers.

    Args:
        program: The program (registered on the workers), or its name.
        rows: Rows with known answers (`threadline.rated(...)`, or any list of dicts with the
            program's inputs and an answer column).
        metric: A metric the workers know: `exact_match` (default), `contains`, or one defined with
            `@threadline.metric` in a THREADLINE_PROGRAMS module (the `Metric` or its name).
        lm: The model to ask (default: the workers').
        concurrency: How many rows are asked at once.
        tl: The connection (default: `connect(settings)`).
        settings: Where Temporal is, when `tl` is not given (default: the environment's).
        id: The workflow id (default `evaluation/<program>/<UUIDv7>`): the same id follows a
            running evaluation again.
        on_progress: Called with each new progress (rows scored of all, the mean so far).

    Raises:
        ThreadlineError: `program-unknown`, `metric-unknown`, `inputs-invalid` (a row lacks an
            input) or `invalid-request` (no rows, a value with no JSON form), before any row is asked.
    """
    if tl is None:  # a connection of its own, closed (its payload store's pool) at the end
        own = await connect(settings)
        try:
            return await evaluate(program, rows, metric, lm, concurrency, tl=own, id=id, on_progress=on_progress)
        finally:
            await own.close()
    name = program.name if isinstance(program, Program) else program
    metric_name = metric.name if isinstance(metric, Metric) else metric
    data = [_json_row(row, i) for i, row in enumerate(rows)]
    if not data:
        raise ThreadlineError(ErrorCode.INVALID_REQUEST, "the evaluation has no rows")
    job = EvaluationInput(program=name, rows=data, metric=metric_name, lm=lm, concurrency=concurrency)
    client = await tl.temporal()
    with crossing():
        handle = await client.start_workflow(
            EvaluationWorkflow.run,
            job,
            id=id or evaluation_id(name),
            task_queue=tl.settings.task_queue,
            static_summary=f"evaluation of {name} on {len(data)} rows by {metric_name}",
        )
    results = await follow(handle, on_progress)
    known = tl.programs().get(name)
    return Evaluation(name, metric_name, data, results, answer=known.answer if known else "result")


@crossed
async def follow(handle: WorkflowHandle[Any, list[RowResult]], on_progress: Progress | None) -> list[RowResult]:
    """Wait for an evaluation's results, reporting its progress meanwhile."""
    result = asyncio.ensure_future(handle.result())
    last: EvaluationProgress | None = None
    try:
        while on_progress is not None and not result.done():
            try:
                with crossing():
                    now = await handle.query(EvaluationWorkflow.progress)
            except ThreadlineError:
                now = None  # not started on a worker yet
            if now is not None and now != last:
                on_progress(now)
                last = now
            await asyncio.wait({result}, timeout=POLL_S)
        return await result
    finally:
        result.cancel()


def _json_row(row: Mapping[str, Any], index: int) -> dict[str, Any]:
    try:
        canonical_json(dict(row))
    except (TypeError, ValueError):
        message = f"row {index} holds a value with no JSON form: give text, numbers, lists and objects"
        raise ThreadlineError(ErrorCode.INVALID_REQUEST, message) from None
    return dict(row)


@dataclass(frozen=True)
class Evaluation:
    """An evaluation's report: each row's score and answer, each conversation's mean and spread, the
    overall mean with its 95% interval (a failed row counts 0)."""

    program: str
    metric: str
    rows: list[dict[str, Any]]
    results: list[RowResult]
    answer: str = field(default="result")

    @property
    def scores(self) -> list[float]:
        """Each row's score, in order; a failed row's is 0."""
        return [r.score if r.score is not None else 0.0 for r in self.results]

    @property
    def mean(self) -> float | None:
        """The mean score (None with no rows)."""
        return statistics.fmean(self.scores) if self.scores else None

    def interval(self) -> tuple[float | None, float | None]:
        """The mean's 95% interval: Wilson's for 0/1 scores, the normal one otherwise (None below 2 rows)."""
        return interval(self.scores)

    def by_row(self) -> list[dict[str, Any]]:
        """One entry per row: its index, conversation, score, expected and new answer, error."""
        out = []
        for result, row in zip(self.results, self.rows, strict=True):
            answer = (result.outputs or {}).get(self.answer) if result.outputs else None
            entry = {"row": result.index, "conversation": row.get("conversation"), "score": result.score}
            entry |= {"expected": row.get(self.answer), "answer": answer}
            entry["error"] = result.error.model_dump() if result.error else None
            out.append(entry)
        return out

    def by_conversation(self) -> list[dict[str, Any]]:
        """One entry per conversation (rows with none each stand alone): rows, mean, spread (the
        scores' standard deviation), lowest and highest."""
        groups: dict[str, list[float]] = {}
        for result, row, score in zip(self.results, self.rows, self.scores, strict=True):
            conversation = row.get("conversation")
            key = conversation if isinstance(conversation, str) else f"(row {result.index})"
            groups.setdefault(key, []).append(score)
        return [
            {"conversation": key, "rows": len(s), "mean": statistics.fmean(s), "spread": spread(s)}
            | {"low": min(s), "high": max(s)}
            for key, s in groups.items()
        ]

    def as_dict(self) -> dict[str, Any]:
        """The report as JSON-able data."""
        low, high = self.interval()
        failed = sum(1 for r in self.results if r.score is None)
        summary = {"program": self.program, "metric": self.metric, "n": len(self.results), "failed": failed}
        summary |= {"mean": self.mean, "low": low, "high": high, "spread": spread(self.scores)}
        return summary | {"rows": self.by_row(), "conversations": self.by_conversation()}

    def table(self) -> str:
        """The report as text: the rows, the conversations, then the overall mean."""
        return report_text(self.as_dict())

    def chart(self, path: str | Path) -> Path:
        """Write a PNG histogram of the scores to `path` (needs the `charts` extra: matplotlib).

        Raises:
            ThreadlineError: `invalid-request` when matplotlib is not installed.
        """
        from .charts import score_chart

        return score_chart(self.scores, Path(path), title=f"{self.program} by {self.metric}", mean=self.mean)


def spread(scores: Sequence[float]) -> float | None:
    """The scores' sample standard deviation (None below two)."""
    return statistics.stdev(scores) if len(scores) > 1 else None


def interval(scores: Sequence[float]) -> tuple[float | None, float | None]:
    """A 95% interval of the mean of `scores`: Wilson's for 0/1 scores, else mean ± 1.96 standard errors."""
    n = len(scores)
    if n < 2:
        return None, None
    mean = statistics.fmean(scores)
    if all(s in (0.0, 1.0) for s in scores):
        z2 = _Z975**2
        center = (mean + z2 / (2 * n)) / (1 + z2 / n)
        half = _Z975 * math.sqrt(mean * (1 - mean) / n + z2 / (4 * n * n)) / (1 + z2 / n)
        return (0.0 if mean == 0 else max(0.0, center - half)), (1.0 if mean == 1 else min(1.0, center + half))
    half = _Z975 * statistics.stdev(scores) / math.sqrt(n)
    return mean - half, mean + half
