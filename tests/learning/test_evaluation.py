"""Evaluations as their own workflow: each rated row asked again with its earlier turns, nothing recorded,
no row lost or asked twice across a worker's kill -9, and a report of rows, conversations and a chart."""

from __future__ import annotations

import asyncio
import json
import struct
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle
from temporalio.worker import Replayer, Worker

import threadline
from core.errors import ErrorCode, ThreadlineError
from core.learning import EvaluationInput, RowResult
from core.models import TurnError
from core.settings import Settings
from store.calls.metrics import BUILT_IN, contains, exact_match
from tests.support.processes import WorkerProcess
from threadline.client import Threadline
from threadline.evaluation import Evaluation, evaluation_id, follow
from workflows.evaluation import EvaluationWorkflow


def files(folder: Path) -> dict[str, bytes]:
    """Every file under the store folder (conversations, call log), by path."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


async def rated_rows(tl: Threadline, settings: Settings, cid: str) -> list[dict[str, Any]]:
    """Three offline turns of one conversation and one of another, all rated right but the second,
    rated wrong with a correction: the offline model says how many earlier turns it was shown."""
    chat = tl.conversation("tutor", id=cid)
    turns = [await chat.predict(m) for m in ("one", "two", "three")]
    alone = await tl.conversation("tutor", id=f"{cid}-b").predict("alone")
    for turn in [turns[0], turns[2], alone]:
        await turn.rate("right", by="ana")
    await turns[1].rate("wrong", answer="Two!", by="ana")
    return list(threadline.rated("tutor", settings=settings))


async def test_rows_are_asked_again_with_their_earlier_turns_and_nothing_is_recorded(
    tl: Threadline, worker: Worker, settings: Settings, cid: str
) -> None:
    """The offline model answers a rated row exactly as it did only when shown the same earlier turns:
    the rows rated right score 1, the corrected one 0; the store's files are byte for byte the same."""
    rows = await rated_rows(tl, settings, cid)
    before = files(settings.store_folder("default"))
    seen: list[int] = []

    report = await threadline.evaluate("tutor", rows, "exact_match", tl=tl, on_progress=lambda p: seen.append(p.done))

    assert [1.0, 0.0, 1.0, 1.0] == report.scores
    assert [0, 1, 2, 0] == [len(r["earlier"]) for r in rows]
    assert before == files(settings.store_folder("default"))
    assert seen == sorted(seen)
    assert 0.75 == report.mean
    by_conversation = {c["conversation"]: (c["rows"], c["mean"]) for c in report.by_conversation()}
    assert {cid: (3, 2 / 3), f"{cid}-b": (1, 1.0)} == by_conversation


async def test_an_evaluations_history_replays(client: Client, tl: Threadline, worker: Worker) -> None:
    """An evaluation's history (a check, rows at concurrency 2, one failed row) replays deterministically."""
    rows = [{"message": f"row {i}", "result": "x"} for i in range(5)] + [{"message": "bad", "earlier": "no"}]
    handle = await client.start_workflow(
        EvaluationWorkflow.run,
        EvaluationInput(program="tutor", rows=rows, concurrency=2),
        id=evaluation_id("tutor"),
        task_queue=tl.settings.task_queue,
    )

    results = await follow(handle, None)

    assert ["inputs-invalid"] == [r.error.code for r in results if r.error]
    replayer = Replayer(workflows=[EvaluationWorkflow], data_converter=client.data_converter)
    await replayer.replay_workflow(await handle.fetch_history())


async def test_a_bad_evaluation_is_refused_before_any_row_is_asked(tl: Threadline, worker: Worker) -> None:
    """An unknown metric, an unknown program, a row without an input and no rows: each its code."""
    row = {"message": "hi", "result": "hi"}

    refused = [
        await _code(threadline.evaluate("tutor", [row], "nope", tl=tl)),
        await _code(threadline.evaluate("nobody", [row], tl=tl)),
        await _code(threadline.evaluate("tutor", [row, {"result": "x"}], tl=tl)),
        await _code(threadline.evaluate("tutor", [], tl=tl)),
    ]

    assert [
        ErrorCode.METRIC_UNKNOWN,
        ErrorCode.PROGRAM_UNKNOWN,
        ErrorCode.INPUTS_INVALID,
        ErrorCode.INVALID_REQUEST,
    ] == refused


async def test_a_killed_worker_loses_no_row_and_asks_no_scored_row_again(
    client: Client, tl: Threadline, settings: Settings, tmp_path: Path
) -> None:
    """kill -9 of the worker mid-evaluation: the next worker asks the rows in flight again, never a row
    whose score was recorded, and every row ends with its score."""
    rows = [{"message": f"row {i}", "result": f"(offline) You said: row {i}. I was shown 0 earlier turn(s)."}
            for i in range(8)]  # fmt: skip
    first_log, second_log = tmp_path / "first.log", tmp_path / "second.log"
    first = WorkerProcess(settings, first_log, delay=1.0)
    await asyncio.to_thread(first.wait_ready)
    job = EvaluationInput(program="tutor", rows=rows, metric="exact_match", concurrency=2)
    handle = await client.start_workflow(
        EvaluationWorkflow.run, job, id=evaluation_id("tutor"), task_queue=settings.task_queue
    )
    await _until(lambda: _scored(handle), at_least=3)

    await asyncio.to_thread(first.kill)
    second = WorkerProcess(settings, second_log, delay=0.2)
    try:
        results = await asyncio.wait_for(follow(handle, None), timeout=90)
    finally:
        await asyncio.to_thread(second.stop)

    completed = await _completed_by(handle)
    scored_by_first = {row for row, who in completed.items() if who == f"{first.process.pid}@"}
    asked_again = _asked(second_log)
    assert 3 <= len(scored_by_first) < len(rows)
    assert set() == scored_by_first & set(asked_again)
    assert sorted(asked_again) == sorted(set(asked_again))
    assert set(range(len(rows))) == scored_by_first | set(asked_again)
    assert [1.0] * len(rows) == [r.score for r in results]


