"""The `threadline` command, run as real subprocesses against the session dev server and a worker."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import pty
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.api.workflowservice.v1 import GetSystemInfoRequest
from temporalio.client import Client
from temporalio.service import RPCError
from temporalio.worker import Worker

from activities.language_model import OfflineModel
from core.settings import Settings
from core.temporal import workflow_id
from store.backends.folder import FolderStore
from store.records import entry_record
from tests.support.kit import slow
from threadline.cli.output import short_id
from threadline.client import Threadline
from threadline.devserver import free_port
from threadline.reading import Turn
from worker import build_worker

SLOW_REPLY_S = 3.0
"""How long the offline model takes per reply when a test needs a turn that is still running."""
DEV_TIMEOUT_S = 20.0


def clean_env(**values: str) -> dict[str, str]:
    """The test process's environment without its THREADLINE_* variables, plus `values`."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("THREADLINE_")}
    return env | {f"THREADLINE_{name.upper()}": value for name, value in values.items()}


def settings_env(settings: Settings, **values: str) -> dict[str, str]:
    """`clean_env` for a command that talks to the test's server, task queue and data folder, plus `values`."""
    return clean_env(
        temporal_address=settings.address,
        data=str(settings.data),
        task_queue=settings.task_queue,
        payloads=str(settings.payload_folder),
        **values,
    )


@pytest.fixture(name="cli_env")
def _cli_env(settings: Settings) -> dict[str, str]:
    return settings_env(settings)


async def threadline(env: dict[str, str], *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    """Run `python -m threadline ARGS` (with `stdin` piped in) without blocking the in-process worker's loop."""
    command = [sys.executable, "-m", "threadline", *args]
    return await asyncio.to_thread(
        subprocess.run, command, env=env, input=stdin, capture_output=True, text=True, timeout=30
    )


async def threadline_json(env: dict[str, str], *args: str, status: int = 0) -> Any:
    """Run `python -m threadline ARGS --json`, check its exit status, and return what it printed."""
    done = await threadline(env, *args, "--json")
    assert status == done.returncode, done.stderr
    return json.loads(done.stdout)


@asynccontextmanager
async def dev_process(env: dict[str, str], log: Path, *args: str) -> AsyncIterator[asyncio.subprocess.Process]:
    """`threadline dev ARGS`, with SIGTERM (to it alone) when a test leaves it running."""
    with log.open("wb") as stderr:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "threadline", "dev", *args, env=env, stdout=subprocess.PIPE, stderr=stderr
        )
        try:
            yield process
        finally:
            if process.returncode is None:
                process.send_signal(signal.SIGTERM)
                await asyncio.wait_for(process.communicate(), DEV_TIMEOUT_S)


async def read_until(process: asyncio.subprocess.Process, text: str, *, count: int = 1) -> list[str]:
    """The lines `process` prints up to the `count`th one containing `text`, within `DEV_TIMEOUT_S`."""
    assert process.stdout is not None
    lines: list[str] = []
    async with asyncio.timeout(DEV_TIMEOUT_S):
        while sum(text in line for line in lines) < count:
            line = (await process.stdout.readline()).decode()
            assert line, f"stdout ended before {text!r}: {lines}"
            lines.append(line.rstrip("\n"))
    return lines


async def terminate(process: asyncio.subprocess.Process) -> int:
    """Send SIGTERM to `process` and return its exit status."""
    process.send_signal(signal.SIGTERM)
    await asyncio.wait_for(process.communicate(), DEV_TIMEOUT_S)
    assert process.returncode is not None
    return process.returncode


async def test_send_waits_and_prints_the_outcome(cli_env: dict[str, str], worker: Worker, cid: str) -> None:
    """`send` waits for the turn and prints its id, parent, state and answer."""
    first = await threadline_json(cli_env, "send", cid, "Hi, I'm Alex.")
    second = await threadline(cli_env, "send", cid, "What is 1/2 + 1/3?")

    assert ("done", None) == (first["state"], first["parent"])
    assert "You said: Hi, I'm Alex." in first["result"]
    assert 0 == second.returncode, second.stderr
    assert f"parent  {first['turn']}" in second.stdout.splitlines()
    assert "state   done" in second.stdout.splitlines()
    assert "I was shown 1 earlier turn(s)." in second.stdout


