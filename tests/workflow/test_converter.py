"""The payload converter: pydantic's JSON, byte for byte (but for an outcome's answer, carried once,
and a compact model's fields left at their defaults), with one set of type adapters per process.

The SDK makes a payload converter for every workflow instance; with pydantic's own, each cached
conversation built and held its own adapters for the same types (a third of its Python objects, and
schema building in every new or replayed conversation's first workflow task)."""

from __future__ import annotations

import dataclasses
import json
import pickle
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from temporalio.api.common.v1 import Payload
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import PayloadCodec, SerializationContext, WithSerializationContext
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from core.context import ContextRule
from core.encryption import EncryptionKeys, new_key
from core.models import (
    BeginInput,
    BeginResult,
    ConversationConfig,
    ConversationState,
    Ended,
    HelperMemory,
    PlacedRun,
    RunInput,
    StopSend,
    TurnOutcome,
    TurnSend,
)
from core.runner import ContextFreeRunner, context_free
from core.starting import LEARNED, unlearned
from core.temporal import DATA_CONVERTER, PayloadConverter, data_converter
from store.backends.blobs import FolderBlobs
from worker import workflow_runner

VALUES: list[Any] = [
    StopSend(request_id="r-converter-1", turn="héllo"),
    {"plain": ["dict", 1, True]},
    "text",
    None,
    b"\x00bytes",
]


def json_adapter(converter: PayloadConverter) -> Any:
    return next(c for c in converter.converters.values() if hasattr(c, "_type_adapter"))._type_adapter


def test_payloads_are_the_bytes_pydantics_converter_writes_and_read_back_equal() -> None:
    ours = DATA_CONVERTER.payload_converter.to_payloads(VALUES)
    theirs = pydantic_data_converter.payload_converter.to_payloads(VALUES)

    assert [(p.metadata, p.data) for p in ours] == [(p.metadata, p.data) for p in theirs]
    assert DATA_CONVERTER.payload_converter.from_payloads(ours, [StopSend, dict, str, type(None), bytes]) == VALUES


def test_converters_made_for_two_workflows_share_their_type_adapters() -> None:
    one, two = PayloadConverter(), PayloadConverter()
    config = {"program": "tutor", "store": "default", "conversation": "c-conv"}
    state = ConversationState.model_validate({"config": config})
    payload = one.to_payloads([state])[0]

    one.from_payloads([payload], [ConversationState])
    before = json_adapter(two).cache_info().hits
    two.from_payloads([payload], [ConversationState])
    copied = pickle.loads(pickle.dumps(two))

    assert json_adapter(two).cache_info().hits == before + 1
    assert json_adapter(copied) is json_adapter(one)


async def test_an_outcome_crosses_temporal_with_its_answer_once() -> None:
    """Across Temporal the answer is `outputs[answer]` alone; read back, `result` is there again, and
    the outcome's own JSON (the HTTP service's) still has both."""
    answer = "Five sixths."
    outcome = TurnOutcome(request_id="r-1", state="done", outputs={"result": answer}, answer="result", result=answer)

    [payload] = await DATA_CONVERTER.encode([outcome])
    [back] = await DATA_CONVERTER.decode([payload], [TurnOutcome])

    assert 1 == payload.data.decode().count("Five sixths.")
    assert "result" not in json.loads(payload.data)
    assert outcome == back
    assert "Five sixths." == outcome.model_dump()["result"]


async def test_an_answer_that_is_no_output_still_crosses() -> None:
    """A program whose answer is none of its outputs keeps `result` on the wire."""
    outcome = TurnOutcome(request_id="r-1", state="done", outputs={"topic": "tides"}, result={"topic": "tides", "n": 2})

    [payload] = await DATA_CONVERTER.encode([outcome])

    assert outcome == (await DATA_CONVERTER.decode([payload], [TurnOutcome]))[0]


def test_converters_share_one_set_of_encoding_converters() -> None:
    """Made for every workflow instance and twice per workflow task, a converter costs no building."""
    assert PayloadConverter().converters is PayloadConverter().converters


class _ContextualCodec(PayloadCodec, WithSerializationContext):
    """A codec that reads the serialization context (it would key by workflow, say)."""

    def __init__(self, context: SerializationContext | None = None) -> None:
        self.context = context

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return list(payloads)

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return list(payloads)

    def with_context(self, context: SerializationContext) -> _ContextualCodec:
        return _ContextualCodec(context)


def test_the_sandbox_answers_serialization_contexts_when_the_converter_reads_them(tmp_path: Path) -> None:
    """Threadline's converters (claim check, encryption) read no context: their workflows' instances
    answer it outside the sandbox. A converter that reads it keeps the sandbox's own answer."""
    keys = EncryptionKeys.parse([f"k1={new_key()}"], source="test")
    ours = [DATA_CONVERTER, data_converter(FolderBlobs(tmp_path)), data_converter(FolderBlobs(tmp_path), keys)]
    contextual = dataclasses.replace(DATA_CONVERTER, payload_codec=_ContextualCodec())

    assert all(isinstance(workflow_runner(c), ContextFreeRunner) for c in ours)
    assert not context_free(contextual)
    assert type(workflow_runner(contextual)) is SandboxedWorkflowRunner


