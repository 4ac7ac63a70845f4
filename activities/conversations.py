"""A conversation's own records, written without a model call: its setup (system prompt and
metadata) and imported messages (a transcript recorded as done turns).

Each reads the log itself, decides, and appends in one conditional append (decided again on a
conflict); each finds its request id in the log on a retry and writes nothing again.
"""

from __future__ import annotations

from collections.abc import Mapping

import structlog
from temporalio import activity

from core.errors import ErrorCode, ThreadlineError
from core.limits import check_keys
from core.models import MAX_REQUEST_ID, check_inputs
from core.records_models import ImportInput, ImportResult, SetupInput, SetupResult
from core.temporal import coded
from store.backends.reader import ConversationLog, LogCache, now
from store.log.imports import import_turns, pairs_of
from store.log.preamble import recorded_at, setup_record
from store.programs.program import Program

from .placing import find_program

logger = structlog.get_logger(__name__)


class ConversationActivities:
    """Setups and imports for every conversation of this worker.

    Args:
        logs: The worker's conversation logs, by store.
        programs: The programs by name (imported turns are turns of the conversation's program).
    """

    def __init__(self, logs: LogCache, programs: Mapping[str, Program]) -> None:
        self.logs = logs
        self.programs = dict(programs)

    @activity.defn(name="setup_conversation")
    @coded
    async def setup_conversation(self, input: SetupInput) -> SetupResult:
        """Record the conversation's system prompt and metadata: an `entry` every later turn is shown."""
        config, setup = input.config, input.setup
        _check_request_id(setup.request_id)
        check_keys(setup.metadata, "metadata")
        check_inputs({"system_prompt": setup.system_prompt or "", "metadata": setup.metadata})
        conversation = await self.logs.open(config.store, config.conversation, config.store_id)
        while True:
            log = await conversation.read()
            record = setup_record(
                log,
                system_prompt=setup.system_prompt,
                metadata=setup.metadata,
                program=config.program,
                request_id=setup.request_id,
                now=now(),
            )
            if record is None:
                return SetupResult(created_at=recorded_at(log, setup.request_id) or "", existing=True)
            if await _appended(conversation, [record], log.n):
                logger.info("conversation.set_up", conversation=config.conversation, program=config.program)
                return SetupResult(created_at=str(record["at"]))

    @activity.defn(name="import_messages")
    @coded
    async def import_messages(self, input: ImportInput) -> ImportResult:
        """Record messages as done turns of the conversation's program, after the head, without a model call."""
        config, send = input.config, input.send
        _check_request_id(send.request_id)
        check_inputs({"messages": [m.content for m in send.messages]})
        pairs = pairs_of([(m.role, m.content) for m in send.messages])
        program = find_program(self.programs, config.program)
        conversation = await self.logs.open(config.store, config.conversation, config.store_id)
        while True:
            log = await conversation.read()
            made = import_turns(log, program, pairs, request_id=send.request_id, now=now())
            if made.existing:
                return ImportResult(turns=made.turns, existing=True)
            if await _appended(conversation, made.records, made.expect):
                logger.info("messages.imported", conversation=config.conversation, turns=len(made.turns))
                return ImportResult(turns=made.turns)


def _check_request_id(request_id: str) -> None:
    if not 0 < len(request_id) <= MAX_REQUEST_ID:
        raise ThreadlineError(ErrorCode.INVALID_REQUEST, f"a request id has 1 to {MAX_REQUEST_ID} characters")


async def _appended(conversation: ConversationLog, records: list[dict[str, object]], expect: int) -> bool:
    """Append on the log it was decided on; False on a conflict (decide again)."""
    try:
        await conversation.append(records, expect=expect)
    except ThreadlineError as err:
        if err.code != ErrorCode.STORE_CONFLICT:
            raise
        return False
    return True
