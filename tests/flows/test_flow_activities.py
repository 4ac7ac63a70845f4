"""Guided flows at the activity level: the article's order flow end to end, branching, attempts that
run out, an AI extractor, timers, retries, restarts, and functai reading what a flow wrote.

Activities run in Temporal's `ActivityEnvironment` over a real folder store; the AI extractor asks
the fake provider server over loopback. Nothing of ours is replaced.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.flows import FlowActivities
from activities.language_model import OfflineModel, Providers
from activities.providers import OpenAIProvider
from core.models import ConversationRef, FlowAnswer, FlowRef, FlowResult, FlowStart, FlowStatus
from store.backends.folder import FolderStore
from store.backends.reader import LogCache, Stores, Threaded
from store.backends.writer import Writer
from store.flows.manager import load_flows
from store.flows.progress import progress_of
from store.log.state import Log
from store.log.turns import Answer, TurnRequest
from store.programs.program import TUTOR, Program
from store.records import Record, entry_record
from tests.support.fakeprovider import FakeProvider, Reply
from tests.support.functai_kit import offline, reply, tutor

ORDER_DATA = {"greeting": "Two pizzas, please.", "quantity": 3, "email": "ada@example.com"}


@dataclass
class Kit:
    """A worker's flow activities over one store folder, and one conversation of its own."""

    flows: FlowActivities
    folder: Path
    conversation: str
    fake: FakeProvider
    providers: Providers

    def records(self) -> list[Record]:
        return FolderStore(self.folder).read(self.conversation)

    def log(self) -> Log:
        return Log(self.records())

    def restarted(self) -> FlowActivities:
        """The same activities in a new process: nothing cached, everything read from the log again."""
        store = FolderStore(self.folder)
        return FlowActivities(
            LogCache(Stores({"default": lambda: Threaded(store)})), load_flows(FLOW_MODULES), self.providers
        )

    async def start(self, flow: str, *, request_id: str | None = None, message: str = "") -> FlowResult:
        start = FlowStart(
            store="default",
            conversation=self.conversation,
            flow=flow,
            request_id=_rid() if request_id is None else request_id,
            message=message,
        )
        return await ActivityEnvironment().run(self.flows.start_flow, start)

    def answer(self, message: str, **fields: Any) -> FlowAnswer:
        return FlowAnswer(
            **{
                "store": "default",
                "conversation": self.conversation,
                "request_id": _rid(),
                "message": message,
                **fields,
            }
        )

    async def say(self, message: str, **fields: Any) -> FlowResult:
        return await ActivityEnvironment().run(self.flows.flow_step, self.answer(message, **fields))

    async def timer(self, activity: str, run: str | None, moves: int | None, **fields: Any) -> FlowResult:
        ref = FlowRef(
            store="default", conversation=self.conversation, request_id=_rid(), run=run or "", moves=moves, **fields
        )
        return await ActivityEnvironment().run(getattr(self.flows, activity), ref)


FLOW_MODULES = ["tests.support.example_flows"]


def _rid() -> str:
    return str(uuid.uuid4())


@pytest.fixture(name="kit")
def _kit(tmp_path: Path, cid: str) -> Iterator[Kit]:
    store = FolderStore(tmp_path / "store")
    logs = LogCache(Stores({"default": lambda: Threaded(store)}))
    with FakeProvider() as fake:
        openai = OpenAIProvider(httpx.AsyncClient(), base_url=fake.openai_url, api_key="sk-test")
        providers = Providers({"offline": OfflineModel(), "openai": openai})
        yield Kit(FlowActivities(logs, load_flows(FLOW_MODULES), providers), tmp_path / "store", cid, fake, providers)


async def run_order(kit: Kit) -> list[FlowResult]:
    """The `checkout` flow with one invalid quantity and one invalid e-mail address."""
    results = [await kit.start("checkout", message="I'd like to order.")]
    for text in ("Two pizzas, please.", "lots", "3", "nope", "ada@example.com"):
        results.append(await kit.say(text))
    return results


