"""The call log beside a store: each ended Threadline turn's call record, written as functai writes its own,
in functai's folder layout, safe with concurrent writers and a writer killed mid-line."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import functai.calllog as functai_calls
import pytest
from functai import schemas

from core.errors import ErrorCode, ThreadlineError
from store.backends.folder import FolderStore
from store.backends.writer import Writer
from store.calls.folder import CallFolder, call_folder
from store.calls.log import backfill, call_log, turn_call, write_call
from store.calls.record import call_line, call_record
from store.log.state import Log
from store.log.turns import Answer, TurnRequest, failed_record
from store.records import abandoned_record, ended_record, iso, lease_record, stopped_record, turn_record, uuid7
from tests.support.calllog_kit import TUTOR, call_records, calls_folder, functai_turn, threadline_turn

ROOT = Path(__file__).resolve().parents[2]
ONLY_FUNCTAI_KNOWS = {"started", "seconds", "model", "exchanges", "process"}
"""What a conversation's records cannot say: when functai's own call ran, which model it asked, the
requests it sent, the process that wrote the line (and `program.file`/`line`, the code's place)."""
BIG = 8 << 10
"""Bytes of answer in a record a killed writer writes, so the kill may fall inside a line."""


class TestTheRecord:
    def test_a_turns_record_is_the_one_functai_writes_for_it(self, tmp_path: Path) -> None:
        """Built from the conversation log alone, a functai turn's call record equals the one functai
        logged for it, key for key and in functai's key order, but for what only functai knows."""
        store = FolderStore(tmp_path)
        turns = [functai_turn(store, "same", m, a) for m, a in [("one", "A1"), ("two", "A2"), ("three", "A3")]]
        log, theirs = Log(store.read("same")), call_records(store)

        for turn in turns:
            ours, logged = turn_call(log, "same", turn), theirs[turn]
            assert ours is not None
            assert list(logged) == list(ours)
            assert {k: v for k, v in logged.items() if k not in ONLY_FUNCTAI_KNOWS | {"program"}} == {
                k: v for k, v in ours.items() if k not in ONLY_FUNCTAI_KNOWS | {"program"}
            }
            assert {k: v for k, v in logged["program"].items() if k not in ("file", "line")} == ours["program"]
        assert [{"saw_of": turns[1]}, {"call": turns[1], "steps": True}] == theirs[turns[2]]["saw"]

    def test_a_threadline_turns_record_passes_functais_schema(self, tmp_path: Path) -> None:
        """A Threadline turn's record and a failed turn's pass functai's call schema, and name the turn's
        conversation, parent, program and what it saw."""
        store = FolderStore(tmp_path)
        first = threadline_turn(store, "ok", "Hi", "Hello")
        second = threadline_turn(store, "ok", "Again", "Hello again")
        writer = Writer(store, "ok", TUTOR)
        failed = writer.send(TurnRequest({"message": "boom"}), lambda _s, _i: _raise())
        assert write_call(call_log(store), "ok", writer.read(), failed) is not None
        records = call_records(store)

        assert all(schemas.problem("call", records[t]) is None for t in (first, second, failed))
        assert {"id": "ok", "turn": second, "parent": first} == records[second]["conversation"]
        assert [{"call": first, "steps": True}] == records[second]["saw"]
        assert {"name": "tutor", "kind": "ai", "module": TUTOR.module, "version": TUTOR.version} == {
            k: records[second]["program"][k] for k in ("name", "kind", "module", "version")
        }
        assert TUTOR.signature == records[second]["program"]["signature"] == records[second]["program"]["interface"]
        assert [{"kind": "model", "outputs": {"result": "Hello again"}}] == records[second]["steps"]
        assert (None, "ThreadlineError") == (records[failed]["outputs"], records[failed]["error"]["type"])
        assert "steps" not in records[failed]

    def test_only_a_turn_whose_call_ended_has_a_record(self) -> None:
        """Done, failed and stopped turns have a record; running, abandoned and merged turns none."""
        t = [uuid7() for _ in range(6)]
        done = ended_record(t[0], attempt=1, state="done", outputs={"result": "x"}, value="x")
        merge = turn_record(t[5], parent=None, program=TUTOR.version, inputs={"message": "m"})
        merge["made_by"] = {"name": "pick", "version": "sha256:" + "0" * 64, "call": uuid7()}
        records = [
            TUTOR.record(at=iso()),
            *(turn_record(x, parent=None, program=TUTOR.version, inputs={}) for x in t[:5]),
        ]
        records += [merge, done, failed_record(t[1], {"type": "E"}, attempt=1, saw=[])]
        records += [stopped_record(t[2], attempt=1), lease_record(t[3], attempt=1)]
        records += [abandoned_record(t[4], attempt=1)]
        records += [ended_record(t[5], attempt=1, state="done", outputs={"result": "y"}, value="y")]
        log = Log(records)

        assert [True, True, True, False, False, False] == [turn_call(log, "c", x) is not None for x in t]

    def test_a_record_longer_than_8_mib_is_cut_as_functai_cuts_it(self) -> None:
        """A record past 8 MiB loses its steps, then its values, and says it was cut."""
        big = "x" * (5 << 20)
        turn = turn_record(uuid7(), parent=None, program=TUTOR.version, inputs={"message": big})
        ended = ended_record(turn["turn"], attempt=1, state="done", outputs={"result": big}, value=big)
        ended["lmcc"] = {"steps": [{"kind": "model", "outputs": {"result": big}}]}

        cut = json.loads(call_line(call_record("c", turn, ended, TUTOR.record(at=iso()))))

        assert cut["truncated"] is True
        assert not {"inputs", "outputs", "steps"} & set(cut)
        assert {"inputs": {"message": len(big) + 2}, "outputs": {"result": len(big) + 2}} == cut["sizes"]


class TestTheFolder:
    def test_records_go_to_this_processs_file_of_the_day(self, tmp_path: Path) -> None:
        """`<store>/calls/<UTC day>/<host>-<pid>-<hex>.jsonl`, 0600 in a 0700 folder, one line per
        record, read back by functai's own reader."""
        store = FolderStore(tmp_path)
        turns = [threadline_turn(store, "laid", f"m{i}", f"a{i}") for i in range(3)]

        files = list(calls_folder(store).glob("*/*.jsonl"))
        assert 1 == len(files)
        day, name = files[0].parent.name, files[0].name
        assert time.strftime("%Y-%m-%d", time.gmtime()) == day
        assert name.startswith(f"{_host()}-{os.getpid()}-")
        assert len(name.split("-")[-1]) == len("abcdef.jsonl")
        assert (0o600, 0o700) == (stat.S_IMODE(files[0].stat().st_mode), stat.S_IMODE(files[0].parent.stat().st_mode))
        assert 3 == len(files[0].read_bytes().splitlines())
        assert turns == [c["id"] for c in functai_calls.read(str(calls_folder(store)))[0]]

    def test_the_call_log_is_beside_the_store_unless_told(self, tmp_path: Path) -> None:
        """A folder store's call log is `<folder>/calls`, one per process; a folder given is used instead."""
        store = FolderStore(tmp_path / "store")

        assert call_log(store) is call_log(tmp_path / "store" / "calls")
        assert tmp_path / "store" / "calls" == call_log(store).folder  # type: ignore[attr-defined]
        assert tmp_path / "elsewhere" == call_log(store, folder=tmp_path / "elsewhere").folder  # type: ignore[attr-defined]

    def test_a_turn_logged_twice_by_one_process_is_written_once(self, tmp_path: Path) -> None:
        """An activity retried after its turn's record was written writes nothing more."""
        store = FolderStore(tmp_path)
        turn = threadline_turn(store, "twice", "m", "a")

        again = write_call(call_log(store), "twice", Log(store.read("twice")), turn)

        assert again is None
        assert 1 == sum(len(p.read_bytes().splitlines()) for p in calls_folder(store).glob("*/*.jsonl"))

    def test_backfill_writes_only_the_calls_the_log_lacks(self, tmp_path: Path) -> None:
        """Turns ended before their calls were logged get records; logged calls, functai's too, are kept as they are."""
        store = FolderStore(tmp_path)
        theirs = functai_turn(store, "late", "one", "A1")
        unlogged = threadline_turn(store, "late", "two", "A2", logged=False)
        before = call_records(store)[theirs]

        written = backfill(store)

        assert 1 == written
        assert before == call_records(store)[theirs]
        assert {theirs, unlogged} == set(call_records(store))
        assert 0 == backfill(store)

    def test_concurrent_writers_lose_and_mix_nothing(self, tmp_path: Path) -> None:
        """Four threads here and three processes append 200 records each: every line is whole, once."""
        folder = tmp_path / "calls"
        procs = [_writer_process(folder, f"p{i}", 200) for i in range(3)]
        threads = [threading.Thread(target=_write_many, args=(call_folder(folder), f"t{i}", 200)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert all(0 == p.wait(timeout=60) for p in procs)

        lines = [line for p in folder.glob("*/*.jsonl") for line in p.read_bytes().splitlines()]
        ids = [json.loads(line)["id"] for line in lines]
        assert 1400 == len(ids) == len(set(ids))
        assert 1400 == len(CallFolder(folder).read().calls) == len(functai_calls.read(str(folder))[0])
        assert 4 == len(list(folder.glob("*/*.jsonl")))

    def test_a_writer_killed_mid_line_leaves_every_other_record_readable(self, tmp_path: Path) -> None:
        """A process killed while writing leaves at most a partial last line in its own file: readers
        skip it, and the next writer starts a file of its own rather than continue it."""
        folder = tmp_path / "calls"
        proc = _writer_process(folder, "k", 5000, big=True)
        _wait_for_lines(folder, 21)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        killed = next(folder.glob("*/*.jsonl"))
        killed_bytes = killed.read_bytes()
        (killed.parent / "torn-by-hand.jsonl").write_bytes(b'{"functai_call":2,"id":"0192')

        _write_many(call_folder(folder), "after", 5)

        complete = killed_bytes.count(b"\n")
        assert complete >= 20
        assert complete + 5 == len(CallFolder(folder).read().calls) == len(functai_calls.read(str(folder))[0])
        assert killed_bytes == killed.read_bytes()


def _raise() -> Answer:
    raise ThreadlineError(ErrorCode.PROVIDER_REJECTED, "the model refused the request")


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", socket.gethostname()) or "host"


def _record(tag: str, i: int, *, big: bool = False) -> bytes:
    turn = turn_record(uuid7(), parent=None, program=TUTOR.version, inputs={"message": f"{tag}-{i}"})
    text = "y" * BIG if big else f"{tag}-{i}"
    ended = ended_record(turn["turn"], attempt=1, state="done", outputs={"result": text}, value=text)
    return call_line(call_record(tag, turn, ended, TUTOR.record(at=iso())))


def _write_many(folder: CallFolder, tag: str, n: int, *, big: bool = False) -> None:
    for i in range(n):
        folder.write([_record(tag, i, big=big)])


WRITER = """
import sys
from pathlib import Path
from core.errors import ErrorCode, ThreadlineError
from store.calls.folder import call_folder
from tests.learning.test_calllog import _write_many
_write_many(call_folder(Path(sys.argv[1])), sys.argv[2], int(sys.argv[3]), big=sys.argv[4] == "big")
"""


def _writer_process(folder: Path, tag: str, n: int, *, big: bool = False) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-c", WRITER, str(folder), tag, str(n), "big" if big else "small"]
    return subprocess.Popen(argv, cwd=ROOT)


def _wait_for_lines(folder: Path, n: int) -> None:
    """Until the folder's files hold `n` complete lines (bytes alone undercount: a record is larger than BIG)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if sum(p.read_bytes().count(b"\n") for p in folder.glob("*/*.jsonl")) >= n:
            return
        time.sleep(0.005)
    pytest.fail(f"the writer wrote fewer than {n} lines in 30 s")
