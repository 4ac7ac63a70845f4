"""The README and docs/ say what the code does: their code blocks run as written (against a real dev
server, worker and HTTP service, tests/support/docs_kit.py says how), their tables list exactly the error
codes and environment variables the code has, and the README stays short."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import re
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from activities.providers import ANTHROPIC_BASE_URL, OPENAI_BASE_URL
from activities.providers.anthropic import DEFAULT_MAX_TOKENS
from bench import cold
from core.errors import ErrorCode
from core.settings import Settings
from tests.support.docs_kit import (
    DOC_IDS,
    LANGUAGES,
    PAGES,
    ROOT,
    PageRun,
    commands,
    fits,
    markers,
    printed_values,
    read_blocks,
    shown_source,
)
from tests.support.processes import WorkerProcess
from tests.support.service_kit import serving
from threadline.client import connect
from threadline.http import create_app
from threadline.http.app import ServiceSettings
from threadline.http.status import STATUS
from worker import build_worker

README = ROOT / "README.md"
README_PRINTS = [
    "(offline) You said: Hi, I'm Alex. I was shown 0 earlier turn(s).",
    "(offline) You said: What is 1/2 + 1/3?. I was shown 1 earlier turn(s).",
    "(offline) You said: Let's talk about decimals instead. I was shown 1 earlier turn(s).",
]
"""What the README's Python quickstart prints with the offline model."""
README_SUPPORT_PRINTS = [
    "(offline) You said: message: My parcel is late, a shipping question.",
    "topic: shipping. I was shown 0 earlier turn(s).",
    "A person from our team will write to you shortly.",
]
"""What the README's program with code prints: `topic` sorts, `answer` answers, then a hand-over."""
CODE = ("core", "store", "activities", "workflows", "threadline", "worker.py", "bench", "tests")
"""Where environment variables are read: the code, its benchmarks and its tests."""
_NAMED = re.compile(r"\b(THREADLINE_[A-Z0-9_]+|(?:OPENAI|ANTHROPIC)_(?:API_KEY|BASE_URL|STREAM|MAX_TOKENS))\b")
_READ = re.compile(r'(?:environ|env)(?:\.get\(|\[)\s*"([A-Z][A-Z0-9_]*)"|"([A-Z][A-Z0-9_]*)" (?:not )?in os\.environ')
_LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)]*)?\)")


def table_rows(page: Path) -> list[list[str]]:
    """The rows of `page`'s tables whose first cell is code (`` `name` ``), as lists of cells."""
    rows = []
    for line in page.read_text(encoding="utf-8").splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("|") and cells[0].startswith("`"):
            rows.append(cells)
    return rows


def code_of(cell: str) -> str:
    """The first `` `code` `` span of a table cell, or "" when it has none."""
    found = re.search(r"`([^`]*)`", cell)
    return found[1] if found else ""


def source_files() -> list[Path]:
    files: list[Path] = []
    for name in CODE:
        path = ROOT / name
        files += [path] if path.is_file() else sorted(path.rglob("*.py"))
    return files


def variables_read() -> set[str]:
    """Every environment variable the code names or reads."""
    found: set[str] = set()
    for path in source_files():
        text = path.read_text(encoding="utf-8")
        found |= set(_NAMED.findall(text))
        found |= {a or b for a, b in _READ.findall(text)}
    return found


# ----- the runner itself


def test_output_fits_with_ellipses_and_nothing_else() -> None:
    """`...` matches any text in a line, a line of `...` any lines; anything else must be equal."""
    printed = ["turn    0199-abc", "parent  -", "state   done"]

    assert fits(["turn    ...", "...", "state   done"], printed)
    assert fits(["...", "state   done"], printed)
    assert not fits(["turn    ...", "state   done"], printed)
    assert not fits(["turn    ...", "...", "state   failed"], printed)


