"""Bounded history whatever the inputs: payloads over 8 KB cross Temporal as references to the
payload store (the claim check), so history per send stays a few KB at any input size."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from temporalio.api.common.v1 import Payload
from temporalio.client import Client
from temporalio.worker import Worker

from core.errors import ErrorCode, ThreadlineError
from core.settings import Settings
from core.temporal import CLAIM_CHECK_ENCODING, CLAIM_CHECK_THRESHOLD, ClaimCheck, workflow_id
from store.backends.blobs import FolderBlobs, open_blobs
from store.backends.pgblobs import PostgresBlobs
from threadline.client import Threadline

PER_SEND_LIMIT = 8 * 1024


def files(folder: Path) -> int:
    return sum(1 for path in folder.rglob("*") if path.is_file())


async def test_large_payloads_become_references_and_come_back_whole(tmp_path: Path) -> None:
    """A payload over the threshold is kept by its hash and replaced by a short reference; a small one
    passes untouched; decoding gives back the very bytes."""
    codec = ClaimCheck(FolderBlobs(tmp_path))
    small = Payload(metadata={"encoding": b"json/plain"}, data=b'"hi"')
    large = Payload(metadata={"encoding": b"json/plain"}, data=b'"' + b"x" * (CLAIM_CHECK_THRESHOLD * 4) + b'"')

    encoded = await codec.encode([small, large])
    decoded = await codec.decode(encoded)

    assert small == encoded[0]
    assert CLAIM_CHECK_ENCODING == encoded[1].metadata["encoding"]
    assert encoded[1].ByteSize() < 200
    assert [small, large] == decoded
    assert 1 == files(tmp_path)  # the large payload only


async def test_a_missing_payload_is_a_coded_error(tmp_path: Path) -> None:
    """A reference whose bytes the payload store lacks fails `store-invalid`, naming the setting."""
    codec = ClaimCheck(FolderBlobs(tmp_path))
    reference = Payload(metadata={"encoding": CLAIM_CHECK_ENCODING}, data=b"sha256:" + b"0" * 64)

    with pytest.raises(ThreadlineError) as missing:
        await codec.decode([reference])

    assert ErrorCode.STORE_INVALID == missing.value.code


async def history_bytes(client: Client, conversation: str) -> int:
    history = await client.get_workflow_handle(workflow_id("default", conversation)).fetch_history()
    return sum(event.ByteSize() for event in history.events)


@pytest.mark.parametrize("size", [1_000, 100_000, 1_000_000])
async def test_history_per_send_stays_small_whatever_the_input_size(
    tl: Threadline, client: Client, worker: Worker, cid: str, size: int
) -> None:
    """Three sends of `size` characters each add under 8 KB of history per send."""
    chat = tl.conversation("tutor", id=cid)
    await chat.predict("warm up")
    before = await history_bytes(client, cid)

    for k in range(3):
        turn = await chat.predict(f"{k}" + "x" * (size - 1))
        assert size == len(turn.inputs["message"])

    per_send = (await history_bytes(client, cid) - before) / 3
    assert per_send < PER_SEND_LIMIT


async def test_a_database_keeps_the_payloads_every_host_shares(pg_spec: str, tmp_path: Path) -> None:
    """With the default store in PostgreSQL, payloads go to its database (every host reaches it), and
    come back whole through another process's codec."""
    settings = dataclasses.replace(Settings.from_env({}), data=tmp_path, stores={"default": pg_spec})
    large = Payload(metadata={"encoding": b"json/plain"}, data=b'"' + b"y" * (CLAIM_CHECK_THRESHOLD * 4) + b'"')
    writer, reader = open_blobs(settings), open_blobs(settings)
    assert isinstance(writer, PostgresBlobs)

    try:
        encoded = await ClaimCheck(writer).encode([large])
        decoded = await ClaimCheck(reader).decode(encoded)
    finally:
        await writer.close()
        await reader.close()

    assert [large] == decoded
    assert 0 == files(tmp_path)  # nothing was written to a folder


async def test_an_ordinary_long_message_stays_in_history_a_very_long_one_does_not(tmp_path: Path) -> None:
    """The threshold is where history is at risk (8 KB), not 2 KB: a 4 KB message crosses as plain
    JSON any client reads; a 12 KB one crosses as a reference."""
    codec = ClaimCheck(FolderBlobs(tmp_path))
    four = Payload(metadata={"encoding": b"json/plain"}, data=b'"' + b"x" * 4096 + b'"')
    twelve = Payload(metadata={"encoding": b"json/plain"}, data=b'"' + b"x" * 12_288 + b'"')

    encoded = await codec.encode([four, twelve])

    assert four == encoded[0]
    assert CLAIM_CHECK_ENCODING == encoded[1].metadata["encoding"]
