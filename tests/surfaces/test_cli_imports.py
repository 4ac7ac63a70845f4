"""What `threadline` loads before it knows what to run: `--help` and usage errors import none of
Temporal, pydantic, the HTTP service or the stores; `import threadline` imports its public names only
when they are first read. Read from `sys.modules` of a fresh interpreter, never timed."""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from temporalio.worker import Worker

import threadline
from core.settings import Settings
from threadline.cli import flow_commands
from threadline.listing import STATES

ROOT = Path(__file__).resolve().parent.parent.parent
HEAVY = ("temporalio", "pydantic", "fastapi", "uvicorn", "httpx", "psycopg", "structlog", "cryptography")
"""Third-party packages none of which parsing the command line needs."""
PARSING = {"core", "core.errors", "core.sends", "threadline"}
"""The project's modules outside `threadline.cli` that parsing may load."""
PROJECT = ("core", "store", "activities", "workflows", "threadline", "worker")

_LOADED_AFTER = """\
import json, runpy, sys
sys.argv = ["threadline", *json.loads(sys.argv[1])]
status = None
try:
    runpy.run_module("threadline", run_name="__main__", alter_sys=True)
except SystemExit as done:
    status = done.code
print(json.dumps({"status": status, "modules": sorted(sys.modules)}))
"""


def loaded_after(*args: str) -> tuple[int, list[str]]:
    """`python -m threadline ARGS` in a fresh interpreter: its exit status and every module it imported."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("THREADLINE_")}
    done = subprocess.run(
        [sys.executable, "-c", _LOADED_AFTER, json.dumps(args)],
        cwd=ROOT,
        env=env | {"PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    found = json.loads(done.stdout.splitlines()[-1])
    return found["status"], found["modules"]


def too_heavy(modules: list[str]) -> list[str]:
    """The modules of `modules` that parsing the command line should not have needed."""
    third_party = [m for m in modules if m.split(".")[0] in HEAVY]
    ours = [
        m for m in modules if m.split(".")[0] in PROJECT and m not in PARSING and not m.startswith("threadline.cli")
    ]
    return sorted(third_party + ours)


@pytest.mark.parametrize(
    ("args", "status"),
    [
        (("--help",), 0),
        (("send", "--help"), 0),
        (("store", "copy", "--help"), 0),
        (("send",), 2),  # a usage error: MESSAGE is missing
        (("no-such-command",), 2),
    ],
    ids=["help", "send-help", "store-copy-help", "usage-error", "unknown-command"],
)
def test_parsing_the_command_line_imports_nothing_a_command_runs_with(args: tuple[str, ...], status: int) -> None:
    """Help and usage errors come from the parser alone, so they print without loading Temporal & co."""
    exit_status, modules = loaded_after(*args)

    assert status == exit_status
    assert [] == too_heavy(modules)


def test_importing_the_package_imports_its_names_on_first_use() -> None:
    """`import threadline` is as light as the parser; `threadline.connect` then loads the client."""
    code = (
        "import json, sys; import threadline; before = sorted(sys.modules); threadline.connect; "
        "print(json.dumps([before, 'threadline.client' in sys.modules]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=os.environ | {"PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    before, client_after = json.loads(done.stdout)

    assert [] == too_heavy(before)
    assert client_after


def test_every_public_name_is_the_object_its_module_defines() -> None:
    """Each name in `__all__` resolves, to the very object of the module it comes from."""
    homes = {name: module for module, names in threadline._HOMES.items() for name in names}

    assert sorted(threadline.__all__) == sorted(homes)
    for name, module in homes.items():
        assert getattr(importlib.import_module(module, "threadline"), name) is getattr(threadline, name)


def test_the_list_command_offers_the_states_the_listing_takes() -> None:
    """`threadline list --state` spells the states out; they stay those `threadline.listing` accepts."""
    assert STATES == flow_commands.STATES


_SENT = """\
import json, sys
from threadline.cli import run
status = run(json.loads(sys.argv[1]))
print(json.dumps({"status": status, "modules": sorted(sys.modules)}))
"""
SENDING = (
    *("psycopg", "psycopg_pool", "httpx", "activities", "store.calls", "worker", "temporalio.worker"),
    *("temporalio.testing", "temporalio.contrib.opentelemetry", "openai", "google.genai", "opentelemetry"),
    *("fastapi", "starlette", "uvicorn", "threadline.http", "threadline.devserver", "numpy"),
    *("structlog", "rich", "store.flows", "core.schedules", "core.toolmodels", "core.again_models"),
    *("core.records_models", "threadline.closing"),
)
"""What a send from the command line never needs: the worker's side (activities, the workflow sandbox,
the providers and their SDKs, tracing, the call log), the test server, the HTTP service, the
PostgreSQL driver when the store is a folder, the workflow code beyond its names; structlog while
nothing is logged; guided flows, schedules, turn actions and the setup and import models; stopping
and closing. Each costs a command that sends a turn its import time (docs/benchmarks.md, `cli`)."""


@pytest.mark.parametrize(
    ("output", "ended"), [("--json", '"state":"done"'), ("", "state   done")], ids=["json", "text"]
)
async def test_a_send_loads_neither_the_worker_nor_a_database_driver(
    settings: Settings, worker: Worker, output: str, ended: str
) -> None:
    """`threadline send` to a running worker imports the client's modules only (it pays for nothing else),
    whether it prints JSON or streams the answer's text."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("THREADLINE_")} | {
        "PYTHONPATH": str(ROOT),
        "THREADLINE_TEMPORAL_ADDRESS": settings.address,
        "THREADLINE_DATA": str(settings.data),
        "THREADLINE_TASK_QUEUE": settings.task_queue,
        "THREADLINE_PAYLOADS": str(settings.payload_folder),
    }
    args = ["send", f"imports-{uuid.uuid4().hex[:8]}", "hello", *filter(None, [output])]
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-c", _SENT, json.dumps(args)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    found = json.loads(done.stdout.splitlines()[-1])
    modules = found["modules"]

    assert 0 == found["status"], done.stderr
    assert ended in done.stdout
    assert [] == [m for m in modules if m.split(".")[0] in SENDING or m.startswith(SENDING)]
    assert [] == [m for m in modules if m.startswith("workflows.") and m != "workflows.attributes"]
