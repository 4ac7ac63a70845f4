"""The activities of a conversation: every side effect of a turn lives here.

`TurnActivities` receives its stores, programs and providers (the worker composes them). Each
method reads the record log itself, so transcripts never pass through workflow history, and
each is idempotent: a retry finds what its earlier attempt appended and does not append it again.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Mapping

import structlog
from temporalio import activity

from core.errors import ErrorCode, ThreadlineError
from core.models import (
    BeginInput,
    BeginResult,
    PrepareResult,
    RunInput,
    RunResult,
    TurnOutcome,
    TurnRef,
    WatchInput,
    check_input_size,
)
from store.base import Store
from store.log import Log, Turn
from store.program import Program
from store.records import Record, head_record, iso
from store.streams import StreamLog
from store.turns import Begin, Busy, TurnRequest, begin_turn, failed_record, stop_records

from .context import Preparer
from .conversation import LogView, now, outcome_of
from .failures import to_failure
from .models import Providers
from .run import TurnRun
from .sends import rule_of, summary_of, view_of

log = structlog.get_logger(__name__)

VIEWS_KEPT = 1024
"""Conversations whose parsed log a worker keeps between activities (least recently used go)..."""
RECORDS_KEPT = 200_000
"""... and at most this many parsed records in all (about 1 GB of long, tool-heavy records)."""


class TurnActivities:
    """Store reads and appends, and the model call, for every conversation of this worker.

    Args:
        stores: The stores by name (`default` -> a `FolderStore`).
        programs: The programs by name.
        providers: The model providers.
        default_model: The model string used when neither the conversation nor the send names one.
        streams: Where each store's turns stream their text (a store without one does not stream).
    """

    def __init__(
        self,
        stores: Mapping[str, Store],
        programs: Mapping[str, Program],
        providers: Providers,
        *,
        default_model: str = "offline",
        streams: Mapping[str, StreamLog] | None = None,
    ) -> None:
        self.stores = dict(stores)
        self._views: OrderedDict[tuple[str, str], LogView] = OrderedDict()
        self.streams = dict(streams or {})
        self.programs = dict(programs)
        self.providers = providers
        self.default_model = default_model

    def store(self, name: str) -> Store:
        """The store named `name` (`store-unknown` if this worker has none)."""
        if name not in self.stores:
            raise to_failure(ThreadlineError(ErrorCode.STORE_UNKNOWN, f"this worker has no store named {name!r}"))
        return self.stores[name]

    def program(self, name: str) -> Program:
        """The program named `name` (`program-unknown` if it is not registered on this worker)."""
        if name not in self.programs:
            known = ", ".join(sorted(self.programs))
            message = f"no program named {name!r} is registered on this worker (registered: {known})"
            raise to_failure(ThreadlineError(ErrorCode.PROGRAM_UNKNOWN, message))
        return self.programs[name]

    def view(self, store: str, conversation: str) -> LogView:
        """This worker's incremental view of one conversation: each activity reads only what is new."""
        key = (store, conversation)
        found = self._views.get(key)
        if found is None:
            found = self._views[key] = LogView(self.store(store), conversation)
            kept = sum(view.log.n for view in self._views.values())
            while len(self._views) > 1 and (len(self._views) > VIEWS_KEPT or kept > RECORDS_KEPT):
                kept -= self._views.popitem(last=False)[1].log.n
        else:
            self._views.move_to_end(key)
        return found

    @activity.defn(name="begin_turn")
    async def begin_turn(self, input: BeginInput) -> BeginResult:
        """Place a send: the request-id rule, the parent under `sends`, then `program?`, `turn` and
        its first `lease` in one conditional append (decided again on conflict)."""
        try:
            return await self._begin(input)
        except ThreadlineError as err:
            raise to_failure(err) from None

    async def _begin(self, input: BeginInput) -> BeginResult:
        config, send = input.config, input.send
        program = self.program(send.program or config.program)
        check_input_size(send.inputs)  # a signal may come from any SDK or the Temporal CLI, not only our client
        inputs = program.validate_inputs(send.inputs)
        lm = send.lm or config.lm
        request = TurnRequest(
            inputs,
            request_id=send.request_id,
            view=view_of(send),
            sends=send.sends or config.sends,
            rule=rule_of(config, send),
            settings={"lm": lm} if lm else {},
            summary=summary_of(config, send),
        )
        conversation = self.view(config.store, config.conversation)
        while True:
            current = await conversation.read()
            if send.continue_from and send.continue_from not in current.turns:
                raise ThreadlineError(ErrorCode.TURN_UNKNOWN, f"turn {send.continue_from} is not in this conversation")
            decided = begin_turn(current, program, request, now=now())
            if isinstance(decided, Busy):
                return BeginResult(kind="busy", turn=decided.turn, records=current.n)
            if not isinstance(decided, Begin):
                existing = current.turns[decided.turn]
                outcome = outcome_of(existing, send.request_id)
                return BeginResult(kind="existing", turn=existing.id, parent=existing.parent, outcome=outcome)
            try:
                await conversation.append(decided.records, expect=decided.expect)
            except ThreadlineError as err:
                if err.code != ErrorCode.STORE_CONFLICT:
                    raise
                continue
            log.info("turn.begun", conversation=config.conversation, turn=decided.turn, parent=decided.parent)
            return BeginResult(kind="begun", turn=decided.turn, parent=decided.parent, records=current.n)

    @activity.defn(name="prepare_turn")
    async def prepare_turn(self, input: BeginInput) -> PrepareResult:
        """Before a send is placed: classify its topic (and place it by topic under `branch`). The
        classification is kept in the log before it is used, so a retry pays for it once."""
        config, send = input.config, input.send
        model = send.lm or config.lm or self.default_model
        preparer = Preparer(self.view(config.store, config.conversation), self.providers, model)
        try:
            return await preparer.prepare(config, send)
        except ThreadlineError as err:
            raise to_failure(err) from None

    @activity.defn(name="summarise_branch")
    async def summarise_branch(self, input: RunInput) -> None:
        """After a turn ended done: extend its branch's summary if one is due (a model call)."""
        config, send = input.config, input.send
        model = send.lm or config.lm or self.default_model
        preparer = Preparer(self.view(config.store, config.conversation), self.providers, model)
        try:
            await preparer.summarise(config, send, input.turn)
        except ThreadlineError as err:
            raise to_failure(err) from None

    @activity.defn(name="run_turn")
    async def run_turn(self, input: RunInput) -> RunResult:
        """Run a begun turn's model call while heartbeating, renewing its lease and watching the log
        for a stop or a takeover; end it with exactly one `ended` record."""
        config = input.config
        program = self.program(input.send.program or config.program)
        lm = input.send.lm or config.lm or self.default_model
        conversation = self.view(config.store, config.conversation)
        run = TurnRun(conversation, program, input, rule_of(config, input.send), self.streams.get(config.store))
        try:
            provider, name = self.providers.resolve(lm)
            return await run.execute(provider, model=lm, name=name)
        except ThreadlineError as err:
            if err.retryable:
                raise to_failure(err) from None
            return await run.fail(err)

    @activity.defn(name="follow_turn")
    async def follow_turn(self, ref: TurnRef) -> RunResult:
        """Wait while another writer runs the turn: until it ends, or reads `interrupted` (claim it then)."""
        conversation = self.view(ref.store, ref.conversation)
        while True:
            t = await conversation.turn(ref.turn)
            outcome = outcome_of(t, ref.request_id)
            if outcome is not None:
                return RunResult(kind="ended", outcome=outcome, attempt=t.attempt)
            if t.state(now()) == "interrupted":
                return RunResult(kind="interrupted", attempt=t.attempt)
            activity.heartbeat()
            await asyncio.sleep(0.25)

    @activity.defn(name="stop_turn")
    async def stop_turn(self, ref: TurnRef) -> None:
        """Append a `stop` for a running turn (its runner ends it), or abandon a waiting or interrupted one."""
        try:
            await self.view(ref.store, ref.conversation).append_if(ref.turn, lambda lg, t: _stop(lg, t))
        except ThreadlineError as err:
            raise to_failure(err) from None

    @activity.defn(name="move_head")
    async def move_head(self, ref: TurnRef) -> None:
        """Append a `head` record: the conversation continues from `ref.turn`."""
        conversation = self.view(ref.store, ref.conversation)
        try:
            await conversation.turn(ref.turn)
        except ThreadlineError as err:
            raise to_failure(err) from None
        await conversation.append([head_record(ref.turn, at=iso(now()))])

    @activity.defn(name="end_turn")
    async def end_turn(self, ref: TurnRef) -> TurnOutcome:
        """End a turn whose runner gave up (its retries ran out) as `failed`, unless it already ended."""
        error = ref.error
        failure = (
            ThreadlineError(error.code, error.message) if error else ThreadlineError(ErrorCode.INTERNAL, "gave up")
        )

        def build(_: Log, t: Turn) -> list[Record] | None:
            return None if t.ended else [failed_record(t.id, failure, attempt=t.attempt, saw=[])]

        t = await self.view(ref.store, ref.conversation).append_if(ref.turn, build)
        outcome = outcome_of(t, ref.request_id)
        assert outcome is not None  # the turn has ended: by us or by someone else
        return outcome

    @activity.defn(name="watch_log")
    async def watch_log(self, input: WatchInput) -> bool:
        """Wait until the conversation holds more than `after` records (True) or the timeout passes."""
        store = self.store(input.store)
        return await asyncio.to_thread(store.wait, input.conversation, input.after, input.timeout_s)


def _stop(log: Log, t: Turn) -> list[Record] | None:
    if t.stops and not t.ended:
        return None  # already asked: one stop record is enough
    return stop_records(log, t.id, now=now()) or None
