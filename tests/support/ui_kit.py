"""The Temporal UI as an operator sees it: `threadline dev` (its server, UI, worker and codec server)
in a process of its own, a conversation of five turns (one of 4 KB, one stopped), and its page in
headless Chromium from the system's packages (Playwright drives it; it downloads no browser).

    python -m tests.support.ui_kit docs/images    # the screenshots docs/operations.md shows
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import urllib.parse
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from playwright.async_api import Browser, Page, async_playwright
from playwright.async_api import TimeoutError as PageTimeout

from core.settings import Settings
from threadline.client import Threadline, connect
from threadline.devserver import free_port

START_TIMEOUT_S = 120.0
PAGE_TIMEOUT_MS = 90_000
WIDTH, HEIGHT = 1680, 1300
FOUR_KB = (
    "Tell me everything about the sea and its tides: why the moon pulls the water, why there are "
    "two tides a day, and which coasts see the highest ones. "
) * 30
TURNS = (
    "Hi, I'm Sam. Can you help me with fractions?",
    "What is 1/2 + 1/3?",
    FOUR_KB,
    "Explain long division step by step, with three examples.",  # stopped
    "Thanks, that is all for today.",
)
STOPPED = 3
SHOTS = (
    ("Timeline", "Timeline", "ui-timeline.png"),
    ("Event History", "Event History", "ui-history.png"),
    ("User Metadata", "Current Details", "ui-details.png"),
)
"""Each screenshot: the tab it opens, the heading it scrolls to the top, its file."""
_RUN_PAGE = re.compile(r".*/workflows/[^/]+/[0-9a-f-]{36}/[a-z-]+$")


def chromium() -> str:
    """The system's Chromium (Debian's `chromium`, which `make test` installs); the test is skipped without it."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.skip("Chromium is not installed (make test installs Debian's `chromium` as root)")
    return found


@dataclass(frozen=True, slots=True)
class Dev:
    """A running `threadline dev`: its Temporal address, its UI and its environment."""

    address: str
    ui_url: str
    env: dict[str, str]

    async def threadline(self) -> Threadline:
        """A Python client of its server and data folder (its payload store too)."""
        return await connect(Settings.from_env(self.env))


@contextlib.asynccontextmanager
async def dev(data: Path, log: Path, **settings: str) -> AsyncIterator[Dev]:
    """`threadline dev --json` on free ports, its data in `data` and `settings` in its environment; each
    turn takes 1 s (so one can be stopped); SIGTERM to it alone at the end."""
    env = {**os.environ, "THREADLINE_DATA": str(data), "THREADLINE_OFFLINE_DELAY_S": "1.0", **settings}
    env.pop("THREADLINE_TEMPORAL_ADDRESS", None)
    ports = [str(free_port()) for _ in range(3)]
    args = ["--json", "--port", ports[0], "--ui-port", ports[1], "--codec-port", ports[2]]
    with log.open("wb") as stderr:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "threadline", "dev", *args, env=env, stdout=subprocess.PIPE, stderr=stderr
        )
        try:
            ready = await _ready(process)
            env["THREADLINE_TEMPORAL_ADDRESS"] = ready["address"]
            yield Dev(ready["address"], ready["ui_url"], env)
        finally:
            if process.returncode is None:
                process.send_signal(signal.SIGTERM)
                await asyncio.wait_for(process.communicate(), START_TIMEOUT_S)


async def _ready(process: asyncio.subprocess.Process) -> dict[str, str]:
    """The line `threadline dev --json` prints once its worker and codec server are up."""
    assert process.stdout is not None
    async with asyncio.timeout(START_TIMEOUT_S):
        while line := await process.stdout.readline():
            printed = json.loads(line)
            if "codec_endpoint" in printed:
                await asyncio.sleep(1.0)  # the codec server starts listening right after it says so
                return dict(printed)
    raise AssertionError("threadline dev ended before it was ready")


async def five_turns(tl: Threadline, conversation: str) -> str:
    """The conversation of the screenshots: five turns, the third of 4 KB, the fourth stopped; its workflow id."""
    chat = tl.conversation("tutor", id=conversation)
    for k, message in enumerate(TURNS):
        if k == STOPPED:
            turn = await chat.send(message)
            await asyncio.sleep(0.3)
            await chat.stop()
            assert "stopped" == (await turn.result()).state
        else:
            await chat(message)
    return f"conversation/default/{conversation}"


@contextlib.asynccontextmanager
async def browser() -> AsyncIterator[Browser]:
    """Headless Chromium from the system's packages."""
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(executable_path=chromium(), args=["--no-sandbox"])
        try:
            yield launched
        finally:
            await launched.close()


async def history_page(browser: Browser, ui_url: str, workflow_id: str) -> Page:
    """The UI's page of the workflow's newest run (its Event History), loaded."""
    page = await browser.new_page(viewport={"width": WIDTH, "height": HEIGHT})
    url = f"{ui_url}/namespaces/default/workflows/{urllib.parse.quote(workflow_id, safe='')}"
    await page.goto(url, timeout=PAGE_TIMEOUT_MS)  # the UI forwards to the newest run's page
    # On a loaded machine the forward can stall as the first load below does (a request the UI never
    # repeats; a fresh-clone run waited out the whole timeout here): asked for again once.
    try:
        await page.wait_for_url(_RUN_PAGE, timeout=PAGE_TIMEOUT_MS // 2)
    except PageTimeout:
        await page.goto(url, timeout=PAGE_TIMEOUT_MS)
        await page.wait_for_url(_RUN_PAGE, timeout=PAGE_TIMEOUT_MS)
    await page.goto(page.url.rsplit("/", 1)[0] + "/history", timeout=PAGE_TIMEOUT_MS)
    # Not "network idle": the page refreshes itself every few seconds while the workflow runs. On a
    # loaded machine the UI's first load can stall on a request it never repeats: loaded again once.
    try:
        await page.get_by_text("Workflow Type").first.wait_for(timeout=PAGE_TIMEOUT_MS // 2)
    except PageTimeout:
        await page.reload(timeout=PAGE_TIMEOUT_MS)
        await page.get_by_text("Workflow Type").first.wait_for(timeout=PAGE_TIMEOUT_MS)
    return page


async def show(page: Page, tab: str, heading: str) -> None:
    """Open the page's `tab` and scroll its `heading` to the top of the window."""
    await page.get_by_role("tab", name=re.compile("^" + re.escape(tab))).first.click()
    found = page.get_by_role("heading", name=heading).first
    await found.wait_for(timeout=PAGE_TIMEOUT_MS)
    await found.evaluate("element => element.scrollIntoView()")
    await page.wait_for_timeout(3000)  # the codec server's answers arrive after the page is drawn


async def shoot(folder: Path) -> list[Path]:
    """Write the screenshots of a five-turn conversation (its payloads sealed) into `folder`."""
    await asyncio.to_thread(folder.mkdir, parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="ui-shots-") as name:
        tmp = Path(name)
        key = base64.b64encode(os.urandom(32)).decode()  # sealed in history: the UI reads it through the codec
        sealed = {"THREADLINE_ENCRYPTION_KEYS": f"k1={key}"}
        async with dev(tmp / "data", tmp / "dev.log", **sealed) as running, browser() as chrome:
            workflow_id = await five_turns(await running.threadline(), "sam")
            written = []
            page = await history_page(chrome, running.ui_url, workflow_id)
            for tab, heading, name in SHOTS:
                await show(page, tab, heading)
                await page.screenshot(path=folder / name)
                written.append(folder / name)
            return written


if __name__ == "__main__":
    for path in asyncio.run(shoot(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/images"))):
        print(path)
