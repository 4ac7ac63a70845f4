"""The `Conversation` workflow's contract as data: its names and the JSON Schema of every payload,
for clients in any language (docs/workflow.md).

`python -m threadline.contract [FOLDER]` writes `contract.json` (the workflow type, id scheme, task
queue, and each signal, update and query with its argument and answer) and one schema per payload
model into FOLDER (default `docs/schemas`); tests/clients/test_contract.py fails when a model, a
handler or these files drift apart.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, TypeAdapter

from core.again_models import AskAgain, AskedAgain
from core.errors import ErrorCode
from core.models import (
    MAX_REQUEST_ID,
    Begun,
    ConversationSettings,
    ConversationState,
    ConversationStatus,
    FlowStatus,
    RenderResult,
    SettingsSend,
    StopSend,
    TurnOutcome,
    TurnSend,
)
from core.records_models import ImportResult, ImportSend, SetupResult, SetupSend
from core.schedules import SCHEDULED_WORKFLOW, Firing, ScheduledSend
from core.settings import DEFAULT_TASK_QUEUE
from core.toolmodels import ActResult, TurnAction
from workflows.attributes import SEARCH_ATTRIBUTE_KEYS

RequestId = Annotated[str, Field(max_length=MAX_REQUEST_ID, description="The request id of a send.")]
TurnId = Annotated[str, Field(description="A turn id of this conversation.")]
Ending = Literal["closed", "idle"]
"""How a run ends by itself: closed (the `close` update) or idle for the idle timeout."""

WORKFLOW = "Conversation"
WORKFLOW_ID = "conversation/{store}/{conversation}"
INPUT: type[BaseModel] = ConversationState
SIGNALS: dict[str, type[BaseModel]] = {"turn": TurnSend, "flow": TurnSend, "stop": StopSend}
UPDATES: dict[str, tuple[Any, Any]] = {
    "send": (TurnSend, TurnOutcome),
    "place": (TurnSend, Begun),
    "wait": (RequestId, TurnOutcome),
    "begun": (RequestId, Begun),
    "head": (TurnId, None),
    "close": (None, int),
    "act": (TurnAction, ActResult),
    "render": (TurnSend, RenderResult),
    "ask_again": (AskAgain, AskedAgain),
    "setup": (SetupSend, SetupResult),
    "append": (ImportSend, ImportResult),
    "configure": (SettingsSend, ConversationSettings),
}
"""Each update's argument and answer (None: it takes none, or answers null)."""
QUERIES: dict[str, type[BaseModel]] = {"status": ConversationStatus, "flows": FlowStatus}
SCHEDULED: dict[str, Any] = {
    "workflow_type": SCHEDULED_WORKFLOW,
    "workflow_id": "conversation/{store}/{conversation}/schedule/{schedule}-<scheduled time>",
    "schedule_id": "conversation/{store}/{conversation}/schedule/{schedule}",
    "request_id": "schedule/{schedule}/<scheduled time, UTC, to the second: 2026-12-02T09:00:00Z>",
}
"""A schedule's firing (docs/workflow.md, scheduled turns): started by a Temporal Schedule, it sends one turn."""


def _is_model(kind: Any) -> bool:
    return isinstance(kind, type) and issubclass(kind, BaseModel)


def _ref(kind: Any, *, answer: bool) -> Any:
    """A model by its file's name; anything else as its schema inline (None: no payload)."""
    if kind is None:
        return None
    if _is_model(kind):
        return f"{kind.__name__}.json"
    return TypeAdapter(kind).json_schema(mode="serialization" if answer else "validation")


def contract() -> dict[str, Any]:
    """The names and payloads of the workflow's contract (`contract.json`)."""
    return {
        "workflow_type": WORKFLOW,
        "workflow_id": WORKFLOW_ID,
        "task_queue": DEFAULT_TASK_QUEUE,
        "input": _ref(INPUT, answer=False),
        "result": _ref(Ending, answer=True),
        "signals": {name: {"arg": _ref(kind, answer=False)} for name, kind in SIGNALS.items()},
        "updates": {
            name: {"arg": _ref(arg, answer=False), "result": _ref(result, answer=True)}
            for name, (arg, result) in UPDATES.items()
        },
        "queries": {name: {"result": _ref(kind, answer=True)} for name, kind in QUERIES.items()},
        "error_types": sorted(code.value for code in ErrorCode),
        "search_attributes": {
            key.name: key.indexed_value_type.name.removeprefix("INDEXED_VALUE_TYPE_") for key in SEARCH_ATTRIBUTE_KEYS
        },
        "scheduled_turn": {
            **SCHEDULED,
            "input": _ref(ScheduledSend, answer=False),
            "result": _ref(Firing, answer=True),
        },
    }


def payload_models() -> dict[type[BaseModel], bool]:
    """Every model of the contract, and whether it is an answer (its schema in serialization mode)."""
    found: dict[type[BaseModel], bool] = {INPUT: False}
    found |= {kind: False for kind in SIGNALS.values()}
    for arg, result in UPDATES.values():
        found |= {arg: False} if _is_model(arg) else {}
        found |= {result: True} if _is_model(result) else {}
    return found | {kind: True for kind in QUERIES.values()} | {ScheduledSend: False, Firing: True}


def schemas() -> dict[str, dict[str, Any]]:
    """Every file of the schema folder by name: `contract.json` and one JSON Schema per model."""
    files = {"contract.json": contract()}
    for model, answer in payload_models().items():
        schema = model.model_json_schema(mode="serialization" if answer else "validation")
        files[f"{model.__name__}.json"] = {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}
    return files


def render(files: Mapping[str, Any]) -> dict[str, str]:
    """The files' text, as written."""
    return {name: json.dumps(data, indent=2, ensure_ascii=False) + "\n" for name, data in files.items()}


def write(folder: Path) -> list[str]:
    """Write the schema folder afresh (a file of a model no longer in the contract is removed)."""
    folder.mkdir(parents=True, exist_ok=True)
    texts = render(schemas())
    for stale in folder.glob("*.json"):
        if stale.name not in texts:
            stale.unlink()
    for name, text in texts.items():
        (folder / name).write_text(text, encoding="utf-8")
    return sorted(texts)


def main(argv: list[str]) -> int:
    """`python -m threadline.contract [FOLDER]`: write the schemas; print the files written."""
    folder = Path(argv[0] if argv else "docs/schemas")
    for name in write(folder):
        sys.stdout.write(f"{folder / name}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
