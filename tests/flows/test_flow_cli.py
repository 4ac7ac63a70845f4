"""Guided flows and listing from the shell: `threadline flow start|show|stop`, `threadline chat` with a
flow (its prompts as answers, what it collected at the end), and `threadline list`, run as real
subprocesses against the session dev server and an in-process worker."""

from __future__ import annotations

import json

import pytest
from temporalio.worker import Worker

from core.settings import Settings
from tests.surfaces.test_cli import clean_env, threadline, threadline_json

ORDER_LINES = ["Two pizzas, please.", "lots", "3", "ada@example.com", "Anything else?"]
COLLECTED = {"greeting": "Two pizzas, please.", "quantity": 3, "email": "ada@example.com"}


@pytest.fixture(name="cli_env")
def _cli_env(settings: Settings) -> dict[str, str]:
    return clean_env(
        temporal_address=settings.address,
        data=str(settings.data),
        task_queue=settings.task_queue,
        payloads=str(settings.payload_folder),
    )


async def test_flow_start_then_send_answers_and_show_reads_it(
    cli_env: dict[str, str], worker: Worker, cid: str
) -> None:
    """`flow start` prints the first prompt, `send` answers the flow while it is active (printing what
    it collected when it completes), and `flow show` reads where it stands from the store."""
    started = await threadline(cli_env, "flow", "start", cid, "checkout")
    answers = [await threadline(cli_env, "send", cid, text) for text in ORDER_LINES[:4]]
    shown = await threadline_json(cli_env, "flow", "show", cid)
    text = await threadline(cli_env, "flow", "show", cid)

    assert (0, "Hello! What would you like to order?\n") == (started.returncode, started.stdout)
    assert [0, 0, 0, 0] == [a.returncode for a in answers]
    assert "Please enter a valid number." in answers[1].stdout
    assert f"collected  {json.dumps(COLLECTED, separators=(',', ':'))}" in answers[3].stdout
    assert ("completed", COLLECTED) == (shown["state"], shown["data"])
    assert {"started": 1, "completed": 1, "abandoned": 0, "handed_off": 0, "invalid": {"quantity": 1}} == shown[
        "counts"
    ]["checkout"]
    assert "state   completed\n" in text.stdout


async def test_chat_shows_the_flows_prompts_and_what_it_collected(
    cli_env: dict[str, str], worker: Worker, cid: str
) -> None:
    """In `threadline chat`, `/flow checkout` prints the first prompt, each line's answer is the flow's
    next prompt, the data is printed when it completes, and the chat goes on freely after it."""
    lines = "\n".join(["/flow checkout", *ORDER_LINES, "/flow"]) + "\n"

    done = await threadline(cli_env, "chat", cid, stdin=lines)

    printed = done.stdout
    assert 0 == done.returncode, done.stderr
    order = [
        "Hello! What would you like to order?",
        "How many would you like?",
        "Please enter a valid number.",
        "What e-mail address should the confirmation go to?",
        "Thank you, that is everything I needed.",
        f"collected  {json.dumps(COLLECTED, separators=(',', ':'))}",
        "(offline) You said: Anything else?",
        "completed",
    ]
    places = [printed.find(text) for text in order]
    assert -1 not in places, printed
    assert sorted(places) == places


async def test_flow_stop_abandons_the_flow(cli_env: dict[str, str], worker: Worker, cid: str) -> None:
    """`flow stop` abandons the active flow; the next message is answered by the program."""
    await threadline(cli_env, "flow", "start", cid, "checkout")

    stopped = await threadline(cli_env, "flow", "stop", cid)
    after = await threadline_json(cli_env, "send", cid, "Hello again")
    shown = await threadline_json(cli_env, "flow", "show", cid)

    assert 0 == stopped.returncode
    assert (None, "abandoned") == (after["flow"], shown["state"])


async def test_list_prints_the_conversations_of_a_program(cli_env: dict[str, str], worker: Worker, cid: str) -> None:
    """`threadline list --program` lists by the search attributes (a program of this test's own name)."""
    await threadline(cli_env, "send", cid, "Hi", "--program", "tutor")
    program = f"p{cid.replace('-', '')}"
    await threadline(cli_env, "flow", "start", f"{cid}-x", "checkout", "--program", program)

    for _ in range(50):
        listed = await threadline_json(cli_env, "list", "--program", program)
        if listed["conversations"]:
            break

    assert [(f"{cid}-x", program)] == [(c["conversation"], c["program"]) for c in listed["conversations"]]
    assert ("checkout", "active") == (listed["conversations"][0]["flow"], listed["conversations"][0]["flow_state"])
