"""The payload converter: pydantic's JSON, byte for byte, with one set of type adapters per process.

The SDK makes a payload converter for every workflow instance; with pydantic's own, each cached
conversation built and held its own adapters for the same types (a third of its Python objects, and
schema building in every new or replayed conversation's first workflow task)."""

from __future__ import annotations

import pickle
from typing import Any

from temporalio.contrib.pydantic import pydantic_data_converter

from core.models import ConversationState, TurnSend
from core.temporal import DATA_CONVERTER, PayloadConverter

VALUES: list[Any] = [
    TurnSend(request_id="r-converter-1", inputs={"message": "héllo", "n": [1, 2.5, None]}),
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
    assert DATA_CONVERTER.payload_converter.from_payloads(ours, [TurnSend, dict, str, type(None), bytes]) == VALUES


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
