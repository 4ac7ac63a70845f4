"""The Temporal UI as an operator opens it: `threadline dev` with its codec server, a conversation whose
payloads are sealed in history, and its page in headless Chromium. The first words of a message and
of an answer are on the page in clear, in the collapsed events, without expanding anything."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import pytest
from playwright.async_api import expect
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from tests.support.ui_kit import PAGE_TIMEOUT_MS, browser, dev, history_page
from workflows._details import first_words

MESSAGE = "Hi, I'm Sam. Can you help me with fractions and decimals, please?"


@pytest.mark.slow
async def test_the_ui_shows_what_was_sent_and_answered_in_clear(tmp_path: Path) -> None:
    """With every payload sealed, the history's event rows show the message's first words (the model
    call's summary) and the answer's (the send's outcome), decoded by the codec server for the UI."""
    key = base64.b64encode(os.urandom(32)).decode()
    async with dev(tmp_path / "data", tmp_path / "dev.log", THREADLINE_ENCRYPTION_KEYS=f"k1={key}") as running:
        chat = (await running.threadline()).conversation("tutor", id="sam")
        answer = await chat(MESSAGE)
        sealed = await stored_payloads(await Client.connect(running.address), "conversation/default/sam")
        async with browser() as chrome:
            page = await history_page(chrome, running.ui_url, "conversation/default/sam")
            said = page.get_by_text(f"turn 1: «{first_words(MESSAGE)}»")
            answered = page.get_by_text(f'{{"outputs":{{"result":"{answer[:24]}')
            await expect(said.first).to_be_visible(timeout=PAGE_TIMEOUT_MS)
            await expect(answered.first).to_be_visible(timeout=PAGE_TIMEOUT_MS)

    assert answer.startswith("(offline) You said: Hi, I'm Sam.")
    assert not any(b"Sam" in data for data in sealed)


async def stored_payloads(client: Client, workflow_id: str) -> list[bytes]:
    """What Temporal stores of the sends and their outcomes (read without the codec)."""
    events = (await client.get_workflow_handle(workflow_id).fetch_history()).events
    found = []
    for event in events:
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
            args = event.workflow_execution_update_accepted_event_attributes.accepted_request.input.args
            found += [p.data for p in args.payloads]
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_COMPLETED:
            outcome = event.workflow_execution_update_completed_event_attributes.outcome.success
            found += [p.data for p in outcome.payloads]
        if event.HasField("user_metadata"):
            found.append(event.user_metadata.summary.data)
    return found
