"""Wire models: what crosses Temporal (workflow input, signals, updates, activities) and the edges.

All pydantic, frozen, and tolerant of unknown fields (a rolling deploy may add some). Nothing
here holds a secret; inputs and outputs of one turn are the only content that crosses history.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)

from .context import ONCE as ONCE
from .context import ContextRule, compacted
from .deadlines import ApprovalDeadline, DeadlineClock
from .docstrings import describe_fields
from .errors import ErrorCode, ThreadlineError
from .sends import SENDS as SENDS
from .sends import Sends as Sends

OutcomeState = Literal["done", "failed", "stopped", "abandoned", "refused", "waiting"]
ApproveRule = Literal["changes", "all"] | tuple[str, ...] | ApprovalDeadline | None
"""An `approve` rule that can cross the wire: `changes`, `all`, tool names and approval paths, or
one of them with a deadline (`core.deadlines.ApprovalDeadline`)."""


MAX_INPUT_BYTES = 1 << 20
"""The largest inputs one send may carry, as JSON bytes."""
MAX_REQUEST_ID = 200
"""The longest request id (it is carried in outcomes and written in the log)."""


MAX_INPUT_DEPTH = 32
"""How deeply inputs may nest (lists and objects within each other)."""


def check_inputs(inputs: dict[str, Any]) -> None:
    """Refuse inputs no turn can take, before anything is sent or recorded.

    Raises:
        ThreadlineError: `invalid-request` for text with a lone surrogate or a NUL, or values nested
            deeper than `MAX_INPUT_DEPTH`; `input-too-large` past `MAX_INPUT_BYTES` of JSON.
    """
    _check_values(inputs)
    size = len(json.dumps(inputs, ensure_ascii=False, default=str).encode())
    if size > MAX_INPUT_BYTES:
        raise ThreadlineError(
            ErrorCode.INPUT_TOO_LARGE, f"the inputs are {size} bytes; at most {MAX_INPUT_BYTES} are accepted"
        )


def _check_values(inputs: dict[str, Any]) -> None:
    """Walk the values without recursion: a value nested ten thousand deep is refused, not a crash."""
    pending: list[tuple[Any, int]] = [(inputs, 1)]
    while pending:
        value, depth = pending.pop()
        if isinstance(value, str):
            _check_text(value)
            continue
        if not isinstance(value, dict | list | tuple):
            continue
        if depth > MAX_INPUT_DEPTH:
            raise ThreadlineError(ErrorCode.INVALID_REQUEST, f"inputs nest deeper than {MAX_INPUT_DEPTH} levels")
        if isinstance(value, dict):
            for key in value:
                _check_text(str(key))
        pending.extend((item, depth + 1) for item in (value.values() if isinstance(value, dict) else value))


def _check_text(text: str) -> None:
    if "\x00" in text:
        raise ThreadlineError(ErrorCode.INVALID_REQUEST, "text in the inputs holds a NUL character; remove it")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ThreadlineError(
            ErrorCode.INVALID_REQUEST, "text in the inputs holds a lone surrogate, which is not Unicode text"
        ) from None


class Model(BaseModel):
    """Base of the wire models: frozen, unknown fields ignored; a field's docstring is its description
    in the JSON Schemas other clients read (docs/schemas; `core.docstrings`)."""

    model_config = ConfigDict(frozen=True, extra="ignore", json_schema_extra=describe_fields)


class Compact(Model):
    """A wire model that crosses Temporal with only the fields that differ from their defaults
    (`core.context.compacted`): the send, the config, an activity's input and result, an answer."""

    WIRE_KEPT: ClassVar[frozenset[str]] = frozenset()
    """Fields that cross whenever they were given, even at their defaults."""

    @model_serializer(mode="wrap")
    def _compact(self, handler: SerializerFunctionWrapHandler, info: SerializationInfo):  # type: ignore[no-untyped-def]
        """Without a return annotation, so the JSON Schemas (docs/schemas) still describe the fields."""
        return compacted(self, handler(self), info, kept=self.WIRE_KEPT)


