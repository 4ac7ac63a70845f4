"""Wire models: what crosses Temporal (workflow input, signals, updates, activities) and the edges.

All pydantic, frozen, and tolerant of unknown fields (a rolling deploy may add some). Nothing
here holds a secret; inputs and outputs of one turn are the only content that crosses history.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from .errors import ErrorCode, ThreadlineError

Sends = Literal["queue", "refuse", "branch"]
OutcomeState = Literal["done", "failed", "stopped", "abandoned", "refused"]


MAX_INPUT_BYTES = 1 << 20
"""The largest inputs one send may carry, as JSON bytes."""


def check_input_size(inputs: dict[str, Any]) -> None:
    """Refuse inputs over `MAX_INPUT_BYTES` with `input-too-large`."""
    size = len(json.dumps(inputs, ensure_ascii=False, default=str).encode())
    if size > MAX_INPUT_BYTES:
        raise ThreadlineError(
            ErrorCode.INPUT_TOO_LARGE, f"the inputs are {size} bytes; at most {MAX_INPUT_BYTES} are accepted"
        )


class Model(BaseModel):
    """Base of the wire models: frozen, unknown fields ignored."""

    model_config = ConfigDict(frozen=True, extra="ignore")


class SummarySettings(Model):
    """Summarise a branch's older turns once it holds more than `after`, keeping the last `keep` verbatim."""

    after: int = Field(default=20, ge=1)
    keep: int = Field(default=6, ge=1)
    model: str | None = None
    """The model that writes summaries (default: the conversation's)."""


class ContextRule(Model):
    """What a turn is shown of the earlier turns, and how the conversation keeps track of topics.

    `last` (None: every done turn), `window` (the last messages, two per turn) and `max_tokens`
    (the most recent turns that fit) pick turns, all that are set together; `without` leaves
    fields out; `summary` replaces older turns with a summary and key facts. `topics` classifies
    each message: `track` records it, `branch` also moves a new topic onto its own branch and
    continues a returning topic from its latest turn.
    """

    last: int | None = Field(default=None, ge=0)
    without: tuple[str, ...] = ()
    window: int | None = Field(default=None, ge=0)
    max_tokens: int | None = Field(default=None, ge=0)
    summary: SummarySettings | None = None
    topics: Literal["off", "track", "branch"] = "off"
    topic_model: str | None = None


class ConversationConfig(Model):
    """What a conversation workflow needs to know of itself; set by the client that starts it."""

    store: str
    conversation: str
    program: str = "tutor"
    sends: Sends = "queue"
    context: ContextRule = ContextRule()
    lm: str | None = None
    idle_timeout_s: float = 24 * 3600.0
    turns_per_run: int = 100
    search_attributes: bool = False
    """Whether the server has Threadline's search attributes registered (the dev launcher does)."""


class TurnSend(Model):
    """The `turn` signal: one message to the conversation."""

    request_id: str
    inputs: dict[str, Any]
    program: str | None = None
    continue_from: str | None = None
    """Continue after exactly this turn."""
    follow: str | None = None
    """Continue the branch through this turn (its newest descendant); ignored with `continue_from`."""
    root: bool = False
    """Start a new branch with no parent (a new topic)."""
    sends: Sends | None = None
    lm: str | None = None
    context: ContextRule | None = None


class StopSend(Model):
    """The `stop` signal: a turn by id, a send by request id, or (neither) everything running and queued."""

    turn: str | None = None
    request_id: str | None = None


class TurnError(Model):
    """A coded error: `code` is one of the stable kebab-case codes."""

    code: str
    message: str


class TurnOutcome(Model):
    """How a send ended."""

    request_id: str
    turn: str | None = None
    parent: str | None = None
    state: OutcomeState
    outputs: dict[str, Any] | None = None
    result: Any = None
    model: str | None = None
    usage: dict[str, int] = {}
    seconds: float | None = None
    error: TurnError | None = None


class Begun(Model):
    """A send was placed: its turn and parent (or it was refused: `error`)."""

    request_id: str
    turn: str | None = None
    parent: str | None = None
    existing: bool = False
    error: TurnError | None = None


class ConversationInput(Model):
    """The workflow's input, also what continue-as-new carries: small state, never the transcript."""

    config: ConversationConfig
    pending: list[TurnSend] = []
    outcomes: list[TurnOutcome] = []
    turns: int = 0


class ConversationStatus(Model):
    """The `status` query: what the workflow is doing now."""

    store: str
    conversation: str
    program: str
    running: list[str]
    pending: int
    turns: int
    turns_this_run: int
    summarising: int = 0
    """Summaries being made in the background after a turn."""
    last: TurnOutcome | None = None


# ----- activities


class BeginInput(Model):
    """Place a send: decide its turn, parent and what it is shown, and append its first records."""

    config: ConversationConfig
    send: TurnSend


class BeginResult(Model):
    """`begun` (records appended), `existing` (the request id was already sent), or `busy` (the head runs)."""

    kind: Literal["begun", "existing", "busy"]
    turn: str
    parent: str | None = None
    outcome: TurnOutcome | None = None
    """For `existing`: how that turn ended, if it has."""
    records: int = 0
    """How many records the log held when this was decided (`busy`: watch for more)."""


class RunInput(Model):
    """Run (or resume) a begun turn's model call."""

    config: ConversationConfig
    send: TurnSend
    turn: str
    attempt: int = 1
    """The log attempt this workflow owns: a higher one in the log means another writer took over."""


class RunResult(Model):
    """`ended` (with its outcome), `yielded` (another writer holds the turn) or `interrupted`."""

    kind: Literal["ended", "yielded", "interrupted"]
    outcome: TurnOutcome | None = None
    attempt: int = 1


class TurnRef(Model):
    """One turn of one conversation (stop, follow, head, end)."""

    store: str
    conversation: str
    turn: str
    request_id: str = ""
    error: TurnError | None = None


class PrepareResult(Model):
    """Where the topic policy places a send (`continue_from`, or a new `root`), and the topic seen."""

    continue_from: str | None = None
    root: bool = False
    topic: dict[str, Any] | None = None


class WatchInput(Model):
    """Wait until the conversation holds more than `after` records, or `timeout_s` passes."""

    store: str
    conversation: str
    after: int
    timeout_s: float = 2.0
