"""Program descriptions against functai 1.2.0, the reference implementation of format 1."""
# The functions below are read, never run, and their bodies return functai's untyped `_ai`.
# mypy: disable-error-code="no-any-return"

from __future__ import annotations

import dataclasses
import enum
import json
from typing import Annotated, Any, Literal, NamedTuple, Optional

import annotated_types
import functai.calllog
import functai.interface
import pydantic
import pytest
from functai import _ai, ai
from functai.conversations import _fields, describe
from hypothesis import given
from hypothesis import strategies as st
from typing_extensions import TypedDict

from core.errors import ErrorCode, ThreadlineError
from store.programs.program import TUTOR, Program, canonical_json, check_fields

TUTOR_SIGNATURE = "sha256:fe7368110315350b0ace26b1495a05d87ed7e45f4e220918efe2ab97f184e20f"


class Inner(pydantic.BaseModel):
    x: int = 3
    tags: list[str] = []


class Outer(pydantic.BaseModel):
    """An outer model."""

    name: str
    inner: Inner
    maybe: Inner | None = None
    score: float = pydantic.Field(default=1.0, ge=0.0, description="how sure")


@dataclasses.dataclass
class Item:
    name: str
    qty: int = 1


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Point(TypedDict, total=False):
    x: int
    y: Annotated[int, annotated_types.Ge(0)]


def t_str(message: str) -> str:
    return _ai


def t_int(n: int) -> int:
    return _ai


def t_float(x: float) -> float:
    return _ai


def t_bool(flag: bool) -> bool:
    return _ai


def t_list(words: list[str]) -> list[str]:
    return _ai


def t_dict(counts: dict[str, int]) -> dict[str, int]:
    return _ai


def t_literal(choice: Literal["x", "y"]) -> Literal["x", "y"]:
    return _ai


def t_literal_kinds(a: Literal[1, 2], b: Literal[True, False], c: Literal["a", 1]) -> Literal["b", None]:
    return _ai


def t_optional(
    hint: Optional[str],  # noqa: UP045
    note: str = None,  # type: ignore[assignment]  # noqa: RUF013 functai reads this as Optional[str]
    size: int | None = 2,
) -> str | None:
    """Maybe."""
    return _ai


def t_model(outer: Outer) -> Outer:
    return _ai


def t_dataclass(item: Optional[Item]) -> list[Item]:  # noqa: UP045
    """Stock."""
    return _ai


def t_models(batch: list[Inner], extra: dict[str, Inner]) -> list[Item] | None:
    return _ai


def t_several(question: str, context: list[str], tone: str = "kind", depth: int = 1) -> str:
    return _ai


def t_other(
    anything: Any,
    blob: dict[str, Any],
    pair: tuple[str, int],
    rest: tuple[int, ...],
    colour: Colour,
    point: Point,
    numbers: frozenset[float],
) -> Colour:
    return _ai


def t_bounds(
    x: Annotated[float, annotated_types.Gt(1.0)],
    word: Annotated[str, pydantic.Field(min_length=1, max_length=5, pattern="^a")],
    items: Annotated[list[int], annotated_types.Len(1, 3)],
) -> Annotated[int, pydantic.Field(ge=0, le=10)]:
    return _ai


def t_result_input(result: str, output: int) -> str:
    return _ai


SAME_SIGNATURE = [
    t_str, t_int, t_float, t_bool, t_list, t_dict, t_literal, t_literal_kinds, t_optional, t_model,
    t_dataclass, t_models, t_several, t_other, t_bounds, t_result_input,
]  # fmt: skip


@pytest.mark.parametrize("fn", SAME_SIGNATURE, ids=lambda fn: fn.__name__)
def test_fields_and_signature_equal_functai_for_the_same_function(fn):
    """A function read by `Program.from_function` has functai's fields and signature."""
    expected = ai(fn)

    program = Program.from_function(fn)

    assert _fields(expected) == program.field_records()
    assert describe(expected)["signature"] == program.signature
    assert describe(expected)["answer"] == program.answer


def several_outputs(question: str) -> str:
    """Label, score, answer."""
    label: Literal["a", "b"] = _ai  # noqa: F841 declares an output
    score: float = _ai  # noqa: F841
    return _ai


def test_several_outputs_equal_functai_declared_outputs():
    """Outputs declared in a functai body match `Program.define` outputs in order, the answer last."""
    expected = ai(several_outputs)
    outputs = {"label": Literal["a", "b"], "score": float, "result": str}

    program = Program.define("several_outputs", "Label.", inputs={"question": str}, outputs=outputs)

    assert _fields(expected) == program.field_records()
    assert describe(expected)["signature"] == program.signature


def test_tutor_signature_is_functais():
    """The built-in tutor has the signature functai gives `tutor`."""
    assert TUTOR_SIGNATURE == TUTOR.signature


@pytest.mark.parametrize("fn", [t_str, t_several, t_model], ids=lambda fn: fn.__name__)
def test_interface_is_functais_without_type_names(fn):
    """The interface is functai's less the host type names (defaults kept), and functai accepts it."""
    expected = describe(ai(fn))["interface"]
    for field in expected["inputs"] + expected["outputs"]:
        del field["type"]

    interface = Program.from_function(fn).interface

    assert expected == interface
    functai.interface.check(interface, ai=True)


def test_program_record_keys_are_in_functais_order():
    """The `program` record's keys come in the order functai writes them."""
    record = TUTOR.record("2026-09-30T10:00:00.000000Z")

    assert [
        "functai_conversation", "kind", "at", "version", "name", "program_kind", "module", "interface", "fields",
        "answer", "signature",
    ] == list(record)  # fmt: skip
    assert list(describe(ai(t_str))) == list(record)
    assert ["name", "direction", "purpose", "shape"] == list(record["fields"][0])