class HelperMemory(Compact):
    """What a helper of a program with code remembers in a conversation (`remembers={name: ...}`).

    `conversation`: its own earlier calls on the branch, in earlier turns and this one; `turn`: its
    earlier calls in this turn only; `steps`: with their tool calls and results. `own` is not a helper's
    memory: it lets the program's code use another conversation (named by its program) inside its turn.
    A plain string is the mode (`"conversation"`).
    """

    mode: Literal["conversation", "turn", "own"] = "conversation"
    steps: bool = False

    @model_validator(mode="before")
    @classmethod
    def _from_mode(cls, value: Any) -> Any:
        return {"mode": value} if isinstance(value, str) else value


class Budget(Model):
    """What a conversation may spend in all (`core.budgets`): `tokens` (read and written, every turn of every
    branch) and `cost` (in the price table's currency, `THREADLINE_PRICES`); None is no limit on it."""

    tokens: int | None = Field(default=None, ge=0)
    cost: float | None = Field(default=None, ge=0)


class ConversationConfig(Compact):
    """What a conversation workflow needs to know of itself; set by the client that starts it."""

    WIRE_KEPT: ClassVar[frozenset[str]] = frozenset({"search_attributes", "idle_timeout_s", "attributes_every_s"})
    """`core.starting.LEARNED`: a starter that leaves them out gets the worker's values."""
    WORKFLOW_ONLY: ClassVar[frozenset[str]] = frozenset(
        {*WIRE_KEPT, "turns_per_run", "waiting_check_s", "approval_timeout_s"}
    )
    """The settings only the workflow reads (its idle clock, runs, attributes and deadlines): the config
    an activity is given leaves them out (`ActivityInput`)."""

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
    attributes_every_s: float = 10.0
    """Search attributes are written at most this often (each is a visibility write)."""
    store_id: str | None = None
    """The identity of the store the conversation lives in: every activity checks its store has it, so a
    worker with another store never writes here. Set by the client, else learned from the first placing."""
    approve: ApproveRule = None
    """Which tool calls ask a person first (None: the program's own rule)."""
    approval_timeout_s: float | None = None
    """A turn that waits this long for a person is abandoned (None: it waits as long as it takes)."""
    waiting_check_s: float = 300.0
    """While a turn waits, the log is read after this long, then twice as long each time (up to an hour),
    for answers another process recorded without telling the workflow (functai's); answers given through
    Threadline wake it at once."""
    remembers: dict[str, HelperMemory] = {}
    """A program with code's helpers' memory, by helper name (helpers remember nothing otherwise)."""
    earlier_without: tuple[str, ...] = ()
    """Outputs the program now writes that earlier turns lack (reasoning turned on, a first tool): they are
    shown without them instead of the send being refused `conversation-signature`."""
    budget: Budget | None = None
    """What the conversation may spend; a turn that would exceed it is refused `budget-exceeded` (None: no limit)."""
    configured: tuple[str, ...] = ()
    """The settings changed since the start by the `configure` update (`budget`): they hold over what each
    send carries."""

    def settings(self) -> ConversationSettings:
        """The settings the `configure` update may change, as they are now."""
        return ConversationSettings(budget=self.budget, configured=list(self.configured))

    def configure(self, change: SettingsSend) -> ConversationConfig:
        """This config with `change` made (its budget `{}`: no limit), each setting it names marked configured."""
        update: dict[str, Any] = {}
        if change.budget is not None:
            limited = change.budget.tokens is not None or change.budget.cost is not None
            update["budget"] = change.budget if limited else None
        named = tuple(name for name in update if name not in self.configured)
        return self.model_copy(update={**update, "configured": self.configured + named})


class SettingsSend(Model):
    """The `configure` update: settings of the conversation changed for its next turns (the run carries
    them through continue-as-new); a setting left out (None) stays as it is."""

    budget: Budget | None = None
    """What the conversation may spend from its next turn on (`{}`: no limit); it holds over the budget
    each send carries."""


class ConversationSettings(Model):
    """A conversation's settings that may change while it runs (the `configure` update's answer)."""

    budget: Budget | None = None
    """What the conversation may spend (None: no limit of its own; a store's budget still holds)."""
    configured: list[str] = []
    """The settings changed by `configure` since the conversation's workflow started: they hold over
    what each send carries."""