async def test_a_send_is_one_update_that_answers_with_the_outcome(
    cli_env: dict[str, str], client: Client, worker: Worker, cid: str
) -> None:
    """`send` asks Temporal once for the turn and its outcome (the `send` update), whether it prints text
    or JSON: placing first and asking `wait` after cost a second call and a workflow task."""
    await threadline(cli_env, "send", cid, "Hi, I'm Alex.")
    await threadline_json(cli_env, "send", cid, "And again.")

    history = await client.get_workflow_handle(workflow_id("default", cid)).fetch_history()
    updates = [
        event.workflow_execution_update_accepted_event_attributes.accepted_request.input.name
        for event in history.events
        if event.HasField("workflow_execution_update_accepted_event_attributes")
    ]

    assert ["send", "send"] == updates


async def test_a_running_turns_text_is_printed_as_it_comes(
    client: Client, settings: Settings, tl: Threadline, cid: str
) -> None:
    """A turn still running when `send` looks streams its text (found by the send's request id in the
    log), printed once, and the outcome after it without the answer again."""
    async with build_worker(client, slow(settings, 2.0)):
        sent = await threadline(settings_env(settings), "send", cid, "Take your time.")
    [turn] = await tl.conversation("tutor", cid).turns()

    assert 0 == sent.returncode, sent.stderr
    assert sent.stdout.startswith("(offline) You said: Take your time.")
    assert 1 == sent.stdout.count("You said: Take your time.")
    assert [f"turn    {turn.id}", "parent  -", "state   done"] == sent.stdout.splitlines()[-3:]


async def test_send_without_waiting_prints_the_placed_turn(
    cli_env: dict[str, str], worker: Worker, tl: Threadline, cid: str
) -> None:
    """`send --no-wait` returns once the turn is placed; the turn then ends as usual."""
    placed = await threadline_json(cli_env, "--json", "send", cid, "Hello", "--no-wait", "--request-id", "r-1")

    outcome = await tl.conversation("tutor", cid).outcome("r-1")

    assert (placed["turn"], "done") == (outcome.turn, outcome.state)
    assert placed["parent"] is None


async def test_send_from_branches_and_head_picks_the_branch(cli_env: dict[str, str], worker: Worker, cid: str) -> None:
    """`--from` continues after an earlier turn; `head` moves the head; `turns --all` shows every branch."""
    first = await threadline_json(cli_env, "send", cid, "one")
    second = await threadline_json(cli_env, "send", cid, "two")
    branch = await threadline_json(cli_env, "send", cid, "two again", "--from", first["turn"])

    head = await threadline_json(cli_env, "head", cid, second["turn"])
    listed = await threadline_json(cli_env, "turns", cid)
    every = await threadline_json(cli_env, "turns", cid, "--all")

    assert first["turn"] == branch["parent"]
    assert second["turn"] == head["head"]
    assert [first["turn"], second["turn"]] == [turn["id"] for turn in listed["turns"]]
    assert {first["turn"], second["turn"], branch["turn"]} == {turn["id"] for turn in every["turns"]}


async def test_turns_prints_an_aligned_table_without_colour(cli_env: dict[str, str], worker: Worker, cid: str) -> None:
    """Piped, `turns` prints a header and one row per turn in aligned columns, with no escape codes."""
    sent = await threadline_json(cli_env, "send", cid, "first line\nsecond line")

    listed = await threadline(cli_env, "turns", cid)

    header, row = listed.stdout.splitlines()
    assert ["TURN", "PARENT", "STATE", "INPUT", "RESULT"] == header.split()
    assert [sent["turn"], "-", "done", "first", "line", "(offline)"] == row.split()[:6]
    assert header.index("STATE") == row.index("done")
    assert "\x1b" not in listed.stdout


async def test_stop_ends_a_running_turn(
    cli_env: dict[str, str], client: Client, settings: Settings, tl: Threadline, cid: str
) -> None:
    """`stop ID TURN` stops a turn that is still running."""
    hold = asyncio.Event()  # the turn runs until the test says, however slowly the commands start
    async with build_worker(client, settings, providers={"offline": OfflineModel(hold=hold)}):
        placed = await threadline_json(cli_env, "send", cid, "Take your time.", "--no-wait", "--request-id", "r-1")

        stopped = await threadline_json(cli_env, "stop", cid, placed["turn"])
        outcome = await tl.conversation("tutor", cid).outcome("r-1")
        hold.set()

    assert placed["turn"] == stopped["stop"]
    assert "stopped" == outcome.state


