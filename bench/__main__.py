"""Run every benchmark in this folder: each `bench/<name>.py` module's `main()`, in a fixed order.

The modules named in `ORDER` run first, in that order; any other module found here runs after them,
sorted by name, so a new benchmark is never skipped.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
import time
from pathlib import Path

ORDER = ["store", "turns", "streaming", "context", "cold", "scale"]


def modules() -> list[str]:
    """The benchmark modules of this folder, in the order they run."""
    found = {m.name for m in pkgutil.iter_modules([str(Path(__file__).parent)]) if not m.name.startswith("_")}
    return [name for name in ORDER if name in found] + sorted(found - set(ORDER))


def main() -> int:
    start = time.perf_counter()
    names = modules()
    for i, name in enumerate(names):
        if i:
            print()
        module = importlib.import_module(f"bench.{name}")
        run = getattr(module, "main", None)
        if not callable(run):
            print(f"bench.{name} has no main(): skipped", file=sys.stderr)
            continue
        run()
    print(f"\nbench: {len(names)} benchmark(s) in {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
