"""Cold-turn benchmark: the first turn of a long conversation after a restart, against functai 1.2.0.

    python -m bench.cold

For each size in `SIZES` a conversation of that many turns is written straight into a folder
store (`tests/support/long_log.py`: the records Threadline writes, each turn `saw_of` its parent) and
copied once per system. Then, each in a process that has never seen it:

1. threadline: a new worker process (`python worker.py`, empty caches) on a dev server, and a
   fresh client (`tl.conversation("tutor", id=...)` then `await chat("next")`): the time until
   the answer is back, the client's own cold read included. Then the worker's peak RSS.
2. threadline store: a new process that opens a fresh `FolderStore` and `Writer` and makes one
   turn with a constant answer (no Temporal): what placing, showing and ending a turn costs the
   store. Its peak RSS, and (tracemalloc, in that process) the bytes a fresh `FolderStore` and
   `Log` keep of the whole conversation, and their peak while reading it.
3. functai: a new process that opens `tutor.conversation(id, store=folder)` and sends one turn
   with an offline model (lm15's FakeLM): the anchor. Its peak RSS.

Absolute times depend on the machine; the ratio threadline / functai is what to read.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench._report import exit_now, print_table

SIZES = tuple(int(n) for n in os.environ.get("BENCH_COLD_SIZES", "1000,10000,100000").split(","))
"""The conversation sizes, in turns (`BENCH_COLD_SIZES=1000,10000` for a shorter run)."""
ROOT = Path(__file__).resolve().parent.parent
TARGET_RATIO = 2.0
TARGET_SECONDS_AT_10K = 1.0


@dataclasses.dataclass(slots=True)
class Row:
    """One line of the result table: threadline against functai."""

    measure: str
    threadline: float | str
    anchor: float | str
    unit: str = ""
    digits: int = 2
    target: str = "-"
    met: bool | None = None

    @property
    def ratio(self) -> float | None:
        if isinstance(self.threadline, str) or isinstance(self.anchor, str) or not self.anchor:
            return None
        return self.threadline / self.anchor

    def cell(self, value: float | str) -> str:
        return value if isinstance(value, str) else f"{value:,.{self.digits}f} {self.unit}".strip()

    def markdown(self) -> str:
        ratio = "-" if self.ratio is None else f"{self.ratio:.2f}"
        met = "-" if self.met is None else ("met" if self.met else "**NOT met**")
        cells = [self.measure, self.cell(self.threadline), self.cell(self.anchor), ratio, self.target, met]
        return "| " + " | ".join(cells) + " |"


# ------------------------------------------------------------------ the child processes


def _peak_rss_mb() -> float:
    # VmHWM, not ru_maxrss: after a fork and exec, ru_maxrss still counts the parent's pages.
    return _status_mb(os.getpid(), "VmHWM")


def functai_turn(folder: str, conversation: str) -> dict[str, Any]:
    """In a fresh process: functai opens the conversation and sends one turn (offline)."""
    from tests.support.functai_kit import offline, reply, tutor

    with offline([reply("ok")]):
        start = time.perf_counter()
        chat = tutor.conversation(conversation, store=folder)
        chat("next")
        seconds = time.perf_counter() - start
    return {"seconds": seconds, "rss_mb": _peak_rss_mb()}


def store_turn(folder: str, conversation: str) -> dict[str, Any]:
    """In a fresh process: a fresh store and writer place, show and end one turn; then memory."""
    from store.backends.folder import FolderStore
    from store.backends.writer import Writer
    from store.log.turns import Answer, TurnRequest
    from store.programs.program import TUTOR

    start = time.perf_counter()
    writer = Writer(FolderStore(folder), conversation, TUTOR)
    writer.send(TurnRequest({"message": "next"}), lambda _shown, _inputs: Answer({"result": "ok"}, model="bench"))
    seconds = time.perf_counter() - start
    rss = _peak_rss_mb()
    del writer
    kept, peak = kept_memory(folder, conversation)
    return {"seconds": seconds, "rss_mb": rss, "kept_mb": kept / 2**20, "peak_mb": peak / 2**20}


def kept_memory(folder: str, conversation: str) -> tuple[int, int]:
    """The bytes (tracemalloc) a fresh FolderStore and Log keep of the conversation, and their peak."""
    import gc
    import tracemalloc

    from store.backends.base import read_batches
    from store.backends.folder import FolderStore
    from store.log.state import Log

    def cold_read() -> tuple[FolderStore, Log]:
        store, log = FolderStore(folder), Log()
        for batch in read_batches(store, conversation):
            log.apply(batch)
        return store, log

    gc.collect()
    tracemalloc.start()
    kept_objects = cold_read()
    gc.collect()
    kept, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del kept_objects
    return kept, peak


def child(kind: str, folder: Path, conversation: str) -> dict[str, Any]:
    """Run `python -m bench.cold <kind> <folder> <conversation>` and return the JSON it prints."""
    command = [sys.executable, "-m", "bench.cold", kind, str(folder), conversation]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}"}
    out: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return out


# ------------------------------------------------------------------ the worker


def _status_mb(pid: int, field: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def worker_turn(env: Any, data: Path, conversation: str) -> dict[str, Any]:
    """A new worker process and a fresh client take the next turn of the conversation in `data`."""
    from core.settings import Settings
    from tests.support.processes import WorkerProcess
    from threadline.client import connect

    settings = dataclasses.replace(
        Settings.from_env({}),
        data=data,
        stores={"default": data / "store"},
        address=env.client.service_client.config.target_host,
        task_queue=f"bench-cold-{uuid.uuid4().hex[:8]}",
    )
    worker = WorkerProcess(settings, data / "worker.log")
    try:
        await asyncio.to_thread(worker.wait_ready)
        idle = _status_mb(worker.process.pid, "VmRSS")
        tl = await connect(settings, client=env.client)
        chat = tl.conversation("tutor", id=conversation)
        start = time.perf_counter()
        try:
            await chat("next")
        except Exception as err:  # noqa: BLE001 - the old code fails here: report it, do not stop the run
            error = f"{type(err).__name__}: {getattr(err, 'code', '')}"
            return {"error": error, "rss_mb": _status_mb(worker.process.pid, "VmHWM"), "idle_mb": idle}
        seconds = time.perf_counter() - start
        return {"seconds": seconds, "rss_mb": _status_mb(worker.process.pid, "VmHWM"), "idle_mb": idle}
    finally:
        worker.stop()


# ------------------------------------------------------------------ the run


def make_copies(root: Path, turns: int, conversation: str) -> tuple[Path, Path, Path, float]:
    """Write the conversation once and copy it for each system; the seconds the writing took."""
    from tests.support.long_log import write_conversation

    source = root / f"source-{turns}"
    start = time.perf_counter()
    write_conversation(source, conversation, turns)
    seconds = time.perf_counter() - start
    name = f"{conversation}.jsonl"
    copies = []
    for system in ("worker", "store", "functai"):
        target = root / f"{system}-{turns}"
        folder = target / "store" if system == "worker" else target
        (folder / "conversations").mkdir(mode=0o700, parents=True)
        shutil.copyfile(source / "conversations" / name, folder / "conversations" / name)
        copies.append(target)
    shutil.rmtree(source)
    return copies[0], copies[1], copies[2], seconds


def _seconds(result: dict[str, Any]) -> float | str:
    return result["seconds"] if "seconds" in result else f"failed ({result['error']})"


def rows_for(turns: int, worker: dict[str, Any], store: dict[str, Any], functai: dict[str, Any]) -> list[Row]:
    """The table's rows for one size."""
    size = f"{turns:,} turns"
    anchor = _seconds(functai)
    cold = _seconds(worker)
    ok = isinstance(cold, float) and isinstance(anchor, float) and cold <= TARGET_RATIO * anchor
    target = f"<= {TARGET_RATIO:.0f}x functai"
    if turns == 10_000:
        target += f", < {TARGET_SECONDS_AT_10K:.0f} s"
        ok = ok and isinstance(cold, float) and cold < TARGET_SECONDS_AT_10K
    rows = [Row(f"cold turn, worker + client, {size}", cold, anchor, "s", target=target, met=ok)]
    rows.append(Row(f"cold turn, store only, {size}", _seconds(store), anchor, "s"))
    for who, result in (("worker", worker), ("store process", store)):
        rss = result.get("rss_mb", "-")
        rows.append(Row(f"peak RSS, {who} / functai, {size}", rss, functai.get("rss_mb", "-"), "MB", 0))
    if "kept_mb" in store:
        rows.append(Row(f"FolderStore + Log kept, {size}", store["kept_mb"], "-", "MB", 1))
        rows.append(Row(f"... per turn, {size}", store["kept_mb"] * 2**20 / turns, "-", "B", 0))
        rows.append(Row(f"... peak while reading, {size}", store["peak_mb"], "-", "MB", 1))
    return rows


