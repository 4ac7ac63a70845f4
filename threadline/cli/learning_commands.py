"""The learning commands: `merge`, `rate`, `rated`, `evaluate` and `backfill-calls`."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.errors import ErrorCode, ThreadlineError

from . import output
from .common import Subcommands, add_conversation, add_store, env_settings, open_local
from .output import Output

if TYPE_CHECKING:
    from core.learning import EvaluationProgress
    from threadline.reading import Turn

BAR_WIDTH = 30


def add_commands(commands: Subcommands, common: argparse.ArgumentParser) -> None:
    """Add the learning commands, in the order `--help` lists them."""
    for add in (_add_merge, _add_rate, _add_rated, _add_evaluate, _add_backfill):
        add(commands, common)


def _add_merge(commands: Subcommands, common: argparse.ArgumentParser) -> None:
    merge = commands.add_parser(
        "merge",
        parents=[common],
        help="merge branches with another program",
        description="Ask PROGRAM (registered on the worker) to combine the TURNs, done children of the "
        "conversation's head (or of --from); its answer becomes a turn with `reads` and `made_by`, "
        "written as functai writes a merge. A bad merge is refused and records nothing.",
    )
    add_conversation(merge, program=True)
    merge.add_argument("turns", metavar="TURN", nargs="+", help="the turns to merge")
    merge.add_argument("--with", dest="merging", metavar="PROGRAM", required=True, help="the merging program")
    merge.add_argument("--from", dest="from_turn", metavar="TURN", help="the turn the merged branches continue")
    merge.add_argument("--inputs", metavar="JSON", help="the merging program's inputs (default: the branches)")
    merge.add_argument("--request-id", metavar="R", help="an idempotency key: the same R is one merge")
    merge.add_argument("--lm", metavar="MODEL", help="the merging program's model")
    merge.set_defaults(run=run_merge)


def _add_rate(commands: Subcommands, common: argparse.ArgumentParser) -> None:
    rate = commands.add_parser(
        "rate",
        parents=[common],
        help="rate a turn's answer right or wrong",
        description="Rate TURN of conversation ID as functai rates a call, in the store's call log. "
        "One person's later rating replaces their earlier one; `withdraw` takes theirs back.",
    )
    add_conversation(rate)
    rate.add_argument("turn", metavar="TURN", help="the turn")
    rate.add_argument("verdict", choices=("right", "wrong", "withdraw"), help="the judgement")
    rate.add_argument("--answer", metavar="A", help="with wrong: the right answer (JSON, or plain text)")
    rate.add_argument("--note", metavar="N", help="why, in a sentence")
    rate.add_argument("--reason", dest="reasons", action="append", default=[], metavar="R", help="a short tag")
    rate.add_argument("--by", metavar="PERSON", help="who judges (default: this account)")
    rate.set_defaults(run=run_rate)


def _add_rated(commands: Subcommands, common: argparse.ArgumentParser) -> None:
    rated_ = commands.add_parser(
        "rated",
        parents=[common],
        help="print the rated turns as rows with known answers",
        description="Print the rated turns of PROGRAM (every program's without one) as the rows functai's "
        "`rated()` gives: inputs, the right answer, what each was shown, and the rating.",
    )
    rated_.add_argument("program", metavar="PROGRAM", nargs="?", help="the program (default: all)")
    add_store(rated_)
    rated_.add_argument("--by", metavar="PERSON", help="only this person's ratings")
    rated_.set_defaults(run=run_rated)


def _add_evaluate(commands: Subcommands, common: argparse.ArgumentParser) -> None:
    ev = commands.add_parser(
        "evaluate",
        parents=[common],
        help="ask a program its rated rows again and score it",
        description="Ask PROGRAM every rated row again (each with its earlier turns) as an Evaluation "
        "workflow, score the answers with the metric, and print each row, each conversation (mean "
        "and spread) and the mean. Nothing is recorded in any conversation or call log.",
    )
    ev.add_argument("program", metavar="PROGRAM", help="the program to evaluate")
    ev.add_argument("--metric", default="exact_match", help="exact_match (default), contains, or a registered one")
    ev.add_argument("--rows", metavar="FILE", type=Path, help="rows from a .json or .jsonl file, not the rated ones")
    add_store(ev)
    ev.add_argument("--by", metavar="PERSON", help="only rows rated by this person")
    ev.add_argument("--lm", metavar="MODEL", help="the model to ask (default: the worker's)")
    ev.add_argument("--concurrency", type=int, default=4, metavar="N", help="rows asked at once (default 4)")
    ev.add_argument("--chart", metavar="PNG", type=Path, help="also draw the score distribution there")
    ev.set_defaults(run=run_evaluate)


def _add_backfill(commands: Subcommands, common: argparse.ArgumentParser) -> None:
    backfill = commands.add_parser(
        "backfill-calls",
        parents=[common],
        help="log the calls of turns that ended before calls were logged",
        description="Write the call record of every ended turn of the store that its call log lacks "
        "(turns that ended before the worker logged calls). Run it once; a call is never written twice.",
    )
    add_store(backfill)
    backfill.set_defaults(run=run_backfill)


async def run_merge(args: argparse.Namespace, out: Output) -> int:
    """Merge branches; print the merge turn (through Temporal: THREADLINE_URL does not serve merges)."""
    chat = await open_local(args, env_settings())
    if args.from_turn:
        chat = chat.continue_from(args.from_turn)
    inputs = _json_object(args.inputs, "--inputs") if args.inputs else {}
    turn = await chat.merge(args.turns, args.merging, request_id=args.request_id, lm=args.lm, **inputs)
    out.emit({"conversation": chat.id, **turn.as_dict()}, _merge_text(turn))
    return 0


def _merge_text(turn: Turn) -> str:
    made_by = turn.made_by or {}
    rows = [("turn", turn.id), ("parent", turn.parent or "-"), ("reads", " ".join(turn.reads))]
    rows += [
        ("made_by", f"{made_by.get('name')} (call {made_by.get('call')})"),
        ("result", output.text_of(turn.result)),
    ]
    return output.fields(rows)


async def run_rate(args: argparse.Namespace, out: Output) -> int:
    """Rate a turn; print the rating written (in the store's call log, not through THREADLINE_URL)."""
    chat = await open_local(args, env_settings())
    verdict = None if args.verdict == "withdraw" else args.verdict
    answer = _answer(args.answer) if args.answer is not None else None
    rating = await chat.rate(args.turn, verdict, answer, note=args.note, reasons=args.reasons, by=args.by)
    shown = [("rating", str(rating["id"])), ("call", str(rating["call"])), ("verdict", str(verdict or "withdrawn"))]
    out.emit({"conversation": chat.id, **rating}, output.fields(shown))
    return 0


async def run_rated(args: argparse.Namespace, out: Output) -> int:
    """Print the rated rows, and how many rated calls were left out and why."""
    from threadline.learning import known_program, rated

    settings = env_settings()
    rows = rated(known_program(settings, args.program) if args.program else None, store=args.store, by=args.by)
    data = {"program": args.program, "store": args.store, "rows": list(rows), "left": rows.left}
    headers = ("CALL", "RATING", "CONVERSATION", "EARLIER", "ROW")
    out.emit(data, output.table(headers, [_rated_row(r) for r in rows], out) if rows else "No rated turns.")
    return 0


def _rated_row(row: dict[str, Any]) -> tuple[str, ...]:
    conversation = output.trim(output.text_of(row.get("conversation") or "-"), 24)
    earlier = str(len(row.get("earlier") or []))
    return (str(row.get("call")), str(row.get("rating")), conversation, earlier, output.trim(_row_data(row), 48))


def _row_data(row: dict[str, Any]) -> str:
    skip = {"earlier", "conversation", "helpers", "sections", "rating", "rated_by", "origin", "disputed"}
    return output.dumps({k: v for k, v in row.items() if k not in skip | {"sample", "version", "call"}})


async def run_evaluate(args: argparse.Namespace, out: Output) -> int:
    """Evaluate a program on rows with known answers; print the report (and draw its chart)."""
    from threadline.evaluation import evaluate
    from threadline.learning import rated

    settings = env_settings()
    rows = _rows_file(args.rows) if args.rows else list(rated(args.program, store=args.store, by=args.by))
    bar = ProgressBar() if sys.stderr.isatty() else None
    report = await evaluate(
        args.program, rows, args.metric, args.lm, args.concurrency, settings=settings, on_progress=bar
    )
    if bar is not None:
        bar.close()
    data = report.as_dict()
    if args.chart:
        data["chart"] = str(report.chart(args.chart))
    out.emit(data, report.table() + (f"\nchart  {data['chart']}" if args.chart else ""))
    return 0


class ProgressBar:
    """`[#####.....] 5/10 rows, mean 0.80` on stderr, redrawn in place as rows are scored."""

    def __call__(self, progress: EvaluationProgress) -> None:
        """Draw `progress`."""
        done = round(BAR_WIDTH * progress.done / progress.total) if progress.total else 0
        mean = f", mean {progress.mean:.2f}" if progress.mean is not None else ""
        failed = f", {progress.failed} failed" if progress.failed else ""
        bar = "#" * done + "." * (BAR_WIDTH - done)
        sys.stderr.write(f"\r[{bar}] {progress.done}/{progress.total} rows{mean}{failed}")
        sys.stderr.flush()

    def close(self) -> None:
        """End the bar's line."""
        sys.stderr.write("\n")
        sys.stderr.flush()


async def run_backfill(args: argparse.Namespace, out: Output) -> int:
    """Log the calls of every ended turn the store's call log lacks."""
    from threadline.learning import backfill_calls

    written = backfill_calls(env_settings(), args.store)
    out.emit({"store": args.store, "written": written}, f"Wrote {written} call record(s) for store {args.store}.")
    return 0


def _rows_file(path: Path) -> list[dict[str, Any]]:
    """Rows from a JSON list or a JSON-lines file."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise ThreadlineError(ErrorCode.INVALID_REQUEST, f"cannot read {path} ({err.strerror})") from None
    try:
        data = json.loads(text) if text.lstrip().startswith("[") else [json.loads(x) for x in text.splitlines() if x]
    except ValueError:
        raise ThreadlineError(ErrorCode.INVALID_REQUEST, f"{path} is neither a JSON list nor JSON lines") from None
    if not all(isinstance(row, dict) for row in data):
        raise ThreadlineError(ErrorCode.INVALID_REQUEST, f"every row of {path} is a JSON object")
    return list(data)


def _json_object(text: str, option: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if not isinstance(value, dict):
        raise ThreadlineError(ErrorCode.INVALID_REQUEST, f"{option} is a JSON object of inputs by name")
    return value


def _answer(text: str) -> Any:
    """`--answer` as JSON when it is JSON, else the text itself."""
    try:
        return json.loads(text)
    except ValueError:
        return text
