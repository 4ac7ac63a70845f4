"""A turn that waits for a person outlives its worker and its Temporal server: a dev server of its own
(restarted on the same database) and workers run as processes (killed with `kill -9`)."""

from __future__ import annotations

import dataclasses
import uuid
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType

from core.errors import ErrorCode, ThreadlineError
from core.settings import Settings
from tests.support.acting_programs import runs_in
from tests.support.processes import WorkerProcess
from tests.support.service_kit import serving
from threadline.acting import Waiting
from threadline.client import Threadline, connect
from threadline.devserver import DevServer, free_port
from threadline.http import create_app


def settings_for(tmp_path: Path, address: str) -> Settings:
    data = tmp_path / "data"
    return dataclasses.replace(
        Settings.from_env({}),
        data=data,
        stores={"default": data / "store"},
        address=address,
        task_queue=f"test-{uuid.uuid4()}",
        payloads=tmp_path / "payloads",
        programs=("tests.support.acting_programs",),
    )


async def waiting_turn(tl: Threadline, cid: str, message: str) -> str:
    with pytest.raises(Waiting) as waiting:
        await tl.conversation("careful_shop", id=cid)(message)
    return waiting.value.turn.id


async def test_a_waiting_turn_outlives_worker_and_server_restarts(tmp_path: Path) -> None:
    """Two turns wait (a timer in history, no activity running); the worker is killed and the server
    restarted; a queued send is refused; approved over HTTP one ends done with its refund run once,
    denied the other ends done with the denial as the refund's result."""
    port, runs = free_port(), tmp_path / "runs.txt"
    env = {"THREADLINE_TEST_TOOL_RUNS": str(runs), "THREADLINE_PROGRAMS": "tests.support.acting_programs"}
    async with DevServer(tmp_path / "temporal", port=port, ui_port=None) as server:
        settings = settings_for(tmp_path, server.address)
        worker = WorkerProcess(settings, tmp_path / "w1.log", env=env)
        try:
            worker.wait_ready()
            tl = await connect(settings)
            turns = {name: await waiting_turn(tl, f"shop-{name}", f"Refund order {name}") for name in ("yes", "no")}
            handle = tl.conversation("careful_shop", id="shop-yes").handle
            history = [e.event_type for e in (await handle.fetch_history()).events]
            pending = (await handle.describe()).raw_description.pending_activities
        finally:
            worker.kill()

    last_timer = len(history) - 1 - history[::-1].index(EventType.EVENT_TYPE_TIMER_STARTED)
    waiting = history[last_timer:]
    assert EventType.EVENT_TYPE_TIMER_FIRED not in waiting
    assert not {EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED, EventType.EVENT_TYPE_MARKER_RECORDED} & set(waiting)
    assert [] == list(pending)
    async with DevServer(tmp_path / "temporal", port=port, ui_port=None):
        worker = WorkerProcess(settings, tmp_path / "w2.log", env=env)
        try:
            worker.wait_ready()
            tl = await connect(settings)
            with pytest.raises(ThreadlineError) as busy:
                await tl.conversation("careful_shop", id="shop-yes").send("And another")
            async with serving(create_app(tl)) as http:
                answered = {
                    name: await http.post(
                        f"/v1/conversations/shop-{name}/turns/{turns[name]}/approvals",
                        json={"verdict": name, "reason": "no receipt" if name == "no" else None, "wait": True},
                    )
                    for name in ("yes", "no")
                }
        finally:
            worker.stop()

    assert ErrorCode.CONVERSATION_BUSY == busy.value.code
    assert [200, 200] == [answered[n].status_code for n in ("yes", "no")]
    yes, no = answered["yes"].json(), answered["no"].json()
    assert ("done", 2) == (yes["state"], yes["attempt"])
    assert "refund: refunded 0" in yes["result"]
    assert "refund: The person did not allow this call. Reason: no receipt" in no["result"]
    assert ["order_status", "order_status", "refund"] == sorted(runs_in(runs))
