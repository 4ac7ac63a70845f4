"""Field docstrings as the descriptions of a model's JSON Schema, read when a schema is made.

A field's docstring (the string on the line after it) is its description in the schemas other
clients read (docs/schemas, the service's OpenAPI): what pydantic's `use_attribute_docstrings` gives,
without its cost at import, where it reads and parses each model class's source as the class is made
(a third of the time `core.models` takes to import, paid by every command that sends a turn).
"""

from __future__ import annotations

import ast
import functools
import inspect
import textwrap
from typing import Any


def describe_fields(schema: dict[str, Any], cls: type) -> None:
    """A model's `json_schema_extra`: each property without a description gets its field's docstring,
    from the class that declares the field last (a field declared again keeps only its own)."""
    for name, prop in (schema.get("properties") or {}).items():
        owner = next((c for c in cls.__mro__ if name in inspect.get_annotations(c)), None)
        doc = None if owner is None else docstrings(owner).get(name)
        if doc is not None and isinstance(prop, dict) and "description" not in prop:
            prop["description"] = doc


@functools.cache
def docstrings(cls: type) -> dict[str, str]:
    """The docstrings of the fields `cls` itself declares, by field name."""
    try:
        source = inspect.getsource(cls)
    except (OSError, TypeError):
        return {}
    node = ast.parse(textwrap.dedent(source)).body[0]
    if not isinstance(node, ast.ClassDef):
        return {}
    found: dict[str, str] = {}
    target: str | None = None
    previous: ast.stmt | None = None
    for stmt in node.body:
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            target = stmt.target.id
        elif (
            isinstance(stmt, ast.Expr)
            and isinstance(stmt.value, ast.Constant)
            and isinstance(stmt.value.value, str)
            and isinstance(previous, ast.AnnAssign)
        ):
            if target:
                found[target] = inspect.cleandoc(stmt.value.value)
            target = None
        previous = stmt
    return found