class CallerTool(Model):
    """A function the caller runs itself (the OpenAI protocol's function tools): offered to the model
    with the turn; a call of it pauses the turn until the caller sends its output (a resume)."""

    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    description: str = Field(default="", max_length=4000)
    parameters: dict[str, Any] = {}
    """The JSON Schema of its input."""


class TurnSend(Compact):
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
    flow: str | None = None
    """Start this guided flow (the `flow` signal): `inputs["message"]` is what started it, and the answer
    is the flow's first prompt."""
    approve: ApproveRule = None
    """This turn's `approve` rule (None: the conversation's)."""
    merge: MergeSpec | None = None
    """A merge instead of a turn (`workflows/_merges.py`): the branches and the program that merges them."""
    earlier_without: tuple[str, ...] | None = None
    """This send's `earlier_without` (None: the conversation's)."""
    metadata: dict[str, Any] = {}
    """The message's own metadata (the article's per-message metadata): kept with its turn and returned
    with the message."""
    remembers: dict[str, HelperMemory] | None = None
    """This send's helpers' memory (None: the conversation's); a handle's travels with each send."""
    tools: list[CallerTool] = Field(default_factory=list, max_length=64)
    """Functions the caller runs (recorded with the turn as `settings.tools`): the model may call them, and
    the turn then waits for their outputs."""

    budget: Budget | None = None
    """The sender's budget for the conversation (None: the conversation's); a handle's travels with each send,
    so a conversation reopened by its next send keeps it."""

    AS_CONFIG: ClassVar[frozenset[str]] = frozenset(
        {"program", "sends", "context", "lm", "remembers", "earlier_without", "budget"}
    )
    """Settings a send carries that, when None, are the conversation's: every reader falls back to the
    config's (`send.lm or config.lm`, `memory`, `limit`)."""

    def as_config(self, name: str, config: ConversationConfig) -> bool:
        """Whether this send's setting `name` says what None would: the config's value (an activity's
        input, which carries the config beside it, leaves it out)."""
        return name in self.AS_CONFIG and getattr(self, name) == getattr(config, name)

    def memory(self, config: ConversationConfig) -> dict[str, HelperMemory]:
        """The helpers' memory this send runs with: its own, else the conversation's."""
        return self.remembers if self.remembers is not None else config.remembers

    def limit(self, config: ConversationConfig) -> Budget | None:
        """The budget this send is held to: the conversation's once `configure` changed it, else the
        send's own, else the conversation's."""
        if "budget" in config.configured:
            return config.budget
        return self.budget or config.budget


class MergeSpec(Compact):
    """What a merge reads and who merges it: done turns continuing the view's head, and the merging
    program (registered on the worker), asked `inputs` (None: the branches' answers)."""

    turns: list[str]
    program: str
    inputs: dict[str, Any] | None = None


class StopSend(Model):
    """The `stop` signal: a turn by id, a send by request id, or (neither) everything running and queued.

    With `flow`, it stops the active guided flow instead (abandoned, reason `stopped`).
    """

    turn: str | None = None
    request_id: str | None = None
    flow: bool = False


class TurnError(Model):
    """A coded error as it crosses the wire: `code` is one of the stable kebab-case codes."""

    code: str
    message: str

    @classmethod
    def of(cls, err: ThreadlineError) -> TurnError:
        """`err` as it travels in outcomes."""
        return cls(code=str(err.code), message=err.message)

    def to_error(self) -> ThreadlineError:
        """The `ThreadlineError` this stands for (an unknown code reads as `internal`)."""
        return ThreadlineError(ErrorCode.parse(self.code), self.message)


_READ_FIRST = ("outputs", "state", "error")
"""The fields of an outcome the Temporal UI shows first (its collapsed events cut the JSON short)."""