class TestOrderFlow:
    """The built-in flow `checkout` (release 0.2.0's order flow)."""

    async def test_invalid_answers_reprompt_and_completion_returns_the_data_once(self, kit: Kit) -> None:
        """Each answer gets the next prompt or its step's `on_invalid`; the last one completes the flow
        with the collected data, once; the next message is no longer the flow's."""
        results = await run_order(kit)
        after = await kit.say("Thanks!")

        said = [(r.response, r.valid, r.step, r.state) for r in results]
        assert [
            ("Hello! What would you like to order?", None, "greeting", "active"),
            ("How many would you like?", True, "quantity", "active"),
            ("Please enter a valid number.", False, "quantity", "active"),
            ("What e-mail address should the confirmation go to?", True, "email", "active"),
            ("Please enter a valid email address.", False, "email", "active"),
            ("Thank you, that is everything I needed.", True, "email", "completed"),
        ] == said
        assert [None] * 5 + [ORDER_DATA] == [r.flow_data for r in results]
        assert (False, None, None) == (after.in_flow, after.response, after.flow_data)
        assert "completed" == after.state

    async def test_each_prompt_and_answer_is_a_turn_and_each_move_an_entry(self, kit: Kit) -> None:
        """Six turns, each ended `done` with the flow's response; the entries say what the flow made of them."""
        results = await run_order(kit)

        log = kit.log()
        turns = [log.turns[t] for t in log.order]
        entries = [(e["entry"], e["data"].get("step")) for e in log.entries]
        assert [r.turn for r in results] == [t.id for t in turns]
        assert [r.response for r in results] == [t.outputs["result"] for t in turns]
        assert ["I'd like to order.", "Two pizzas, please.", "lots", "3", "nope", "ada@example.com"] == [
            t.inputs["message"] for t in turns
        ]
        assert [
            ("started", "greeting"),
            ("answered", "greeting"),
            ("invalid", "quantity"),
            ("answered", "quantity"),
            ("invalid", "email"),
            ("answered", "email"),
            ("completed", None),
        ] == entries
        assert [r.events for r in results] == [
            ["started"],
            ["answered"],
            ["invalid"],
            ["answered"],
            ["invalid"],
            ["answered", "completed"],
        ]
        assert [None, *(t.id for t in turns[:-1])] == [t.parent for t in turns]

    async def test_a_retried_step_writes_nothing_twice_and_answers_the_same(self, kit: Kit) -> None:
        """The same request id again (a retried activity) finds its turn and entries: nothing is appended
        and the result is the first one's, read back."""
        start = FlowStart(store="default", conversation=kit.conversation, flow="checkout", request_id="start-1")
        first_start = await ActivityEnvironment().run(kit.flows.start_flow, start)
        answer = kit.answer("Hello")
        first = await ActivityEnvironment().run(kit.flows.flow_step, answer)
        count = len(kit.records())

        again_start = await ActivityEnvironment().run(kit.flows.start_flow, start)
        again = await ActivityEnvironment().run(kit.flows.flow_step, answer)

        assert count == len(kit.records())
        assert (True, True) == (again_start.existing, again.existing)
        assert first_start.model_dump(exclude={"existing"}) == again_start.model_dump(exclude={"existing"})
        assert first.model_dump(exclude={"existing"}) == again.model_dump(exclude={"existing"})

    async def test_a_retried_completion_returns_the_data_again_but_a_new_message_does_not(self, kit: Kit) -> None:
        """The completing call retried reads the same data back; only a new request id is past the flow."""
        await kit.start("checkout")
        await kit.say("Two pizzas, please.")
        await kit.say("3")
        last = kit.answer("ada@example.com")
        done = await ActivityEnvironment().run(kit.flows.flow_step, last)

        again = await ActivityEnvironment().run(kit.flows.flow_step, last)

        assert ORDER_DATA == done.flow_data == again.flow_data
        assert None is (await kit.say("And another thing")).flow_data

    async def test_the_progress_rebuilt_by_a_new_worker_equals_the_progress_before(self, kit: Kit) -> None:
        """A fresh read of the log gives the same progress, and a restarted worker goes on from there."""
        await kit.start("checkout")
        await kit.say("Two pizzas, please.")
        await kit.say("lots")
        cached = progress_of(await kit.flows.logs.get("default", kit.conversation).read())

        rebuilt = progress_of(kit.log())
        kit.flows = kit.restarted()
        went_on = await kit.say("3")

        assert cached == rebuilt
        assert ("quantity", 1, 3) == (rebuilt.step, rebuilt.attempts, rebuilt.moves)
        assert ("email", True) == (went_on.step, went_on.valid)

    async def test_a_message_with_no_flow_active_records_nothing(self, kit: Kit) -> None:
        """Outside a flow, `flow_step` says so and leaves the log as it was."""
        result = await kit.say("Hello")

        assert (False, None, []) == (result.in_flow, result.state, kit.records())