class TestTheReport:
    def report(self) -> Evaluation:
        rows: list[dict[str, Any]] = [
            {"message": "a", "result": "A", "conversation": "c1"},
            {"message": "b", "result": "B", "conversation": "c1"},
            {"message": "c", "result": "C", "conversation": "c2"},
            {"message": "d", "result": "D", "conversation": None},
        ]
        results = [
            RowResult(index=0, score=1.0, outputs={"result": "A"}, conversation="c1"),
            RowResult(index=1, score=0.0, outputs={"result": "b?"}, conversation="c1"),
            RowResult(index=2, score=1.0, outputs={"result": "C"}, conversation="c2"),
            RowResult(index=3, error=TurnError(code="provider-rejected", message="refused")),
        ]
        return Evaluation("tutor", "exact_match", rows, results)

    def test_rows_and_conversations_with_mean_and_spread(self) -> None:
        """Per row its score, expected and new answer or error; per conversation its mean and spread
        (a row with none stands alone); overall the mean with Wilson's 95% interval, a failure as 0."""
        data = self.report().as_dict()

        assert [1.0, 0.0, 1.0, None] == [r["score"] for r in data["rows"]]
        assert "provider-rejected" == data["rows"][3]["error"]["code"]
        assert [("c1", 2, 0.5, 0.7071), ("c2", 1, 1.0, None), ("(row 3)", 1, 0.0, None)] == [
            (c["conversation"], c["rows"], c["mean"], None if c["spread"] is None else round(c["spread"], 4))
            for c in data["conversations"]
        ]
        assert (0.5, 1, 4) == (data["mean"], data["failed"], data["n"])
        assert 0.15 == round(data["low"], 2)
        assert 0.85 == round(data["high"], 2)
        json.dumps(data)

    def test_the_table_shows_rows_conversations_and_the_mean(self) -> None:
        """The text report: a row table, a conversation table, and the summary line."""
        text = self.report().table()

        assert "ROW  CONVERSATION  SCORE  EXPECTED  ANSWER" in text
        assert "3    -             -      D         provider-rejected: refused" in text
        assert "c1            2     0.50  0.71    0.00  1.00" in text
        assert text.endswith(
            "tutor by exact_match: mean 0.50 (95% interval 0.15 to 0.85), 4 rows, 1 failed, spread 0.58"
        )

    def test_the_chart_is_a_png_of_the_score_distribution(self, tmp_path: Path) -> None:
        """`chart()` writes a 640x400 PNG."""
        path = self.report().chart(tmp_path / "charts" / "scores.png")

        data = path.read_bytes()
        assert b"\x89PNG\r\n\x1a\n" == data[:8]
        assert (640, 400) == struct.unpack(">II", data[16:24])


def test_the_built_in_metrics() -> None:
    """`exact_match` ignores case and repeated spaces and compares every output the row has;
    `contains` asks for the row's text inside the answer; a row with no such column cannot be scored."""
    assert 1.0 == exact_match({"result": "Five  Sixths"}, {"result": "five sixths"})
    assert 0.0 == exact_match({"result": "5/6"}, {"result": "five sixths"})
    assert 1.0 == contains({"result": "5/6"}, {"result": "It is 5/6."})
    with pytest.raises(ThreadlineError) as unscored:
        BUILT_IN["exact_match"].score({"message": "x"}, {"result": "y"})
    assert ErrorCode.INVALID_REQUEST == unscored.value.code


async def _code(action: object) -> ErrorCode:
    try:
        await action  # type: ignore[misc]
    except ThreadlineError as err:
        return err.code
    raise AssertionError("nothing was refused")


async def _scored(handle: WorkflowHandle[Any, Any]) -> set[int]:
    """The rows whose results are in the evaluation's history."""
    found: set[int] = set()
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            payloads = event.activity_task_completed_event_attributes.result.payloads
            (result,) = await handle._client.data_converter.decode(payloads, [RowResult])
            found.add(result.index)
    return found


async def _completed_by(handle: WorkflowHandle[Any, Any]) -> dict[int, str]:
    """Each row's one recorded result, by the worker that completed it (its identity up to the host):
    read from the whole history, so a result the killed worker sent just before dying counts as its."""
    by: dict[int, str] = {}
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            attributes = event.activity_task_completed_event_attributes
            (result,) = await handle._client.data_converter.decode(attributes.result.payloads, [RowResult])
            assert result.index not in by, f"row {result.index} recorded twice"
            by[result.index] = attributes.identity.split("@")[0] + "@"
    return by


async def _until(read: Any, *, at_least: int) -> None:
    for _ in range(300):
        if len(await read()) >= at_least:
            return
        await asyncio.sleep(0.1)
    raise TimeoutError("the evaluation did not get that far")


def _asked(log: Path) -> list[int]:
    events = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines() if line.startswith("{")]
    return [int(e["row"]) for e in events if e.get("event") == "evaluation.row_asked"]
