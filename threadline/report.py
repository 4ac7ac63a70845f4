"""An evaluation's report as text: each row, each conversation (mean and spread), then the overall mean."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

WIDTH = 40


def report_text(report: Mapping[str, Any]) -> str:
    """The report (`Evaluation.as_dict()`) as aligned tables."""
    rows = [
        [str(r["row"]), _cell(r["conversation"]), _number(r["score"]), _cell(r["expected"]), _answer(r)]
        for r in report["rows"]
    ]
    conversations = [
        [_cell(c["conversation"]), str(c["rows"]), *(_number(c[k]) for k in ("mean", "spread", "low", "high"))]
        for c in report["conversations"]
    ]
    low, high = report["low"], report["high"]
    within = f" (95% interval {_number(low)} to {_number(high)})" if low is not None else ""
    failed = f", {report['failed']} failed" if report["failed"] else ""
    summary = f"{report['program']} by {report['metric']}: mean {_number(report['mean'])}{within}"
    return "\n\n".join(
        [
            table(["ROW", "CONVERSATION", "SCORE", "EXPECTED", "ANSWER"], rows),
            table(["CONVERSATION", "ROWS", "MEAN", "SPREAD", "LOW", "HIGH"], conversations),
            f"{summary}, {report['n']} rows{failed}, spread {_number(report['spread'])}",
        ]
    )


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Rows under headers in columns two spaces apart."""
    widths = [max(len(row[i]) for row in [headers, *rows]) for i in range(len(headers))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in [headers, *rows]
    )


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _cell(value: Any) -> str:
    text = "-" if value is None else value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    text = " ".join(text.split())
    return text if len(text) <= WIDTH else text[: WIDTH - 1] + "…"


def _answer(row: Mapping[str, Any]) -> str:
    error = row.get("error")
    return f"{error['code']}: {error['message']}" if error else _cell(row["answer"])
