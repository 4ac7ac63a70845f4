"""The HTTP service: a thin FastAPI adapter over the Python API, served by uvicorn."""

from __future__ import annotations

from .app import ServiceSettings, create_app, serve
from .middleware import STATUS, APIKey

__all__ = ["STATUS", "APIKey", "ServiceSettings", "create_app", "serve"]