class TurnOutcome(Model):
    """How a send ended.

    Across Temporal its JSON starts with what a person reads in the UI's collapsed event (which
    shows the first fifty characters or so): the outputs (the answer), then the state and the error;
    it leaves out the fields that hold their defaults there (a missing field is its default)."""

    request_id: str
    turn: str | None = None
    parent: str | None = None
    state: OutcomeState
    outputs: dict[str, Any] | None = None
    """The program's outputs by name, when the turn is done (`tutor`: `result`)."""
    answer: str | None = None
    """Which of `outputs` is the answer (`result` for `tutor`), when it is one of them."""
    result: Any = None
    """The answer. Across Temporal it is left out when it is `outputs[answer]` (it would be carried
    twice); then read `outputs[answer]`."""
    model: str | None = None
    usage: dict[str, int] = {}
    seconds: float | None = None
    error: TurnError | None = None
    steers: list[str] = []
    """The request ids of the sends that steered the turn (`sends="steer"`), in the order it took them."""
    flow: FlowResult | None = None
    """When a guided flow answered the send: where the flow stands (`flow_data` once, on completion)."""
    approvals: list[dict[str, Any]] = []
    """While `waiting`: the questions asked (tool name, input, effects, site, invocation, question)."""

    @model_validator(mode="before")
    @classmethod
    def _answer_from_outputs(cls, data: Any) -> Any:
        """An outcome that came across Temporal without `result` has it in `outputs[answer]`."""
        if isinstance(data, dict) and "result" not in data and data.get("answer") is not None:
            return {**data, "result": (data.get("outputs") or {}).get(data["answer"])}
        return data

    @model_serializer(mode="wrap")
    def _answer_once(self, handler: SerializerFunctionWrapHandler, info: SerializationInfo):  # type: ignore[no-untyped-def]
        """Under the `ONCE` context (across Temporal): `result` left out when `outputs[answer]` holds
        it, the fields at their defaults left out (`compacted`), and the fields a person reads first
        put first.

        Without a return annotation on purpose: pydantic then describes the outcome's own fields in
        its serialization schema (docs/schemas), where an annotation would replace them."""
        data = handler(self)
        if not (isinstance(info.context, dict) and info.context.get(ONCE) and isinstance(data, dict)):
            return data
        if self.answer is not None and self.answer in (self.outputs or {}):
            data.pop("result", None)
        data = compacted(self, data, info)
        return {**{name: data[name] for name in _READ_FIRST if name in data}, **data}


class Begun(Compact):
    """A send was placed: its turn and parent (a refused send has neither: `wait` tells why)."""

    request_id: str
    turn: str | None = None
    parent: str | None = None
    existing: bool = False


class ConversationState(BaseModel):
    """The workflow's state: its input, what it keeps as it runs, and what continue-as-new carries.

    Small by construction: the pending sends, the recent outcomes (without outputs once carried) and
    a counter, never the transcript, which lives in the record log.
    """

    model_config = ConfigDict(extra="ignore", json_schema_extra=describe_fields)

    config: ConversationConfig
    pending: list[TurnSend] = []
    outcomes: list[TurnOutcome] = []
    turns: int = 0
    waiting: list[WaitingTurn] = []
    """Turns waiting for a person under a deadline when the run continued as new: the next run waits
    on with the same clock."""
    accounted: bool = False
    """The run before continued as new with no turn it placed left open and undriven, as far as it could
    know: this run does not look for lost turns at its start (its sends' placing and an idle close still do)."""
    flow: FlowStatus | None = None
    """The guided flow and its counts as the run before continued as new, as `read_flow` would read them
    back (the log agreed with every flow step of that run): this run takes them instead of reading them."""

    @model_serializer(mode="wrap")
    def _compact(self, handler: SerializerFunctionWrapHandler, info: SerializationInfo):  # type: ignore[no-untyped-def]
        """Only what differs from the defaults, across Temporal (`compacted`): a run's input carries no
        empty queue. Without a return annotation, so the JSON Schemas still describe the fields."""
        return compacted(self, handler(self), info)


class WaitingTurn(BaseModel):
    """A turn that waits for a person under a deadline, as continue-as-new carries it."""

    model_config = ConfigDict(extra="ignore", json_schema_extra=describe_fields)

    turn: str
    request_id: str
    parent: str | None = None
    program: str | None = None
    attempt: int = 1
    approvals: list[dict[str, Any]] = []
    clock: DeadlineClock


ConversationInput = ConversationState
"""The workflow's input (the same JSON as its state: a run starts from what the last one carried)."""


