"""A conversation's own records, decided from its log alone: imported messages as done turns (pairs,
lone halves, a repeated request id, a running head) and its setup (once per request id, shown to
every turn as sections)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from core.errors import ThreadlineError
from store.backends.folder import FolderStore
from store.log.imports import MODEL, import_turns, pairs_of
from store.log.preamble import sections, setup_of, setup_record, times
from store.log.state import Log
from store.programs.program import CHAT, TUTOR
from store.records import lease_record, turn_record


def test_messages_pair_up_and_a_lone_half_gets_an_empty_partner() -> None:
    """Each user message and the assistant message after it are one exchange; a lone one has an empty other half."""
    messages = [("user", "u1"), ("user", "u2"), ("assistant", "a2"), ("assistant", "a3"), ("user", "u4")]

    assert [("u1", ""), ("u2", "a2"), ("", "a3"), ("u4", "")] == pairs_of(messages)


@pytest.mark.parametrize("messages", [[], [("system", "be brief")]])
def test_an_empty_import_or_another_role_is_refused(messages: list[tuple[str, str]]) -> None:
    """Nothing to import, or a role other than user and assistant: `invalid-request`."""
    with pytest.raises(ThreadlineError) as caught:
        pairs_of(messages)

    assert "invalid-request" == caught.value.code


def test_imported_turns_follow_the_head_and_read_back_as_done(tmp_path: Path) -> None:
    """The exchanges become done turns in a chain after the head, `model` `imported`, in one batch; the
    same request id again records nothing and finds the same turns."""
    store = FolderStore(tmp_path)
    made = import_turns(Log(), CHAT, [("Hi", "Hello"), ("Bye", "")], request_id="imp-1", now=time.time())
    store.append("c", made.records, expect=made.expect)
    log = Log(store.read("c"))

    again = import_turns(log, CHAT, [("Hi", "Hello"), ("Bye", "")], request_id="imp-1", now=time.time())

    turns = [log.turns[t] for t in made.turns]
    assert [(None, "done", "Hello"), (made.turns[0], "done", "")] == [
        (t.parent, t.state(time.time()), t.outputs["result"]) for t in turns
    ]
    assert [MODEL, MODEL] == [t.ended["model"] for t in turns if t.ended]
    assert (True, made.turns, []) == (again.existing, again.turns, again.records)


def test_an_import_while_the_head_runs_is_refused_busy() -> None:
    """The head runs (a live lease): `conversation-busy`, nothing decided."""
    now = time.time()
    running = Log(
        [
            turn_record("t-1", parent=None, program=TUTOR.version, inputs={"message": "x"}),
            lease_record("t-1", attempt=1, now=now),
        ]
    )

    with pytest.raises(ThreadlineError) as caught:
        import_turns(running, TUTOR, [("Hi", "Hello")], request_id="imp-2", now=now)

    assert "conversation-busy" == caught.value.code


def test_a_setup_is_recorded_once_per_request_id_and_shown_as_sections() -> None:
    """The newest setup counts; its system prompt and metadata are every turn's sections; a repeat is None."""
    first = setup_record(
        Log(), system_prompt="Be brief.", metadata={"user": "u-1"}, program="chat", request_id="s-1", now=1.0
    )
    assert first is not None
    log = Log([{**first, "seq": 1}])

    again = setup_record(log, system_prompt="Be brief.", metadata={}, program="chat", request_id="s-1", now=2.0)

    assert again is None
    assert ["Be brief.", 'Metadata of this conversation: {"user": "u-1"}'] == sections(log)
    found = setup_of(log) or {}
    assert ("chat", first["at"]) == (found.get("program"), found.get("at"))
    assert (first["at"], first["at"]) == times(log)