def test_console_blocks_split_into_commands_and_their_output(tmp_path: Path) -> None:
    """A `$ ` line is a command (with its `\\` continuations), the lines under it its output; the
    marker before a block is its reason not to run."""
    page = tmp_path / "page.md"
    page.write_text(
        "<!-- not run: needs a model -->\n```bash\nthreadline dev\n```\n\n"
        '```console\n$ curl -s a \\\n    -d \'{}\'\n{"turn": "t-1"}\n$ threadline turns alex\n```\n'
    )

    skipped, console = read_blocks(page)

    assert ("bash", "needs a model") == (skipped.language, skipped.not_run)
    assert [("curl -s a -d '{}'", ['{"turn": "t-1"}']), ("threadline turns alex", [])] == [
        (command.text, command.expected) for command in commands(console)
    ]
    assert {"turn": "t-1", "parent": "t-0"} == printed_values('{"turn": "t-1"}\nparent  t-0\nstate done now')


# ----- shape


def test_the_readme_fits_in_150_lines() -> None:
    """The README is read in five minutes: depth goes in docs/."""
    assert len(README.read_text(encoding="utf-8").splitlines()) <= 150


def test_every_block_is_python_bash_or_console() -> None:
    """Every fenced block names a language the docs test runs, or shows a file the tests run (`from:`)."""
    unmarked = [
        block.where
        for page in PAGES
        for block in read_blocks(page)
        if block.language not in LANGUAGES and block.source is None
    ]

    assert [] == unmarked


def test_a_block_from_a_file_shows_that_file_as_it_is() -> None:
    """A `<!-- from: path[#region] -->` block is the file's code (or region's) exactly, and the file is
    one of the tests' own (tests/clients/node is compiled and run by tests/clients/test_typescript.py)."""
    shown = [block for page in PAGES for block in read_blocks(page) if block.source is not None]

    assert [] == [block.where for block in shown if block.code != shown_source(block.source or "")]
    assert all((block.source or "").startswith("tests/") for block in shown)


def test_every_not_run_marker_gives_a_reason_and_stands_before_a_block() -> None:
    """`<!-- not run: reason -->` says why, and a block follows it (else it would skip nothing)."""
    for page in PAGES:
        skipped = {block.not_run for block in read_blocks(page) if block.not_run is not None}
        for line, reason in markers(page):
            assert reason, f"{page.name}:{line}: a not-run marker without a reason"
            assert reason in skipped, f"{page.name}:{line}: no block follows this marker"


def test_links_between_pages_resolve() -> None:
    """Every relative link of the README and docs/ names a file that exists."""
    broken = [
        f"{page.relative_to(ROOT)}: {target}"
        for page in PAGES
        for target in _LINK.findall(page.read_text(encoding="utf-8"))
        if "://" not in target and not (page.parent / target).exists()
    ]

    assert [] == broken


_ANCHORED = re.compile(r"\]\(([^)\s#]*)#([^)\s]+)\)")


def heading_anchor(heading: str) -> str:
    """The anchor a Markdown renderer (GitHub's rule) gives a heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_links_to_a_section_name_a_heading_of_that_page() -> None:
    """Every `page.md#section` link of the README and docs/ names a heading the page has."""
    broken = []
    for page in PAGES:
        for target, anchor in _ANCHORED.findall(page.read_text(encoding="utf-8")):
            linked = page.parent / target if target else page
            if "://" in target or linked.suffix != ".md":
                continue
            lines = linked.read_text(encoding="utf-8").splitlines()
            anchors = {heading_anchor(line.lstrip("#")) for line in lines if line.startswith("#")}
            if anchor not in anchors:
                broken.append(f"{page.relative_to(ROOT)}: {target}#{anchor}")

    assert [] == broken


def test_every_docs_page_is_linked_from_the_readme() -> None:
    """A newcomer finds every page of docs/ from the README."""
    linked = {(ROOT / target).resolve() for target in _LINK.findall(README.read_text(encoding="utf-8"))}

    assert [] == [page.name for page in PAGES[1:] if page.resolve() not in linked]


# ----- tables against the code


def test_the_error_table_lists_every_code_with_its_http_status() -> None:
    """docs/errors.md lists exactly ErrorCode's codes, once each, with the status the service answers."""
    rows = table_rows(ROOT / "docs" / "errors.md")
    listed = [code_of(row[0]) for row in rows]

    assert sorted(code.value for code in ErrorCode) == sorted(listed)
    assert len(listed) == len(set(listed))
    assert {code: str(STATUS.get(code, 500)) for code in listed} == {code_of(row[0]): row[2] for row in rows}
    assert all(row[1] and row[3] for row in rows), "every code has a meaning and says whether to retry"


