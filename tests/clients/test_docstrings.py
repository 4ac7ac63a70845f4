"""A field's docstring is its description in a model's JSON Schema (`core.docstrings`), as pydantic's
`use_attribute_docstrings` makes it: the same classes described both ways give the same schema."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from core.docstrings import describe_fields


class PydanticBase(BaseModel):
    model_config = ConfigDict(use_attribute_docstrings=True)

    plain: int = 0
    """A field's docstring."""
    again: str = ""
    """Declared again below, without a docstring there."""
    nested: Part | None = None
    """A field whose type is a model."""


class PydanticChild(PydanticBase):
    again: str = "x"
    lines: int = 1
    """A docstring
        on two lines."""
    given: int = Field(1, description="given in the field")
    """Not the description: the field gives one."""
    undocumented: int = 2
    after: int = 3

    "A string after a blank line still describes the field before it."


class Part(BaseModel):
    model_config = ConfigDict(use_attribute_docstrings=True)

    name: str = ""
    """The part's name."""


class DescribedBase(BaseModel):
    model_config = ConfigDict(json_schema_extra=describe_fields)

    plain: int = 0
    """A field's docstring."""
    again: str = ""
    """Declared again below, without a docstring there."""
    nested: Described | None = None
    """A field whose type is a model."""


class DescribedChild(DescribedBase):
    again: str = "x"
    lines: int = 1
    """A docstring
        on two lines."""
    given: int = Field(1, description="given in the field")
    """Not the description: the field gives one."""
    undocumented: int = 2
    after: int = 3

    "A string after a blank line still describes the field before it."


class Described(BaseModel):
    model_config = ConfigDict(json_schema_extra=describe_fields)

    name: str = ""
    """The part's name."""


def renamed(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` with the described classes' names spelled as the pydantic ones'."""
    text = json.dumps(schema).replace("DescribedChild", "PydanticChild").replace("DescribedBase", "PydanticBase")
    found: dict[str, Any] = json.loads(text.replace("Described", "Part"))
    return found


PydanticBase.model_rebuild()
DescribedBase.model_rebuild()


def test_field_docstrings_describe_a_schema_as_pydantic_does() -> None:
    """Inherited, declared again, multi-line, given by `Field`, a nested model, after a blank line."""
    for mode in ("validation", "serialization"):
        expected = PydanticChild.model_json_schema(mode=mode)

        assert renamed(DescribedChild.model_json_schema(mode=mode)) == expected
        assert "description" not in expected["properties"]["again"]
