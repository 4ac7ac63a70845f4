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

from fastapi import APIRouter, FastAPI, Request, Security
from fastapi.responses import Response
from fastapi.security import HTTPBearer
from google.protobuf import json_format
from google.protobuf.message import DecodeError
from pydantic import BaseModel, ConfigDict, Field
from temporalio.api.common.v1 import Payloads
from temporalio.converter import PayloadCodec

from core.errors import ErrorCode, ThreadlineError
from core.settings import Settings
from core.temporal import data_converter
from store.backends.blobs import open_blobs

from .bodies import ErrorBody

MAX_PAYLOADS = 1000
"""The most payloads one request may carry (the UI sends one event's, the CLI one history page's)."""


class PayloadBody(BaseModel):
    """One payload in Temporal's JSON form: its metadata values and its data in base64."""

    metadata: dict[str, str] = {}
    data: str = ""


class PayloadsBody(BaseModel):
    """Temporal's `Payloads` as JSON, what the codec-server protocol sends and answers."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [{"payloads": [{"metadata": {"encoding": "anNvbi9wbGFpbg=="}, "data": "IkhpIg=="}]}]
        }
    )
    payloads: list[PayloadBody] = Field(default_factory=list, max_length=MAX_PAYLOADS)


router = APIRouter(
    prefix="/v1/codec",
    tags=["codec"],
    responses={200: {"model": PayloadsBody}, "4XX": {"model": ErrorBody}},
    dependencies=[Security(HTTPBearer(auto_error=False))],
)


def _parsed(body: PayloadsBody) -> Payloads:
    try:
        return json_format.ParseDict(body.model_dump(), Payloads())
    except (json_format.ParseError, DecodeError):
        raise ThreadlineError(
            ErrorCode.INVALID_REQUEST, "each payload's metadata values and data must be base64"
        ) from None


def _answer(payloads: Sequence[Any]) -> Response:
    body = json_format.MessageToJson(Payloads(payloads=list(payloads)), indent=None)
    return Response(body, media_type="application/json")


def _codec(request: Request) -> PayloadCodec | None:
    """The payload codec every client and worker of the app's settings uses (encryption, claim check),
    made on first use (a PostgreSQL payload store opens its pool then)."""
    state = request.app.state
    if not hasattr(state, "codec"):
        settings: Settings = state.codec_settings
        state.codec_blobs = open_blobs(settings)
        state.codec = data_converter(state.codec_blobs, settings.encryption).payload_codec
    codec: PayloadCodec | None = state.codec
    return codec


async def close(app: FastAPI) -> None:
    """Close the payload store the codec opened (its pool, for a PostgreSQL one), if it opened one."""
    blobs = getattr(app.state, "codec_blobs", None)
    if blobs is not None:
        del app.state.codec, app.state.codec_blobs
        await blobs.close()


@router.post(
    "/decode",
    summary="Payloads as Threadline reads them",
    description="Each payload as Threadline's clients and workers see it: a claim-checked one brought back "
    "from the payload store, a sealed one opened (`payload-key-unknown` when its key is missing). The Temporal "
    "UI's codec endpoint and `temporal ... --codec-endpoint` call it.",
)
async def decode(request: Request, body: PayloadsBody) -> Response:
    codec, payloads = _codec(request), _parsed(body).payloads
    return _answer(await codec.decode(payloads) if codec else payloads)


@router.post(
    "/encode",
    summary="Payloads as Threadline writes them",
    description="Each payload as Threadline hands it to Temporal: sealed when encryption keys are set, and "
    "kept in the payload store (history then holds its key) when it is large.",
)
async def encode(request: Request, body: PayloadsBody) -> Response:
    codec, payloads = _codec(request), _parsed(body).payloads
    return _answer(await codec.encode(payloads) if codec else payloads)


def install(app: FastAPI, settings: Settings) -> None:
    """Serve the codec routes on `app`, with the payload codec `settings` give every process."""
    app.state.codec_settings = settings
    app.include_router(router)
