"""Values however deeply nested: copied, measured, written and read without RecursionError, and
lines parsed exactly as json parses them."""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.errors import ThreadlineError
from store.backends.base import encode
from store.backends.folder import FolderStore
from store.log.rules import entries, estimate_tokens
from store.log.state import Log
from store.records import loads, turn_record
from store.values import copy_value, dumped_length

DEEP = 10_000

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=30,
)


def nested(depth: int) -> Any:
    """`{"a": [{"a": [... "bottom" ...]}]}`, `depth` containers deep, built without recursion."""
    value: Any = "bottom"
    for i in range(depth):
        value = {"a": value} if i % 2 else [value]
    return value


def old_estimate_tokens(value: Any) -> int:
    """The recursive definition estimate_tokens had (json.dumps below the mappings)."""
    if isinstance(value, Mapping):
        return sum(old_estimate_tokens(v) for v in value.values())
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return (len(text) + 3) // 4


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_copies_and_measures_equal_the_recursive_ones(value: Any) -> None:
    """For ordinary values: a deep copy equal to deepcopy's (and sharing no container), the length
    json.dumps writes, and the old token estimate."""
    copied = copy_value(value)

    assert copy.deepcopy(value) == copied
    assert not isinstance(value, dict | list) or copied is not value
    assert len(json.dumps(value, ensure_ascii=False)) == dumped_length(value)
    assert old_estimate_tokens(value) == estimate_tokens(value)
    assert old_estimate_tokens({"x": value, "y": {"z": value}}) == estimate_tokens({"x": value, "y": {"z": value}})


def test_a_value_10000_deep_is_copied_and_measured() -> None:
    """No RecursionError: the copy is as deep as the value, and the estimate counts its text."""
    value = nested(DEEP)

    copied = copy_value(value)
    depth = 0
    while not isinstance(copied, str):
        copied = copied["a"] if isinstance(copied, dict) else copied[0]
        depth += 1
    assert DEEP == depth
    assert estimate_tokens({"inputs": value}) > DEEP // 4


def test_an_entry_10000_deep_is_read_back_as_data() -> None:
    """A plugin's entry whose data nests 10,000 deep (put in the log by code, not read from a file)
    is returned as a copy, not a RecursionError."""
    data = nested(DEEP)
    log = Log([{"functai_conversation": 1, "kind": "entry", "plugin": "p", "entry": "k", "data": data}])

    found = entries(log, "p", "k", None)

    assert 1 == len(found)
    assert found[0]["data"] is not data


def test_a_record_too_deep_to_write_is_refused_as_invalid(tmp_path: Path) -> None:
    """Writing a value nested 10,000 deep is a coded refusal, and nothing is written."""
    store = FolderStore(tmp_path)

    with pytest.raises(ThreadlineError) as refused:
        encode(turn_record("t", parent=None, program="p", inputs={"deep": nested(DEEP)}), 1)
    with pytest.raises(ThreadlineError) as appended:
        store.append("c", [{"deep": nested(DEEP)}])

    assert ["record-invalid", "record-invalid"] == [refused.value.code, appended.value.code]
    assert 0 == store.count("c")


def test_a_line_too_deep_to_decode_is_one_unreadable_record(tmp_path: Path) -> None:
    """Another writer's line nested 10,000 deep counts as one record that cannot be read, like a
    torn line; the records around it keep their numbers."""
    store = FolderStore(tmp_path)
    store.append("c", [{"a": 1}])
    with store.path("c").open("ab") as f:
        f.write(b'{"deep":' + b"[" * DEEP + b"]" * DEEP + b"}\n")
    store.append("c", [{"b": 2}], expect=2)

    assert [{"a": 1, "seq": 1}, {"unreadable": True}, {"b": 2, "seq": 3}] == store.read("c")


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_lines_parse_as_json_parses_them(value: Any) -> None:
    """What json writes (big integers, floats, any text) reads back as json reads it."""
    line = json.dumps({"v": value}, ensure_ascii=False).encode()

    assert json.loads(line) == loads(line)


@pytest.mark.parametrize(
    "line",
    [
        b'{"big":123456789012345678901234567890}',
        b'{"negative":-9223372036854775809}',
        b'{"unsigned":18446744073709551615}',
        b'{"nan":NaN,"inf":Infinity}',
        b'{"huge":1e400}',
        b'{"lone":"\\ud800"}',
        b'\xef\xbb\xbf{"bom":1}',
        b'{"a":1,"a":2}',
        b'{"tiny":5e-324,"under":1e-400}',
        b'{"hash":"sha256:0000000000000000000000000000000000000000000000000000000000000abc","n":1}',
        b'{"hash":"00000000000000000000000","big":100000000000000000000,"float":1e19}',
        b'{"float":12345678901234567890.5,"i64":-9223372036854775808,"u64":18446744073709551615}',
    ],
)
def test_lines_json_reads_differently_from_orjson_read_as_json_does(line: bytes) -> None:
    """Where orjson refuses or reads otherwise (NaN, 64-bit overflow, lone surrogates, a BOM),
    the line is read as functai's json reads it."""
    expected = json.loads(line)

    assert json.dumps(expected) == json.dumps(loads(line))
    assert [type(v) for v in expected.values()] == [type(v) for v in loads(line).values()]
