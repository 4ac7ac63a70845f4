"""The HTTP service: a thin FastAPI adapter over the client API, served by uvicorn.

    app = create_app(await threadline.connect(), keys=["k1", "k2:team"])

`/v1/conversations/...` takes bearer keys; `/health` and `/ready` are open; OpenAPI is at `/docs`.
Every error is `{"error": {"code", "message"}}`, its status taken from `STATUS`.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import structlog
import uvicorn
from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.middleware.cors import CORSMiddleware

from core.errors import ErrorCode, ThreadlineError
from core.settings import Settings
from threadline.client import Threadline, connect
from threadline.crossing import SDK_ERROR

from . import article, codec, openai_conversations, openai_responses
from .configuring import configuring
from .learning import router as learning_router
from .limits import DEFAULT_LIMITS, Limits, timed_protocol
from .middleware import APIKey, Auth, BodyLimit, RequestLog, on_error, on_http_error
from .records import router as records
from .routes import probes, router
from .schedules import scheduling
from .status import STATUS
from .tracing import Traced
from .turn_routes import acting

logger = structlog.get_logger(__name__)

SHUTDOWN_GRACE_S = 5
"""How long a stopping server lets open requests (event streams of long turns) finish before closing them."""

_DESCRIPTION = """\
Conversations whose turns survive crashes and restarts: each conversation is one Temporal workflow,
and its turns live in a record log that functai reads too.

Send `Authorization: Bearer <key>` to everything under `/v1/` (unless the service runs open).
A conversation is created by its first turn, or by `POST /v1/conversations` with the article's
body (`{"system_prompt": ...}`); with `program` alone that call only validates and returns a
handle. Messages go to an active guided flow first (`/messages`, `/flows`). Errors are
`{"error": {"code", "message"}}`; the status follows the code:

"""


@dataclass(frozen=True, slots=True)
class ServiceSettings:
    """The service's own settings: who may call it, how large a body may be and how long it may take to
    arrive, which origins may read it."""

    keys: tuple[APIKey, ...] = ()
    """`THREADLINE_API_KEYS` (comma-separated) and `THREADLINE_API_KEYS_FILE` (one per line); none: open."""
    max_body_bytes: int = DEFAULT_LIMITS.max_body_bytes
    """`THREADLINE_MAX_BODY_BYTES`: larger request bodies are refused 413 before they are parsed."""
    cors_origins: tuple[str, ...] = ()
    """`THREADLINE_CORS_ORIGINS` (comma-separated): browser origins allowed to call the service."""
    header_timeout_s: float = DEFAULT_LIMITS.header_timeout_s
    """`THREADLINE_HEADER_TIMEOUT_S`: a connection whose request headers take longer is closed."""
    body_timeout_s: float = DEFAULT_LIMITS.body_timeout_s
    """`THREADLINE_BODY_TIMEOUT_S`: a body that takes longer is answered 408 and its connection closed."""

    @property
    def limits(self) -> Limits:
        """How large a body may be and how long a request may take to arrive."""
        return Limits(self.max_body_bytes, self.header_timeout_s, self.body_timeout_s)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ServiceSettings:
        """Read the settings from `env` (default: the process environment)."""
        env = os.environ if env is None else env
        specs = _items(env.get("THREADLINE_API_KEYS", "").split(","))
        if env.get("THREADLINE_API_KEYS_FILE"):
            specs += _key_lines(Path(env["THREADLINE_API_KEYS_FILE"]))
        origins = _items(env.get("THREADLINE_CORS_ORIGINS", "").split(","))
        limits = Limits.from_env(env)
        keys = tuple(APIKey.parse(spec) for spec in specs)
        return cls(keys, limits.max_body_bytes, tuple(origins), limits.header_timeout_s, limits.body_timeout_s)


def _items(items: Iterable[str]) -> list[str]:
    return [item.strip() for item in items if item.strip() and not item.strip().startswith("#")]


def _key_lines(path: Path) -> list[str]:
    try:
        return _items(path.read_text(encoding="utf-8").splitlines())
    except OSError as err:
        raise ThreadlineError(
            ErrorCode.INVALID_REQUEST, f"cannot read THREADLINE_API_KEYS_FILE ({err.strerror}); fix the path"
        ) from None


_CORS: dict[str, Any] = {
    "allow_methods": ["GET", "POST", "PATCH", "DELETE"],
    # X-Namespace: the Temporal UI names its namespace on every codec request.
    "allow_headers": ["Authorization", "Content-Type", "Last-Event-ID", "X-Request-ID", "X-Namespace"],
    "expose_headers": ["X-Request-ID", "Location"],
}


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    config: ServiceSettings = app.state.config
    if not config.keys:
        logger.warning("service.open", reason="no API keys are set (THREADLINE_API_KEYS): anyone may call it")
    scoped = sum(key.stores is not None for key in config.keys)
    logger.info("service.started", keys=len(config.keys), scoped=scoped, max_body_bytes=config.max_body_bytes)
    try:
        yield
    finally:
        tl: Threadline = app.state.tl
        await codec.close(app)
        await tl.close()  # the service owns the client it serves: its stores' connections end with it


@asynccontextmanager
async def _closing_codec(app: FastAPI) -> AsyncIterator[None]:
    try:
        yield
    finally:
        await codec.close(app)


def create_app(
    tl: Threadline,
    *,
    keys: Sequence[APIKey | str] = (),
    limits: Limits = DEFAULT_LIMITS,
    cors_origins: Sequence[str] = (),
) -> FastAPI:
    """The service's app: `keys` (none: open), the body's limits, and the origins CORS allows (none by
    default). Serve it with `server_config`, whose protocol holds the limits' header timeout.

    The app owns `tl`: it closes it (its stores' connections) when it stops."""
    parsed = tuple(key if isinstance(key, APIKey) else APIKey.parse(key) for key in keys)
    codes = "\n".join(f"- `{code}`: {status}" for code, status in STATUS.items())
    app = FastAPI(
        title="Threadline",
        summary="Durable multi-turn LLM conversations on Temporal.",
        description=f"{_DESCRIPTION}{codes}\n- any other code: 500",
        lifespan=_lifespan,
    )
    timeouts = (limits.header_timeout_s, limits.body_timeout_s)
    app.state.tl, app.state.config = tl, ServiceSettings(parsed, limits.max_body_bytes, tuple(cors_origins), *timeouts)
    app.include_router(records)  # first: `/v1/conversations/records` is not a conversation id
    app.include_router(router)
    app.include_router(learning_router)
    app.include_router(article.router)
    app.include_router(acting)
    app.include_router(openai_conversations.router)
    app.include_router(openai_responses.router)
    app.include_router(scheduling)
    app.include_router(configuring)
    app.include_router(probes)
    codec.install(app, tl.settings)
    return guarded(app, app.state.config)


def guarded(app: FastAPI, config: ServiceSettings) -> FastAPI:
    """`app` behind the service's edge: coded error answers, the body limit, bearer keys, CORS for the
    configured origins, and one log line per request."""
    for kind in (ThreadlineError, RequestValidationError, SDK_ERROR):
        app.add_exception_handler(kind, on_error)
    app.add_exception_handler(HTTPException, on_http_error)
    app.add_middleware(BodyLimit, limits=config.limits)
    app.add_middleware(Auth, keys=config.keys)
    if config.cors_origins:  # outside Auth: browsers send preflight requests without the key
        app.add_middleware(CORSMiddleware, allow_origins=list(config.cors_origins), **_CORS)
    app.add_middleware(RequestLog)  # added last: the outermost, so every answer is logged
    app.add_middleware(Traced)  # outside it: the request's log line carries the request's trace
    return app


def create_codec_app(settings: Settings, config: ServiceSettings) -> FastAPI:
    """An app that serves only the codec routes (`threadline codec`): no Temporal connection needed."""
    app = FastAPI(
        title="Threadline codec",
        summary="Temporal's codec-server protocol for Threadline's payloads.",
        lifespan=_closing_codec,
    )
    app.state.config = config
    codec.install(app, settings)
    return guarded(app, config)


async def serve(settings: Settings, host: str = "127.0.0.1", port: int = 8000) -> None:
    """Connect to Temporal and serve the app with uvicorn until SIGINT or SIGTERM."""
    own = ServiceSettings.from_env()
    tl = await connect(settings)
    app = create_app(tl, keys=own.keys, limits=own.limits, cors_origins=own.cors_origins)
    await uvicorn.Server(server_config(app, host, port)).serve()  # its lifespan closes `tl`, also if it cannot listen


class _Embedded(uvicorn.Server):
    """A server inside another command (`threadline dev`): that command owns the signals and says
    when to stop (`should_exit`)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def codec_server(
    settings: Settings, host: str, port: int, *, origins: Sequence[str] = (), embedded: bool = False
) -> uvicorn.Server:
    """A server of the codec routes alone, also readable from `origins` (a Temporal UI's)."""
    own = ServiceSettings.from_env()
    config = replace(own, cors_origins=tuple(dict.fromkeys([*own.cors_origins, *origins])))
    kind = _Embedded if embedded else uvicorn.Server
    return kind(server_config(create_codec_app(settings, config), host, port))


def server_config(app: FastAPI, host: str = "127.0.0.1", port: int = 8000) -> uvicorn.Config:
    """How uvicorn serves `app`: with its limits' read timeouts, no access log (`RequestLog` writes one
    line per request), and uvicorn's records through `core.logs`."""
    limits: Limits = app.state.config.limits
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        http=timed_protocol(limits),
        log_config=None,
        access_log=False,
        ws="none",
        timeout_graceful_shutdown=SHUTDOWN_GRACE_S,
    )