class TestBeyondTheArticle:
    """Branching, attempts that run out, pydantic types, an AI extractor, timers, counts."""

    @pytest.mark.parametrize(
        ("kind", "prompt"), [("Billing", "Which invoice number?"), ("bug", "Which version do you run?")]
    )
    async def test_next_step_is_chosen_by_the_data(self, kit: Kit, kind: str, prompt: str) -> None:
        """A branching `next_step` picks the next step from what was collected."""
        await kit.start("support")

        result = await kit.say(kind)

        assert (prompt, kind.lower()) == (result.response, kit.log().entries[-1]["data"]["value"])

    async def test_attempts_that_run_out_hand_the_conversation_to_a_person(self, kit: Kit) -> None:
        """Two invalid invoice numbers on a `person` step: handed off, with what was collected so far."""
        await kit.start("support")
        await kit.say("billing")
        await kit.say("the blue one")

        result = await kit.say("the red one")

        assert ("handed_off", False) == (result.state, result.valid)
        assert "I'm handing you over to a person who will help you from here." == result.response
        assert {"kind": "billing"} == result.flow_data
        assert ["invalid", "handed_off"] == result.events
        assert False is (await kit.say("hello?")).in_flow

    async def test_attempts_that_run_out_abandon_the_flow(self, kit: Kit) -> None:
        """Two invalid versions on an `abandon` step: the flow is abandoned, its data not returned."""
        await kit.start("support")
        await kit.say("bug")
        await kit.say("the latest")

        result = await kit.say("new")

        assert ("abandoned", None, ["invalid", "abandoned"]) == (result.state, result.flow_data, result.events)
        assert "attempts" == kit.log().entries[-1]["data"]["reason"]

    async def test_pydantic_types_check_and_convert_answers(self, kit: Kit) -> None:
        """`EmailStr` refuses a bad address and keeps a good one; a model is read from JSON text."""
        await kit.start("signup")
        bad = await kit.say("ada at example")
        await kit.say(" ada@example.com ")

        done = await kit.say('{"street": "1 Main St", "city": "Paris"}')

        assert False is bad.valid
        assert {"email": "ada@example.com", "address": {"street": "1 Main St", "city": "Paris"}} == done.flow_data

    async def test_an_ai_extractor_reads_a_number_from_free_text_once(self, kit: Kit) -> None:
        """ "two dozen" -> 24 by the conversation's model; the model's answer is kept before it is used,
        so the retried step asks no model and writes nothing."""
        kit.fake.add(Reply(outputs={"result": 24}))
        await kit.start("bulk")
        answer = kit.answer("two dozen", lm="openai:gpt-test")

        done = await ActivityEnvironment().run(kit.flows.flow_step, answer)
        count = len(kit.records())
        again = await ActivityEnvironment().run(kit.flows.flow_step, answer)

        assert {"quantity": 24} == done.flow_data == again.flow_data
        assert 1 == len(kit.fake.requests)
        assert "two dozen" in str(kit.fake.requests[0].body["messages"])
        assert count == len(kit.records())
        kept = [e["data"] for e in kit.log().entries if e["entry"] == "checked"]
        assert [("extractor", True, 24)] == [(d["check"], d["ok"], d["value"]) for d in kept]

    async def test_a_check_kept_by_a_worker_that_died_is_not_paid_for_again(self, kit: Kit) -> None:
        """A worker died after keeping the model's answer and before the exchange: the retry on a new
        worker uses the kept answer, asks no model (an unscripted request would fail) and goes on."""
        started = await kit.start("bulk")
        answer = kit.answer("two dozen", lm="openai:gpt-test")
        data = {"flow": "bulk", "run": started.run, "step": "quantity", "request_id": answer.request_id}
        kept = entry_record("flow", "checked", {**data, "check": "extractor", "ok": True, "value": 24})
        FolderStore(kit.folder).append(kit.conversation, [kept])
        kit.flows = kit.restarted()

        done = await ActivityEnvironment().run(kit.flows.flow_step, answer)

        assert ({"quantity": 24}, []) == (done.flow_data, kit.fake.requests)
        assert ["started", "checked", "answered", "completed"] == [e["entry"] for e in kit.log().entries]

    async def test_a_message_for_another_flow_is_not_taken_and_asks_no_model(self, kit: Kit) -> None:
        """With `flow` naming another flow, the active one does not take the message: nothing is checked or recorded."""
        await kit.start("bulk")
        count = len(kit.records())

        result = await kit.say("two dozen", flow="checkout", lm="openai:gpt-test")

        assert (False, "bulk", "active") == (result.in_flow, result.flow, result.state)
        assert (count, []) == (len(kit.records()), kit.fake.requests)

    async def test_an_ai_extractor_that_finds_nothing_makes_the_answer_invalid(self, kit: Kit) -> None:
        """A reply that does not fit the program's answer: the step re-prompts."""
        kit.fake.add(Reply(outputs={"result": "many"}), Reply(outputs={"result": "many"}))
        await kit.start("bulk")

        result = await kit.say("a lot", lm="openai:gpt-test")

        assert (False, "active", ["invalid"]) == (result.valid, result.state, result.events)

    async def test_a_reminder_is_sent_once_and_a_stale_timer_does_nothing(self, kit: Kit) -> None:
        """`remind_flow` at the current moves re-sends the prompt once; after an answer the old
        timer's moves are stale. The start result carries the timers to set."""
        started = await kit.start("signup")
        reminded = await kit.timer("remind_flow", started.run, started.moves)
        twice = await kit.timer("remind_flow", started.run, started.moves)
        moved = await kit.say("ada@example.com")
        stale = await kit.timer("remind_flow", started.run, started.moves)

        assert (60.0, 600.0) == (started.remind_after_s, started.expire_after_s)
        assert ("Your e-mail address?", ["reminded"], None) == (
            reminded.response,
            reminded.events,
            reminded.remind_after_s,
        )
        assert (False, []) == (twice.in_flow, twice.events)
        assert (False, []) == (stale.in_flow, stale.events)
        assert None is moved.remind_after_s  # the address step has no reminder
        assert ["reminded"] == [e["entry"] for e in kit.log().entries if e["entry"] == "reminded"]

    async def test_an_expiry_abandons_the_flow_only_if_nobody_answered(self, kit: Kit) -> None:
        """An expiry timer at stale moves does nothing; at the current moves it abandons the flow."""
        started = await kit.start("signup")
        answered = await kit.say("ada@example.com")

        stale = await kit.timer("abandon_flow", started.run, started.moves)
        expired = await kit.timer("abandon_flow", started.run, answered.moves)

        assert (False, "active") == (stale.in_flow, stale.state)
        assert ("abandoned", ["abandoned"]) == (expired.state, expired.events)
        assert "expired" == kit.log().entries[-1]["data"]["reason"]

    async def test_starting_a_flow_while_another_is_active_abandons_it(self, kit: Kit) -> None:
        """As the article's `start_flow` replaces the active flow, the old run is recorded `replaced`."""
        await kit.start("checkout")

        started = await kit.start("signup")

        assert (["abandoned", "started"], "signup") == (started.events, started.flow)
        assert "replaced" == kit.log().entries[-2]["data"]["reason"]

    async def test_read_flow_counts_starts_ends_and_invalid_answers_per_step(self, kit: Kit) -> None:
        """What the article asks to monitor, rebuilt from the log with the current flow."""
        await run_order(kit)
        await kit.start("support")
        await kit.say("bug")

        status: FlowStatus = await ActivityEnvironment().run(
            kit.flows.read_flow, ConversationRef(store="default", conversation=kit.conversation)
        )

        assert ("support", "version", "active", True) == (
            status.current.flow,
            status.current.step,
            status.current.state,
            status.current.in_flow,
        )
        order = status.counts["checkout"]
        assert (1, 1, 0, {"quantity": 1, "email": 1}) == (
            order.started,
            order.completed,
            order.abandoned,
            order.invalid,
        )
        assert 1 == status.counts["support"].started

    async def test_an_unknown_flow_is_refused_with_its_code(self, kit: Kit) -> None:
        """`flow-unknown`, not retryable, and nothing is recorded."""
        with pytest.raises(ApplicationError) as raised:
            await kit.start("nope")

        assert ("flow-unknown", True, []) == (raised.value.type, raised.value.non_retryable, kit.records())

    async def test_a_request_id_a_retry_could_not_find_is_refused(self, kit: Kit) -> None:
        """An empty request id would make the exchange impossible to find again: `invalid-request`."""
        with pytest.raises(ApplicationError) as raised:
            await kit.start("checkout", request_id="")

        assert ("invalid-request", []) == (raised.value.type, kit.records())

    async def test_a_conversation_of_other_fields_refuses_a_flow(self, kit: Kit) -> None:
        """Flow turns have `tutor`'s fields: a branch made with other fields is refused, as a turn is."""
        quiz = Program.define("quiz", "Ask.", inputs={"question": str}, outputs={"result": str})
        Writer(FolderStore(kit.folder), kit.conversation, quiz).send(
            TurnRequest({"question": "x"}), lambda _s, _i: Answer({"result": "y"})
        )

        with pytest.raises(ApplicationError) as raised:
            await kit.start("checkout")

        assert "conversation-signature" == raised.value.type


