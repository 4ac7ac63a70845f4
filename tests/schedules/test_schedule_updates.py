"""A schedule's timing and inputs changed through Temporal's schedule update, on the session's dev
server and a worker (the time-skipping server has no Schedules): the schedule then describes the new
timing and fires by it, sends the new inputs, stays paused when it was, and a change that cannot fire
changes nothing. Through the Python API, the HTTP service and the `threadline` command."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from temporalio.worker import Worker

from core.errors import ErrorCode, ThreadlineError
from core.settings import Settings
from tests.schedules.test_schedule_surfaces import cli_env
from tests.schedules.test_schedules import FAR_CRON, count_is, eventually, turns_of
from tests.support.service_kit import serving
from tests.surfaces.test_cli import threadline_json
from threadline.client import Threadline
from threadline.http import create_app


async def test_a_schedule_given_a_new_interval_and_inputs_fires_by_them(
    worker: Worker, tl: Threadline, cid: str
) -> None:
    """Made yearly, it fires nothing; changed to every second with other inputs, it describes that and
    its turns send them."""
    chat = tl.conversation("tutor", id=cid)
    made = await chat.schedule("Happy new year", cron=FAR_CRON, timezone="Europe/Paris", id="tick")

    changed = await chat.update_schedule("tick", every=1, inputs="Tick")
    await eventually(lambda: count_is(chat, 2))
    paused = await chat.pause_schedule("tick")
    turns = await turns_of(chat)

    assert (FAR_CRON, None) == (made.cron, made.every)
    assert (None, 1.0, "Europe/Paris") == (changed.cron, changed.every, changed.timezone)
    assert {"message": "Tick"} == changed.inputs
    assert [timedelta(seconds=1)] * 2 == [b - a for a, b in zip(changed.next, changed.next[1:], strict=False)]
    assert paused.fired >= 2
    assert all(t.inputs == {"message": "Tick"} for t in turns)


async def test_a_paused_schedule_changed_stays_paused_and_a_change_that_cannot_fire_changes_nothing(
    tl: Threadline, cid: str
) -> None:
    """The new cron is described in its zone; paused, nothing is due; a wrong change is refused."""
    chat = tl.conversation("tutor", id=cid)
    await chat.schedule("Tick", every=3600, id="tick", paused=True)
    start = datetime.now(UTC) + timedelta(days=1)

    changed = await chat.update_schedule("tick", cron="30 8 * * *", timezone="Asia/Tokyo", start=start)
    refusals = []
    for wrong in ({"every": 0.1}, {"timezone": "Mars/Olympus"}, {"end": start - timedelta(hours=1)}, {}):
        with pytest.raises(ThreadlineError) as refused:
            await chat.update_schedule("tick", **wrong)
        refusals.append(refused.value.code)
    with pytest.raises(ThreadlineError) as unknown:
        await chat.update_schedule("nothing", every=60)
    resumed = await chat.resume_schedule("tick")

    assert ("30 8 * * *", None, "Asia/Tokyo", start) == (changed.cron, changed.every, changed.timezone, changed.start)
    assert (True, ()) == (changed.paused, changed.next)
    assert [ErrorCode.SCHEDULE_INVALID] * 4 == refusals
    assert ErrorCode.SCHEDULE_UNKNOWN == unknown.value.code
    assert resumed.cron == changed.cron
    assert resumed.next[0] >= start
    assert all((t.hour, t.minute) == (8, 30) for t in (n.astimezone(ZoneInfo("Asia/Tokyo")) for n in resumed.next))


async def test_the_service_and_the_command_change_a_schedules_timing(
    tl: Threadline, settings: Settings, cid: str
) -> None:
    """`PATCH .../schedules/{schedule}` with `every`, `message` and `paused` at once; `threadline schedule
    update` with `--cron`; a body that names nothing is 422."""
    chat = tl.conversation("tutor", id=cid)
    await chat.schedule("Tick", cron=FAR_CRON, id="tick", paused=True)
    base = f"/v1/conversations/{cid}/schedules/tick"
    async with serving(create_app(tl)) as http:
        patched = await http.patch(base, json={"every": "PT2H", "message": "Anything new?", "paused": True})
        nothing = await http.patch(base, json={"note": "only a note"})
        wrong = await http.patch(base, json={"every": 60, "cron": "0 9 * * *"})
    updated = await threadline_json(
        cli_env(settings), "schedule", "update", cid, "tick", "--cron", "0 9 * * MON-FRI", "--timezone", "UTC"
    )
    refused = await threadline_json(cli_env(settings), "schedule", "update", cid, "tick", "--every", "0", status=1)

    assert 200 == patched.status_code, patched.text
    assert (7200.0, None, {"message": "Anything new?"}, True) == tuple(
        patched.json()[k] for k in ("every", "cron", "inputs", "paused")
    )
    assert (422, "invalid-request") == (nothing.status_code, nothing.json()["error"]["code"])
    assert (422, "schedule-invalid") == (wrong.status_code, wrong.json()["error"]["code"])
    assert ("0 9 * * MON-FRI", None, {"message": "Anything new?"}) == (
        updated["cron"],
        updated["every"],
        updated["inputs"],
    )
    assert "schedule-invalid" == refused["error"]["code"]
