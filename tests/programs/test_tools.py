"""Tools and approve rules against functai 1.2.0: fields, signature, schemas, results and rules equal its own."""
# The functions below are read, never run, and their bodies return functai's untyped `_ai`.
# mypy: disable-error-code="no-any-return"

from __future__ import annotations

import dataclasses
import enum
import itertools
from typing import Annotated, Any, Literal

import annotated_types
import functai
import functai.tools
import pydantic
import pytest
from functai import _ai, ai
from functai.conversations import _fields, describe
from functai.engine import ToolCall as FunctaiCall
from functai.engine import run_tool, tool_spec

import threadline
from core.errors import ErrorCode, ThreadlineError
from store.programs.approvals import asks, check_approve, decide
from store.programs.program import Program, load_programs
from store.programs.tools import CALLS_SHAPE, TOOLS_SHAPE, Effects, Tool, ToolCall, result_text
from tests.support import tool_programs


class Size(pydantic.BaseModel):
    width: int = 3
    unit: Literal["cm", "in"] = "cm"


@dataclasses.dataclass
class Plot:
    bed: str
    rows: int = 2


class Mood(enum.Enum):
    CALM = "calm"
    BUSY = "busy"


def read_note(name: str) -> str:
    """The text of one note."""
    return "the note"


def write_note(name: str, text: str, mode: Literal["replace", "append"] = "replace") -> str:
    """Replace a note's text,
    or append to it."""
    return "ok"


def plant(
    seeds: list[str],
    size: Size,
    plot: Plot | None = None,
    depth: Annotated[float, annotated_types.Gt(0)] = 1.5,
    note: str = None,  # type: ignore[assignment]  # noqa: RUF013 functai reads this as a string with a default
    tags: dict[str, int] | None = None,
    untyped="x",
) -> str:
    return "planted"


def no_parameters() -> int:
    """Nothing to give."""
    return 4


TOOL_FUNCTIONS = [read_note, write_note, plant, no_parameters]


@pytest.mark.parametrize("fn", TOOL_FUNCTIONS, ids=lambda fn: fn.__name__)
def test_a_tool_is_described_as_functai_describes_it(fn):
    """Name, description (the cleaned docstring) and parameters' schema equal functai's `tool_spec`."""
    expected = tool_spec(fn)

    described = Tool.from_function(fn).spec

    assert {"name": expected.name, "description": expected.description, "parameters": expected.parameters} == described


def t_str(message: str) -> str:
    return _ai


def t_several(question: str, context: list[str], tone: str = "kind") -> Size:
    """Several inputs."""
    return _ai


def t_result_input(result: str, output: int) -> str:
    return _ai


@pytest.mark.parametrize("fn", [t_str, t_several, t_result_input], ids=lambda fn: fn.__name__)
@pytest.mark.parametrize(
    "tools", [[read_note], [read_note, write_note, plant], [no_parameters]], ids=["one", "three", "bare"]
)
def test_a_program_with_tools_has_functais_fields_and_signature(fn, tools):
    """With tools, `fields` gain the `calls` output and the signature also counts the `tools` input, as functai's."""
    expected = ai(tools=tools)(fn)

    program = Program.from_function(fn, tools=tools)

    assert _fields(expected) == program.field_records()
    assert describe(expected)["signature"] == program.signature
    assert describe(expected)["answer"] == program.answer
    assert {f["name"] for f in describe(expected)["interface"]["inputs"]} == {n for n, _ in program.inputs}


def several_outputs(question: str) -> str:
    """Label, score, answer."""
    label: Literal["a", "b"] = _ai  # noqa: F841 declares an output
    score: float = _ai  # noqa: F841
    return _ai


