"""JSON Schema shapes of Python types, exactly as functai 1.2.0 derives them, and canonical JSON.

functai compares field shapes byte for byte before it continues a conversation, so `shape_of`
follows its mapping (docs/format-1.md 3.1); `canonical_json` is the form every hash is taken over.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
import types
import typing
from collections import abc
from collections.abc import Mapping
from typing import Any, Literal

import pydantic

from core.errors import ErrorCode, ThreadlineError

_SCALARS: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}
UNIONS = (typing.Union, types.UnionType)
_SEQUENCES = (list, abc.Sequence, abc.MutableSequence, abc.Iterable)
_MAPPINGS = (dict, abc.Mapping, abc.MutableMapping)
_BOUNDS = {"ge": "minimum", "gt": "exclusiveMinimum", "le": "maximum", "lt": "exclusiveMaximum", "pattern": "pattern"}
_BOUNDS |= {"multiple_of": "multipleOf", "min_length": "min_length", "max_length": "max_length"}
_LENGTHS = {"string": ("minLength", "maxLength"), "array": ("minItems", "maxItems")}
_LENGTHS |= {"object": ("minProperties", "maxProperties")}
_CONSTRAINT_PACKAGES = frozenset({"annotated_types", "pydantic", "pydantic_core"})
_SUBSHAPES, _SHAPE_LISTS = ("items", "additionalProperties", "not"), ("anyOf", "prefixItems", "oneOf", "allOf")


def canonical_json(value: Any) -> str:
    """Return `value` as canonical JSON: sorted keys, no whitespace, raw UTF-8 (docs/format-1.md 1.3).

    This is `json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)` except for
    floats, spelled as ECMAScript spells them (`1.0` is `1`, `1e-07` is `1e-7`) as functai does when it
    hashes a shape such as `{"minimum": 1.0}`. NaN and infinities raise `ValueError`; values with no
    JSON form, `TypeError`.
    """
    if value is None or isinstance(value, bool | str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, int):
        return str(int(value))
    if isinstance(value, float):
        return _ecmascript(value)
    if isinstance(value, Mapping):
        if not all(isinstance(k, str) for k in value):
            raise TypeError("a JSON object's keys are text")
        return (
            "{"
            + ",".join(f"{json.dumps(k, ensure_ascii=False)}:{canonical_json(value[k])}" for k in sorted(value))
            + "}"
        )
    if isinstance(value, list | tuple):
        return "[" + ",".join(canonical_json(v) for v in value) + "]"
    raise TypeError(f"{type(value).__name__} has no JSON form")


def _ecmascript(x: float) -> str:
    if x != x or x in (float("inf"), float("-inf")):
        raise ValueError("NaN and infinities have no JSON form")
    if x <= 0:
        return "0" if x == 0 else "-" + _ecmascript(-x)
    mantissa, _, exp = repr(x).partition("e")  # repr gives the shortest digits that round-trip
    whole, _, frac = mantissa.partition(".")
    digits = whole + frac
    point = int(exp or 0) + len(whole) - (len(digits) - len(digits.lstrip("0")))
    digits = digits.strip("0")
    if len(digits) <= point <= 21:
        return digits + "0" * (point - len(digits))
    if 0 < point <= 21:
        return digits[:point] + "." + digits[point:]
    if -6 < point <= 0:
        return "0." + "0" * -point + digits
    return f"{digits[0]}{'.' + digits[1:] if len(digits) > 1 else ''}e{point - 1:+d}"


def hash_json(value: Any) -> str:
    """Return `"sha256:"` and the hex SHA-256 of `value`'s canonical JSON."""
    return "sha256:" + hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()


# ------------------------------------------------------------------ shapes


def shape_of(tp: Any) -> dict[str, Any]:
    """Return the shape functai 1.2.0 records in `fields` for the Python type `tp` (no `default`).

    Raises:
        ThreadlineError: `program-invalid` for a type with no shape, or one functai's shape and
            pydantic's JSON would disagree on (a `datetime`, `bytes`, a NamedTuple, a plain class).
    """
    shape: dict[str, Any] = _without_defaults(full_shape(tp))
    return shape


def data_shape(shape: Any) -> Any:
    """`shape` without any `default` keyword, its own or a sub-shape's: what its data looks like.

    A member that is named `default` stays, and so does data (`enum`, `const`, `examples`).
    """
    return _without_defaults(shape)


def _without_defaults(shape: Any) -> Any:
    if not isinstance(shape, dict):
        return shape
    out: dict[str, Any] = {}
    for key, value in shape.items():
        if key in _SUBSHAPES and isinstance(value, dict):
            value = _without_defaults(value)
        elif key in _SHAPE_LISTS and isinstance(value, list):
            value = [_without_defaults(v) for v in value]
        elif key in ("properties", "$defs") and isinstance(value, dict):
            value = {name: _without_defaults(v) for name, v in value.items()}
        if key != "default":
            out[key] = value
    return out


