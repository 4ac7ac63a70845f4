"""Settings from the environment, read once at the edges (CLI, worker, client), never in workflows."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from .budgets import Price, parse_budgets, parse_prices
from .encryption import EncryptionKeys
from .errors import ErrorCode, ThreadlineError
from .models import Budget

DEFAULT_ADDRESS = "127.0.0.1:7233"
DEFAULT_TASK_QUEUE = "threadline"
DEFAULT_IDLE_TIMEOUT_S = 24 * 3600.0
DEFAULT_WORKFLOW_CACHE = 1000
"""Temporal's own default: conversations a worker keeps in memory between their turns."""
DEFAULT_WARM_LOGS = 256
"""Conversations whose logs a worker that starts reads at once: those appended to last."""
DEFAULT_TURNS_PER_RUN = 5
"""Turns a conversation's workflow run serves before it continues as new (its history starts again)."""
DEFAULT_ATTRIBUTES_EVERY_S = 0.0
"""Search attributes written as each turn ends: a write rides on the turn's own last workflow task. A
longer interval leaves the writes of turns in a row to one timer at its end, whose firing is a
workflow task of its own (a replay, on a worker that has not the conversation cached): measured
dearer, for the server and the worker, than a write per turn in bursts of a few turns."""
DATABASE_SCHEMES = ("postgresql", "postgres")

StoreSpec = Path | str
"""Where a store is: a folder (`Path`), or a PostgreSQL URL (`str`, `postgresql://...`)."""


def is_database_url(spec: StoreSpec) -> bool:
    """Whether `spec` is a PostgreSQL URL rather than a folder."""
    return isinstance(spec, str) and urlsplit(spec).scheme.lower() in DATABASE_SCHEMES


def store_spec(value: str) -> StoreSpec:
    """A `THREADLINE_STORES` value: a PostgreSQL URL as it is, anything else a folder path."""
    value = value.strip()
    return value if is_database_url(value) else Path(value).expanduser().absolute()


def _stores(data: Path, spec: str) -> dict[str, StoreSpec]:
    stores: dict[str, StoreSpec] = {"default": data / "store"}
    # A URL may hold commas in its query, so items are split at commas that start a new `name=`.
    for item in filter(None, (part.strip() for part in _items(spec))):
        name, sep, where = item.partition("=")
        if not sep or not name.strip() or not where.strip():
            raise ThreadlineError(
                ErrorCode.INVALID_REQUEST,
                f"THREADLINE_STORES item {item!r} is not name=folder or name=postgresql://...; "
                "write e.g. THREADLINE_STORES=team=/srv/team",
            )
        stores[name.strip()] = store_spec(where)
    return stores


def _folders(variable: str, spec: str) -> dict[str, Path]:
    """`name=folder,...` as folders by name."""
    out: dict[str, Path] = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        name, sep, folder = item.partition("=")
        if not sep or not name.strip() or not folder.strip():
            raise ThreadlineError(
                ErrorCode.INVALID_REQUEST,
                f"{variable} item {item!r} is not name=folder; write e.g. {variable}=team=/srv/team",
            )
        out[name.strip()] = Path(folder.strip()).expanduser().absolute()
    return out


def _items(spec: str) -> list[str]:
    items: list[str] = []
    for part in spec.split(","):
        head = part.split("=", 1)[0]
        if items and ("=" not in part or "/" in head or ":" in head):
            items[-1] += "," + part
        else:
            items.append(part)
    return items