class ConversationStatus(Model):
    """The `status` query: what the workflow is doing now."""

    store: str
    conversation: str
    program: str
    running: list[str]
    """The turns this run drives (a send placed and run in one step shows here once its turn is known)."""
    pending: int
    """The sends queued, and the one being placed and run in one step while its turn is not known here."""
    turns: int
    turns_this_run: int
    summarising: int = 0
    """Summaries being made in the background after a turn."""
    last: TurnOutcome | None = None
    deadlines: dict[str, DeadlineClock] = {}
    """The approval deadlines of the turns waiting for a person, by turn: when each is due, who may
    answer, and how many reminders were given."""
    settings: ConversationSettings = ConversationSettings()
    """The settings the next turns run with (the `configure` update changes them)."""


# ----- activities


class ActivityInput(Compact):
    """An activity's input that carries the conversation's `config`: across Temporal the config leaves out
    what only the workflow reads (`ConversationConfig.WORKFLOW_ONLY`), which the activity sees at its
    defaults, and its `send` the settings that say what the config says (`TurnSend.as_config`: a handle
    sends its own with every send); a turn's model call pays for its config once per turn in history."""

    config: ConversationConfig

    @model_serializer(mode="wrap")
    def _compact(self, handler: SerializerFunctionWrapHandler, info: SerializationInfo):  # type: ignore[no-untyped-def]
        """Without a return annotation, so the JSON Schemas still describe the fields."""
        data = compacted(self, handler(self), info, kept=self.WIRE_KEPT)
        config = data.get("config") if isinstance(info.context, dict) and info.context.get(ONCE) else None
        if isinstance(config, dict):
            data["config"] = {k: v for k, v in config.items() if k not in ConversationConfig.WORKFLOW_ONLY}
            send, sent = getattr(self, "send", None), data.get("send")
            if isinstance(send, TurnSend) and isinstance(sent, dict):
                data["send"] = {k: v for k, v in sent.items() if not send.as_config(k, self.config)}
        return data


class BeginInput(ActivityInput):
    """Place a send: decide its turn, parent and what it is shown, and append its first records (and, in
    `place_and_run`, run it: the activity input a sequential turn puts in history)."""

    config: ConversationConfig
    send: TurnSend
    holding: list[str] = []
    """The turns the workflow drives now: any other open turn it placed was lost with its task."""
    at_once: bool = False
    """The send is placed and run in one step (`place_and_run`): an open turn this workflow placed under
    its request id is that step's turn, found `existing`, never an orphan; and it steers no turn."""
    opening: bool = False
    """The run's first look at the log (a conversation begun or reopened by this send): a log that holds
    guided flows comes back `flows`, nothing placed, so the flow is read back and offered the send first;
    lost turns come back `orphans` as always. A send placed here shows the run the log held neither."""


class OpenTurn(Compact):
    """A turn the workflow placed that has not ended and that it does not drive (it lost the task that
    placed it): what driving it needs, read from its `turn` record."""

    turn: str
    request_id: str
    parent: str | None = None
    program: str | None = None
    """The registered program whose version answers it (None: the conversation's)."""
    inputs: dict[str, Any] = {}
    lm: str | None = None

    def send(self) -> TurnSend:
        """The send that placed it, as far as its record tells (enough to run it)."""
        return TurnSend(request_id=self.request_id, inputs=self.inputs, program=self.program, lm=self.lm)


class OwnedInput(Compact):
    """Find the open turns this workflow placed but does not drive (`holding` are those it drives)."""

    store: str
    conversation: str
    store_id: str | None = None
    holding: list[str] = []


class SendRef(Compact):
    """A send of one conversation, by request id: where the log holds it (`find_send`)."""

    store: str
    conversation: str
    store_id: str | None = None
    request_id: str


class FoundSend(Compact):
    """Where the log holds a send: its turn and parent, and its outcome once the turn ended (no turn:
    the log holds no send with that request id)."""

    turn: str | None = None
    parent: str | None = None
    outcome: TurnOutcome | None = None


class BeginResult(Compact):
    """`begun` (records appended), `existing` (the request id was already sent), `busy` (the head runs),
    `steered` (a `steer` entry for the running head `turn` was appended), `orphans`: nothing placed,
    because turns the workflow placed run nowhere (`orphans`): it adopts them first; or `flows`: nothing
    placed, because a run's first look at the log (`BeginInput.opening`) found guided flows there (`turn`
    empty): the workflow reads them back (`read_flow`) before the send is offered again."""

    kind: Literal["begun", "existing", "busy", "orphans", "steered", "flows"]
    turn: str
    parent: str | None = None
    outcome: TurnOutcome | None = None
    """For `existing`: how that turn ended, if it has."""
    records: int = 0
    """How many records the log held when this was decided (`busy`: watch for more)."""
    store_id: str | None = None
    """The identity of the store it was decided in."""
    orphans: list[OpenTurn] = []


