"""Where a turn's CPU goes: py-spy samples of the throughput run, Threadline beside the best bare conversation.

    python -m bench._profile            # writes bench/profiles/turns.md (about two minutes)

For each system, a child process starts a dev server and drives `CONVERSATIONS` conversations at
once, `TURNS_EACH` turns each, `REPS` times (what `bench.turns` measures as throughput), while
py-spy samples it (`--nonblocking`, so the sampling does not stop the process). Samples are
sorted into the parts of a turn (each sample counts once, in the first part that its stack is
in) and reported per turn, with the frames that cost most. Only this Python process is sampled:
the dev server's CPU is what `bench.turns` reports beside it. Not part of `python -m bench`
(py-spy needs ptrace, and it is a diagnosis, not a figure with a target).
"""

from __future__ import annotations

import asyncio
import collections
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

RATE = 97
"""Samples per second: a prime, so the sampling does not beat with the work's own rhythm."""
CONVERSATIONS, TURNS_EACH, REPS = 100, 3, 3
SYSTEMS = ("threadline", "best bare")
"""The best bare conversation: bench/_bare.py's update-with-start, its handler running one activity."""
OUT = Path(__file__).parent / "profiles" / "turns.md"

PARTS: list[tuple[str, tuple[str, ...]]] = [
    ("creating workflow instances (the sandbox loads the workflow module)", ("_create_workflow_instance",)),
    (
        "payloads of workflow tasks (the SDK's visitor and codec, per payload)",
        ("decode_activation", "encode_completion"),
    ),
    ("workflow code (activations in the sandbox)", ("_RunningWorkflow.activate",)),
    ("record log appends (write + fsync, in a thread)", ("FolderStore.append", "_append_line")),
    ("record log reads (in a thread)", ("FolderStore.read",)),
    ("call log writes (in a thread)", ("write_call",)),
    ("stream writes", ("StreamWriter.", "StreamLog.writer")),
    ("activities (our code and the SDK's activity worker)", ("_ActivityWorker.",)),
    ("the client (send, wait, read the turn)", ("Conversation.", "BareChat.", "BestBareChat.")),
    ("workflow task polling and completion (SDK bridge)", ("_WorkflowWorker.",)),
    ("thread hand-offs (executor, loop wake-ups)", ("ThreadPoolExecutor.submit", "_write_to_self", "_read_from_self")),
]
GENERIC = ("(asyncio/", "(threading.py", "(concurrent/", "(<frozen", "(selectors.py", "bench/_profile.py", "<module>")
"""Frames every stack passes through: left out of the costliest frames."""
IDLE = ("EpollSelector.select", "_worker (concurrent/futures/thread.py", "Condition.wait", "SimpleQueue.get")


@dataclass
class Profile:
    """Busy samples of one system, by part and by frame."""

    samples: int = 0
    parts: collections.Counter[str] = field(default_factory=collections.Counter)
    frames: collections.Counter[str] = field(default_factory=collections.Counter)


def read_raw(path: Path) -> Profile:
    """Sort py-spy's raw (collapsed) stacks: idle threads dropped, each busy sample in one part."""
    profile = Profile()
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = [re.sub(r":\d+\)", ")", f) for f in stack.split(";")]
        if not frames or not frames[-1] or frames[-1].startswith(IDLE):
            continue
        n = int(count)
        profile.samples += n
        part = next((name for name, keys in PARTS if any(k in f for f in frames for k in keys)), "other")
        profile.parts[part] += n
        for frame in set(frames):
            if not any(generic in frame for generic in GENERIC):
                profile.frames[frame] += n
    return profile


async def drive(system: str) -> None:
    """The throughput run of one system (run under py-spy by `main`)."""
    from bench import turns
    from bench._report import quiet_logs

    quiet_logs()
    with tempfile.TemporaryDirectory(prefix="bench-profile-") as tmp:
        async with turns.started(Path(tmp)) as b:
            for rep in range(REPS):
                names = [f"p{rep}-{i}" for i in range(CONVERSATIONS)]
                chats: list[Callable[[str], Awaitable[Any]]] = (
                    [b.threadline(n) for n in names] if system == "threadline" else [b.best(n).predict for n in names]
                )

                async def one(predict: Callable[[str], Awaitable[Any]]) -> None:
                    for k in range(TURNS_EACH):
                        await predict(turns.question(k))

                start = time.perf_counter()
                await asyncio.gather(*(one(p) for p in chats))
                took = time.perf_counter() - start
                print(f"  {system} rep {rep + 1}: {CONVERSATIONS * TURNS_EACH / took:.1f} turns/s (while sampled)")


def record(system: str, out: Path) -> None:
    """Run `drive(system)` in a child process under py-spy, writing raw stacks to `out`."""
    spy = Path(sys.executable).with_name("py-spy")
    command = [str(spy), "record", "--nonblocking", "-r", str(RATE), "-f", "raw", "-o", str(out), "--"]
    subprocess.run([*command, sys.executable, "-m", "bench._profile", "--drive", system], check=True)


def report(profiles: dict[str, Profile]) -> str:
    """The markdown report: parts per turn side by side, then each system's costliest frames."""
    turns = CONVERSATIONS * TURNS_EACH * REPS
    ms = {name: 1000 / RATE / turns for name in profiles}
    lines = [
        "# Where a turn's time goes (py-spy)",
        "",
        f"Written by `python -m bench._profile`: {CONVERSATIONS} conversations x {TURNS_EACH} turns, {REPS} times,",
        f"sampled at {RATE} Hz. Busy time of the client-and-worker process per turn (samples x interval /",
        "turns; a thread blocked in `fsync` counts as busy), each sample in the first part its stack is in.",
        "",
        "| part | threadline ms/turn | best bare ms/turn |",
        "|---|---:|---:|",
    ]
    names = [name for name, _ in PARTS] + ["other"]
    for part in names:
        cells = [f"{profiles[s].parts[part] * ms[s]:.2f}" for s in SYSTEMS]
        lines.append(f"| {part} | {cells[0]} | {cells[1]} |")
    totals = [f"**{profiles[s].samples * ms[s]:.2f}**" for s in SYSTEMS]
    lines += [f"| **busy, all parts** | {totals[0]} | {totals[1]} |", ""]
    for system, profile in profiles.items():
        lines += [f"## {system}: the frames most samples are in (inclusive, our code and the SDK's)", ""]
        lines += ["| share | frame |", "|---:|---|"]
        for frame, n in profile.frames.most_common(40):
            lines.append(f"| {100 * n / profile.samples:.1f}% | `{frame}` |")
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    """Profile both systems and write `OUT`."""
    profiles: dict[str, Profile] = {}
    with tempfile.TemporaryDirectory(prefix="bench-profile-raw-") as tmp:
        for system in SYSTEMS:
            raw = Path(tmp) / f"{system}.txt"
            record(system, raw)
            profiles[system] = read_raw(raw)
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(report(profiles) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--drive"]:
        asyncio.run(drive(sys.argv[2]))
        from bench._report import exit_now

        exit_now()
    main()