async def test_refused_send_exits_1_with_its_code(
    cli_env: dict[str, str], client: Client, settings: Settings, tl: Threadline, cid: str
) -> None:
    """With `--sends refuse`, a send while a turn runs prints `conversation-busy` and exits 1."""
    hold = asyncio.Event()  # the first turn runs until the test says
    async with build_worker(client, settings, providers={"offline": OfflineModel(hold=hold)}):
        await threadline_json(cli_env, "send", cid, "First.", "--sends", "refuse", "--no-wait", "--request-id", "r-1")

        refused = await threadline_json(cli_env, "send", cid, "Second.", "--sends", "refuse", status=1)
        await threadline_json(cli_env, "stop", cid)
        outcome = await tl.conversation("tutor", cid).outcome("r-1")
        hold.set()

    assert "conversation-busy" == refused["error"]["code"]
    assert "stopped" == outcome.state


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["send", "no/such", "hi"], "conversation-id"),
        (["send", "fine", "hi", "--store", "nope"], "store-unknown"),
        (["send", "fine", "hi", "--lm", "offline" * 100], "invalid-request"),
        (["turns", "fine", "--store", "nope"], "store-unknown"),
    ],
)
async def test_bad_input_is_refused_before_anything_is_recorded(
    cli_env: dict[str, str], client: Client, settings: Settings, args: list[str], code: str
) -> None:
    """A bad id or store exits 1 with its code, in JSON and in text, and starts no workflow."""
    as_json = await threadline_json(cli_env, *args, status=1)
    as_text = await threadline(cli_env, *args)

    assert code == as_json["error"]["code"]
    assert (1, "") == (as_text.returncode, as_text.stdout)
    assert as_text.stderr.startswith(f"error: {code}: ")
    assert not list(settings.data.glob("**/*.jsonl"))
    with pytest.raises(RPCError):
        await client.get_workflow_handle(workflow_id("default", args[1])).describe()


async def test_ask_again_prints_the_answer_and_records_only_when_asked(
    cli_env: dict[str, str], worker: Worker, tl: Threadline, settings: Settings, cid: str
) -> None:
    """`ask-again ID TURN` prints what the turn's request answers now and records nothing; `--record` keeps it
    as a new turn beside TURN."""
    chat = tl.conversation("tutor", cid)
    first, second = await chat.predict("one"), await chat.predict("two")
    store = FolderStore(settings.store_folder("default"))
    records = store.count(cid)

    asked = await threadline_json(cli_env, "ask-again", cid, second.id)
    unchanged = store.count(cid)
    as_text = await threadline(cli_env, "ask-again", cid, second.id)
    kept = await threadline_json(cli_env, "ask-again", cid, second.id, "--record")

    assert (second.id, second.result, None) == (asked["turn"], asked["result"], asked["branch"])
    assert records == unchanged
    assert as_text.stdout.rstrip().endswith(str(second.result))
    assert first.id == (await chat.turn(kept["branch"])).parent
    assert 3 == len(await chat.turns(all=True))


async def test_render_shows_the_earlier_turns_and_records_nothing(
    cli_env: dict[str, str], worker: Worker, tl: Threadline, settings: Settings, cid: str
) -> None:
    """`render` prints the request the next turn would send, with the earlier turns; nothing is recorded."""
    chat = tl.conversation("tutor", cid)
    first, second = await chat.predict("one"), await chat.predict("two")
    store = FolderStore(settings.store_folder("default"))
    records = store.count(cid)

    rendered = await threadline_json(cli_env, "render", cid, "three?")
    branched = await threadline_json(cli_env, "render", cid, "two again?", "--from", first.id)
    as_text = await threadline(cli_env, "render", cid, "three?")

    assert ([first.id, second.id], second.id) == (rendered["shown"], rendered["parent"])
    messages = [m["content"] for m in rendered["request"]["messages"]]
    assert ["one", first.result, "two", second.result, "three?"] == messages
    assert ([first.id], first.id) == (branched["shown"], branched["parent"])
    header, request = as_text.stdout.split("\n\n", 1)
    assert f"parent  {second.id}" in header.splitlines()
    assert "shown   2 earlier turn(s)" in header.splitlines()
    assert rendered["request"] == json.loads(request)
    assert records == store.count(cid)
    assert 2 == len(await chat.turns(all=True))