def full_shape(tp: Any) -> dict[str, Any]:
    # a pydantic model's schema keeps its `default`s here: the interface shows them, `fields` do not
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Annotated:
        bounds: dict[str, Any] = {}
        for extra in tp.__metadata__:
            _read_constraints(extra, bounds)
        return _constrained(full_shape(tp.__origin__), bounds)
    if tp is Any or tp is object:
        return {}
    if tp is None or tp is type(None):
        return {"type": "null"}
    if isinstance(tp, type) and tp in _SCALARS:
        return {"type": _SCALARS[tp]}
    if origin is Literal:
        kinds = {type(v) for v in args}
        typed = {"type": "string"} if kinds == {str} else {"type": "integer"} if kinds == {int} else {}
        return {"enum": list(args), **typed}
    if origin in UNIONS:
        return {"anyOf": [full_shape(a) for a in args]}
    return _container_shape(tp, origin, args) or _class_shape(tp)


def _read_constraints(extra: Any, out: dict[str, Any]) -> None:
    # only what the packages that define constraints made: a user's marker with a `ge` says nothing
    if extra is None or isinstance(extra, str | bytes | int | float | type):
        return
    if (type(extra).__module__ or "").split(".")[0] not in _CONSTRAINT_PACKAGES:
        return
    metadata = getattr(extra, "metadata", None)
    for inner in metadata if isinstance(metadata, list) else ():
        _read_constraints(inner, out)
    for attr, keyword in _BOUNDS.items():
        value = getattr(extra, attr, None)
        lengths = attr in ("min_length", "max_length")
        if (
            (isinstance(value, int) and not isinstance(value, bool))
            if lengths
            else not (value is None or callable(value))
        ):
            out[keyword] = value


def _constrained(shape: dict[str, Any], bounds: dict[str, Any]) -> dict[str, Any]:
    out, kind = dict(shape), shape.get("type")
    for key, value in bounds.items():
        if key in ("min_length", "max_length"):
            names = _LENGTHS.get(kind) if isinstance(kind, str) else None
            if names is None:
                continue
            key = names[key == "max_length"]
        out[key] = value
    return out


def _container_shape(tp: Any, origin: Any, args: tuple[Any, ...]) -> dict[str, Any] | None:
    if tp is tuple or origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return {"type": "array", "items": full_shape(args[0])}
        fixed = {"prefixItems": [full_shape(a) for a in args], "minItems": len(args), "maxItems": len(args)}
        return {"type": "array", **(fixed if args else {})}
    if tp in (set, frozenset) or origin in (set, frozenset):
        return {"type": "array", "items": full_shape(args[0]) if args else {}, "uniqueItems": True}
    if tp is list or origin in _SEQUENCES:
        return {"type": "array", "items": full_shape(args[0])} if args else {"type": "array"}
    if tp is dict or origin in _MAPPINGS:
        if len(args) == 2 and args[1] is not Any and args[1] is not object:
            return {"type": "object", "additionalProperties": full_shape(args[1])}
        return {"type": "object"}
    return None


def _class_shape(tp: Any) -> dict[str, Any]:
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        values = [m.value for m in tp]
        if all(isinstance(v, str) for v in values):
            return {"enum": values, "type": "string"}
        if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
            return {"enum": values, "type": "integer"}
    elif isinstance(tp, type) and issubclass(tp, pydantic.BaseModel):
        return tp.model_json_schema()
    elif isinstance(tp, type) and typing.is_typeddict(tp):
        hints = type_hints(tp, extras=False)
        required = getattr(tp, "__required_keys__", frozenset(hints))
        return _record_shape(hints, [k for k in hints if k in required])
    elif isinstance(tp, type) and dataclasses.is_dataclass(tp):
        hints = type_hints(tp, extras=True)
        names = [f.name for f in dataclasses.fields(tp) if f.init]
        return _record_shape({n: hints.get(n, Any) for n in names}, names)
    name = getattr(tp, "__name__", repr(tp))
    message = f"type {name} has no shape Threadline can check; use JSON types, a dataclass or a pydantic model"
    raise ThreadlineError(ErrorCode.PROGRAM_INVALID, message)


def _record_shape(properties: Mapping[str, Any], required: list[str]) -> dict[str, Any]:
    shapes = {name: full_shape(tp) for name, tp in properties.items()}
    return {"type": "object", "properties": shapes, "required": required}


def type_hints(obj: Any, *, extras: bool) -> dict[str, Any]:
    try:
        return typing.get_type_hints(obj, include_extras=extras)
    except (NameError, TypeError, AttributeError) as exc:
        message = f"{getattr(obj, '__name__', 'a type')}: its annotations name types that cannot be found"
        raise ThreadlineError(ErrorCode.PROGRAM_INVALID, message) from exc


# ------------------------------------------------------------------ programs
