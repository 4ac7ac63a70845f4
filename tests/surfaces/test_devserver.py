"""Tests for `threadline.devserver`, against real `temporal server start-dev` processes."""

from __future__ import annotations

import asyncio
import os
import socket
import sys
import uuid
from pathlib import Path

import httpx
import pytest
from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest, RemoveSearchAttributesRequest
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.common import SearchAttributePair, TypedSearchAttributes

from core.errors import ErrorCode, ThreadlineError
from threadline.devserver import SEARCH_ATTRIBUTES, DevServer, find_temporal_binary, free_port
from workflows.attributes import SEARCH_ATTRIBUTE_KEYS, TURNS_KEY


async def list_search_attributes(client: Client) -> dict[str, int]:
    request = ListSearchAttributesRequest(namespace="default")
    response = await client.operator_service.list_search_attributes(request)
    return dict(response.custom_attributes)


async def start_parked_workflow(client: Client, attributes: TypedSearchAttributes | None = None) -> str:
    """Start a workflow that no worker polls for, so it stays running and needs no code."""
    workflow_id = f"parked-{uuid.uuid4()}"
    task_queue = f"unused-{uuid.uuid4()}"
    await client.start_workflow("NeverRegistered", id=workflow_id, task_queue=task_queue, search_attributes=attributes)
    return workflow_id


def test_search_attributes_and_keys_agree() -> None:
    """The (name, type) pairs passed to the CLI and the SDK keys name the same attributes."""
    assert [name for name, _ in SEARCH_ATTRIBUTES] == [key.name for key in SEARCH_ATTRIBUTE_KEYS]
    assert "Int" == dict(SEARCH_ATTRIBUTES)["ThreadlineTurns"]


def test_binary_next_to_the_interpreter_is_found_without_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """The venv's own `temporal` is used even when PATH has none."""
    monkeypatch.setenv("PATH", "")

    found = find_temporal_binary()

    assert Path(sys.executable).parent == Path(found).parent


def test_missing_binary_is_server_unavailable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """With no `temporal` anywhere, the error carries `server-unavailable`."""
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    monkeypatch.setenv("PATH", str(tmp_path))

    with pytest.raises(ThreadlineError) as caught:
        find_temporal_binary()

    assert ErrorCode.SERVER_UNAVAILABLE == caught.value.code


async def test_started_server_has_search_attributes_and_stops(tmp_path: Path) -> None:
    """A client connects, the custom search attributes are registered, and stop() ends the process."""
    data_dir = tmp_path / "data"
    server = DevServer(data_dir, port=free_port(), ui_port=None)

    await server.start()
    try:
        pid = server.pid
        registered = await list_search_attributes(await Client.connect(server.address))
    finally:
        await server.stop()
    await server.stop()

    assert {key.name: key.indexed_value_type for key in SEARCH_ATTRIBUTE_KEYS}.items() <= registered.items()
    assert 0o700 == data_dir.stat().st_mode & 0o777
    assert (data_dir / "temporal.db").is_file()
    assert server.pid is None
    assert pid is not None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


async def test_the_server_runs_with_its_dynamic_config(tmp_path: Path) -> None:
    """The server runs with `DYNAMIC_CONFIG`: a transfer queue read up to 1,000 times a second, not 20
    (sequential turns no longer wait for the next of 20 ticks a second), and search attribute definitions
    read from the server's cache, not from its database at every use; a caller's flag for the same key
    comes later, so it wins."""
    async with DevServer(tmp_path, port=free_port(), ui_port=None, extra_args=["--log-format", "json"]) as server:
        assert server.pid is not None
        cmdline = await asyncio.to_thread(Path(f"/proc/{server.pid}/cmdline").read_bytes)
    arguments = cmdline.decode().split("\0")

    given = [arguments[i + 1] for i, arg in enumerate(arguments[:-1]) if arg == "--dynamic-config-value"]
    assert ["history.transferProcessorMaxPollRPS=1000", "system.forceSearchAttributesCacheRefreshOnRead=false"] == given
    assert arguments.index("--log-format") > arguments.index("--dynamic-config-value")


async def test_restart_on_same_data_dir_keeps_workflows(tmp_path: Path) -> None:
    """A workflow started before a restart is still running after it."""
    port = free_port()
    async with DevServer(tmp_path, port=port, ui_port=None) as server:
        workflow_id = await start_parked_workflow(await Client.connect(server.address))

    async with DevServer(tmp_path, port=port, ui_port=None) as server:
        client = await Client.connect(server.address)
        description = await client.get_workflow_handle(workflow_id).describe()

    assert WorkflowExecutionStatus.RUNNING == description.status


async def test_restart_registers_search_attributes_the_database_lacks(tmp_path: Path) -> None:
    """The CLI ignores --search-attribute on an existing database, so start() adds what is missing."""
    async with DevServer(tmp_path, port=free_port(), ui_port=None) as server:
        client = await Client.connect(server.address)
        request = RemoveSearchAttributesRequest(namespace="default", search_attributes=[TURNS_KEY.name])
        await client.operator_service.remove_search_attributes(request)
        assert TURNS_KEY.name not in await list_search_attributes(client)

    async with DevServer(tmp_path, port=free_port(), ui_port=None) as server:
        client = await Client.connect(server.address)
        attributes = TypedSearchAttributes([SearchAttributePair(TURNS_KEY, 3)])
        workflow_id = await start_parked_workflow(client, attributes)
        description = await client.get_workflow_handle(workflow_id).describe()

    assert 3 == description.typed_search_attributes.get(TURNS_KEY)


async def test_port_in_use_is_server_unavailable(tmp_path: Path) -> None:
    """A frontend port that something else listens on fails start() with `server-unavailable`."""
    with socket.create_server(("127.0.0.1", 0)) as holder:
        server = DevServer(tmp_path, port=holder.getsockname()[1], ui_port=None)

        with pytest.raises(ThreadlineError) as caught:
            await server.start()

    assert ErrorCode.SERVER_UNAVAILABLE == caught.value.code
    assert server.pid is None


async def test_server_exiting_during_start_is_server_unavailable(tmp_path: Path) -> None:
    """A server that exits before answering (here: a bad flag) fails start() instead of hanging."""
    server = DevServer(tmp_path, port=free_port(), ui_port=None, extra_args=["--no-such-flag"])

    with pytest.raises(ThreadlineError) as caught:
        await server.start()

    assert ErrorCode.SERVER_UNAVAILABLE == caught.value.code
    assert server.pid is None


async def test_ui_answers_http_when_enabled(tmp_path: Path) -> None:
    """The web UI serves its page at `ui_url`."""
    async with DevServer(tmp_path, port=free_port(), ui_port=free_port()) as server:
        assert server.ui_url is not None
        async with httpx.AsyncClient() as http:
            response = await http.get(server.ui_url)

    assert 200 == response.status_code
