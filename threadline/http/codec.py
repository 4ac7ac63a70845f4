"""Temporal's codec-server protocol, so the Temporal UI, the `temporal` CLI and any SDK read what
Threadline's payload codec wrote: large payloads kept by the claim check, and sealed ones.

`POST /v1/codec/decode` takes `{"payloads": [...]}` (the JSON form of Temporal's `Payloads`, bytes
in base64) and answers the same shape with each payload as Threadline's clients and workers see it;
`POST /v1/codec/encode` does the reverse. The endpoint to give the UI (`--ui-codec-endpoint`) or the
CLI (`--codec-endpoint`) is `http://<host>:<port>/v1/codec`. Like every `/v1/` route it needs a
bearer key when the service has keys (the CLI's `--codec-auth 'Bearer <key>'`), and browsers reach
it from the origins `THREADLINE_CORS_ORIGINS` names (the UI's).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import Response
from google.protobuf import json_format
from google.protobuf.message import DecodeError
from temporalio.api.common.v1 import Payloads
from temporalio.converter import PayloadCodec

from core.errors import ErrorCode, ThreadlineError
from core.settings import Settings
from core.temporal import data_converter
from store.backends.blobs import open_blobs

router = APIRouter(prefix="/v1/codec", tags=["codec"])

MAX_PAYLOADS = 1000
"""The most payloads one request may carry (the UI sends one event's, the CLI one history page's)."""


def settings_codec(settings: Settings) -> PayloadCodec | None:
    """The payload codec every client and worker of `settings` uses (claim check, encryption)."""
    return data_converter(open_blobs(settings), settings.encryption).payload_codec


async def _payloads(request: Request) -> Payloads:
    try:
        parsed = json_format.Parse(await request.body(), Payloads())
    except (json_format.ParseError, DecodeError, UnicodeDecodeError):
        raise ThreadlineError(
            ErrorCode.INVALID_REQUEST, 'send {"payloads": [{"metadata": {...}, "data": "<base64>"}]} as JSON'
        ) from None
    if len(parsed.payloads) > MAX_PAYLOADS:
        raise ThreadlineError(ErrorCode.INVALID_REQUEST, f"send at most {MAX_PAYLOADS} payloads at a time")
    return parsed


def _answer(payloads: Sequence[Any]) -> Response:
    body = json_format.MessageToJson(Payloads(payloads=list(payloads)), indent=None)
    return Response(body, media_type="application/json")


def _codec(request: Request) -> PayloadCodec | None:
    """The app's codec, made on first use (a PostgreSQL payload store opens its pool then)."""
    state = request.app.state
    if not hasattr(state, "codec"):
        state.codec = settings_codec(state.codec_settings)
    codec: PayloadCodec | None = state.codec
    return codec


@router.post("/decode", summary="Payloads as Threadline reads them (claim check resolved, encryption opened)")
async def decode(request: Request) -> Response:
    codec, payloads = _codec(request), (await _payloads(request)).payloads
    return _answer(await codec.decode(payloads) if codec else payloads)


@router.post("/encode", summary="Payloads as Threadline writes them (sealed, large ones kept by reference)")
async def encode(request: Request) -> Response:
    codec, payloads = _codec(request), (await _payloads(request)).payloads
    return _answer(await codec.encode(payloads) if codec else payloads)


def install(app: FastAPI, settings: Settings) -> None:
    """Serve the codec routes on `app`, with the payload codec `settings` give every process."""
    app.state.codec_settings = settings
    app.include_router(router)
