"""A conversation's records applied in order: turns, their states, the head (docs/format-1.md 4.1, 4.2).

Pure and incremental: `Log.apply` takes the records read since the last call, so a reader that
follows a long conversation pays only for what is new. Time is always passed in (`now`, seconds
since the epoch), never read here.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from store.records import FORMAT, LEASE_GRACE_SECONDS, LEASE_SECONDS, Record, parse_time
from store.values import copy_value

from .kept import kept_ended, kept_lease, kept_turn, paused_gc
from .memo import ShownMemo

TurnStateName = Literal["done", "failed", "stopped", "abandoned", "running", "waiting", "interrupted"]
ENDED_STATES = frozenset({"done", "failed", "stopped", "abandoned"})


def _approval_key(a: Mapping[str, Any]) -> tuple[Any, int, str]:
    """Which question an approval answers: the asking call's site, the invocation, the plugin."""
    return (a.get("site"), int(a.get("invocation") or 0), a.get("plugin") or "approval")


@dataclass(slots=True)
class Turn:
    """What the records say of one turn.

    A long conversation keeps thousands of these, so a turn holds no more than the rules read:
    its `turn` record, its first `ended` record, its last `lease` (reduced to who holds it, until
    when, which attempt and where), and records of the other kinds only when it has some.
    """

    record: Record
    ended: Record | None = None
    lease: Record | None = None
    waiting: Record | None = None
    stops: int = 0
    attempt: int = 1
    answers: Sequence[Record] = ()
    tools: Sequence[Record] = ()
    replies: Sequence[Record] = ()
    calls: Sequence[Record] = ()
    steers: Sequence[Record] = ()
    """Its `threadline` entries of kinds `steer` and `steered` (`store.log.steers`), in file order."""
    children: list[str] = field(default_factory=list)
    position: int = 0
    """Its place in `Log.order` (later turns were recorded later)."""
    lease_seen: float | None = None
    """A moment (the reader's clock) before which its last lease was not in the log, when the reader
    knows one: it read the log without that lease then."""

    @property
    def id(self) -> str:
        """The turn's id."""
        return str(self.record["turn"])

    @property
    def parent(self) -> str | None:
        """The id of the turn it continues, or None."""
        parent = self.record.get("parent")
        return parent if isinstance(parent, str) else None

    @property
    def inputs(self) -> dict[str, Any]:
        """The inputs the turn was sent with."""
        return dict(self.record.get("inputs") or {})

    @property
    def outputs(self) -> dict[str, Any]:
        """The outputs of its `ended` record (empty unless it ended with some)."""
        return dict((self.ended or {}).get("outputs") or {})

    @property
    def saw(self) -> list[Record]:
        """Its saw entries: from its `ended` record, else its `turn` record, else none."""
        return list((self.ended or {}).get("saw") or self.record.get("saw") or [])

    def state(self, now: float) -> TurnStateName:
        """How it ended, or `waiting`, `running` (a live lease) or `interrupted`.

        A lease is live until `LEASE_GRACE_SECONDS` after its `until`, which is the writer's clock, so
        a writer whose clock runs somewhat behind is not taken over; and, on the reader's own clock,
        for `LEASE_SECONDS` after a moment the reader knows it was not yet written (`lease_seen`),
        whatever its `until` says.
        """
        if self.ended is not None:
            return self.ended.get("state", "failed")  # type: ignore[no-any-return]
        lease_seq = int(self.lease.get("seq") or 0) if self.lease else 0
        if self.waiting is not None and int(self.waiting.get("seq") or 0) > lease_seq:
            return "waiting"
        if self.lease is None:
            return "interrupted"
        live = parse_time(self.lease.get("until")) + LEASE_GRACE_SECONDS
        if self.lease_seen is not None:
            live = max(live, self.lease_seen + LEASE_SECONDS)
        return "running" if live >= now else "interrupted"

    def unanswered(self) -> list[Record]:
        """The approvals its last `waiting` record asks for that no later `approval` answers."""
        if self.waiting is None:
            return []
        after = int(self.waiting.get("seq") or 0)
        answered = {_approval_key(a) for a in self.answers if int(a.get("seq") or 0) > after}
        asked = self.waiting.get("approvals") or []
        return [a for a in asked if isinstance(a, dict) and _approval_key(a) not in answered]

    def unfinished(self) -> list[Record]:
        """Tools that started and have no result recorded: they may have run."""
        started: dict[tuple[Any, Any], Record] = {}
        for tool in self.tools:
            key = (tool.get("site"), tool.get("invocation"))
            if tool.get("state") == "started":
                started[key] = tool
            elif tool.get("state") in ("done", "given", "rerun"):
                started.pop(key, None)
        return list(started.values())


