"""What the call-log tests share: Threadline's twin of functai's `tutor`, turns written by each side, and
the call log read by functai itself."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import dpyr
import functai
import functai.calllog as functai_calls

from store.backends.base import Store
from store.backends.folder import FolderStore
from store.backends.writer import Writer
from store.calls.log import call_log, write_call
from store.log.turns import Answer, TurnRequest
from store.programs.program import Program
from tests.support.functai_kit import offline, reply
from tests.support.functai_kit import tutor as functai_tutor


def tutor(message: str) -> str:
    """Tutor."""
    raise NotImplementedError("the model answers for it")


TUTOR = Program.from_function(tutor, module=functai_tutor.__module__)
"""functai's `tutor` as Threadline declares it: the same name, module and fields, so their calls pool."""


def calls_folder(store: FolderStore) -> Path:
    """The call-log folder beside `store`, where functai's `log_calls` points."""
    return store.folder / "calls"


def threadline_turn(store: Store, conversation: str, message: str, answer: str, *, logged: bool = True) -> str:
    """One Threadline turn after the conversation's head, its call logged unless `logged` is False."""
    writer = Writer(store, conversation, TUTOR)
    turn = writer.send(TurnRequest({"message": message}), lambda _s, _i: Answer({"result": answer}, model="offline"))
    if logged:
        assert write_call(call_log(store), conversation, writer.read(), turn) is not None
    return turn


def functai_turn(store: FolderStore, conversation: str, message: str, answer: str) -> str:
    """One functai turn after the conversation's head, its call logged by functai beside the store."""
    with offline([reply(answer)]), functai.configure(log_calls=str(calls_folder(store))):
        chat = functai_tutor.conversation(conversation, store=str(store.folder))
        chat(message)
        return str(chat.head.id)


def functai_rated(store: FolderStore, program: Any = functai_tutor) -> list[dict[str, Any]]:
    """functai's own `rated()` table over the store's call log, as rows (its warnings kept quiet)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table = functai.rated(program, folder=str(calls_folder(store)))
    rows: list[dict[str, Any]] = table.collect().to_dicts()
    return rows


def as_table(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows through the table functai's `rated()` builds (dpyr over polars), read back as rows."""
    frame: Any = dpyr.read(list(rows))
    table: list[dict[str, Any]] = frame.collect().to_dicts()
    return table


def functai_rows(store: FolderStore, name: str = "tutor") -> tuple[list[dict[str, Any]], dict[str, int]]:
    """functai's rows before it makes them a table, and what it left out (`no_context` included)."""
    found, ratings = functai_calls.read(str(calls_folder(store)))
    rows, left = functai_calls.rated_rows(found, ratings, name=name)
    rows, left["no_context"] = functai_calls.with_context(rows, found)
    return rows, left


def call_records(store: FolderStore) -> dict[str, dict[str, Any]]:
    """The call records in the store's call log, by id, as functai reads them."""
    found, _ = functai_calls.read(str(calls_folder(store)))
    return {str(c["id"]): c for c in found}
