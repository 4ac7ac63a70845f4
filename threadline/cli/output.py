"""How the `threadline` command prints: one JSON object per line with `--json`, aligned text otherwise."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO
from urllib.parse import quote

from core.errors import ThreadlineError

if TYPE_CHECKING:
    from core.models import TurnOutcome
    from threadline.reading import Turn

INPUT_WIDTH = 32
RESULT_WIDTH = 48
_STATE_COLORS = {"done": "32", "failed": "31", "refused": "31", "stopped": "33", "abandoned": "33", "running": "36"}


@dataclass(frozen=True, slots=True)
class Output:
    """Where and how a command prints.

    Args:
        json: Print one JSON object per line instead of text.
        color: Colour turn states (only when stdout is a terminal and `NO_COLOR` is unset).
        stream: Where results go (default: `sys.stdout` at the time); text-mode errors go to stderr.
    """

    json: bool = False
    color: bool = False
    stream: TextIO | None = None

    @classmethod
    def for_stdout(cls, *, json: bool) -> Output:
        """The output of this process: colour only for a terminal that has not opted out."""
        color = not json and sys.stdout.isatty() and "NO_COLOR" not in os.environ
        return cls(json=json, color=color)

    def emit(self, data: Mapping[str, Any], text: str) -> None:
        """Print `data` as one JSON line, or `text`."""
        _write(self.stream or sys.stdout, dumps(data) if self.json else text)

    def error(self, err: ThreadlineError) -> None:
        """Print `err` as `{"error": {...}}` on stdout, or `error: <code>: <message>` on stderr."""
        if self.json:
            self.emit({"error": err.to_dict()}, "")
        else:
            _write(sys.stderr, f"error: {err}")

    def state(self, state: str, width: int = 0) -> str:
        """`state` padded to `width`, coloured when colour is on."""
        padded = state.ljust(width)
        code = _STATE_COLORS.get(state)
        return f"\x1b[{code}m{padded}\x1b[0m" if self.color and code else padded


def _write(stream: TextIO, text: str) -> None:
    stream.write(text + "\n")
    # At once: `threadline dev` is read line by line through a pipe while it keeps running.
    stream.flush()


def dumps(data: Any) -> str:
    """Compact JSON on one line, non-ASCII kept readable."""
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"), default=str)


def text_of(value: Any) -> str:
    """A value as text: strings as they are, anything else as compact JSON."""
    return value if isinstance(value, str) else dumps(value)


def trim(text: str, width: int) -> str:
    """The first line of `text`, cut to `width` characters with an ellipsis."""
    line = text.strip().split("\n", 1)[0]
    return line if len(line) <= width else line[: width - 1] + "…"


def input_text(inputs: Mapping[str, Any]) -> str:
    """A turn's inputs as text: a lone input's value, or all of them as JSON."""
    if len(inputs) == 1:
        return text_of(next(iter(inputs.values())))
    return dumps(dict(inputs))


def result_text(turn: Turn) -> str:
    """A turn's answer, or its coded error when it has one."""
    if turn.error:
        return f"{turn.error.get('code', 'error')}: {turn.error.get('message', '')}"
    return "" if turn.result is None else text_of(turn.result)


def fields(rows: Iterable[tuple[str, str]], *, gap: int = 2) -> str:
    """`name  value` lines with the values aligned; later lines of a value are indented to match."""
    pairs = list(rows)
    width = max((len(name) for name, _ in pairs), default=0) + gap
    return "\n".join(name.ljust(width) + value.replace("\n", "\n" + " " * width) for name, value in pairs)


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], out: Output, *, state_column: int = -1) -> str:
    """Rows under headers in columns two spaces apart; the state column coloured by `out`."""
    widths = [max(len(row[i]) for row in [headers, *rows]) for i in range(len(headers))]

    def line(row: Sequence[str], *, header: bool = False) -> str:
        cells = [
            out.state(cell, width) if i == state_column and not header else cell.ljust(width)
            for i, (cell, width) in enumerate(zip(row, widths, strict=True))
        ]
        return "  ".join(cells).rstrip()

    return "\n".join([line(headers, header=True), *(line(row) for row in rows)])


def turns_table(turns: Sequence[Turn], out: Output) -> str:
    """The turns as `TURN PARENT STATE INPUT RESULT` rows, input and result trimmed to one line."""
    rows = [
        (t.id, t.parent or "-", t.state, trim(input_text(t.inputs), INPUT_WIDTH), trim(result_text(t), RESULT_WIDTH))
        for t in turns
    ]
    return table(("TURN", "PARENT", "STATE", "INPUT", "RESULT"), rows, out, state_column=2)


def outcome_text(outcome: TurnOutcome, out: Output, *, answer: bool = True) -> str:
    """How a send ended: turn, parent, state, then the whole answer (unless it was streamed) or the error."""
    rows = [("turn", outcome.turn or "-"), ("parent", outcome.parent or "-"), ("state", out.state(outcome.state))]
    if outcome.error is not None:
        rows.append(("error", f"{outcome.error.code}: {outcome.error.message}"))
    elif outcome.state == "done" and answer:
        rows.append(("result", text_of(outcome.result)))
    if outcome.flow is not None and outcome.flow.flow_data is not None:  # a guided flow ended: what it collected
        rows.append(("collected", dumps(outcome.flow.flow_data)))
    return fields(rows)


def approvals_text(approvals: Sequence[Mapping[str, Any]]) -> str:
    """What a waiting turn asks, one line each: `? refund {"order": "7"}  (changes; invocation 2 at shop#1)`."""
    lines = []
    for a in approvals:
        where = f"{a.get('effects') or 'effects unknown'}; invocation {a.get('invocation')} at {a.get('site')}"
        asked = f"? {a.get('name')} {trim(dumps(a.get('input')), RESULT_WIDTH)}  ({where})"
        lines.append(asked + (f"\n  {a['question']}" if a.get("question") else ""))
    return "\n".join(lines)