def test_the_configuration_lists_every_variable_the_code_reads() -> None:
    """docs/configuration.md lists exactly the environment variables the code, benchmarks and tests read."""
    listed = [code_of(row[0]) for row in table_rows(ROOT / "docs" / "configuration.md")]

    assert sorted(variables_read()) == sorted(listed)
    assert len(listed) == len(set(listed))


def test_the_configuration_defaults_are_the_codes() -> None:
    """Each documented default is what the code uses with an empty environment ("" for none)."""
    settings, service = Settings.from_env({}), ServiceSettings.from_env({})
    defaults = {
        "THREADLINE_DATA": f"./{settings.data.relative_to(Path.cwd())}",
        "THREADLINE_TEMPORAL_ADDRESS": settings.address,
        "THREADLINE_NAMESPACE": settings.namespace,
        "THREADLINE_TASK_QUEUE": settings.task_queue,
        "THREADLINE_MODEL": settings.model,
        "THREADLINE_OFFLINE_DELAY_S": f"{settings.offline_delay_s:g}",
        "THREADLINE_IDLE_TIMEOUT_S": f"{settings.idle_timeout_s:g}",
        "THREADLINE_ATTRIBUTES_EVERY_S": f"{settings.attributes_every_s:g}",
        "THREADLINE_WORKFLOW_CACHE": str(settings.workflow_cache),
        "THREADLINE_WARM_LOGS": str(settings.warm_logs),
        "THREADLINE_TURNS_PER_RUN": str(settings.turns_per_run),
        "THREADLINE_WORKER_GC": settings.worker_gc,
        "THREADLINE_PAYLOADS": f"$THREADLINE_DATA/{settings.payload_folder.relative_to(settings.data)}",
        "THREADLINE_MAX_BODY_BYTES": str(service.max_body_bytes),
        "THREADLINE_HEADER_TIMEOUT_S": f"{service.limits.header_timeout_s:g}",
        "THREADLINE_BODY_TIMEOUT_S": f"{service.limits.body_timeout_s:g}",
        "OPENAI_BASE_URL": OPENAI_BASE_URL,
        "ANTHROPIC_BASE_URL": ANTHROPIC_BASE_URL,
        "ANTHROPIC_MAX_TOKENS": str(DEFAULT_MAX_TOKENS),
        "OPENAI_STREAM": "true",
        "ANTHROPIC_STREAM": "true",
        "THREADLINE_PG_BIN": pg_bin_default(),
        "BENCH_COLD_SIZES": ",".join(str(size) for size in cold.SIZES),
        **scale_sizes(),
    }
    documented = {code_of(row[0]): code_of(row[1]) for row in table_rows(ROOT / "docs" / "configuration.md")}

    assert {name: defaults.get(name, "") for name in documented} == documented


def scale_sizes() -> dict[str, str]:
    """The sizes bench/scale.py's sections use when their `BENCH_SCALE_*` variables are unset."""
    from bench import _scale_cold, _scale_idle, _scale_load, _scale_long, _scale_store

    sizes = {
        "BENCH_SCALE_CONVERSATIONS": _scale_load.SIZES,
        "BENCH_SCALE_IDLE": _scale_idle.IDLE,
        "BENCH_SCALE_TURNS": _scale_long.POINTS,
        "BENCH_SCALE_RECORDS": _scale_store.RECORDS,
        "BENCH_SCALE_COLD": _scale_cold.SIZES,
    }
    return {name: ",".join(str(n) for n in values) for name, values in sizes.items()}


def pg_bin_default() -> str:
    """The folder tests/support/pg_kit.py takes PostgreSQL's programs from when THREADLINE_PG_BIN is unset."""
    kit = (ROOT / "tests" / "support" / "pg_kit.py").read_text(encoding="utf-8")
    found = re.search(r'"THREADLINE_PG_BIN", "([^"]+)"', kit)
    return found[1] if found else ""