class RunInput(ActivityInput):
    """Run (or resume) a begun turn's model call."""

    config: ConversationConfig
    send: TurnSend
    turn: str
    attempt: int = 1
    """The log attempt this workflow owns: a higher one in the log means another writer took over."""


class Ended(Compact):
    """The turn ended: how."""

    kind: Literal["ended"] = "ended"
    outcome: TurnOutcome
    attempt: int = 1


class Yielded(Compact):
    """Another writer holds the turn (a higher attempt): follow it in the log."""

    kind: Literal["yielded"] = "yielded"
    attempt: int = 1


class Interrupted(Compact):
    """Nobody holds the turn any more (its lease ran out): claim it again."""

    kind: Literal["interrupted"] = "interrupted"
    attempt: int = 1


class ToolRef(Compact):
    """One tool call a model step asked for, by reference: the reply that holds it and its place there.

    Name and input stay in the log (the `reply` record); the activity reads them from there."""

    key: str
    """The `reply` record's key."""
    index: int
    """The call's place among the reply's calls."""
    invocation: int
    """Its number among the turn's tool calls (1, 2, ...), as `tool` and `approval` records count them."""
    site: str
    name: str
    reads: bool = False
    """The tool only reads (it gets no `started` record and may be retried)."""
    timeout_s: float = 120.0
    attempts: int = 1


class ToolRound(Compact):
    """The model asked for tools: run these (in order), then ask it again with the same attempt."""

    kind: Literal["tools"] = "tools"
    attempt: int = 1
    calls: list[ToolRef] = []


class Paused(Compact):
    """The turn waits for a person: approvals to answer (`waiting`), or a tool that may have run to settle
    by hand (`unfinished`); nothing runs it meanwhile."""

    kind: Literal["paused"] = "paused"
    attempt: int = 1
    reason: Literal["waiting", "unfinished"] = "waiting"
    approvals: list[dict[str, Any]] = []
    deadline: ApprovalDeadline | None = None
    """The approval deadline of the rule that asked (the send's, the conversation's or the program's)."""


RunResult = Annotated[Ended | Yielded | Interrupted | ToolRound | Paused, Field(discriminator="kind")]
"""How an attempt at a turn came out."""


class PlacedRun(Compact):
    """How a send placed and run in one step (`place_and_run`) came out: how it was placed, and, when
    that placed its turn (or found the step's own turn placed), how running it came out.

    A turn that ran to its end leaves `placed` out: its outcome names the same turn and parent
    (`placing`), and history holds each once."""

    placed: BeginResult | None = None
    result: RunResult | None = None

    @classmethod
    def of(cls, placed: BeginResult, result: RunResult | None = None) -> PlacedRun:
        """`placed` and `result`, without the placing when the ended outcome says all it says."""
        if isinstance(result, Ended) and placed == cls._begun(result):
            return cls(result=result)
        return cls(placed=placed, result=result)

    def placing(self) -> BeginResult:
        """How the send was placed (as the ended outcome tells it, when it was left out)."""
        if self.placed is not None:
            return self.placed
        if not isinstance(self.result, Ended):
            raise ValueError("a placed run without its placing has an ended result")
        return self._begun(self.result)

    @staticmethod
    def _begun(result: Ended) -> BeginResult:
        return BeginResult(kind="begun", turn=result.outcome.turn or "", parent=result.outcome.parent)


class TurnRef(Compact):
    """One turn of one conversation (stop, follow, head, end)."""

    store: str
    conversation: str
    turn: str
    store_id: str | None = None
    request_id: str = ""
    error: TurnError | None = None


class PrepareResult(Model):
    """Where the topic policy places a send (`continue_from`, or a new `root`), and the topic seen."""

    continue_from: str | None = None
    root: bool = False
    topic: dict[str, Any] | None = None

    def applied(self, send: TurnSend) -> TurnSend:
        """`send` placed where this says."""
        return send.model_copy(update={"continue_from": self.continue_from, "root": self.root})