_PER_TURN = {"approval": "answers", "tool": "tools", "reply": "replies", "call": "calls"}
_STEERS = frozenset({"steer", "steered"})


class Expansions(Mapping[str, list[Record]]):
    """What ended turns saw with `saw_of` expanded, kept as links (filled by `rules.expand`).

    A turn that saw its parent's entries and then its parent keeps a link to the turn its
    `saw_of` names and its own entries: a few dozen bytes, however long the chain behind it. The
    whole list is built only when asked for, in time linear in its length, without recursion.
    """

    def __init__(self) -> None:
        self._links: dict[str, tuple[str | None, tuple[Record, ...]]] = {}

    def link(self, turn: str, base: str | None, own: tuple[Record, ...]) -> None:
        """Keep that `turn` saw what `base` saw (None: nothing), then `own`."""
        self._links[turn] = (base, own)

    def entries(self, turn: str) -> list[Record]:
        """What `turn` saw, oldest first: the kept entries themselves, not copies.

        Raises:
            KeyError: for a turn not kept.
        """
        parts: list[tuple[Record, ...]] = []
        at: str | None = turn
        while at is not None:
            at, own = self._links[at]
            parts.append(own)
        return [entry for own in reversed(parts) for entry in own]

    def __getitem__(self, turn: str) -> list[Record]:
        return [copy_value(entry) for entry in self.entries(turn)]

    def __contains__(self, turn: object) -> bool:
        return turn in self._links

    def __iter__(self) -> Iterator[str]:
        return iter(self._links)

    def __len__(self) -> int:
        return len(self._links)


