"""A conversation of 20,000 turns after a restart: placed, shown and read by objects and a worker
that never saw it, and continued by functai 1.2.0 the same way."""

from __future__ import annotations

import asyncio
import shutil
import sys
import time
from pathlib import Path

import pytest
from temporalio.worker import Worker

from core.settings import Settings
from store.backends.folder import FolderStore
from store.backends.writer import Writer
from store.log.rules import expand, shown
from store.log.state import Log
from store.log.turns import Answer, TurnRequest
from store.programs.program import TUTOR
from store.records import Record
from tests.support.long_log import write_conversation
from tests.support.service_kit import serving
from tests.surfaces.test_cli import clean_env, threadline_json
from threadline.client import Threadline
from threadline.http import create_app

TURNS = 20_000
ROOT = Path(__file__).resolve().parents[2]


def steps_entry(turn: str) -> Record:
    return {"call": turn, "steps": True}


def test_a_log_keeps_long_log_records_equal_to_those_written(tmp_path: Path) -> None:
    """The records of the long-log shape (lmcc, value, saw_of) are kept equal to what was written."""
    write_conversation(tmp_path, "short", 30)
    records = FolderStore(tmp_path).read("short")
    log = Log(FolderStore(tmp_path).read("short"))

    assert [r for r in records if r.get("kind") == "turn"] == [log.turns[t].record for t in log.order]
    assert [r for r in records if r.get("kind") == "ended"] == [log.turns[t].ended for t in log.order]


def copied(folder: Path, conversation: str, to: Path) -> Path:
    """A copy of the conversation as `<to>/conversations/long.jsonl`; returns `to`."""
    (to / "conversations").mkdir(parents=True)
    shutil.copyfile(folder / "conversations" / f"{conversation}.jsonl", to / "conversations" / "long.jsonl")
    return to


def fresh_writer_turn(folder: Path) -> tuple[Log, str]:
    """A restart: a new store and writer send one turn; the log as a new reader then reads it."""
    writer = Writer(FolderStore(folder), "long", TUTOR)
    turn = writer.send(TurnRequest({"message": "next"}), lambda _s, _i: Answer({"result": "ok"}, model="offline"))
    return Log(FolderStore(folder).read("long")), turn


@pytest.mark.slow
async def test_a_20000_turn_conversation_continues_after_a_restart(
    tl: Threadline, worker: Worker, settings: Settings, folder: Path, cid: str, tmp_path: Path
) -> None:
    """Three readers that never saw a 20,000-turn conversation continue it, each on its own copy:

    - a fresh store and writer (a restart) place the next turn after the last one and record
      `[saw_of, call]`, and expand it to every earlier turn;
    - functai 1.2.0 is shown the same 20,000 turns Threadline computes for the same parent (it
      writes them out in full: its own expansion stops near a thousand turns);
    - a new worker and client take the next turn through the Python API; render shows every
      turn, history counts them, and the turns of its branch list with what each saw.
    """
    ids = write_conversation(folder, cid, TURNS)
    theirs = copied(folder, cid, tmp_path / "theirs")
    functai = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.support.long_log", "functai", str(theirs), "long", cwd=ROOT
    )
    written, turn = fresh_writer_turn(copied(folder, cid, tmp_path / "ours"))

    chat = tl.conversation("tutor", id=cid)
    next_turn = await chat.predict("next")
    rendered = await chat.render("after")
    history = await chat.history()
    # Every turn's `saw` lists every earlier turn, so the whole list of 20,001 turns is quadratic in
    # size: the surfaces page it (a branch's first hundred turns; the last three, over HTTP and the CLI).
    early = await chat.continue_from(ids[99]).turns()
    async with serving(create_app(tl)) as http:
        state = (await http.get(f"/v1/conversations/{cid}")).json()
        last_page = (await http.get(f"/v1/conversations/{cid}/turns", params={"limit": 3, "before": ids[0]})).json()
        tail = (await http.get(f"/v1/conversations/{cid}/turns", params={"after": ids[-2]})).json()
    env = {**clean_env(data=str(folder.parent), task_queue=settings.task_queue, payloads=str(settings.payload_folder))}
    listed = await threadline_json(env, "turns", cid, "--all", "--limit", "2", "--after", ids[-3])

    assert 0 == await asyncio.wait_for(functai.wait(), 120)
    continued = Log(FolderStore(theirs).read("long"))
    their_turn = continued.turns[continued.order[-1]]
    fields, signature = TUTOR.field_records(), TUTOR.signature
    computed = shown(continued, ids[-1], fields=fields, signature=signature, now=time.time()).saw
    everything = [steps_entry(t) for t in ids]

    assert (ids[-1], [{"saw_of": ids[-1]}, steps_entry(ids[-1])]) == (
        written.turns[turn].parent,
        written.turns[turn].saw,
    )
    assert everything == expand(written, turn)
    assert (ids[-1], [{"saw_of": ids[-1]}, steps_entry(ids[-1])]) == (their_turn.parent, computed)
    assert their_turn.saw in (computed, everything)
    assert everything == expand(continued, their_turn.id)
    assert (ids[-1], ids) == (next_turn.parent, next_turn.saw)
    assert f"I was shown {TURNS} earlier turn(s)." in str(next_turn.result)
    assert [*ids, next_turn.id] == rendered.shown
    assert (TURNS + 1, "idle", next_turn.id) == (state["total"], state["state"], state["head"])
    assert [] == last_page  # nothing comes before the first turn
    assert [ids[-1], next_turn.id] == [t["id"] for t in tail]
    assert ids == tail[-1]["saw"]
    assert [ids[-2], ids[-1]] == [t["id"] for t in listed["turns"]]
    assert (TURNS + 1, TURNS + 1) == (history["branch_turns"], history["done_turns"])
    assert (ids[:100], [ids[:k] for k in range(100)]) == ([t.id for t in early], [t.saw for t in early])