def _float(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ThreadlineError(ErrorCode.INVALID_REQUEST, f"{name}={raw!r} is not a number of seconds") from None
    if value < 0:
        raise ThreadlineError(ErrorCode.INVALID_REQUEST, f"{name} must not be negative")
    return value


def _count(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    if not raw.strip().isdigit():
        raise ThreadlineError(ErrorCode.INVALID_REQUEST, f"{name}={raw!r} is not a whole number of 0 or more")
    return int(raw)


def _positive(env: Mapping[str, str], name: str, default: int) -> int:
    value = _count(env, name, default)
    if value < 1:
        raise ThreadlineError(ErrorCode.INVALID_REQUEST, f"{name} must be 1 or more")
    return value


def _one_of(env: Mapping[str, str], name: str, choices: tuple[str, ...]) -> str:
    """The setting `name`, one of `choices` (unset or empty: the first)."""
    raw = (env.get(name) or choices[0]).strip().lower()
    if raw not in choices:
        raise ThreadlineError(ErrorCode.INVALID_REQUEST, f"{name}={raw!r} is not one of: {', '.join(choices)}")
    return raw


def _modules(spec: str) -> tuple[str, ...]:
    return tuple(name.strip() for name in spec.split(",") if name.strip())


FUNCTAI_STORE = "functai"
"""The name of functai's default folder among the stores (`store=True`)."""


def functai_folder(env: Mapping[str, str]) -> Path:
    """Where functai 1.2.0 keeps conversations given `store=True`: `$XDG_DATA_HOME/functai/conversations`
    (`~/.local/share` when unset; the platform's data folder on macOS and Windows), as functai finds it."""
    if sys.platform == "darwin":
        base = Path.home() / "Library" / "Application Support"
    elif os.name == "nt":
        base = Path(env.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local")
    else:
        base = Path(env.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    return base.expanduser().absolute() / "functai" / "conversations"


def default_model(env: Mapping[str, str]) -> str:
    """The model when `THREADLINE_MODEL` names none: a configured provider's, else the offline model."""
    if env.get("OPENAI_API_KEY"):
        return "openai:gpt-4o-mini"
    if env.get("ANTHROPIC_API_KEY"):
        return "anthropic:claude-sonnet-4-5"
    return "offline"


@dataclass(frozen=True, slots=True)
class Settings:
    """Where things are and how they behave; every field has an environment variable."""

    data: Path = field(default_factory=lambda: Path(".threadline").absolute())
    """`THREADLINE_DATA`: the data folder (default store, dev server database)."""
    stores: dict[str, StoreSpec] = field(default_factory=dict)
    """`THREADLINE_STORES=name=folder|postgresql://...,...`: named stores, each a folder or a PostgreSQL
    database (URL, with `?schema=` for a store of its own in a shared database); `default` is
    `$THREADLINE_DATA/store` unless named."""
    address: str = DEFAULT_ADDRESS
    """`THREADLINE_TEMPORAL_ADDRESS`: the Temporal frontend."""
    namespace: str = "default"
    """`THREADLINE_NAMESPACE`."""
    task_queue: str = DEFAULT_TASK_QUEUE
    """`THREADLINE_TASK_QUEUE`: where conversations and their activities run."""
    model: str = "offline"
    """`THREADLINE_MODEL`: the model used when a conversation names none (see `default_model`)."""
    offline_delay_s: float = 0.0
    """`THREADLINE_OFFLINE_DELAY_S`: how long the offline model takes per reply (streamed in pieces)."""
    idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S
    """`THREADLINE_IDLE_TIMEOUT_S`: a conversation idle this long closes; the next turn reopens it."""
    programs: tuple[str, ...] = ()
    """`THREADLINE_PROGRAMS=module,...`: modules whose programs the worker registers."""
    flows: tuple[str, ...] = ()
    """`THREADLINE_FLOWS=module,...`: modules whose guided flows the worker registers (besides the built-in
    `order` and any flow defined in a `THREADLINE_PROGRAMS` module)."""
    payloads: StoreSpec | None = None
    """`THREADLINE_PAYLOADS`: the folder where payloads too large for Temporal's history are kept (the
    claim check); every client and worker of a deployment must share it. Default `$THREADLINE_DATA/payloads`."""
    attributes_every_s: float = DEFAULT_ATTRIBUTES_EVERY_S
    """`THREADLINE_ATTRIBUTES_EVERY_S`: a conversation writes its search attributes at most this often
    (0: as each turn ends with nothing else to do)."""
    call_logs: dict[str, Path] = field(default_factory=dict)
    """`THREADLINE_CALL_LOGS=name=folder,...`: where a store's call log is kept (functai's `log_calls`
    folder); a store not named keeps it beside its conversations, in `<store folder>/calls`."""
    encryption: EncryptionKeys | None = None
    """`THREADLINE_ENCRYPTION_KEYS=id=<base64>,...` and `THREADLINE_ENCRYPTION_KEYS_FILE`: payloads are
    sealed (AES-256-GCM) before they reach Temporal, under the first key; every key listed decrypts."""
    functai_store: Path = field(default_factory=lambda: functai_folder(os.environ))
    """`XDG_DATA_HOME`, as functai reads it: functai's default folder, the store `store=True` names (see
    `functai_folder`); `THREADLINE_STORES=functai=...` names another."""
    turns_per_run: int = DEFAULT_TURNS_PER_RUN
    """`THREADLINE_TURNS_PER_RUN`: turns a conversation's workflow run serves before it continues as new.
    A worker that has not the conversation cached (restarted, or evicted it) replays the current run
    at its next turn, so fewer turns per run make that turn cheaper; each run's start costs a little."""
    workflow_cache: int = DEFAULT_WORKFLOW_CACHE
    """`THREADLINE_WORKFLOW_CACHE`: how many conversations a worker keeps in memory between turns (least
    recently used go; an evicted one replays its current run at its next turn); 0 keeps none."""
    warm_logs: int = DEFAULT_WARM_LOGS
    """`THREADLINE_WARM_LOGS`: a worker that starts reads at once the logs of this many conversations,
    those appended to last (at most 512, and 100,000 records), so that their next turns on it read
    only what was appended since; 0 reads none until a turn asks."""
    prices: dict[str, Price] = field(default_factory=dict)
    """`THREADLINE_PRICES={"model": {"input": X, "output": Y}}`: what a model costs per million tokens read and
    written (a conversation's `cost` budget and `render`'s estimate use it; a model not listed has no price)."""
    budgets: dict[str, Budget] = field(default_factory=dict)
    """`THREADLINE_BUDGETS={"store": {"tokens": N, "cost": X}}`: the budget of every conversation of a store,
    checked beside the conversation's own."""
    worker_gc: str = "tuned"
    """`THREADLINE_WORKER_GC`: `tuned` (the default) tunes the garbage collector of a process while a worker
    runs in it, so that full collections, which stop every turn in flight, come rarely and walk less
    (`core/collector.py`); `python` leaves the interpreter's collector as it is."""
    metrics_bind: str | None = None
    """`THREADLINE_METRICS_BIND=host:port`: serve Prometheus metrics on `http://host:port/metrics` (the
    Temporal SDK's and Threadline's; `--metrics-port` of `worker`, `dev` and `serve` binds loopback)."""

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Read the settings from `env` (default: the process environment)."""
        env = os.environ if env is None else env
        data = Path(env.get("THREADLINE_DATA") or ".threadline").expanduser().absolute()
        return cls(
            data=data,
            stores=_stores(data, env.get("THREADLINE_STORES", "")),
            address=env.get("THREADLINE_TEMPORAL_ADDRESS") or DEFAULT_ADDRESS,
            namespace=env.get("THREADLINE_NAMESPACE") or "default",
            task_queue=env.get("THREADLINE_TASK_QUEUE") or DEFAULT_TASK_QUEUE,
            model=env.get("THREADLINE_MODEL") or default_model(env),
            offline_delay_s=_float(env, "THREADLINE_OFFLINE_DELAY_S", 0.0),
            idle_timeout_s=_float(env, "THREADLINE_IDLE_TIMEOUT_S", DEFAULT_IDLE_TIMEOUT_S),
            programs=_modules(env.get("THREADLINE_PROGRAMS", "")),
            flows=_modules(env.get("THREADLINE_FLOWS", "")),
            payloads=store_spec(env["THREADLINE_PAYLOADS"]) if env.get("THREADLINE_PAYLOADS") else None,
            attributes_every_s=_float(env, "THREADLINE_ATTRIBUTES_EVERY_S", DEFAULT_ATTRIBUTES_EVERY_S),
            call_logs=_folders("THREADLINE_CALL_LOGS", env.get("THREADLINE_CALL_LOGS", "")),
            functai_store=functai_folder(env),
            workflow_cache=_count(env, "THREADLINE_WORKFLOW_CACHE", DEFAULT_WORKFLOW_CACHE),
            warm_logs=_count(env, "THREADLINE_WARM_LOGS", DEFAULT_WARM_LOGS),
            turns_per_run=_positive(env, "THREADLINE_TURNS_PER_RUN", DEFAULT_TURNS_PER_RUN),
            encryption=EncryptionKeys.from_env(env),
            metrics_bind=env.get("THREADLINE_METRICS_BIND") or None,
            worker_gc=_one_of(env, "THREADLINE_WORKER_GC", ("tuned", "python")),
            prices=parse_prices(env.get("THREADLINE_PRICES", "")),
            budgets=parse_budgets(env.get("THREADLINE_BUDGETS", "")),
        )

    def payloads_spec(self) -> StoreSpec:
        """Where payloads too large for history are kept: `THREADLINE_PAYLOADS`, else the default store's
        database when it is one, else `$THREADLINE_DATA/payloads`."""
        if self.payloads is not None:
            return self.payloads
        default = self.named_stores().get("default")
        return default if default is not None and is_database_url(default) else self.data / "payloads"

    @property
    def payload_folder(self) -> Path:
        """The payload folder (`store-kind` when payloads are kept in a database)."""
        spec = self.payloads_spec()
        if not isinstance(spec, Path):
            raise ThreadlineError(ErrorCode.STORE_KIND, "payloads are kept in a PostgreSQL database, not a folder")
        return spec

    def named_stores(self) -> dict[str, StoreSpec]:
        """Every store by name (`default` alone, in the data folder, when no setting names any)."""
        return dict(self.stores) if self.stores else {"default": self.data / "store"}

    def hidden_stores(self) -> dict[str, StoreSpec]:
        """Stores reached by name but never listed: functai's default folder (`store=True`), unless
        `THREADLINE_STORES` names a store `functai` itself."""
        return {} if FUNCTAI_STORE in self.named_stores() else {FUNCTAI_STORE: self.functai_store}

    def store_spec(self, name: str) -> StoreSpec:
        """Where the store named `name` is: its folder, or its PostgreSQL URL.

        Raises:
            ThreadlineError: `store-unknown` for a name no setting gives.
        """
        stores = {**self.hidden_stores(), **self.named_stores()}
        if name not in stores:
            known = ", ".join(sorted(self.named_stores()))
            raise ThreadlineError(
                ErrorCode.STORE_UNKNOWN, f"no store is named {name!r} (known: {known}); add it to THREADLINE_STORES"
            )
        return stores[name]

    def store_folder(self, name: str) -> Path:
        """The folder of the store named `name`.

        Raises:
            ThreadlineError: `store-unknown` for a name no setting gives; `store-kind` when the store
                is a PostgreSQL database (reach it through `store.backends.opening`, not a path).
        """
        spec = self.store_spec(name)
        if not isinstance(spec, Path):
            raise ThreadlineError(
                ErrorCode.STORE_KIND,
                f"store {name!r} is a PostgreSQL database, not a folder: use a command that reads it through "
                "its URL (threadline store copy to make a folder of it)",
                store=name,
            )
        return spec

    def call_log_folder(self, name: str) -> Path:
        """The call-log folder of the store named `name`: `THREADLINE_CALL_LOGS`'s, else `<store folder>/calls`.

        Raises:
            ThreadlineError: `store-unknown` for a name no setting gives.
        """
        folder = self.store_folder(name)
        return self.call_logs.get(name) or folder / "calls"
