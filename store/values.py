"""Walks over JSON values that never recurse.

Python's `copy.deepcopy` and `json.dumps` recurse once per level of nesting, so a value nested
a thousand deep raises `RecursionError` wherever it is copied or measured. Values come from
anyone who writes to a conversation, so every walk over them here uses an explicit stack.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

_LEAVES = frozenset({str, int, float, bool, type(None)})
"""The types JSON leaves have: checked by `type(v) in _LEAVES` before any (slower) isinstance."""


def _is_container(value: Any) -> bool:
    return type(value) not in _LEAVES and isinstance(value, Mapping | list | tuple)


def copy_value(value: Any) -> Any:
    """A deep copy of a JSON-like value: mappings become dicts, lists and tuples lists; the rest is shared.

    Key order is kept. Values that are not containers (strings, numbers, None) are immutable and
    returned as they are, as `copy.deepcopy` does.
    """
    if not _is_container(value):
        return value
    root: list[Any] = [None]
    stack: list[tuple[Any, Any, Any]] = [(value, root, 0)]
    while stack:
        source, target, key = stack.pop()
        out: Any
        pairs: Iterable[tuple[Any, Any]]
        if isinstance(source, dict | Mapping):
            out = {}
            pairs = source.items()
        else:
            out = [None] * len(source)
            pairs = enumerate(source)
        target[key] = out
        for k, v in pairs:
            if _is_container(v):
                out[k] = None  # its place, so the keys keep their order
                stack.append((v, out, k))
            else:
                out[k] = v
    return root[0]


def dumped_length(value: Any) -> int:
    """`len(json.dumps(value, ensure_ascii=False))`, computed without recursing.

    Raises:
        TypeError: for a value `json.dumps` cannot write, as it would.
    """
    total = 0
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            # "{" + '"k": v' joined by ", " + "}"
            total += 2 + max(len(item) - 1, 0) * 2 + len(item) * 2
            total += sum(_key_length(k) for k in item)
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            total += 2 + max(len(item) - 1, 0) * 2
            stack.extend(item)
        else:
            total += len(json.dumps(item, ensure_ascii=False))
    return total


def _key_length(key: Any) -> int:
    """How long `key` is as json.dumps writes a dict key (non-string keys become strings)."""
    if isinstance(key, str):
        return len(json.dumps(key, ensure_ascii=False))
    return len(json.dumps({key: None}, ensure_ascii=False)) - len("{: null}")


def estimate_tokens(value: Any) -> int:
    """A rough token count of what a model is shown of a value: four characters a token.

    A mapping counts its values (as messages show them), not its keys, all the way down through
    nested mappings; anything else counts its text (JSON for what is not a string).
    """
    total = 0
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, Mapping):
            stack.extend(item.values())
            continue
        size = len(item) if isinstance(item, str) else dumped_length(item)
        total += (size + 3) // 4
    return total