class TestTheTranscript:
    """A conversation that went through a flow reads as a normal conversation."""

    async def test_functai_lists_the_flow_turns_reads_its_entries_and_continues(self, kit: Kit) -> None:
        """functai 1.2.0 lists every flow turn as done with the flow's response, reads the completed
        data as the `flow` plugin's entry, and continues with a normal turn shown the whole exchange."""
        results = await run_order(kit)

        with offline([reply("Your order is on its way.")]) as lm:
            chat = tutor.conversation(kit.conversation, store=str(kit.folder))
            listed = [(t.state, t.result) for t in chat.turns]
            completed = chat.entries("flow", "completed")
            answer = chat("When will it arrive?")
            new = chat.head
            request = lm.requests[0]

        assert [("done", r.response) for r in results] == listed
        assert [ORDER_DATA] == [e["data"]["data"] for e in completed]
        assert "Your order is on its way." == answer
        assert (results[-1].turn, [r.turn for r in results]) == (new.parent, [t.id for t in new.saw])
        assert 2 * len(results) + 1 == len(request.messages)

    async def test_a_later_turn_is_told_the_flow_data(self, kit: Kit) -> None:
        """The next normal turn continues after the flow and gets its data as a section, recorded in its context."""
        await run_order(kit)
        seen: list[Any] = []

        def model(shown: Any, _inputs: Any) -> Answer:
            seen.append(shown)
            return Answer({"result": "ok"})

        turn = Writer(FolderStore(kit.folder), kit.conversation, TUTOR).send(TurnRequest({"message": "Thanks"}), model)

        data = '{"email": "ada@example.com", "greeting": "Two pizzas, please.", "quantity": 3}'
        section = f"Collected by the 'checkout' flow: {data}"
        assert [section] == seen[0].sections
        assert [section] == kit.log().turns[turn].record["context"]["sections"]
        assert 6 == len(seen[0].turns)
