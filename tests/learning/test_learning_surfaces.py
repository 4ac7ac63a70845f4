"""Merging, rating, rated rows and evaluations over the `threadline` command and the HTTP service, and
Threadline's `rated` and `train_test` against functai's on the same call log."""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from temporalio.client import Client
from temporalio.worker import Worker

import threadline
from core.learning import EvaluationProgress
from core.settings import Settings
from store.backends.folder import FolderStore
from tests.learning.test_split import SEED_EXAMPLE
from tests.support.calllog_kit import functai_rows, functai_turn
from tests.support.service_kit import serving
from tests.surfaces.test_cli import clean_env, threadline_json
from threadline.cli.learning_commands import ProgressBar
from threadline.client import Threadline, connect
from threadline.http import create_app
from worker import build_worker

PROGRAMS = "tests.support.learning_programs"


@pytest.fixture(name="learning")
def _learning(settings: Settings) -> Settings:
    return dataclasses.replace(settings, programs=(PROGRAMS,))


@pytest_asyncio.fixture(name="merging")
async def _merging(client: Client, learning: Settings) -> AsyncIterator[Worker]:
    async with build_worker(client, learning) as worker:
        yield worker


@pytest.fixture(name="shell")
def _shell(learning: Settings) -> dict[str, str]:
    return clean_env(
        temporal_address=learning.address,
        data=str(learning.data),
        task_queue=learning.task_queue,
        payloads=str(learning.payload_folder),
        programs=PROGRAMS,
    )


class TestTheCommand:
    @pytest.mark.slow
    async def test_merge_rate_rated_and_evaluate(
        self, learning: Settings, merging: Worker, shell: dict[str, str], tmp_path: Path, cid: str
    ) -> None:
        """From the shell: send a root and two branches, merge them, rate the turns, list the rated
        rows and evaluate them (a JSON report and a PNG chart); backfill finds nothing missing."""
        root = await threadline_json(shell, "send", cid, "start")
        left = await threadline_json(shell, "send", cid, "left", "--from", root["turn"])
        right = await threadline_json(shell, "send", cid, "right", "--from", root["turn"])

        merged = await threadline_json(
            shell, "merge", cid, left["turn"], right["turn"], "--with", "pick", "--from", root["turn"]
        )
        rated_root = await threadline_json(shell, "rate", cid, root["turn"], "right", "--by", "ana")
        await threadline_json(shell, "rate", cid, left["turn"], "wrong", "--answer", "Left!", "--by", "ana")
        rows = await threadline_json(shell, "rated", "tutor", "--by", "ana")
        chart = tmp_path / "scores.png"
        report = await threadline_json(shell, "evaluate", "tutor", "--metric", "exact_match", "--chart", str(chart))
        backfilled = await threadline_json(shell, "backfill-calls")

        assert ([left["turn"], right["turn"]], "pick") == (merged["reads"], merged["made_by"]["name"])
        assert root["turn"] == rated_root["call"]
        assert [(root["turn"], "right"), (left["turn"], "wrong")] == [(r["call"], r["rating"]) for r in rows["rows"]]
        assert ([1.0, 0.0], 0.5) == ([r["score"] for r in report["rows"]], report["mean"])
        assert [(cid, 2)] == [(c["conversation"], c["rows"]) for c in report["conversations"]]
        assert (640, 400) == struct.unpack(">II", chart.read_bytes()[16:24])
        assert 0 == backfilled["written"]

    def test_the_progress_bar_redraws_one_line(self, capsys: pytest.CaptureFixture[str]) -> None:
        """`threadline evaluate` on a terminal draws `[###...] done/total rows, mean` in place on stderr."""
        bar = ProgressBar()

        bar(EvaluationProgress(done=1, total=4, mean=1.0))
        bar(EvaluationProgress(done=4, total=4, failed=1, mean=0.75))
        bar.close()

        drawn = capsys.readouterr().err
        assert "\r[" + "#" * 8 + "." * 22 + "] 1/4 rows, mean 1.00" in drawn
        assert drawn.endswith("\r[" + "#" * 30 + "] 4/4 rows, mean 0.75, 1 failed\n")


class TestTheService:
    async def test_merge_and_rate_over_http(
        self, client: Client, learning: Settings, merging: Worker, cid: str
    ) -> None:
        """`POST .../merges` answers 201 with the merge turn, 409 `turn-state` for a bad one (nothing
        recorded); `POST .../turns/{turn}/ratings` answers 201 with functai's rating, 422 for a bad verdict."""
        tl = await connect(learning, client=client)
        chat = tl.conversation("tutor", id=cid)
        root = await chat.predict("start")
        left = await chat.continue_from(root).predict("left")
        right = await chat.continue_from(root).predict("right")
        async with serving(create_app(tl)) as http:
            url = f"/v1/conversations/{cid}"
            merged = await http.post(f"{url}/merges", json={"turns": [left.id, right.id], "with": "pick",
                                                            "continue_from": root.id})  # fmt: skip
            refused = await http.post(f"{url}/merges", json={"turns": [left.id, right.id], "with": "pick"})
            rating = await http.post(
                f"{url}/turns/{merged.json()['id']}/ratings", json={"verdict": "right", "by": "ana"}
            )
            bad = await http.post(f"{url}/turns/{root.id}/ratings", json={"verdict": "meh"})

        assert (201, [left.id, right.id]) == (merged.status_code, merged.json()["reads"])
        assert (409, "turn-state") == (refused.status_code, refused.json()["error"]["code"])
        assert (201, merged.json()["made_by"]["call"]) == (rating.status_code, rating.json()["call"])
        assert (422, "invalid-request") == (bad.status_code, bad.json()["error"]["code"])


async def test_threadline_rated_equals_functai_rated_on_a_mixed_log(
    tl: Threadline, worker: Worker, settings: Settings, cid: str
) -> None:
    """functai and worker turns in one conversation, rated from both sides: `threadline.rated` by name
    gives functai's own rows, `earlier` and `conversation` included (functai's `rated(fn)` pools by
    name and module, and the built-in tutor's module is `threadline`, functai's `__main__` or its own)."""
    store = FolderStore(settings.store_folder("default"))
    first = functai_turn(store, cid, "one", "A1")
    chat = tl.conversation("tutor", id=cid)
    second = await chat.predict("two")
    third = functai_turn(store, cid, "three", "A3")
    await second.rate("wrong", answer="Two.", by="ana")
    for turn in (first, third):
        await chat.rate(turn, "right", by="ana")

    ours = threadline.rated("tutor", settings=settings)
    theirs, left = functai_rows(store)

    assert [first, second.id, third] == [r["call"] for r in ours]
    assert [0, 1, 2] == [len(r["earlier"]) for r in ours]
    assert [{k: r.get(k) for k in sorted(ours[0])} for r in theirs] == [{k: r[k] for k in sorted(r)} for r in ours]
    assert left == ours.left


def test_train_test_splits_the_seed_rows_as_documented() -> None:
    """`threadline.train_test` on the seed's rows: every row once, no conversation on both sides."""
    train, test = threadline.train_test(SEED_EXAMPLE, test=0.34)

    sides = [{r["conversation"] for r in side if r["conversation"]} for side in (train, test)]
    assert not sides[0] & sides[1]
    assert sorted(r["x"] for r in SEED_EXAMPLE) == sorted(r["x"] for r in train + test)
