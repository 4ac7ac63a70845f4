"""What clients read of a conversation, computed from its record log: turns, pages of them, the
branch as the model sees it (`history`), and the conversation's state.

Pure functions of a `Log` and the clock; the Python API, the CLI and the HTTP service all use them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Self

from core.context import ContextRule
from core.errors import ErrorCode, ThreadlineError
from core.limits import check_text
from store.log.rules import expand, turn_tokens
from store.log.state import ENDED_STATES, Log
from store.log.state import Turn as LoggedTurn

MAX_PAGE = 1000
"""The most turns one page holds."""


@dataclass(frozen=True)
class Turn:
    """One turn of a conversation, as the record log holds it.

    A turn read through a conversation (`chat.turn(...)`, `chat.turns()`) can be rated: `await
    turn.rate("right")` (see `Conversation.rate`).
    """

    id: str
    parent: str | None
    state: str
    inputs: dict[str, Any]
    outputs: dict[str, Any] = field(default_factory=dict)
    result: Any = None
    saw: list[str] = field(default_factory=list)
    """The ids of the earlier turns it was shown, oldest first."""
    usage: dict[str, int] = field(default_factory=dict)
    model: str | None = None
    error: dict[str, Any] | None = None
    request_id: str | None = None
    attempt: int = 1
    reads: list[str] = field(default_factory=list)
    """A merge's merged turns (empty for any other turn)."""
    made_by: dict[str, Any] | None = None
    """A merge's merging program and its call: `{"name", "version", "call"}`."""
    started_at: str | None = None
    """When the turn was sent (its `turn` record's time, RFC 3339 UTC)."""
    ended_at: str | None = None
    """When it ended (its `ended` record's time), None while it has not."""
    approvals: list[dict[str, Any]] = field(default_factory=list)
    """While it waits: the tool calls a person is asked about (`name`, `input`, `effects`, `site`,
    `invocation`, `question`), answered with `approve` or `deny`."""
    unfinished: list[dict[str, Any]] = field(default_factory=list)
    """Tools that started and have no result: they may have run (settle them when resuming)."""
    steps: list[dict[str, Any]] = field(default_factory=list)
    """Its tool calls and their results, in order: `{"role": "assistant", "calls": [...]}` and
    `{"role": "tool", "id", "name", "output"}`."""
    steers: list[dict[str, Any]] = field(default_factory=list)
    """The sends that steered it (`sends="steer"`), in the order it took them: `{"request_id", "inputs",
    "step", "said"}` (`said`: what a model call the steer cut short had written)."""

    def as_dict(self) -> dict[str, Any]:
        """The turn as JSON-able data (the CLI's `--json`)."""
        return {name: getattr(self, name) for name in self.__dataclass_fields__}

    async def rate(
        self,
        verdict: str | None,
        answer: Any = None,
        outputs: dict[str, Any] | None = None,
        note: str | None = None,
        reasons: Sequence[str] = (),
        by: str | None = None,
    ) -> dict[str, Any]:
        """Judge this turn's answer as functai rates a call; return the rating written (see `Conversation.rate`).

        Raises:
            ThreadlineError: `invalid-request` for a turn not read through a conversation, and the
                codes of `Conversation.rate`.
        """
        rater: Rater | None = getattr(self, "_rater", None)
        if rater is None:
            message = "this turn was not read through a conversation: rate it with chat.rate(turn_id, ...)"
            raise ThreadlineError(ErrorCode.INVALID_REQUEST, message)
        return await rater(self.id, verdict, answer, outputs, note, reasons, by)

    def bound(self, rater: Rater) -> Self:
        """This turn, rated through `rater` (its conversation's)."""
        object.__setattr__(self, "_rater", rater)
        return self


Rater = Callable[
    [str, "str | None", Any, "dict[str, Any] | None", "str | None", Sequence[str], "str | None"],
    Awaitable[dict[str, Any]],
]
"""How a conversation rates one of its turns."""


def shown_ids(log: Log, turn: str) -> list[str]:
    """The turns `turn` was shown, with `saw_of` expanded (empty when it cannot be)."""
    try:
        return [str(e["call"]) for e in expand(log, turn)]
    except ValueError:
        return []


def to_turn(log: Log, turn: LoggedTurn, now: float) -> Turn:
    """A client `Turn` from the log's view of it."""
    from store.log.steers import taken  # here: a send that only waits for its outcome makes no `Turn`

    ended = turn.ended or {}
    done = ended.get("state") == "done"
    state = turn.state(now)
    return Turn(
        id=turn.id,
        parent=turn.parent,
        state=state,
        inputs=turn.inputs,
        outputs=turn.outputs if done else {},
        result=ended.get("value", turn.outputs.get("result")) if done else None,
        saw=shown_ids(log, turn.id),
        usage={k: v for k, v in (ended.get("usage") or {}).items() if isinstance(v, int)},
        model=ended.get("model"),
        error=ended.get("error") if not done and ended else None,
        request_id=turn.record.get("request_id"),
        attempt=turn.attempt,
        reads=[str(t) for t in turn.record.get("reads") or []],
        made_by=dict(turn.record["made_by"]) if isinstance(turn.record.get("made_by"), dict) else None,
        started_at=turn.record.get("at"),
        ended_at=ended.get("at"),
        approvals=[dict(a) for a in turn.unanswered()] if state == "waiting" else [],
        unfinished=[_unfinished(t) for t in turn.unfinished()] if turn.ended is None else [],
        steps=steps_of(turn),
        steers=[asdict(s) for s in taken(turn)] if turn.steers else [],
    )


