"""The closing table every benchmark with targets prints."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class TableRow(Protocol):
    """A row that can print itself and may have a target."""

    measure: str
    met: bool | None

    def markdown(self) -> str:
        """The row as a markdown table line."""
        ...


def print_table(rows: Sequence[TableRow], title: str) -> None:
    """Print `title`, the markdown table, and which targets were met."""
    print(f"\n{title}\n")
    print("| measure | threadline | anchor | ratio | target | met |")
    print("|---|---:|---:|---:|---|---|")
    for row in rows:
        print(row.markdown())
    missed = [r.measure for r in rows if r.met is False]
    met = sum(r.met is True for r in rows)
    print(f"\nTargets: {met} met, {len(missed)} not met{': ' if missed else ''}{'; '.join(missed)}")
