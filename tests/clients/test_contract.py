"""docs/schemas/ is the workflow's contract as it is: every file is what `python -m threadline.contract`
writes from the models now, its names and payload types are those of `ConversationWorkflow`'s
handlers, and the payloads docs/workflow.md shows fit their schemas."""

from __future__ import annotations

import json
import typing
from pathlib import Path
from typing import Any

import jsonschema_rs
import pytest
from temporalio.workflow import _Definition

from tests.support.docs_kit import ROOT
from threadline import contract
from workflows.conversation import ConversationWorkflow

SCHEMAS = ROOT / "docs" / "schemas"


def bare(kind: Any) -> Any:
    """`kind` without its `Annotated` metadata; None for "no payload"."""
    if kind is type(None):
        return None
    return typing.get_args(kind)[0] if typing.get_origin(kind) is typing.Annotated else kind


def test_the_schema_files_are_what_the_models_make_now() -> None:
    """A model changed without `python -m threadline.contract` (or a file edited by hand) fails here."""
    written = {path.name: path.read_text(encoding="utf-8") for path in SCHEMAS.glob("*.json")}

    assert contract.render(contract.schemas()) == written, "run `python -m threadline.contract` and commit docs/schemas"


def test_the_contract_names_the_workflows_handlers_with_their_types() -> None:
    """Every signal, update and query the workflow has is in the contract, with its argument and answer types."""
    defn = _Definition.must_from_class(ConversationWorkflow)
    signals = {name: bare(s.arg_types[0]) if s.arg_types else None for name, s in defn.signals.items() if name}
    updates = {
        name: (bare(u.arg_types[0]) if u.arg_types else None, bare(u.ret_type))
        for name, u in defn.updates.items()
        if name
    }
    queries = {name: bare(q.ret_type) for name, q in defn.queries.items() if name}

    assert contract.WORKFLOW == defn.name
    assert [contract.INPUT] == defn.arg_types
    assert signals == contract.SIGNALS
    assert updates == {name: (bare(arg), bare(result)) for name, (arg, result) in contract.UPDATES.items()}
    assert queries == contract.QUERIES


def validator(name: str) -> Any:
    return jsonschema_rs.validator_for(json.loads((SCHEMAS / name).read_text(encoding="utf-8")))


@pytest.mark.parametrize(
    ("schema", "payload"),
    [
        ("ConversationState.json", {"config": {"store": "default", "conversation": "alex", "program": "tutor"}}),
        ("TurnSend.json", {"request_id": "r-1", "inputs": {"message": "Hi, I'm Alex."}}),
        ("StopSend.json", {}),
        ("StopSend.json", {"request_id": "r-2"}),
        ("SetupSend.json", {"request_id": "setup-1", "system_prompt": "Teach fractions."}),
    ],
)
def test_the_docs_payloads_fit_their_schemas(schema: str, payload: dict[str, Any]) -> None:
    """The minimal start input, a send, the stops and a setup docs/workflow.md names fit their schemas."""
    assert validator(schema).is_valid(payload)


@pytest.mark.parametrize(
    ("schema", "payload"),
    [
        ("ConversationState.json", {"config": {"conversation": "alex"}}),
        ("TurnSend.json", {"inputs": {"message": "no request id"}}),
        ("TurnSend.json", {"request_id": "r-1", "inputs": {}, "sends": "later"}),
    ],
)
def test_a_payload_the_workflow_refuses_does_not_fit(schema: str, payload: dict[str, Any]) -> None:
    """A start without its store, a send without its request id, an unknown `sends` rule: the schemas refuse them."""
    assert not validator(schema).is_valid(payload)


def test_the_command_writes_the_folder(tmp_path: Path) -> None:
    """`python -m threadline.contract FOLDER` writes every file, and removes one no model has any more."""
    (tmp_path / "Gone.json").write_text("{}", encoding="utf-8")

    contract.main([str(tmp_path)])

    assert sorted(p.name for p in SCHEMAS.glob("*.json")) == sorted(p.name for p in tmp_path.glob("*.json"))
