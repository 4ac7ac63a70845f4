"""The layers hold by themselves: read from the source (no code runs), imports flow one way,
`store/` knows nothing of Temporal or HTTP, workflows touch no I/O, clock or randomness, nothing
imports the composition root but the serving commands, and no module imports itself round a circle."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LAYERS = ("core", "store", "activities", "workflows", "threadline", "worker")
"""Bottom to top: a module imports from its own layer or those below it."""
FORBIDDEN = {
    "store": {"temporalio", "httpx", "fastapi", "uvicorn"},
    "workflows": {"httpx", "time", "random", "uuid", "os", "pathlib", "socket", "store", "fastapi"},
    "core": {"httpx", "fastapi", "uvicorn"},
    "activities": {"fastapi", "uvicorn"},
}
"""What each layer must not import at all (workflows: no I/O, clock, randomness, nor the store itself)."""
WORKER_IMPORTERS = {"threadline.cli.serving", "threadline.embedding"}


def modules() -> Iterator[tuple[str, Path]]:
    for layer in LAYERS[:-1]:
        for path in sorted((ROOT / layer).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            yield ".".join(parts[:-1] if parts[-1] == "__init__" else parts), path
    yield "worker", ROOT / "worker.py"


def imports(name: str, path: Path, ours: set[str]) -> set[str]:
    """Every module `path` imports, anywhere in it (relative imports resolved; `from package import
    module` counts as importing that module, not the package's `__init__`)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            submodules = {f"{base}.{alias.name}" for alias in node.names} & ours
            found.update(submodules or {base})
            if len(submodules) < len(node.names):
                found.add(base)
    return found


OURS = {name for name, _ in modules()}
GRAPH = {name: imports(name, path, OURS) for name, path in modules()}


def layer(module: str) -> str:
    return module.split(".")[0]


def project_imports(name: str) -> set[str]:
    return {m for m in GRAPH[name] if m in OURS and m != name}


@pytest.mark.parametrize("name", sorted(GRAPH))
def test_imports_flow_down_the_layers(name: str) -> None:
    """core <- store <- activities <- workflows <- threadline <- worker."""
    rank = LAYERS.index(layer(name))
    allowed = {"worker"} if name in WORKER_IMPORTERS else set()

    upward = sorted(m for m in project_imports(name) - allowed if LAYERS.index(layer(m)) > rank)

    assert [] == upward


@pytest.mark.parametrize("name", sorted(n for n in GRAPH if layer(n) in FORBIDDEN))
def test_a_layer_imports_nothing_it_must_not(name: str) -> None:
    """store/ has no Temporal or HTTP; workflows/ no I/O, clock, randomness or store; core no HTTP."""
    banned = FORBIDDEN[layer(name)]
    if name == "workflows.attributes":
        banned = banned - {"store"}

    found = sorted(m for m in GRAPH[name] if m.split(".")[0] in banned)

    assert [] == found


STORE_PARTS = ("programs", "log", "flows", "backends", "calls")
"""store/'s parts, bottom to top: programs describe what a turn runs, the log's rules decide turns over
applied records, flows run on those rules, backends keep the records, calls learn from what was kept.
`store.records` and `store.values` (the format's bytes and JSON walks) sit below them all."""


def store_part(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "store" and len(parts) > 2 and parts[1] in STORE_PARTS else None


@pytest.mark.parametrize("name", sorted(n for n in GRAPH if store_part(n)))
def test_store_parts_import_only_parts_below_them(name: str) -> None:
    """The log's rules and programs import no backend; nothing in store/ imports a part above its own."""
    rank = STORE_PARTS.index(store_part(name) or "")

    upward = sorted(m for m in project_imports(name) if STORE_PARTS.index(store_part(m) or "programs") > rank)

    assert [] == upward


CROSSING = "threadline.crossing"
"""The one module of the public face that reads what Temporal's SDK raises (docs/errors.md)."""


def temporal_errors(path: Path) -> list[str]:
    """The error types of Temporal's SDK that `path` imports (RPCError and its statuses, any *Error)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("temporalio"):
            found += [
                f"{node.module}.{alias.name}"
                for alias in node.names
                if node.module == "temporalio.service" or alias.name.endswith("Error")
            ]
        elif isinstance(node, ast.Import):
            found += [alias.name for alias in node.names if alias.name == "temporalio.service"]
    return found


@pytest.mark.parametrize("name", sorted(n for n in GRAPH if layer(n) == "threadline" and n != CROSSING))
def test_only_the_crossing_reads_what_temporal_raises(name: str) -> None:
    """Every call into Temporal from the public face crosses `threadline.crossing`, which turns what
    the SDK raises into coded errors: no other module imports the SDK's error types to catch one
    itself (and perhaps let another through raw)."""
    path = next(path for module, path in modules() if module == name)

    assert [] == temporal_errors(path)


def test_only_the_serving_commands_import_the_composition_root() -> None:
    """worker.py is on top: what runs a worker (the CLI's serving commands, the embedded worker of
    `connect(embedded=True)`) reaches it through one narrow function."""
    importers = {
        name for name, found in GRAPH.items() if "worker" in found or any(m.startswith("worker.") for m in found)
    }

    assert WORKER_IMPORTERS == importers


def test_no_module_imports_itself_round_a_circle() -> None:
    """No import cycles (every import counts, also those inside functions)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(project_imports(node)):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for name in sorted(GRAPH):
        if name not in index:
            visit(name)

    assert [] == cycles


@pytest.mark.parametrize("path", sorted((ROOT / "workflows").glob("*.py")), ids=lambda p: p.name)
def test_workflow_code_opens_no_file(path: Path) -> None:
    """No `open(...)` in workflow code (ruff's banned-api covers modules, not builtins)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))

    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", None) == "open"]

    assert [] == calls


WORKFLOW_MODULES = sorted(p for p in (ROOT / "workflows").glob("*.py") if "@workflow.defn" in p.read_text())


@pytest.mark.parametrize("path", WORKFLOW_MODULES, ids=lambda p: p.name)
def test_a_workflow_module_imports_its_helpers_by_name(path: Path) -> None:
    """A workflow's module runs in the sandbox once per workflow run; `from . import _calls` there makes
    the sandbox run the helper again each time too (the package attribute bypasses the pass-through),
    where `from ._calls import quick` loads it once per worker."""
    tree = ast.parse(path.read_text(encoding="utf-8"))

    bare = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level and not n.module]

    assert [] == bare


def test_the_worker_registers_every_activity_the_workflows_call() -> None:
    """Each `XActivities.method` a workflow calls is an `@activity.defn` that `build_worker` registers."""
    import worker

    called = {
        (node.value.id, node.attr)
        for path in (ROOT / "workflows").glob("*.py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id.endswith("Activities")
    }
    classes = {name: getattr(worker, name) for name, _ in called}
    registered = {
        (name, method.__name__) for name, cls in classes.items() for method in worker.activities_of(cls.__new__(cls))
    }

    assert called
    assert set() == called - registered


MUTATORS = frozenset(
    {"append", "appendleft", "extend", "insert", "pop", "popleft", "popitem", "remove", "clear", "add", "discard"}
    | {"update", "setdefault", "sort", "reverse"}
)
"""Methods that change the container they are called on."""


def written_fields(tree: ast.AST) -> Iterator[ast.Attribute]:
    """Every `x.field` the code writes: assigns (plain, augmented, annotated), deletes, stores through
    a subscript, or changes with a container method."""
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign | ast.Delete):
            targets = list(node.targets)
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in MUTATORS:
            targets = [node.func.value]
        while targets:
            target = targets.pop()
            if isinstance(target, ast.Tuple | ast.List | ast.Starred):
                targets.extend(target.elts if not isinstance(target, ast.Starred) else [target.value])
                continue
            while isinstance(target, ast.Subscript):
                target = target.value
            if isinstance(target, ast.Attribute):
                yield target


@pytest.mark.parametrize("path", sorted((ROOT / "workflows").glob("*.py")), ids=lambda p: p.name)
def test_workflow_code_writes_only_its_own_fields(path: Path) -> None:
    """A workflow object writes only `self.field`: whatever another object holds (`turns.begun[...]`,
    `self.state.pending.pop(0)`, `self.turns.closed = False`) changes through that object's methods,
    so the running state has one owner and each of its changes one place."""
    tree = ast.parse(path.read_text(encoding="utf-8"))

    foreign = [
        f"{field.lineno}: {ast.unparse(field)}"
        for field in written_fields(tree)
        if not (isinstance(field.value, ast.Name) and field.value.id == "self")
    ]

    assert [] == foreign