class RenderResult(Model):
    """The request a send would make now (`render`), or the running turn it would wait for first."""

    model: str
    parent: str | None = None
    waits_for: str | None = None
    shown: list[str] = []
    sections: list[str] = []
    request: dict[str, Any] | None = None
    """The provider's JSON body, exactly as the model call would send it; None while the send would wait."""
    tokens: int | None = None
    """The request's input tokens, estimated (four characters a token), as a budget counts them."""
    cost: float | None = None
    """What reading the request costs, estimated from `THREADLINE_PRICES` (None: the model has no price)."""


class WatchInput(Compact):
    """Wait until the conversation holds more than `after` records, or `timeout_s` passes."""

    store: str
    conversation: str
    after: int
    timeout_s: float = 2.0
    store_id: str | None = None


# ----- guided flows

FlowStateName = Literal["active", "completed", "abandoned", "handed_off"]


class FlowStart(Model):
    """Start a guided flow in a conversation: a turn whose input is `message` (what started it, may
    be empty) and whose answer is the flow's first prompt."""

    store: str
    conversation: str
    flow: str
    request_id: str
    message: str = ""
    store_id: str | None = None


class FlowAnswer(Model):
    """A message to a conversation that may be in a flow: the flow takes it as its answer, if one is active.

    `lm` is the model an AI check asks (the conversation's); with `flow`, only that flow takes it.
    """

    store: str
    conversation: str
    request_id: str
    message: str
    flow: str | None = None
    lm: str | None = None
    store_id: str | None = None


class FlowRef(Model):
    """A flow run's timer or stop: remind or abandon run `run` if it is still at `moves` (any, when None)."""

    store: str
    conversation: str
    request_id: str
    """Minted once per timer or stop (a retry carries the same one)."""
    run: str
    moves: int | None = None
    reason: Literal["expired", "stopped"] = "expired"
    store_id: str | None = None


class FlowResult(Compact):
    """What a flow call did, for the workflow: what to say, where the flow stands, the timers to set.

    `in_flow` False: no flow took it (nothing was recorded; a message goes on as a normal turn).
    `flow_data` is set once, on the result that completed the flow (or handed it to a person).
    Timers are keyed by `(run, moves)`: a timer set at other `moves` is stale and does nothing.
    """

    in_flow: bool = False
    flow: str | None = None
    run: str | None = None
    state: FlowStateName | None = None
    step: str | None = None
    response: str | None = None
    valid: bool | None = None
    flow_data: dict[str, Any] | None = None
    turn: str | None = None
    parent: str | None = None
    """The turn `turn` continues."""
    events: list[str] = []
    """The flow entries written (`started`, `answered`, `invalid`, `completed`, ...): what to count."""
    moves: int = 0
    remind_after_s: float | None = None
    """While active and not yet reminded at these moves: re-send the prompt after this long (`remind_flow`)."""
    expire_after_s: float | None = None
    """While active: abandon the flow after this long without an answer (`abandon_flow`)."""
    existing: bool = False
    """The request id was recorded before (a retry): this is that call's result, read back."""


class FlowCount(Compact):
    """What the article asks to monitor for one flow: starts, ends, invalid answers per step."""

    started: int = 0
    completed: int = 0
    abandoned: int = 0
    handed_off: int = 0
    invalid: dict[str, int] = {}


class FlowStatus(Compact):
    """A conversation's flow now (`read_flow`), and its counts by flow name, rebuilt from the log."""

    current: FlowResult
    counts: dict[str, FlowCount] = {}


class ConversationRef(Model):
    """One conversation of one store."""

    store: str
    conversation: str
    store_id: str | None = None


def _complete_models() -> None:
    """Resolve now the forward references of the models that name a model defined after them. Left
    to their first use, pydantic would look this module up in `sys.modules`: inside the workflow
    sandbox, whose modules are its own, it is not there when no sandboxed code imported it."""
    for value in list(globals().values()):
        ours = isinstance(value, type) and issubclass(value, BaseModel) and value.__module__ == __name__
        if ours and not value.__pydantic_complete__:
            value.model_rebuild()


_complete_models()