def test_declared_outputs_with_tools_equal_functais():
    """`calls` comes before the declared outputs, the answer last, as functai orders them."""
    expected = ai(tools=[read_note])(several_outputs)
    outputs = {"label": Literal["a", "b"], "score": float, "result": str}

    program = Program.define("several_outputs", "Label.", inputs={"question": str}, outputs=outputs)
    program = dataclasses.replace(program, tools=(Tool.from_function(read_note),))

    assert _fields(expected) == program.field_records()
    assert ["question", "calls", "label", "score", "result"] == [f["name"] for f in program.field_records()]
    assert describe(expected)["signature"] == program.signature


def test_the_tools_and_calls_shapes_are_functais():
    """The `tools` input and `calls` output shapes are those functai's signature holds."""
    fields = {f.name: f for f in ai(tools=[read_note])(t_str)._spec().signature.fields}

    assert (TOOLS_SHAPE, "tools") == (fields["tools"].shape, fields["tools"].purpose)
    assert (CALLS_SHAPE, "tools.calls") == (fields["calls"].shape, fields["calls"].purpose)


def test_no_tools_is_the_plain_program():
    """An empty tool list changes nothing: fields, signature and version are the plain program's."""
    plain, empty = Program.from_function(t_str), Program.from_function(t_str, tools=[])

    assert (plain.field_records(), plain.signature, plain.version) == (
        empty.field_records(),
        empty.signature,
        empty.version,
    )
    assert describe(ai(tools=[])(t_str))["signature"] == empty.signature


def test_the_version_follows_what_the_model_is_told_of_the_tools():
    """Other tools, or another description of one, make another version; the same tools the same one."""
    one = Program.from_function(t_str, tools=[read_note])
    renamed = Program.from_function(t_str, tools=[Tool.from_function(read_note, description="Read it.")])

    assert one.version == Program.from_function(t_str, tools=[read_note]).version
    assert len({Program.from_function(t_str).version, one.version, renamed.version}) == 3


def tools_input(request: str, tools: str) -> str:
    return _ai


@pytest.mark.parametrize(
    "define",
    [
        lambda: Program.from_function(tools_input, tools=[read_note]),
        lambda: Program.define("p", "P.", inputs={"calls": str}, outputs={"result": str}).__class__(
            "p", "P.", (("calls", str),), (("result", str),), tools=(Tool.from_function(read_note),)
        ),
        lambda: Program.define("p", "P.", inputs={"x": str}, outputs={"result": str}).__class__(
            "p", "P.", (("x", str),), (("calls", str), ("result", str)), tools=(Tool.from_function(read_note),)
        ),
        lambda: Program.from_function(t_str, tools=[read_note, Tool.from_function(write_note, name="read_note")]),
        lambda: Program.from_function(t_str, tools=[read_note], approve="sometimes"),
        lambda: Tool.from_function(read_note, effects="writes"),  # type: ignore[arg-type]
        lambda: Tool.from_function(read_note, name="read note"),
        lambda: Tool.from_function(lambda *names: "", name="star"),
        lambda: Tool.from_function(lambda **names: "", name="stars"),
    ],
    ids=[
        "input-named-tools",
        "input-named-calls",
        "output-named-calls",
        "two-tools-one-name",
        "bad-approve",
        "bad-effects",
        "bad-name",
        "var-positional",
        "var-keyword",
    ],
)
def test_definitions_functai_refuses_are_program_invalid(define):
    """Reserved names, two tools of one name, bad effects, names, rules and `*args` are refused at definition."""
    with pytest.raises(ThreadlineError) as caught:
        define()

    assert ErrorCode.PROGRAM_INVALID == caught.value.code


def test_functai_refuses_the_same_definitions():
    """functai refuses an input named `tools` with tools, unknown effects, an approve rule and `*args`."""
    with pytest.raises(ValueError, match="reserved"):
        ai(tools=[read_note])(tools_input)._spec()
    with pytest.raises(ValueError, match="effects"):
        functai.tool(read_note, effects="writes")
    with pytest.raises(ValueError, match="approve"):
        functai.tools.check_approve("sometimes")
    with pytest.raises(TypeError, match="JSON Schema"):
        tool_spec(lambda *names: "")