async def test_history_prints_the_summary_facts_and_counts(
    cli_env: dict[str, str], worker: Worker, tl: Threadline, settings: Settings, cid: str
) -> None:
    """`history` prints the newest summary on the branch, its key facts, and how many turns are shown."""
    chat = tl.conversation("tutor", cid)
    turns = [await chat.predict(f"message {k}") for k in range(3)]
    summary = {"turns": [turns[0].id, turns[1].id], "through": turns[1].id, "summary": "Alex adds fractions."}
    entry = entry_record("threadline", "summary", summary | {"facts": ["The learner is Alex"]}, turn=turns[1].id)
    FolderStore(settings.store_folder("default")).append(cid, [entry])

    history = await threadline_json(cli_env, "history", cid)
    as_text = await threadline(cli_env, "history", cid)

    counts = ("branch_turns", "done_turns", "summarised_turns", "verbatim_turns")
    assert (3, 3, 2, 1) == tuple(history[name] for name in counts)
    assert ("Alex adds fractions.", ["The learner is Alex"]) == (history["summary"], history["facts"])
    assert turns[2].id == history["head"]
    lines = as_text.stdout.splitlines()
    assert "turns    3 on the branch, 3 done: 1 shown verbatim, 2 summarised" in lines
    assert "summary  Alex adds fractions." in lines
    assert "facts    - The learner is Alex" in lines


async def test_show_draws_the_branch_tree_with_the_head_marked(
    cli_env: dict[str, str], worker: Worker, tl: Threadline, cid: str
) -> None:
    """`show` nests each turn under its parent in the order sent, and marks the head `*`."""
    chat = tl.conversation("tutor", cid)
    first = await chat.predict("one")
    second = await chat.predict("two")
    branch = await chat.continue_from(first).predict("two again")
    await chat.head(second)

    tree = await threadline_json(cli_env, "show", cid)
    as_text = await threadline(cli_env, "show", cid)

    def node(turn: Turn, *children: dict[str, Any]) -> dict[str, Any]:
        return {"id": turn.id, "state": "done", "input": turn.inputs["message"], "children": list(children)}

    assert [node(first, node(second), node(branch))] == tree["turns"]
    assert second.id == tree["head"]
    lines = as_text.stdout.splitlines()
    assert 3 == len(lines)
    assert lines[0].startswith(f"  {short_id(first.id)}  done")
    assert lines[1].startswith(f"* ├─ {short_id(second.id)}  done")
    assert lines[2].startswith(f"  └─ {short_id(branch.id)}  done")
    assert lines[2].endswith("two again")


async def test_chat_streams_answers_and_branches_from_its_input(
    cli_env: dict[str, str], worker: Worker, tl: Threadline, cid: str
) -> None:
    """Each line is a turn whose answer is printed, then a blank line; `/from` makes the next one a branch."""
    first = await tl.conversation("tutor", cid).predict("first")
    script = f"hello\n/turns\n/from {first.id}\nbranch please\n/show\n/quit\nnot sent\n"
    began = time.monotonic()

    chat = await threadline(cli_env, "chat", cid, stdin=script)

    print(f"chat: 2 turns and 3 commands in {time.monotonic() - began:.2f} s (process start included)")
    assert (0, "") == (chat.returncode, chat.stderr)
    turns = {t.inputs["message"]: t for t in await tl.conversation("tutor", cid).turns(all=True)}
    assert ["first", "hello", "branch please"] == list(turns)
    assert first.id == turns["hello"].parent == turns["branch please"].parent
    out = chat.stdout
    assert f"{turns['hello'].result}\n\n" in out
    assert f"{turns['branch please'].result}\n\n" in out
    assert "I was shown 1 earlier turn(s)." in turns["branch please"].result
    assert f"The next message continues after {first.id}." in out
    assert f"* └─ {short_id(turns['branch please'].id)}" in out
    assert "> " not in out


async def test_chat_json_prints_one_event_per_line_and_goes_on_after_errors(
    cli_env: dict[str, str], worker: Worker, tl: Threadline, cid: str
) -> None:
    """With `--json`: placed, text pieces, turn; a bad command is an `error` event and the chat goes on."""
    chat = await threadline(cli_env, "chat", cid, "--json", stdin="hi\n/from nope\n/nonsense\nstill here\n")

    events = [json.loads(line) for line in chat.stdout.splitlines()]
    turns = await tl.conversation("tutor", cid).turns()
    assert 0 == chat.returncode, chat.stderr
    kinds = [e["event"] for e in events if e["event"] != "text"]
    assert ["placed", "turn", "error", "error", "placed", "turn"] == kinds
    assert ["turn-unknown", "invalid-request"] == [e["error"]["code"] for e in events if e["event"] == "error"]
    first_texts = events[1 : next(i for i, e in enumerate(events) if e["event"] == "turn")]
    assert turns[0].result == "".join(e["text"] for e in first_texts)
    assert [t.id for t in turns] == [e["id"] for e in events if e["event"] == "turn"]
    assert ["done", "done"] == [e["state"] for e in events if e["event"] == "turn"]