def test_version_is_our_own_and_follows_the_instruction():
    """The version is a sha256 key that changes with the instruction and not with the module."""
    other = dataclasses.replace(TUTOR, instruction="Tutor, briefly.")

    assert len(TUTOR.version) == 71
    assert TUTOR.version.startswith("sha256:")
    assert other.version != TUTOR.version
    assert dataclasses.replace(TUTOR, module="elsewhere").version == TUTOR.version


def nested_in_list(batch: list[Outer]) -> str:
    """Refused."""
    return _ai


def test_a_list_of_nesting_models_is_refused_like_functai():
    """A shape whose `$ref` points outside its own `$defs` is refused, as functai refuses it."""
    with pytest.raises(functai.interface.InterfaceError):
        ai(nested_in_list)
    with pytest.raises(ThreadlineError) as caught:
        Program.from_function(nested_in_list)

    assert ErrorCode.PROGRAM_INVALID == caught.value.code


@pytest.mark.parametrize(
    "tp", [bytes, NamedTuple("Pair", [("a", int)]), type("Plain", (), {"__annotations__": {"a": int}})]
)
def test_types_without_a_checkable_shape_are_refused(tp):
    """A type with no shape, or whose JSON would not fit functai's shape, is refused at definition."""
    with pytest.raises(ThreadlineError) as caught:
        Program.define("p", "P.", inputs={"x": tp}, outputs={"result": str})

    assert ErrorCode.PROGRAM_INVALID == caught.value.code


MESSAGE, RESULT = TUTOR.field_records()
TONE = {**MESSAGE, "name": "tone"}
REASONING = {"name": "reasoning", "direction": "output", "purpose": "reasoning", "shape": {"type": "string"}}


@pytest.mark.parametrize(
    ("current", "recorded", "earlier_without"),
    [
        (
            Program.define("p", "P.", inputs={"message": int}, outputs={"result": str}).field_records(),
            [MESSAGE, RESULT],
            [],
        ),
        ([MESSAGE, RESULT], [MESSAGE, TONE, RESULT], []),
        ([MESSAGE, TONE, RESULT], [MESSAGE, RESULT], ["tone"]),
        ([MESSAGE, REASONING, RESULT], [MESSAGE, RESULT], []),
        ([MESSAGE, RESULT], [{**MESSAGE, "type": "str"}, RESULT], []),
    ],
    ids=["changed-type", "removed", "new-plain-even-named", "new-reasoning-not-named", "extra-key"],
)
def test_check_fields_refuses_changed_removed_and_new_fields(current, recorded, earlier_without):
    """A changed, removed or unexplained new field (compared whole, by name) is refused."""
    programs = [TUTOR.record("t"), {"fields": recorded}]

    with pytest.raises(ThreadlineError) as caught:
        check_fields(current, programs, earlier_without=earlier_without, program_name="tutor")

    assert ErrorCode.CONVERSATION_SIGNATURE == caught.value.code


def test_check_fields_allows_a_new_reasoning_field_named_in_earlier_without():
    """A new `reasoning` output named in `earlier_without` is allowed."""
    check_fields([MESSAGE, REASONING, RESULT], [TUTOR.record("t")], earlier_without=["reasoning"])


@pytest.mark.parametrize(
    "inputs",
    [{}, {"question": "q", "context": [], "mood": "x"}, {"question": "q", "context": "not a list"}],
    ids=["missing", "extra", "wrong-type"],
)
def test_validate_inputs_refuses_missing_extra_and_ill_typed_inputs(inputs):
    """Missing, unknown and ill-typed inputs are refused with `inputs-invalid`."""
    program = Program.from_function(t_several)

    with pytest.raises(ThreadlineError) as caught:
        program.validate_inputs(inputs)

    assert ErrorCode.INPUTS_INVALID == caught.value.code
    assert "not a list" not in caught.value.message


def test_validate_inputs_fills_defaults_and_returns_json():
    """Bound inputs come in declared order, defaults filled in, as JSON."""
    bound = Program.from_function(t_models).validate_inputs({"extra": {"k": Inner()}, "batch": [{"x": 1}]})
    several = Program.from_function(t_several).validate_inputs({"question": "q", "context": []})

    assert ["batch", "extra"] == list(bound)
    assert {"k": {"x": 3, "tags": []}} == bound["extra"]
    assert {"question": "q", "context": [], "tone": "kind", "depth": 1} == several


def test_validate_outputs_refuses_with_parse_failed():
    """An output that does not fit its type is refused with `parse-failed`."""
    with pytest.raises(ThreadlineError) as caught:
        Program.from_function(t_literal).validate_outputs({"result": "z"})

    assert ErrorCode.PARSE_FAILED == caught.value.code
    assert {"result": "x"} == Program.from_function(t_literal).validate_outputs({"result": "x"})


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner),
    max_leaves=20,
)


@given(JSON)
def test_canonical_json_equals_functais_canonical_form(value):
    """`canonical_json` writes functai's canonical bytes, floats included, and reads back equal."""
    text = canonical_json(value)

    assert functai.calllog.canonical(value) == text
    assert text == canonical_json(json.loads(text))


@given(st.sampled_from([float("nan"), float("inf"), float("-inf")]))
def test_canonical_json_refuses_nan_and_infinities(number):
    """NaN and infinities have no canonical form."""
    with pytest.raises(ValueError, match="NaN"):
        canonical_json({"x": [number]})