def test_the_decorators_make_tools_and_programs_with_tools():
    """`@threadline.tool` bare or with settings, and `@threadline.program(tools=..., approve=...)`."""
    program = tool_programs.gardener

    assert ["read_note", "write_note", "count_notes"] == [t.name for t in program.tools]
    assert ["reads", "changes", None] == [t.effects for t in program.tools]
    assert "changes" == program.approve
    assert "- water the basil" == tool_programs.read_note("todo.md")  # a tool is still its function
    assert isinstance(threadline.tool(read_note), threadline.Tool)


def test_load_programs_finds_programs_with_tools():
    """A module's program brings its tools; tools alone are not programs."""
    programs = load_programs(["tests.support.tool_programs"])

    assert {"tutor", "chat", "gardener"} == set(programs)
    assert ["read_note", "write_note", "count_notes"] == [t.name for t in programs["gardener"].tools]


# ------------------------------------------------------------------ inputs and results


class Ran:
    """A tool's function that keeps every call it gets."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def __call__(self, name: str, count: Annotated[int, annotated_types.Ge(0)] = 1, plot: Plot | None = None) -> str:
        self.calls.append({"name": name, "count": count, "plot": plot})
        return "ran"


@pytest.mark.parametrize(
    ("given", "parameter"),
    [
        (["todo.md"], None),
        ({"name": "todo.md", "colour": "red"}, "colour"),
        ({"count": 2}, "name"),
        ({"name": 3}, "name"),
        ({"name": "todo.md", "count": -1}, "count"),
        ({"name": "todo.md", "plot": {"rows": 2}}, "plot"),
    ],
    ids=["not-an-object", "unknown", "missing", "wrong-type", "constraint", "nested"],
)
async def test_a_bad_input_is_tool_input_invalid_and_nothing_runs(given, parameter):
    """An input that does not fit the parameters is `tool-input-invalid`, naming the parameter, and never runs."""
    ran = Ran()
    tool = Tool.from_function(ran, name="ran")

    with pytest.raises(ThreadlineError) as caught:
        await tool.call(given)

    assert (ErrorCode.TOOL_INPUT_INVALID, parameter) == (caught.value.code, caught.value.details.get("parameter"))
    assert "todo.md" not in caught.value.message
    assert [] == ran.calls


async def test_a_good_input_runs_with_typed_values():
    """A fitting input calls the function with its parameters' types, defaults left to the function."""
    ran = Ran()

    text = await Tool.from_function(ran, name="ran").call({"name": "todo.md", "plot": {"bed": "east"}})

    assert "ran" == text
    assert [{"name": "todo.md", "count": 1, "plot": Plot("east", 2)}] == ran.calls


@dataclasses.dataclass
class Bed:
    name: str
    plants: tuple[str, ...]
    size: Size


def _returning(value: Any) -> Any:
    def give() -> Any:
        return value

    return give


RETURNS = [
    "plain text",
    4,
    2.5,
    True,
    None,
    {"b": [1, 2], "a": "é"},
    ["x", ("y", 1)],
    Bed("east", ("basil",), Size()),
    Size(width=7),
    Mood.BUSY,
    {1: "int keys"},
    {"odd", "set"} - {"odd"},
    float("nan"),
]


@pytest.mark.parametrize("value", RETURNS, ids=lambda v: type(v).__name__)
async def test_a_result_is_the_text_functai_shows_the_model(value):
    """Whatever a tool returns becomes the text functai's `run_tool` makes of it."""
    fn = _returning(value)
    expected = run_tool({"give": fn}, FunctaiCall("c1", "give", {}), errors="report")

    text = await Tool.from_function(fn).call({})

    assert expected == text
    assert expected == result_text(value)