class Log:
    """The state of one conversation after applying its records in file order.

    What it keeps of each record is what the rules read (see `Turn`), with the text records
    repeat (turn ids, program versions, the values an `lmcc` repeats from its turn) held once
    (`store.log.kept`): what it keeps is equal to what was read, and costs about half as much.
    """

    def __init__(self, records: Iterable[Record] = ()) -> None:
        self.n = 0
        self.turns: dict[str, Turn] = {}
        self.order: list[str] = []
        self.open: dict[str, None] = {}
        """The turns with no `ended` record, in `order` (a long log's few open turns, found without walking it)."""
        self.head: str | None = None
        self.request_ids: dict[str, str] = {}
        self.programs: dict[str, Record] = {}
        self.entries: list[Record] = []
        self.expanded = Expansions()
        """What each ended turn saw, `saw_of` expanded (filled by `rules.expand`): without it every
        new turn would walk the whole chain of `saw_of` back to the first turn."""
        self.generation = 0
        """Moved on by each record that changes what a done turn shows: a program version recorded
        after turns of it, a steer entry about an ended turn. What is kept of a branch's showing
        (`shown_memo`) holds only while it stays the same."""
        self.shown_memo: ShownMemo | None = None
        """What the newest long branch shown shows (kept by `rules.shown`)."""
        self._orphans: dict[str, list[str]] = {}
        """Turns recorded before the turn they continue, by that turn's id (`children` lacks them)."""
        self._unseen_at: float | None = None
        self.apply(records)

    def apply(self, records: Iterable[Record], *, unseen_at: float | None = None) -> None:
        """Apply `records` (those after position `n`), skipping unknown formats, kinds and keys.

        `unseen_at` is a moment (the reader's clock) when the log did not hold them yet, when the
        reader knows one: the start of its previous read. A lease among them then counts as live for
        `LEASE_SECONDS` after it, however far the writer's clock is off.
        """
        self._unseen_at = unseen_at
        apply_one = self._apply_one
        with paused_gc():
            for record in records:
                seq = record.get("seq")
                n = seq if isinstance(seq, int) and seq > 0 else self.n + 1
                if n > self.n:
                    self.n = n
                if record.get("functai_conversation") == FORMAT:
                    apply_one(record)

    def _canonical(self, turn: Any) -> Any:
        """The log's own string for a turn id, so a long log holds each id once."""
        known = self.turns.get(turn)
        return turn if known is None else known.record["turn"]

    def _apply_one(self, record: Record) -> None:
        kind = record.get("kind")
        tid = record.get("turn")
        turn = self.turns.get(tid) if isinstance(tid, str) else None
        # The kinds a long log is made of come first.
        if kind == "lease" and turn is not None:
            turn.lease = kept_lease(record, turn.record["turn"])
            turn.lease_seen = self._unseen_at
            turn.attempt = max(turn.attempt, int(record.get("attempt") or 1))
        elif kind == "ended" and turn is not None:
            if turn.ended is None:
                turn.ended = kept_ended(record, turn.record, self._canonical)
                self.open.pop(turn.record["turn"], None)
        elif kind == "turn" and isinstance(tid, str):
            self._add_turn(tid, record)
        elif kind == "program":
            version = record.get("version")
            if version not in self.programs:
                self.programs[version] = record  # type: ignore[index]
                self.generation += 1
        elif kind == "entry":
            self.entries.append(record)
            if turn is not None and record.get("plugin") == "threadline" and record.get("entry") in _STEERS:
                _add_to(turn, "steers", record)
                self.generation += turn.ended is not None
        elif turn is None:
            return  # about a turn not (yet) recorded: ignored, as functai does
        elif kind == "head":
            self.head = tid
        elif kind == "waiting":
            turn.waiting = record
        elif kind == "stop":
            turn.stops += 1
        elif kind in _PER_TURN:
            _add_to(turn, _PER_TURN[kind], record)

    def _add_turn(self, tid: str, record: Record) -> None:
        if tid in self.turns:
            return
        kept = kept_turn(record, self._canonical)
        parent = kept.get("parent")
        if isinstance(parent, str):
            known = self.turns.get(parent)
            if known is not None:
                known.children.append(tid)
            else:
                self._orphans.setdefault(parent, []).append(tid)
        self.turns[tid] = Turn(kept, position=len(self.order))
        self.order.append(tid)
        self.open[tid] = None
        request_id = record.get("request_id")
        if isinstance(request_id, str) and request_id:
            self.request_ids.setdefault(request_id, tid)
        self.head = tid

    def descendants(self, turn: str) -> Iterator[str]:
        """The turns that continue `turn`, at any depth, by their `parent` (in no particular order)."""
        stack, seen = [turn], {turn}
        while stack:
            at = stack.pop()
            known = self.turns.get(at)
            for child in (*(known.children if known else ()), *self._orphans.get(at, ())):
                if child not in seen:
                    seen.add(child)
                    stack.append(child)
                    yield child

    def branch(self, turn: str | None) -> list[Turn]:
        """The turns from the root to `turn`, in order (an unknown parent ends the walk)."""
        out: list[Turn] = []
        seen: set[str] = set()
        while turn is not None and turn in self.turns and turn not in seen:
            seen.add(turn)
            out.append(self.turns[turn])
            turn = self.turns[turn].parent
        return out[::-1]

    def nearest_done(self, turn: str | None, now: float) -> str | None:
        """`turn` if it ended `done`, else its nearest ancestor that did: only those are parents."""
        seen: set[str] = set()
        while turn is not None and turn in self.turns and turn not in seen:
            seen.add(turn)
            if self.turns[turn].state(now) == "done":
                return turn
            turn = self.turns[turn].parent
        return None

    def states(self, now: float) -> dict[str, TurnStateName]:
        """Every turn's state at `now`, in the order they were sent."""
        return {tid: self.turns[tid].state(now) for tid in self.order}


def _add_to(turn: Turn, name: str, record: Record) -> None:
    """Append to one of a turn's lists, making it on the first record (most turns have none)."""
    held = getattr(turn, name)
    if isinstance(held, list):
        held.append(record)
    else:
        setattr(turn, name, [record])