async def run(root: Path) -> list[Row]:
    from bench._server import start_dev_server

    rows: list[Row] = []
    async with await start_dev_server() as env:
        for turns in SIZES:
            conversation = f"cold-{turns}-{uuid.uuid4().hex[:8]}"  # a workflow of its own for each size
            worker_dir, store_dir, functai_dir, written = make_copies(root, turns, conversation)
            print(f"\n{turns:,} turns: written in {written:.2f} s", flush=True)
            functai = await asyncio.to_thread(child, "functai", functai_dir, conversation)
            print(f"  functai        {functai}", flush=True)
            worker = await worker_turn(env, worker_dir, conversation)
            print(f"  worker+client  {worker}", flush=True)
            store = await asyncio.to_thread(child, "store", store_dir, conversation)
            print(f"  store          {store}", flush=True)
            rows += rows_for(turns, worker, store, functai)
            for folder in (worker_dir, store_dir, functai_dir):
                shutil.rmtree(folder, ignore_errors=True)
    return rows


def main() -> list[Row]:
    """Run every size, print the details and the table; return the table's rows."""
    from bench._report import quiet_logs

    started_at = time.perf_counter()
    quiet_logs()
    print("Cold-turn benchmark: the first turn of a long conversation in processes that never saw it")
    print(f"  python {platform.python_version()}, {os.cpu_count()} CPUs; sizes {', '.join(f'{n:,}' for n in SIZES)}")
    with tempfile.TemporaryDirectory(prefix="bench-cold-") as folder:
        rows = asyncio.run(run(Path(folder)))
    elapsed = time.perf_counter() - started_at
    print_table(rows, f"Results ({os.cpu_count()} CPUs, {elapsed:.1f} s; ratio = threadline / functai 1.2.0)")
    return rows


if __name__ == "__main__":
    if len(sys.argv) == 4:
        kinds = {"functai": functai_turn, "store": store_turn}
        print(json.dumps(kinds[sys.argv[1]](sys.argv[2], sys.argv[3])))
    else:
        main()
        exit_now()