async def test_chat_ends_cleanly_at_the_end_of_its_input(
    cli_env: dict[str, str], worker: Worker, tl: Threadline, cid: str
) -> None:
    """Without `/quit`, the end of the input (Ctrl-D) ends the chat with status 0, the last line sent."""
    chat = await threadline(cli_env, "chat", cid, stdin="no newline at the end")

    turns = await tl.conversation("tutor", cid).turns()
    assert (0, "") == (chat.returncode, chat.stderr)
    assert ["no newline at the end"] == [t.inputs["message"] for t in turns]
    assert f"{turns[0].result}\n\n" == chat.stdout


async def test_ctrl_c_in_a_chat_stops_the_turn_being_answered(
    cli_env: dict[str, str], client: Client, settings: Settings, cid: str
) -> None:
    """SIGINT while a turn is answered stops that turn; the chat goes on and ends 0 at the end of its input."""
    async with build_worker(client, slow(settings, SLOW_REPLY_S)):
        command = [sys.executable, "-m", "threadline", "chat", cid, "--json"]
        pipe = subprocess.PIPE
        chat = await asyncio.create_subprocess_exec(*command, env=cli_env, stdin=pipe, stdout=pipe, stderr=pipe)
        assert chat.stdin is not None
        chat.stdin.write(b"Take your time.\n")
        await read_until(chat, '"event":"placed"')
        chat.send_signal(signal.SIGINT)
        ended = await read_until(chat, '"event":"turn"')
        chat.stdin.close()
        rest, _ = await asyncio.wait_for(chat.communicate(), DEV_TIMEOUT_S)

    turn = json.loads(ended[-1])
    errors = [json.loads(line)["error"]["code"] for line in rest.decode().splitlines()]
    assert ("stopped", ["turn-state"], 0) == (turn["state"], errors, chat.returncode)


async def test_a_long_wait_is_announced_on_a_terminal(
    cli_env: dict[str, str], client: Client, settings: Settings, cid: str
) -> None:
    """`send` says `waiting for turn <id>…` on stderr when it is a terminal and nothing printed for a second."""
    parent, terminal = pty.openpty()
    command = [sys.executable, "-m", "threadline", "send", cid, "Take your time.", "--json"]
    async with build_worker(client, slow(settings, 2.0)):
        try:
            run = functools.partial(subprocess.run, env=cli_env, stdout=subprocess.PIPE, stderr=terminal, timeout=30)
            sent = await asyncio.to_thread(run, command)
        finally:
            os.close(terminal)
    said = _read_all(parent)

    assert 0 == sent.returncode
    assert f"waiting for turn {json.loads(sent.stdout)['turn']}…" in said


def _read_all(fd: int) -> str:
    data = b""
    with contextlib.suppress(OSError):  # EIO: the terminal's other end closed
        while chunk := os.read(fd, 4096):
            data += chunk
    os.close(fd)
    return data.decode()


async def test_serve_has_help() -> None:
    """`serve --help` names its options (the HTTP service's own tests cover serving)."""
    done = await threadline(clean_env(), "serve", "--help")

    assert 0 == done.returncode, done.stderr
    assert "--host HOST" in done.stdout
    assert "--port PORT" in done.stdout


async def test_dev_server_only_answers_and_stops_on_sigterm(tmp_path: Path) -> None:
    """`dev --server-only` serves Temporal until SIGTERM, then exits 0."""
    port, ui_port = free_port(), free_port()
    env = clean_env(data=str(tmp_path / "data"))
    began = time.monotonic()

    async with dev_process(
        env, tmp_path / "dev.log", "--server-only", "--port", str(port), "--ui-port", str(ui_port), "--codec-port", "0"
    ) as dev:
        lines = await read_until(dev, "Press Ctrl-C")
        ready_s = time.monotonic() - began
        client = await Client.connect(f"127.0.0.1:{port}")
        system = await client.workflow_service.get_system_info(GetSystemInfoRequest())
        stopping = time.monotonic()
        status = await terminate(dev)

    print(f"dev --server-only: ready in {ready_s:.2f} s, stopped in {time.monotonic() - stopping:.2f} s")
    assert f"Temporal UI: http://127.0.0.1:{ui_port}" in lines
    assert "Codec:       off" in lines
    assert system.server_version
    assert 0 == status, (tmp_path / "dev.log").read_text()


