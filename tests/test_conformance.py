"""The published conformance cases, and the runner that any case file can be given to."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from store.conformance import check

ROOT = Path(__file__).resolve().parent.parent
CASES = ROOT.parent / "shared" / "conformance" / "conversations"
PUBLISHED = sorted(CASES.glob("*.json")) if CASES.is_dir() else []


@pytest.mark.skipif(not PUBLISHED, reason="../shared/conformance is not beside this checkout")
@pytest.mark.parametrize("path", PUBLISHED, ids=lambda p: p.stem)
def test_published_case(path: Path) -> None:
    """Every published case reaches exactly the expected conclusions."""
    case = json.loads(path.read_text(encoding="utf-8"))

    assert None is check(case)


def _case(expect_head: str) -> dict[str, object]:
    turn = "01926d00-0001-7000-8000-000000000000"
    return {
        "description": "one running turn",
        "kind": "state",
        "now": "2026-09-30T10:10:00.000000Z",
        "records": [
            {"functai_conversation": 1, "kind": "turn", "turn": turn, "parent": None, "program": "p", "inputs": {}},
            {"functai_conversation": 1, "kind": "lease", "turn": turn, "until": "2026-09-30T10:10:30.000000Z"},
        ],
        "expect": {"states": {turn: "running"}, "head": expect_head, "next": {"waits": turn}},
    }


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "store.conformance", *args], cwd=ROOT, capture_output=True, text=True, check=False
    )


def test_runner_passes_a_new_case_and_fails_a_wrong_one(tmp_path: Path) -> None:
    """The runner computes any case in the format, prints the first difference, tallies, exits 1."""
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_text(json.dumps(_case("01926d00-0001-7000-8000-000000000000")))
    bad.write_text(json.dumps(_case("someone-else")))

    done = run(str(tmp_path))

    assert 1 == done.returncode
    assert [
        "FAIL bad: expect.head: expected 'someone-else', got '01926d00-0001-7000-8000-000000000000'",
        "PASS good",
        "1 passed, 1 failed",
    ] == done.stdout.splitlines()


def test_runner_reports_an_unreadable_case(tmp_path: Path) -> None:
    """A file that is not a case fails by name instead of stopping the run."""
    (tmp_path / "broken.json").write_text("{")

    done = run(str(tmp_path / "broken.json"))

    assert 1 == done.returncode
    assert done.stdout.startswith("FAIL broken: cannot run the case")


@pytest.mark.skipif(not PUBLISHED, reason="../shared/conformance is not beside this checkout")
def test_runner_on_the_published_folder() -> None:
    """The command the README names prints 14 passes."""
    done = run(str(CASES))

    assert 0 == done.returncode
    assert "14 passed, 0 failed" == done.stdout.splitlines()[-1]
