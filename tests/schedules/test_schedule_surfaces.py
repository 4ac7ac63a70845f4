"""Schedules through the `threadline` command (real subprocesses) and the HTTP service (uvicorn on
loopback), against the session's dev server and a worker: made, listed, paused, resumed, deleted, and
ended with their conversation."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from temporalio.worker import Worker

from core.settings import Settings
from tests.support.service_kit import serving
from tests.surfaces.test_cli import clean_env, threadline, threadline_json
from threadline.client import Threadline
from threadline.http import create_app


async def eventually(check: Callable[[], Awaitable[bool]], *, within: float = 30.0) -> None:
    deadline = time.monotonic() + within
    while not await check():
        assert time.monotonic() < deadline, "not within the time given"
        await asyncio.sleep(0.1)


def cli_env(settings: Settings) -> dict[str, str]:
    return clean_env(
        temporal_address=settings.address,
        data=str(settings.data),
        task_queue=settings.task_queue,
        payloads=str(settings.payload_folder),
    )


async def test_the_command_adds_lists_pauses_resumes_and_deletes(
    worker: Worker, tl: Threadline, settings: Settings, cid: str
) -> None:
    env = cli_env(settings)

    made = await threadline_json(
        env, "schedule", "add", cid, "Good morning", "--cron", "0 9 * * *", "--timezone", "Europe/Paris",
        "--name", "daily",
    )  # fmt: skip
    await threadline_json(env, "schedule", "add", cid, "Tick", "--every", "PT1H", "--name", "hourly", "--paused")

    async def both_listed() -> bool:
        listed = await threadline_json(env, "schedule", "list", cid)
        return ["daily", "hourly"] == [s["id"] for s in listed["schedules"]]

    await eventually(both_listed)
    paused = await threadline_json(env, "schedule", "pause", cid, "daily", "--note", "on holiday")
    resumed = await threadline_json(env, "schedule", "resume", cid, "hourly")
    deleted = await threadline(env, "schedule", "delete", cid, "daily")
    unknown = await threadline_json(env, "schedule", "delete", cid, "daily", status=1)
    bad = await threadline_json(env, "schedule", "add", cid, "x", "--every", "0.1", status=1)
    await tl.conversation("tutor", id=cid).delete_schedule("hourly")

    assert ("0 9 * * *", "Europe/Paris", {"message": "Good morning"}) == (
        made["cron"], made["timezone"], made["inputs"]
    )  # fmt: skip
    assert (True, "on holiday") == (paused["paused"], paused["note"])
    assert (False, 3600.0) == (resumed["paused"], resumed["every"])
    assert (0, f"Deleted schedule daily of {cid}.\n") == (deleted.returncode, deleted.stdout)
    assert "schedule-unknown" == unknown["error"]["code"]
    assert "schedule-invalid" == bad["error"]["code"]


async def test_the_service_makes_lists_patches_and_deletes(worker: Worker, tl: Threadline, cid: str) -> None:
    base = f"/v1/conversations/{cid}/schedules"
    async with serving(create_app(tl)) as http:
        made = await http.post(base, json={"message": "Tick", "every": 1, "id": "tick"})

        async def fired_twice() -> bool:
            return len((await http.get(f"/v1/conversations/{cid}/turns")).json()) >= 2

        await eventually(fired_twice)
        paused = await http.patch(f"{base}/tick", json={"paused": True, "note": "enough"})
        await http.post(base, json={"inputs": {"message": "Later"}, "cron": "0 0 1 1 *", "id": "yearly"})

        async def both_listed() -> bool:
            listed = (await http.get(base)).json()
            return ["tick", "yearly"] == [s["id"] for s in listed]

        await eventually(both_listed)
        one = await http.get(f"{base}/yearly")
        deleted = await http.delete(f"{base}/yearly")
        gone = await http.get(f"{base}/yearly")
        twice = await http.post(base, json={"message": "Tick", "every": 60, "id": "tick"})
        invalid = await http.post(base, json={"message": "x", "cron": "0 9 * * *", "every": 60})
        closed = await http.delete(f"/v1/conversations/{cid}")
        after = await http.get(f"{base}/tick")

    assert 201 == made.status_code
    assert 1.0 == made.json()["every"]
    assert (200, True, "enough") == (paused.status_code, paused.json()["paused"], paused.json()["note"])
    assert (200, {"message": "Later"}) == (one.status_code, one.json()["inputs"])
    assert (200, True) == (deleted.status_code, deleted.json()["deleted"])
    assert (404, "schedule-unknown") == (gone.status_code, gone.json()["error"]["code"])
    assert (409, "schedule-exists") == (twice.status_code, twice.json()["error"]["code"])
    assert (422, "schedule-invalid") == (invalid.status_code, invalid.json()["error"]["code"])
    assert (200, 1) == (closed.status_code, closed.json()["schedules"])
    assert (404, "schedule-unknown") == (after.status_code, after.json()["error"]["code"])


async def test_a_body_that_is_no_schedule_is_refused(tl: Threadline, cid: str) -> None:
    base = f"/v1/conversations/{cid}/schedules"
    async with serving(create_app(tl)) as http:
        both = await http.post(base, json={"message": "x", "inputs": {"message": "x"}, "every": 60})
        loose = await http.patch(f"{base}/tick", json={"paused": "yes"})
        path = await http.get(f"{base}/..%2Fx")
        window = {"start": "2030-01-01T00:00:00Z", "end": "2031-01-01T00:00:00+01:00"}
        bounded = await http.post(base, json={"message": "x", "every": "PT1H", "id": "bounded", **window})
        await http.delete(f"{base}/bounded")

    assert (422, "invalid-request") == (both.status_code, both.json()["error"]["code"])
    assert (422, "invalid-request") == (loose.status_code, loose.json()["error"]["code"])
    assert path.status_code in (404, 422)
    assert (201, "2030-01-01T00:00:00Z") == (bounded.status_code, bounded.json()["start"])
    assert "2030-01-01T00:00:00Z" == bounded.json()["next"][0]
