"""Run every benchmark in this folder: each `bench/<name>.py` module's `main()`, in a fixed order.

The modules named in `ORDER` run first, in that order; any other module found here runs after them,
sorted by name, so a new benchmark is never skipped. A whole run (no names given) then writes what
it printed into the docs, so the figures there always come from one run:

- `docs/benchmarks.md`, between `<!-- bench:begin -->` and `<!-- bench:end -->`: every table each
  benchmark printed, under its name;
- `README.md`, between the same markers: per benchmark, how many targets were met, and each one missed.

    python -m bench               # every benchmark, then the docs
    python -m bench turns store   # only these; the docs are left alone
"""

from __future__ import annotations

import contextlib
import importlib
import io
import os
import pkgutil
import platform
import subprocess
import sys
import time
import traceback
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

ORDER = ["store", "turns", "streaming", "context", "cold", "scale"]
ROOT = Path(__file__).parent.parent
BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"


def modules() -> list[str]:
    """The benchmark modules of this folder, in the order they run."""
    found = {m.name for m in pkgutil.iter_modules([str(Path(__file__).parent)]) if not m.name.startswith("_")}
    return [name for name in ORDER if name in found] + sorted(found - set(ORDER))


@dataclass
class Section:
    """What one benchmark printed and returned."""

    name: str
    summary: str
    output: str = ""
    rows: list[Any] = field(default_factory=list)
    seconds: float = 0.0
    failed: bool = False
    """It raised before it finished: what it printed, then the traceback."""

    def tables(self) -> list[list[str]]:
        """Each markdown table it printed, with the line before it when that is a title."""
        out: list[list[str]] = []
        lines = self.output.splitlines()
        i = 0
        while i < len(lines):
            if not lines[i].startswith("|"):
                i += 1
                continue
            start = i
            while i < len(lines) and lines[i].startswith("|"):
                i += 1
            title = lines[start - 2].strip() if start >= 2 and not lines[start - 1].strip() else ""
            out.append(([title, ""] if title and not title.startswith("|") else []) + lines[start:i])
        return out


class _Tee(io.TextIOBase):
    """Writes to the terminal and keeps a copy."""

    def __init__(self, out: TextIO) -> None:
        self.out, self.kept = out, io.StringIO()

    def write(self, text: str) -> int:
        self.kept.write(text)
        return self.out.write(text)

    def flush(self) -> None:
        self.out.flush()


@contextlib.contextmanager
def _kept() -> Iterator[_Tee]:
    tee = _Tee(sys.stdout)
    with contextlib.redirect_stdout(tee):
        yield tee


def run(names: Sequence[str]) -> list[Section]:
    """Run the benchmarks `names`, printing as they go; what each printed and returned."""
    sections = []
    for i, name in enumerate(names):
        if i:
            print()
        module = importlib.import_module(f"bench.{name}")
        main = getattr(module, "main", None)
        if not callable(main):
            print(f"bench.{name} has no main(): skipped", file=sys.stderr)
            continue
        section = Section(name, (module.__doc__ or "").strip().split("\n\n")[0].replace("\n", " "))
        started = time.perf_counter()
        rows: object = None
        with _kept() as tee:
            try:
                rows = main()
            except Exception:  # noqa: BLE001 - a benchmark that broke costs its own figures, not the run's
                print(f"bench.{name} failed:\n{traceback.format_exc()}")
                section.failed = True
        section.output, section.seconds = tee.kept.getvalue(), time.perf_counter() - started
        section.rows = list(rows) if isinstance(rows, list) else []
        sections.append(section)
    return sections


def _header(total_s: float) -> str:
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
        revision = commit.stdout.strip() or "unknown"
    except OSError:
        revision = "unknown"
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return (
        f"From one run of `make bench` ({when}, commit {revision}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}, {total_s / 60:.0f} min)."
    )


def report(sections: Sequence[Section], total_s: float) -> str:
    """The generated part of docs/benchmarks.md."""
    lines = [_header(total_s), ""]
    for section in sections:
        lines += [f"### `python -m bench.{section.name}` ({section.seconds:.0f} s)", "", section.summary, ""]
        tables = [] if section.failed else section.tables()
        for table in tables:
            lines += [*table, ""]
        if not tables:  # a benchmark that prints lines, not a table: what it printed
            printed = section.output.strip().splitlines()
            lines += ["<!-- not run: what the benchmark printed -->", "```console", *printed, "```", ""]
    return "\n".join(lines).rstrip() + "\n"


def summary(sections: Sequence[Section], total_s: float) -> str:
    """The generated part of the README, short enough for the README's length: where the figures come
    from, targets met per benchmark, then one line per benchmark that missed any, naming each miss."""
    counts, missed = [], []
    for section in sections:
        rows = [row for row in section.rows if getattr(row, "met", None) is not None]
        if rows:
            counts.append(f"{section.name} {sum(bool(row.met) for row in rows)}/{len(rows)}")
        misses = [_missed(row) for row in rows if row.met is False]
        if section.failed:
            misses.append("it failed before it finished (docs/benchmarks.md shows what it printed)")
        if misses:
            missed.append(f"- {section.name}: " + "; ".join(misses) + ".")
    met = sum(int(c.split()[-1].split("/")[0]) for c in counts)
    total = sum(int(c.split()[-1].split("/")[1]) for c in counts)
    lines = [
        _header(total_s) + " Each figure is beside its anchor from the same run: "
        "[the tables, and what each anchor is](docs/benchmarks.md).",
        f"Targets met: {met} of {total} ({', '.join(counts)}){'. Not met:' if missed else '.'}",
        *missed,
    ]
    return "\n".join(lines) + "\n"


def _missed(row: Any) -> str:
    cells = [c.strip() for c in row.markdown().strip("|").split(" | ")]
    measure, ours, anchor, ratio, target = cells[:5]
    measure = measure.removesuffix(" (lower is better)").removesuffix(" (higher is better)")
    figures = ours if anchor == "-" else f"{ours} against {anchor} ({ratio}x)"
    return f"{measure}: {figures}, target {target}"


def replace_between(path: Path, text: str) -> None:
    """Put `text` between the markers in `path` (which must have them)."""
    content = path.read_text()
    head, sep, rest = content.partition(BEGIN)
    _, sep2, tail = rest.partition(END)
    if not sep or not sep2:
        raise SystemExit(f"{path} has no {BEGIN} ... {END} markers")
    path.write_text(f"{head}{BEGIN}\n{text}{END}{tail}")


def main(argv: Sequence[str] = ()) -> int:
    start = time.perf_counter()
    names = list(argv) or modules()
    sections = run(names)
    total = time.perf_counter() - start
    failed = [s.name for s in sections if s.failed]
    broke = f"; failed: {', '.join(failed)}" if failed else ""
    print(f"\nbench: {len(sections)} benchmark(s) in {total:.1f} s{broke}")
    if not argv:
        replace_between(ROOT / "docs" / "benchmarks.md", report(sections, total))
        replace_between(ROOT / "README.md", summary(sections, total))
        print("bench: docs/benchmarks.md and README.md written from this run")
    return 1 if failed else 0


if __name__ == "__main__":
    code = main(sys.argv[1:])
    from bench._report import exit_now

    sys.stdout.flush()
    if code == 0:
        exit_now()
    sys.exit(code)