async def test_async_tools_are_awaited_and_sync_tools_run_in_a_thread():
    """An async tool is awaited; a sync one runs off the event loop's thread."""
    import threading

    loop_thread = threading.get_ident()

    async def later(n: int) -> list[int]:
        return [n, n]

    def where() -> bool:
        return threading.get_ident() != loop_thread

    assert "[2, 2]" == await Tool.from_function(later).call({"n": 2})
    assert "true" == await Tool.from_function(where).call({})


async def test_an_exception_is_reported_as_functai_reports_it():
    """A tool that raises gives `error: <type>: <message>` (functai's words); `errors="raise"` lets it out."""

    def broken(name: str) -> str:
        raise KeyError(name)

    expected = run_tool({"broken": broken}, FunctaiCall("c1", "broken", {"name": "x"}), errors="report")
    tool = Tool.from_function(broken)

    assert expected == await tool.call({"name": "x"})
    with pytest.raises(KeyError):
        await tool.call({"name": "x"}, errors="raise")


# ------------------------------------------------------------------ approve


def _value_id(value: Any) -> str:
    """A test id that is the same in every process (no addresses, no set order)."""
    if callable(value):
        return "a-function"
    if isinstance(value, set | frozenset):
        return f"{type(value).__name__}{sorted(value)!r}"
    return repr(value)


APPROVE_VALUES: list[Any] = [
    None,
    "changes",
    "all",
    "x",
    [],
    ["read_note"],
    ["gardener/write_note"],
    ["write_note", ""],
    ("write_note", "other"),
    {"note", "write_note"},
    frozenset({"read_note"}),
    [1],
    3,
    {"write_note": True},
    lambda approval: True,
]


@pytest.mark.parametrize("value", APPROVE_VALUES, ids=_value_id)
def test_approve_accepts_exactly_what_functai_accepts(value):
    """Every `approve` value functai accepts is accepted, and every one it refuses is `program-invalid`."""
    try:
        functai.tools.check_approve(value)
        accepted = True
    except (TypeError, ValueError):
        accepted = False

    if accepted:
        check_approve(value)
    else:
        with pytest.raises(ThreadlineError) as caught:
            check_approve(value)
        assert ErrorCode.PROGRAM_INVALID == caught.value.code


EFFECTS: list[Effects] = ["reads", "changes", None]
CALLS = list(itertools.product(["read_note", "write_note"], EFFECTS, ["gardener", "helper/sub"]))


def _functai_accepts(value: Any) -> bool:
    try:
        functai.tools.check_approve(value)
    except (TypeError, ValueError):
        return False
    return True


@pytest.mark.parametrize("value", [v for v in APPROVE_VALUES if _functai_accepts(v)], ids=_value_id)
def test_asks_is_functais_rule_for_every_accepted_value(value):
    """For every accepted value, every effects and paths, `asks` answers as functai's `asks`; `decide` follows it."""
    kept = check_approve(value)
    for name, effects, program in CALLS:
        path = f"{program}/{name}"
        approval = functai.tools.Approval("call", 1, "id", name, {}, effects, path)
        expected = functai.tools.asks(value, approval)

        asked = asks(kept, name=name, effects=effects, path=path)
        decision = decide(kept, name=name, effects=effects, path=path)

        assert expected == asked, (name, effects, path)
        assert ("run" if not expected else "function" if callable(value) else "person") == decision


def test_a_program_decides_by_its_tools_effects():
    """`changes` asks a person about a tool that changes things or says nothing, never a reader or an unknown tool."""
    program = tool_programs.gardener

    decisions = [program.decide(ToolCall("c", name, {})) for name in ("read_note", "write_note", "count_notes", "nope")]

    assert ["run", "person", "person", "run"] == decisions
    assert "function" == dataclasses.replace(program, approve=lambda a: True).decide(ToolCall("c", "write_note", {}))
    by_path = dataclasses.replace(program, approve=("gardener/read_note",))
    assert "person" == by_path.decide(ToolCall("c", "read_note", {}))