# ----- the blocks run


def programs_of(page: Path) -> list[str]:
    """The modules the page's `# file:` blocks define."""
    return [block.module for block in read_blocks(page) if block.module is not None and block.not_run is None]


def reader_env(settings: Settings, folder: Path, programs: list[str]) -> dict[str, str]:
    """A reader's environment: the run's server, task queue and data; no keys or settings of the machine's."""
    mine = ("THREADLINE_", "OPENAI_", "ANTHROPIC_")
    env = {name: value for name, value in os.environ.items() if not name.startswith(mine)}
    env |= {
        "THREADLINE_TEMPORAL_ADDRESS": settings.address,
        "THREADLINE_TASK_QUEUE": settings.task_queue,
        "THREADLINE_DATA": str(settings.data),
        "THREADLINE_PAYLOADS": str(settings.payload_folder),
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(folder)]),
        "TEMPORAL_ADDRESS": settings.address,
    }
    return env | ({"THREADLINE_PROGRAMS": ",".join(programs)} if programs else {})


@contextlib.asynccontextmanager
async def page_worker(client: Client, settings: Settings, env: dict[str, str], log: Path) -> AsyncIterator[None]:
    """The page's worker: in this process, or (with programs to import from the run's folder) as a process."""
    if "THREADLINE_PROGRAMS" not in env:
        async with build_worker(client, settings):
            yield
        return
    cleared = {"OPENAI_API_KEY": "", "OPENAI_BASE_URL": "", "ANTHROPIC_API_KEY": "", "THREADLINE_MODEL": ""}
    worker = WorkerProcess(settings, log, env={**env, **cleared})
    try:
        await asyncio.to_thread(worker.wait_ready)
        yield
    finally:
        await asyncio.to_thread(worker.stop)


def uses_service(page: Path) -> bool:
    """Whether a block of `page` calls the HTTP service (a command, or Python code with its address)."""
    blocks = [block for block in read_blocks(page) if block.not_run is None]
    if any(block.language == "python" and "localhost:8000" in block.code for block in blocks):
        return True
    return any(
        "curl " in command.text or "localhost:8000" in command.text
        for block in blocks
        if block.language != "python"
        for command in commands(block)
    )


SLOW_PAGES = {"cli.md", "concepts.md", "README.md"}
"""Pages whose blocks take ten seconds and more (they start workers and a service): run first."""


def slow_if(page: Path) -> Any:
    """`page` as a parameter, marked slow when it is one of `SLOW_PAGES`."""
    return pytest.param(page, marks=pytest.mark.slow) if page.name in SLOW_PAGES else page


@pytest.mark.parametrize("page", [slow_if(page) for page in PAGES], ids=lambda page: page.name)
async def test_the_page_runs_as_written(page: Path, client: Client, settings: Settings, tmp_path: Path) -> None:
    """Every block not marked `not run` runs in order, as a reader would run it, and prints what it shows."""
    data = tmp_path / ".threadline"
    settings = dataclasses.replace(settings, data=data, stores={"default": data / "store"})
    env = reader_env(settings, tmp_path, programs_of(page))
    ids = {name: f"{name}-{uuid.uuid4().hex[:12]}" for name in DOC_IDS}
    run = PageRun(tmp_path, env, ids=ids, task_queue=settings.task_queue)
    blocks = read_blocks(page)
    run.write_modules(blocks)
    async with contextlib.AsyncExitStack() as stack:
        await stack.enter_async_context(page_worker(client, settings, env, tmp_path / "worker.log"))
        if uses_service(page):
            http = await stack.enter_async_context(serving(create_app(await connect(settings, client=client))))
            run.service = str(http.base_url).removeprefix("http://").rstrip("/")
        stack.push_async_callback(run.close)
        for block in blocks:
            if block.not_run is None:
                await run.run(block)

    if page == README:
        assert README_PRINTS == run.outputs[0].splitlines()
        assert README_SUPPORT_PRINTS == run.outputs[1].splitlines()