async def test_dev_demo_holds_a_conversation_and_stops_on_sigterm(tmp_path: Path) -> None:
    """`dev --demo` answers three questions, links the UI page, serves the codec routes its UI reads
    payloads through (a browser on the UI's page may call them), and exits 0 on SIGTERM."""
    port, ui_port, codec_port = free_port(), free_port(), free_port()
    env = clean_env(data=str(tmp_path / "data"))
    began = time.monotonic()
    ports = ("--port", str(port), "--ui-port", str(ui_port), "--codec-port", str(codec_port))
    preflight = {
        "Origin": f"http://127.0.0.1:{ui_port}",
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "content-type,x-namespace",
    }

    async with dev_process(env, tmp_path / "dev.log", "--demo", *ports) as dev:
        answers = await read_until(dev, "tutor: ", count=3)
        demo_s = time.monotonic() - began
        link = await read_until(dev, "See it in the Temporal UI")
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{codec_port}/v1/codec") as codec:
            allowed = await codec.options("/decode", headers=preflight)
            decoded = await codec.post("/decode", json={"payloads": []})
        status = await terminate(dev)

    print(f"dev --demo: last answer after {demo_s:.2f} s")
    assert "I was shown 2 earlier turn(s)." in answers[-1]
    demo = link[-1].rsplit("%2F", 1)[-1]
    expected = f"See it in the Temporal UI: http://127.0.0.1:{ui_port}/namespaces/default/workflows/conversation%2Fdefault%2F{demo}"
    assert expected == link[-1]
    assert f"Codec:       http://127.0.0.1:{codec_port}/v1/codec" in answers
    assert (200, f"http://127.0.0.1:{ui_port}") == (allowed.status_code, allowed.headers["access-control-allow-origin"])
    assert (200, {}) == (decoded.status_code, decoded.json())
    log = (tmp_path / "dev.log").read_text()
    assert 0 == status, log
    assert (tmp_path / "data" / "store" / "conversations" / f"{demo}.jsonl").is_file()
    assert "turn.begun" not in log  # the demo reads alone: the worker logs warnings and errors only


async def test_reading_needs_no_temporal(cli_env: dict[str, str], settings: Settings, cid: str) -> None:
    """turns, show and history only read the store: they work while Temporal is down; render asks the
    conversation's worker (its rules, model and providers), so it needs Temporal like a send."""
    from store.backends.folder import FolderStore
    from store.backends.writer import Writer
    from store.log.turns import Answer, TurnRequest
    from store.programs.program import TUTOR
    from threadline.devserver import free_port

    writer = Writer(FolderStore(settings.store_folder("default")), cid, TUTOR)
    turn = writer.send(TurnRequest({"message": "written by another writer"}), lambda _s, _i: Answer({"result": "ok"}))
    down = {**cli_env, "THREADLINE_TEMPORAL_ADDRESS": f"127.0.0.1:{free_port()}"}

    listed = await threadline_json(down, "turns", cid)
    shown = await threadline_json(down, "show", cid)
    rendered = await threadline(down, "--json", "render", cid, "next")
    sent = await threadline(down, "--json", "send", cid, "this one needs Temporal")

    assert [turn] == [t["id"] for t in listed["turns"]]
    assert turn == shown["head"]
    assert (1, "server-unavailable") == (rendered.returncode, json.loads(rendered.stdout)["error"]["code"])
    assert (1, "server-unavailable") == (sent.returncode, json.loads(sent.stdout)["error"]["code"])


def children(pid: int) -> list[int]:
    """The ids of the processes whose parent is `pid` (read from /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue  # it exited meanwhile
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


async def test_dev_exits_with_an_error_when_its_server_dies(tmp_path: Path) -> None:
    """`dev` notices its Temporal server died (kill -9) and exits 1 with `server-unavailable`, instead of
    running a worker against nothing."""
    port, ui_port = free_port(), free_port()
    env = clean_env(data=str(tmp_path / "data"))

    async with dev_process(env, tmp_path / "dev.log", "--port", str(port), "--ui-port", str(ui_port)) as dev:
        await read_until(dev, "Press Ctrl-C")
        (server,) = await asyncio.to_thread(children, dev.pid)
        os.kill(server, signal.SIGKILL)
        await asyncio.wait_for(dev.communicate(), DEV_TIMEOUT_S)

    assert 1 == dev.returncode
    assert "server-unavailable" in (tmp_path / "dev.log").read_text()