async def test_a_send_and_an_activity_input_cross_with_only_what_differs_from_the_defaults() -> None:
    """The send, the config and `run_turn`'s input leave out the fields that hold their defaults (the
    bulk of a turn's history) and read back equal; the config's learned fields stay when the starter
    gave them, even at their defaults, so the worker does not take them for left out."""
    config = ConversationConfig(
        store="default", conversation="c-compact", search_attributes=False, idle_timeout_s=86400.0, store_id="s-1"
    )
    send = TurnSend(request_id="r-compact", inputs={"message": "hi"}, program="tutor", context=ContextRule())
    run = RunInput(config=config, send=send, turn="t-1")

    payloads = await DATA_CONVERTER.encode([send, config, run])
    back = await DATA_CONVERTER.decode(payloads, [TurnSend, ConversationConfig, RunInput])
    wire = [json.loads(p.data) for p in payloads]

    assert [send, config] == back[:2]
    assert run.model_copy(update={"send": send.model_copy(update={"program": None, "context": None})}) == back[2]
    assert {"request_id": "r-compact", "inputs": {"message": "hi"}, "program": "tutor", "context": {}} == wire[0]
    assert {"store", "conversation", "search_attributes", "idle_timeout_s", "store_id"} == set(wire[1])
    assert "turns_per_run" not in wire[2]["config"]
    assert "sends" not in wire[2]["send"]
    assert {"search_attributes", "idle_timeout_s"} == set(LEARNED) & back[1].model_fields_set
    assert unlearned(back[1])  # `attributes_every_s` was left to the worker, and still is


async def test_an_activity_is_given_the_config_without_what_only_the_workflow_reads() -> None:
    """`run_turn`'s and `place_and_run`'s inputs leave out the config's idle time, run length, attribute
    and deadline settings (no activity reads them: it sees their defaults); the rest reads back equal."""
    config = ConversationConfig(
        store="default",
        conversation="c-trim",
        program="p",
        lm="offline",
        idle_timeout_s=60.0,
        turns_per_run=10,
        search_attributes=True,
        attributes_every_s=1.0,
        waiting_check_s=5.0,
        approval_timeout_s=9.0,
    )
    send = TurnSend(request_id="r-trim", inputs={})
    run, begin = RunInput(config=config, send=send, turn="t-1"), BeginInput(config=config, send=send)

    (payload, begin_payload) = await DATA_CONVERTER.encode([run, begin])
    (back,) = await DATA_CONVERTER.decode([payload], [RunInput])
    (begin_back,) = await DATA_CONVERTER.decode([begin_payload], [BeginInput])

    defaults = {name: ConversationConfig.model_fields[name].default for name in ConversationConfig.WORKFLOW_ONLY}
    assert {"store", "conversation", "program", "lm"} == set(json.loads(payload.data)["config"])
    assert config.model_copy(update=defaults) == back.config
    assert run.model_copy(update={"config": back.config}) == back
    assert {"store", "conversation", "program", "lm"} == set(json.loads(begin_payload.data)["config"])
    assert begin.model_copy(update={"config": back.config}) == begin_back


async def test_a_turn_placed_and_run_to_its_end_names_its_turn_once() -> None:
    """`place_and_run`'s result leaves its placing out when the ended outcome names the same turn and
    parent, and reads back with it; a placing that says more (a store identity) still crosses."""
    outcome = TurnOutcome(request_id="r-1", turn="t-2", parent="t-1", state="done", outputs={"result": "Yes."})
    begun = BeginResult(kind="begun", turn="t-2", parent="t-1")
    told = begun.model_copy(update={"store_id": "s-1"})
    lean, full = PlacedRun.of(begun, Ended(outcome=outcome)), PlacedRun.of(told, Ended(outcome=outcome))

    (lean_payload, full_payload) = await DATA_CONVERTER.encode([lean, full])
    (lean_back, full_back) = await DATA_CONVERTER.decode([lean_payload, full_payload], [PlacedRun, PlacedRun])

    assert "placed" not in json.loads(lean_payload.data)
    assert 1 == lean_payload.data.decode().count('"t-2"')
    assert begun == lean_back.placing()
    assert told == full_back.placing()
    assert begun == PlacedRun.of(begun).placing()


async def test_an_activity_is_given_the_send_without_the_settings_the_config_has() -> None:
    """A handle's send carries its settings even where they are the conversation's; an activity's input
    leaves those out (the activity reads the config's), and keeps the one that differs."""
    config = ConversationConfig(store="default", conversation="c-same", program="p", remembers={"h": HelperMemory()})
    send = TurnSend(
        request_id="r-same",
        inputs={"message": "hi"},
        program="p",
        sends="queue",
        context=ContextRule(),
        earlier_without=(),
        remembers={"h": HelperMemory()},
        lm="other",
    )

    (payload,) = await DATA_CONVERTER.encode([BeginInput(config=config, send=send)])
    (back,) = await DATA_CONVERTER.decode([payload], [BeginInput])

    assert {"request_id", "inputs", "lm"} == set(json.loads(payload.data)["send"])
    assert (None, None, None, None) == (back.send.program, back.send.sends, back.send.context, back.send.remembers)
    assert send.memory(config) == back.send.memory(back.config)
    assert (send.context or config.context) == (back.send.context or back.config.context)
    assert "other" == back.send.lm
