"""Settings from the environment, read once at the edges (CLI, worker, client), never in workflows."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from .errors import ErrorCode, ThreadlineError

DEFAULT_ADDRESS = "127.0.0.1:7233"
DEFAULT_TASK_QUEUE = "threadline"
DEFAULT_IDLE_TIMEOUT_S = 24 * 3600.0


def _stores(data: Path, spec: str) -> dict[str, Path]:
    stores = {"default": data / "store"}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        name, sep, folder = item.partition("=")
        if not sep or not name.strip() or not folder.strip():
            raise ThreadlineError(
                ErrorCode.INVALID_REQUEST,
                f"THREADLINE_STORES item {item!r} is not name=folder; write e.g. THREADLINE_STORES=team=/srv/team",
            )
        stores[name.strip()] = Path(folder.strip()).expanduser().absolute()
    return stores


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


def _modules(spec: str) -> tuple[str, ...]:
    return tuple(name.strip() for name in spec.split(",") if name.strip())


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
    stores: dict[str, Path] = field(default_factory=dict)
    """`THREADLINE_STORES=name=folder,...`: named stores; `default` is `$THREADLINE_DATA/store`."""
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
    payloads: Path | None = None
    """`THREADLINE_PAYLOADS`: the folder where payloads too large for Temporal's history are kept (the
    claim check); every client and worker of a deployment must share it. Default `$THREADLINE_DATA/payloads`."""
    attributes_every_s: float = 10.0
    """`THREADLINE_ATTRIBUTES_EVERY_S`: a conversation writes its search attributes at most this often."""

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
            payloads=Path(env["THREADLINE_PAYLOADS"]).expanduser().absolute()
            if env.get("THREADLINE_PAYLOADS")
            else None,
            attributes_every_s=_float(env, "THREADLINE_ATTRIBUTES_EVERY_S", 10.0),
        )

    @property
    def payload_folder(self) -> Path:
        """Where payloads too large for history are kept (`THREADLINE_PAYLOADS`, else `$THREADLINE_DATA/payloads`)."""
        return self.payloads or self.data / "payloads"

    def store_folder(self, name: str) -> Path:
        """The folder of the store named `name`.

        Raises:
            ThreadlineError: `store-unknown` for a name no setting gives.
        """
        stores = self.stores or {"default": self.data / "store"}
        if name not in stores:
            known = ", ".join(sorted(stores))
            raise ThreadlineError(
                ErrorCode.STORE_UNKNOWN, f"no store is named {name!r} (known: {known}); add it to THREADLINE_STORES"
            )
        return stores[name]