def short_id(turn: str) -> str:
    """`0193a1b2…7c4e`: a UUIDv7's first 8 characters (its time, to about a minute) and last 4 (random)."""
    return turn if len(turn) <= 13 else f"{turn[:8]}…{turn[-4:]}"


def tree(turns: Sequence[Turn]) -> list[dict[str, Any]]:
    """`turns` as nested `{"id", "state", "input", "children"}` nodes by parent links, children in the
    order they were sent; a turn whose parent is not among them is a root."""
    nodes: dict[str, dict[str, Any]] = {
        t.id: {"id": t.id, "state": t.state, "input": input_text(t.inputs), "children": []} for t in turns
    }
    for t in turns:
        if t.approvals:
            nodes[t.id]["approvals"] = t.approvals
    roots: list[dict[str, Any]] = []
    for t in turns:
        parent = nodes.get(t.parent) if t.parent else None
        (roots if parent is None else parent["children"]).append(nodes[t.id])
    return roots


def tree_text(roots: Sequence[Mapping[str, Any]], head: str | None, out: Output) -> str:
    """The tree one turn a line: `*` on the head, then short id, state and the input's first line.

    A lone child continues in its parent's column, so a long thread does not drift right; only where
    a conversation branches are the branches drawn indented under their parent.
    """
    lines: list[str] = []
    stack = _branches(roots, "") if len(roots) > 1 else [(node, "", "") for node in reversed(roots)]
    while stack:
        node, lead, rest = stack.pop()
        mark = "*" if node["id"] == head else " "
        state = out.state(node["state"], len("abandoned"))
        lines.append(f"{mark} {lead}{short_id(node['id'])}  {state}  {trim(node['input'], INPUT_WIDTH)}".rstrip())
        lines += [f"  {rest}   {line}" for line in approvals_text(node.get("approvals") or []).splitlines()]
        children = node["children"]
        stack += [(children[0], rest, rest)] if len(children) == 1 else _branches(children, rest)
    return "\n".join(lines)


def _branches(nodes: Sequence[Mapping[str, Any]], rest: str) -> list[tuple[Mapping[str, Any], str, str]]:
    """Stack entries (last on top: printed first) drawing `nodes` as branches under `rest`'s column."""
    last = len(nodes) - 1
    drawn = [
        (n, rest + ("└─ " if i == last else "├─ "), rest + ("   " if i == last else "│  ")) for i, n in enumerate(nodes)
    ]
    return drawn[::-1]


def tree_depth(roots: Sequence[Mapping[str, Any]]) -> int:
    """How deeply the tree nests (a thread of n turns: n)."""
    depth, stack = 0, [(node, 1) for node in roots]
    while stack:
        node, level = stack.pop()
        depth = max(depth, level)
        stack += [(child, level + 1) for child in node["children"]]
    return depth


@contextlib.contextmanager
def nesting(depth: int) -> Iterator[None]:
    """Room for `json` to encode `depth` levels of nesting (a long thread's tree; the default stops near 450)."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 3 * depth + 200))
    try:
        yield
    finally:
        sys.setrecursionlimit(limit)


def history_text(data: Mapping[str, Any]) -> str:
    """The compressed view: the turn counts, then the summary, key facts and topics the model is given."""
    counts = (
        f"{data['branch_turns']} on the branch, {data['done_turns']} done: "
        f"{data['verbatim_turns']} shown verbatim, {data['summarised_turns']} summarised"
    )
    facts = "\n".join(f"- {fact}" for fact in data["facts"])
    topics = ", ".join(f"{t['label'] or '(none)'} ({t['turns']} turns)" for t in data["topics"])
    rows = [("head", data["head"] or "-"), ("turns", counts), ("summary", data["summary"] or "(none yet)")]
    return fields([*rows, ("facts", facts or "(none)"), ("topics", topics or "(none)")])


def render_text(data: Mapping[str, Any]) -> str:
    """What a turn sent now would send: model, parent, how many earlier turns it is shown, then the request."""
    shown = len(data["shown"])
    rows = [("model", data["model"]), ("parent", data["parent"] or "-"), ("shown", f"{shown} earlier turn(s)")]
    if data["waits_for"]:
        rows.append(("waits for", f"{data['waits_for']} (still running)"))
    if data["sections"]:
        rows.append(("sections", f"{len(data['sections'])} (a summary of the turns not shown)"))
    if data.get("tokens") is not None:
        cost = data.get("cost")
        rows.append(("tokens", f"about {data['tokens']} read"))
        rows.append(("cost", "no price for this model" if cost is None else f"about {cost:.6g}"))
    if data["request"] is None and data["waits_for"]:
        return fields(rows) + "\n\nThe send would wait for that turn to end; render again once it has."
    if data["request"] is None:  # a program with code: its helpers' requests are made as its code runs
        return fields(rows) + "\n\nThe program runs code: its helpers make their requests as it runs."
    request = json.dumps(data["request"], ensure_ascii=False, indent=2, default=str)
    return fields(rows) + "\n\n" + request


def workflow_url(ui_url: str, namespace: str, workflow_id: str) -> str:
    """The web UI's page for the latest run of `workflow_id`.

    The UI encodes ids with `encodeURIComponent` (so `/` is `%2F`) and redirects a URL without a
    run id to the latest run.
    """
    return f"{ui_url}/namespaces/{_encode_component(namespace)}/workflows/{_encode_component(workflow_id)}"


def _encode_component(part: str) -> str:
    return quote(part, safe="!~*'()")  # what JavaScript's encodeURIComponent leaves alone
