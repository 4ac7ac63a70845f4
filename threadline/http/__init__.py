"""The HTTP service: a thin FastAPI adapter over the Python API, served by uvicorn."""

from __future__ import annotations

from .app import ServiceSettings, codec_server, create_app, create_codec_app, serve
from .limits import Limits
from .middleware import APIKey
from .status import STATUS

__all__ = [
    "STATUS",
    "APIKey",
    "Limits",
    "ServiceSettings",
    "codec_server",
    "create_app",
    "create_codec_app",
    "serve",
]