def _unfinished(tool: dict[str, Any]) -> dict[str, Any]:
    keys = ("invocation", "id", "name", "input", "site")
    return {**{k: tool.get(k) for k in keys}, "started": tool.get("at")}


def steps_of(turn: LoggedTurn) -> list[dict[str, Any]]:
    """A turn's tool calls and results in the order they were recorded (either engine's records)."""
    from store.log.toolturn import reply_calls

    steps: list[dict[str, Any]] = []
    seen: set[str] = set()
    for record in sorted([*turn.replies, *turn.tools], key=lambda r: int(r.get("seq") or 0)):
        if record.get("kind") == "reply":
            calls = [c.as_json() for c in reply_calls(record.get("response"))]
            if calls and str(record.get("key")) not in seen:
                steps.append({"role": "assistant", "calls": calls})
            seen.add(str(record.get("key")))
        elif record.get("state") in ("done", "given"):
            steps.append({"role": "tool", **{k: record.get(k) for k in ("id", "name", "invocation", "output")}})
    return steps


def find_turn(log: Log, turn: str, conversation: str) -> LoggedTurn:
    """The turn `turn` of `log`.

    Raises:
        ThreadlineError: `turn-unknown`.
    """
    check_text(turn, "a turn id")
    found = log.turns.get(turn)
    if found is None:
        raise ThreadlineError(ErrorCode.TURN_UNKNOWN, f"turn {turn} is not in conversation {conversation}")
    return found


@dataclass(frozen=True, slots=True)
class Page:
    """Which turns to list: at most `limit`, after or before a turn of the list (its id)."""

    limit: int | None = None
    after: str | None = None
    before: str | None = None

    def cut(self, ids: list[str], conversation: str) -> list[str]:
        """The ids of this page, in order.

        Raises:
            ThreadlineError: `turn-unknown` for a cursor not in the list; `invalid-request` for a bad limit.
        """
        if self.limit is not None and not 0 < self.limit <= MAX_PAGE:
            raise ThreadlineError(ErrorCode.INVALID_REQUEST, f"limit must be from 1 to {MAX_PAGE}")
        start, end = 0, len(ids)
        index = {tid: i for i, tid in enumerate(ids)} if self.after or self.before else {}
        for cursor in (self.after, self.before):
            if cursor is not None and cursor not in index:
                raise ThreadlineError(ErrorCode.TURN_UNKNOWN, f"turn {cursor} is not in this list of {conversation}")
        if self.after is not None:
            start = index[self.after] + 1
        if self.before is not None:
            end = index[self.before]
        chosen = ids[start:end]
        if self.limit is None:
            return chosen
        # Before a turn, a page is the turns just before it; otherwise, the first ones.
        return chosen[-self.limit :] if self.before is not None and self.after is None else chosen[: self.limit]


def history(log: Log, tip: str | None, rule: ContextRule, now: float) -> dict[str, Any]:
    """The branch through `tip` as the model sees it: summary, key facts, turns shown verbatim."""
    from store.log.summary import latest as latest_summary
    from store.log.topics import topics

    branch = log.branch(tip)
    done = [t for t in branch if t.state(now) == "done"]
    summary = latest_summary(log, tip) or {}
    covered = set(summary.get("turns") or [])
    shown = rule.pick([t for t in done if t.id not in covered], turn_tokens)
    return {
        "head": tip,
        "branch_turns": len(branch),
        "done_turns": len(done),
        "summarised_turns": len(covered),
        "verbatim_turns": len(shown),
        "summary": summary.get("summary"),
        "facts": list(summary.get("facts") or []),
        "topics": [{"label": t["label"], "turns": len(t["turns"]), "latest": t["latest"]} for t in topics(log)],
    }


def state_of(log: Log, now: float) -> dict[str, Any]:
    """The conversation as a whole: its head, its program, how many turns, whether one runs."""
    running = any(log.turns[tid].state(now) not in ENDED_STATES for tid in log.order)
    head = log.turns.get(log.head or "")
    program = log.programs.get(str(head.record.get("program"))) if head else None
    return {
        "head": log.head,
        "program": program.get("name") if program else None,
        "turns": len(log.branch(log.head)),
        "total": len(log.order),
        "state": "empty" if not log.order else "running" if running else "idle",
    }
