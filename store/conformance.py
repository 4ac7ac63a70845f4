"""Run conformance cases for the record log: `python -m store.conformance [--store SPEC] [PATH...]`.

Each PATH is a case file or a folder of them (`*.json`), in the format of functai's
`contract/cases/conversations/`; without one, the 14 cases shipped in `store/cases/` run. For every
case the expected conclusions are computed with this package's own rules and compared; the run
prints `PASS name` or `FAIL name: <first difference>`, then `N passed, M failed`, and exits 1 if any
case failed or could not be read. With `--store` (a folder or a `postgresql://` URL), each case's
records are appended to that store as a new conversation and read back before the rules run, so
the store's numbering and reading are checked too; otherwise they go through a store in memory.
"""

from __future__ import annotations

import argparse
import json
import sys
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from core.context import ContextRule
from core.errors import ThreadlineError

from .backends.base import Store
from .backends.locate import open_store
from .backends.memory import MemoryStore
from .log.rules import View, parent_for, shown, unfinished, view_head, waiting
from .log.state import Log
from .records import parse_time

CASES = Path(__file__).resolve().parent / "cases"
"""The published cases, shipped with the package."""


def load_log(records: Sequence[dict[str, Any]], store: Store | None = None) -> Log:
    """The case's records written through a store (which numbers them again) as a new conversation, then applied."""
    target: Store = MemoryStore() if store is None else store
    conversation = f"conformance-{uuid.uuid4().hex}"
    target.append(conversation, [{k: v for k, v in r.items() if k != "seq"} for r in records], expect=0)
    return Log(target.read(conversation))


def _program(log: Log) -> dict[str, Any]:
    # All of a case's turns belong to one program: its record stands for the program under test.
    return next(iter(log.programs.values()), {})


def compute(case: dict[str, Any], store: Store | None = None) -> dict[str, Any]:
    """The conclusions this package reaches for `case` (its records kept in `store`), in the shape of its `expect`."""
    log = load_log(case["records"], store)
    now = parse_time(case["now"])
    if case["kind"] == "context":
        program = _program(log)
        result = shown(
            log,
            case.get("parent"),
            fields=program.get("fields") or [],
            signature=program.get("signature"),
            now=now,
            rule=ContextRule.model_validate(case.get("rule") or {}),
        )
        return {"saw": result.saw, "rows": result.rows}
    head = view_head(log, View())
    try:
        next_ = parent_for(log, head, "queue", now).as_dict()
    except ThreadlineError as err:
        next_ = {"refuses": str(err.code)}
    return {
        "states": dict(log.states(now)),
        "head": head,
        "next": next_,
        "waiting": waiting(log),
        "unfinished": unfinished(log),
    }


def first_difference(expected: Any, actual: Any, path: str = "expect") -> str | None:
    """A description of the first place where `actual` differs from `expected`, or None."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        for key in [*expected, *(k for k in actual if k not in expected)]:
            if key not in actual or key not in expected:
                return f"{path}.{key}: expected {expected.get(key, '<absent>')!r}, got {actual.get(key, '<absent>')!r}"
            found = first_difference(expected[key], actual[key], f"{path}.{key}")
            if found:
                return found
        return None
    if isinstance(expected, list) and isinstance(actual, list):
        for i, (e, a) in enumerate(zip(expected, actual, strict=False)):
            found = first_difference(e, a, f"{path}[{i}]")
            if found:
                return found
        if len(expected) != len(actual):
            return f"{path}: expected {len(expected)} items, got {len(actual)}"
        return None
    if expected != actual or type(expected) is not type(actual):
        return f"{path}: expected {expected!r}, got {actual!r}"
    return None


def check(case: dict[str, Any], store: Store | None = None) -> str | None:
    """Run one case (through `store`, else memory); return its first difference, or None when it passes."""
    actual = compute(case, store)
    return first_difference(case["expect"], {k: actual.get(k) for k in case["expect"]})


def case_files(paths: Sequence[str]) -> Iterator[Path]:
    """The case files named by `paths`: files as given, folders' `*.json` sorted by name."""
    for name in paths:
        path = Path(name)
        if path.is_dir():
            yield from sorted(path.glob("*.json"))
        else:
            yield path


def main(argv: Sequence[str] | None = None) -> int:
    """Run the cases and print one line each, then the tally."""
    parser = argparse.ArgumentParser(prog="python -m store.conformance", description=__doc__.split("\n")[0])
    parser.add_argument("paths", nargs="*", help="case files, or folders of *.json case files (default: store/cases)")
    parser.add_argument(
        "--store", metavar="SPEC", help="keep each case's records in this folder or postgresql:// store"
    )
    args = parser.parse_args(argv)
    try:
        store = open_store(args.store) if args.store else None
    except ThreadlineError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    try:
        return _run(case_files(args.paths or [str(CASES)]), store)
    finally:
        close = getattr(store, "close", None)
        if callable(close):
            close()


def _run(paths: Iterator[Path], store: Store | None) -> int:
    passed = failed = 0
    for path in paths:
        try:
            case = json.loads(path.read_text(encoding="utf-8"))
            problem = check(case, store)
        except (OSError, ValueError, KeyError, TypeError, ThreadlineError) as err:
            problem = f"cannot run the case: {type(err).__name__}: {err}"
        if problem is None:
            passed += 1
            print(f"PASS {path.stem}")
        else:
            failed += 1
            print(f"FAIL {path.stem}: {problem}")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed or not passed else 0


if __name__ == "__main__":
    sys.exit(main())
