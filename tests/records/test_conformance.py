"""The published conformance cases (shipped in store/cases/), and the runner, given any case file or store."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from store.conformance import CASES, check

ROOT = Path(__file__).resolve().parents[2]
PUBLISHED = sorted(CASES.glob("*.json"))


def test_the_fourteen_cases_ship_with_the_package() -> None:
    """The cases are package data beside the runner, not files of another checkout."""
    assert 14 == len(PUBLISHED)
    assert (CASES / "README.md").is_file()


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


def test_runner_on_the_shipped_cases() -> None:
    """The command the README names, with no path, runs the 14 shipped cases and passes them."""
    done = run()

    assert 0 == done.returncode
    assert "14 passed, 0 failed" == done.stdout.splitlines()[-1]


def test_runner_through_a_postgres_store(pg_spec: str) -> None:
    """With `--store postgresql://...`, every case's records are kept in PostgreSQL and read back: 14 pass."""
    done = run("--store", pg_spec)

    assert 0 == done.returncode, done.stderr
    assert "14 passed, 0 failed" == done.stdout.splitlines()[-1]


def test_runner_through_a_folder_store_keeps_each_case(tmp_path: Path) -> None:
    """With `--store FOLDER`, each case becomes a conversation of that folder."""
    done = run("--store", str(tmp_path), str(PUBLISHED[0]))

    assert "1 passed, 0 failed" == done.stdout.splitlines()[-1]
    assert 1 == len(list((tmp_path / "conversations").glob("conformance-*.jsonl")))


def test_runner_refuses_a_store_of_another_kind() -> None:
    """A URL that is neither a folder nor PostgreSQL stops the run with `store-unknown` and exit 2."""
    done = run("--store", "mysql://localhost/db")

    assert 2 == done.returncode
    assert done.stderr.startswith("error: store-unknown:")
