"""Wire models of learning from conversations: merges and evaluations, as they cross Temporal.

Small by construction: ids, names and per-row scores; the merged branches and the rows' earlier
turns travel by reference (the log, the claim check), never in the workflow's own state.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from .models import ConversationConfig, Model, TurnError, TurnOutcome, TurnSend


class MergePlan(Model):
    """A merge placed (`placed`: its turn and call ids minted, nothing recorded yet), or its request
    id already in the log (`existing`: that turn, and how it ended)."""

    kind: Literal["placed", "existing"]
    turn: str
    call: str = ""
    parent: str | None = None
    outcome: TurnOutcome | None = None
    store_id: str | None = None


class MergeRun(Model):
    """Ask a placed merge's merging program (`run_merge`), then record it (`end_merge`, with `answer`)."""

    config: ConversationConfig
    send: TurnSend
    plan: MergePlan
    answer: MergeAnswer | None = None


class MergeAnswer(Model):
    """What the merging program answered, kept in history before anything is recorded."""

    outputs: dict[str, Any]
    model: str | None = None
    usage: dict[str, int] = Field(default_factory=dict)
    seconds: float = 0.0


class EvaluationInput(Model):
    """An evaluation: ask `program` every row again (with its earlier turns) and score each answer.

    `results` are the rows already scored (carried across continue-as-new)."""

    program: str
    rows: list[dict[str, Any]]
    metric: str = "exact_match"
    lm: str | None = None
    concurrency: int = Field(default=4, ge=1, le=64)
    results: list[RowResult] = Field(default_factory=list)


class RowInput(Model):
    """One row to ask again and score."""

    program: str
    index: int
    row: dict[str, Any]
    metric: str
    lm: str | None = None


class RowResult(Model):
    """How one row came out: its score (None when it failed: it counts 0), the answer, what it cost."""

    index: int
    score: float | None = None
    outputs: dict[str, Any] | None = None
    conversation: str | None = None
    error: TurnError | None = None
    model: str | None = None
    usage: dict[str, int] = Field(default_factory=dict)
    seconds: float = 0.0


class EvaluationCheck(Model):
    """Check an evaluation before any row is asked: its program, its metric, each row's inputs."""

    program: str
    metric: str
    rows: list[dict[str, Any]]


class EvaluationProgress(Model):
    """The `progress` query: rows scored of all, and the mean so far (failed rows count 0)."""

    done: int
    total: int
    failed: int = 0
    mean: float | None = None


MergeRun.model_rebuild()
EvaluationInput.model_rebuild()
