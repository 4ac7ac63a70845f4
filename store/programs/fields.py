"""The conversation-signature check: may a program continue turns recorded with other fields?

functai compares a program's current `fields` with those of every `program` record on the branch
before it continues a conversation (docs/format-1.md 3.4), by name, over the canonical JSON of
the whole field object.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from core.errors import ErrorCode, ThreadlineError

from .shape import canonical_json

__all__ = ["check_fields"]

_ADDED_PURPOSES = frozenset({"reasoning", "tools.calls"})


def check_fields(
    current: list[dict[str, Any]],
    recorded_programs: Iterable[Mapping[str, Any]],
    *,
    earlier_without: Sequence[str] = (),
    program_name: str = "",
) -> None:
    """Raise `conversation-signature` if the `current` fields differ from a recorded program's.

    Fields are compared by name, as canonical JSON of the whole field object (docs/format-1.md 3.4);
    the caller picks the `program` records of the earlier turns that apply. A new field is allowed
    only when its purpose is `reasoning` or `tools.calls` and `earlier_without` names it.
    """
    now = _by_name(current)
    for program in recorded_programs:
        was = _by_name(program.get("fields") or [])
        changed = sorted(n for n in was.keys() & now.keys() if canonical_json(was[n]) != canonical_json(now[n]))
        gone = sorted(was.keys() - now.keys())
        new = sorted(
            n
            for n in now.keys() - was.keys()
            if now[n].get("purpose") not in _ADDED_PURPOSES or n not in earlier_without
        )
        if changed or gone or new:
            parts = [f"{', '.join(changed)} changed"] if changed else []
            parts += [f"{', '.join(gone)} is no longer one of its fields"] if gone else []
            parts += [f"{', '.join(new)} is new"] if new else []
            who = program_name or "the program"
            message = f"{who}: earlier turns had other fields ({'; '.join(parts)}); start a new conversation"
            raise ThreadlineError(ErrorCode.CONVERSATION_SIGNATURE, message, changed=changed, gone=gone, new=new)


def _by_name(fields: Iterable[Any]) -> dict[str, Mapping[str, Any]]:
    out: dict[str, Mapping[str, Any]] = {}
    for field in fields:
        if not (isinstance(field, Mapping) and isinstance(field.get("name"), str)):
            raise ThreadlineError(ErrorCode.RECORD_INVALID, "a program record's field has no name; repair the log")
        out[field["name"]] = field
    return out
