"""The flow engine with no worker: the article's API in memory, building, checks, pure transitions,
progress rebuilt from entries, the registry over a log, and loading flows from modules."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import pytest
from pydantic import EmailStr

from core.errors import ErrorCode, ThreadlineError
from store.backends.memory import MemoryStore
from store.flows.manager import (
    CHECKOUT,
    Exchange,
    FlowBuilder,
    FlowManager,
    FlowState,
    create_checkout_flow,
    create_order_flow,
    load_flows,
)
from store.flows.progress import Progress, apply, progress_of
from store.flows.steps import Ask, Asked, Check, Judgement, judge
from store.log.collected import sections
from store.log.state import Log
from store.programs.program import Program
from tests.support.example_flows import BULK, SUPPORT, Address, count


class Conversation:
    """One conversation in memory, to which each exchange's records are appended as a worker would."""

    def __init__(self, manager: FlowManager) -> None:
        self.manager = manager
        self.store = MemoryStore()

    def log(self) -> Log:
        return Log(self.store.read("c"))

    def keep(self, exchange: Exchange) -> Exchange:
        self.store.append("c", exchange.records, expect=exchange.expect)
        return exchange

    def start(self, flow: str, request_id: str = "r-start") -> Exchange:
        return self.keep(self.manager.start_flow(self.log(), flow, request_id=request_id, now=time.time()))

    def say(self, message: str, request_id: str, **more: Any) -> Exchange:
        exchange = self.manager.process_message(self.log(), message, request_id=request_id, now=time.time(), **more)
        return self.keep(exchange)


def code_of(raised: pytest.ExceptionInfo[ThreadlineError]) -> ErrorCode:
    return raised.value.code


class TestTheArticlesAPI:
    """`FlowBuilder(...).build()` gives a flow that runs in memory as the article runs it."""

    def test_the_order_flow_is_the_articles_word_for_word(self) -> None:
        """`get_current_prompt` and `process_response(message) -> (valid, text)` walk the article's four
        steps with its words; the answer to `confirm` completes it with "Flow completed"."""
        flow = create_order_flow()

        first = flow.get_current_prompt()
        said = [flow.process_response(text) for text in ("Pizza", "0", "3", "ada", "ada@example.com", "No, thanks")]

        assert "Welcome! What product would you like to order?" == first
        assert [
            (True, "How many would you like?"),
            (False, "Please enter a valid number."),
            (True, "What's your email address for the confirmation?"),
            (False, "Please enter a valid email address."),
            (True, "Great! I'll send the confirmation to your email. Is there anything else?"),
            (True, "Flow completed"),
        ] == said
        assert (FlowState.COMPLETED, None) == (flow.state, flow.get_current_prompt())
        assert {
            "welcome": "Pizza",
            "quantity": 3,
            "email": "ada@example.com",
            "confirm": "No, thanks",
        } == flow.collected_data

    def test_the_checkout_flow_asks_reprompts_and_completes(self) -> None:
        """Release 0.2.0's order flow, kept as `checkout`: three steps and the project's closing words."""
        flow = create_checkout_flow()

        first = flow.get_current_prompt()
        said = [flow.process_response(text) for text in ("Pizza", "0", "3", "ada", "ada@example.com")]

        assert "Hello! What would you like to order?" == first
        assert [
            (True, "How many would you like?"),
            (False, "Please enter a valid number."),
            (True, "What e-mail address should the confirmation go to?"),
            (False, "Please enter a valid email address."),
            (True, "Thank you, that is everything I needed."),
        ] == said
        assert (FlowState.COMPLETED, None) == (flow.state, flow.get_current_prompt())
        assert {"greeting": "Pizza", "quantity": 3, "email": "ada@example.com"} == flow.collected_data

    def test_a_finished_run_refuses_more_answers_and_a_copy_starts_again(self) -> None:
        """Once over, `process_response` is refused; `copy()` is the same flow at its first step."""
        flow = create_checkout_flow()
        for text in ("Pizza", "3", "ada@example.com"):
            flow.process_response(text)

        with pytest.raises(ThreadlineError) as raised:
            flow.process_response("more")
        fresh = flow.copy()

        assert ErrorCode.INVALID_REQUEST == code_of(raised)
        assert ("greeting", FlowState.ACTIVE, {}) == (fresh.current_step, fresh.state, fresh.collected_data)

    def test_a_step_checked_by_a_model_cannot_run_in_memory(self) -> None:
        """An AI extractor needs a worker: the in-memory run says so instead of guessing."""
        with pytest.raises(ThreadlineError) as raised:
            BULK.copy().process_response("two dozen")

        assert ErrorCode.INVALID_REQUEST == code_of(raised)


class TestBuilding:
    """A definition that cannot run is refused where it is written (`flow-invalid`)."""

    @pytest.mark.parametrize(
        "build",
        [
            lambda: FlowBuilder("f").add_step("a", "A?").add_step("a", "Again?"),
            lambda: FlowBuilder("f").add_step("a", "A?", next_step="b").build(),
            lambda: FlowBuilder("f").build(),
            lambda: FlowBuilder("f").add_step("a", "A?", max_attempts=0).build(),
            lambda: FlowBuilder("f").add_step("a", "A?", validator=42),
            lambda: FlowBuilder("f").add_step(
                "a", "A?", validator=Program.define("v", "V", inputs={"t": str}, outputs={"r": str})
            ),
            lambda: FlowBuilder("f").add_step(
                "a", "A?", extractor=Program.define("x", "X", inputs={"t": int}, outputs={"r": int})
            ),
            lambda: FlowBuilder("f", expire_after=0).add_step("a", "A?").build(),
        ],
        ids=[
            "twice",
            "unknown-next",
            "no-step",
            "no-attempts",
            "not-a-check",
            "validator-not-bool",
            "input-not-text",
            "expiry",
        ],
    )
    def test_a_broken_definition_is_refused(self, build: Any) -> None:
        """Each broken definition raises `flow-invalid`."""
        with pytest.raises(ThreadlineError) as raised:
            build()

        assert ErrorCode.FLOW_INVALID == code_of(raised)


class TestChecks:
    """Validators and extractors: plain callables, pydantic types, AI functions."""

    @pytest.mark.parametrize(
        ("given", "text", "expected"),
        [
            (int, " 3 ", Judgement(True, 3)),
            (int, "three", Judgement(False)),
            (EmailStr, "ada@example.com", Judgement(True, "ada@example.com")),
            (EmailStr, "ada at example", Judgement(False)),
            (
                Address,
                '{"street": "1 Main St", "city": "Paris"}',
                Judgement(True, {"street": "1 Main St", "city": "Paris"}),
            ),
            (Address, "1 Main St, Paris", Judgement(False)),
            (list[int], "[1, 2]", Judgement(True, [1, 2])),
            (lambda text: text.upper(), "yes", Judgement(True, "YES")),
            (lambda text: int(text), "x", Judgement(False)),
        ],
        ids=["int", "not-int", "email", "not-email", "model", "not-model", "list", "callable", "callable-raises"],
    )
    def test_an_extractor_converts_or_rejects(self, given: Any, text: str, expected: Judgement) -> None:
        """A type is applied to the stripped text, then to the text as JSON; a callable's ValueError rejects."""
        assert expected == Check(given, "extractor", "here").apply(text)

    def test_a_check_that_fails_in_its_own_code_is_a_fault_of_the_flow(self) -> None:
        """An exception that is not about the answer is `flow-invalid`, and so is a value with no JSON form."""

        def broken(_text: str) -> bool:
            raise RuntimeError("bug")

        for check in (Check(broken, "validator", "here"), Check(lambda _t: object(), "extractor", "here")):
            with pytest.raises(ThreadlineError) as raised:
                check.apply("x")
            assert ErrorCode.FLOW_INVALID == code_of(raised)

    def test_an_ai_check_is_asked_for_and_decided_with_the_models_answer(self) -> None:
        """`judge` asks for the model's answer, then takes it; a model that found nothing rejects."""
        step = BULK.steps["quantity"]

        asked = judge(step, "two dozen")
        found = judge(step, "two dozen", {"extractor": Asked(True, 24)})
        nothing = judge(step, "many", {"extractor": Asked(False)})

        assert isinstance(asked, Ask)
        assert ("extractor", "count") == (asked.role, asked.program.name)
        assert (Judgement(True, 24), Judgement(False)) == (found, nothing)

    def test_a_validator_that_rejects_asks_no_extractor(self) -> None:
        """The validator runs first: a rejected answer costs no model call for the extractor."""
        flow = FlowBuilder("f").add_step("n", "N?", validator=str.isdigit, extractor=Program.from_function(count))

        judged = judge(flow.build().steps["n"], "lots")

        assert Judgement(False) == judged


class TestProgress:
    """The progress is the flow's entries applied in order; transitions only ever add entries."""

    def test_the_progress_rebuilt_from_the_log_equals_each_exchanges(self) -> None:
        """After every exchange, a fresh read of the log gives exactly the progress the exchange decided."""
        chat = Conversation(FlowManager([CHECKOUT]))
        exchanges = [chat.start("checkout")]
        for i, text in enumerate(("Pizza", "lots", "3")):
            exchanges.append(chat.say(text, f"r-{i}"))

        rebuilt = [progress_of(chat.log(), through=r) for r in ("r-start", "r-0", "r-1", "r-2")]

        assert [e.progress for e in exchanges] == rebuilt
        assert Progress(
            exchanges[0].turn, "checkout", FlowState.ACTIVE, "email", {"greeting": "Pizza", "quantity": 3}, 0, 4
        ) == (progress_of(chat.log()))

    def test_entries_of_another_run_or_step_change_nothing(self) -> None:
        """A stray `answered` (another run, or a step already past) leaves the progress as it was."""
        progress = Progress("run-1", "order", FlowState.ACTIVE, "quantity", {"greeting": "Hi"}, 0, 2)

        other_run = apply(progress, "answered", {"run": "run-0", "step": "quantity", "value": 9, "next": None})
        past_step = apply(
            progress, "answered", {"run": "run-1", "step": "greeting", "value": "Hey", "next": "quantity"}
        )
        unknown = apply(progress, "gossip", {"run": "run-1"})

        assert [progress] * 3 == [other_run, past_step, unknown]

    def test_a_branch_to_a_step_the_flow_lacks_is_a_fault_of_the_flow(self) -> None:
        """A `next_step` function that names no step raises `flow-invalid`, and nothing is decided."""

        def nowhere(_data: Mapping[str, Any]) -> str:
            return "elsewhere"

        chat = Conversation(FlowManager([FlowBuilder("f").add_step("a", "A?", next_step=nowhere).build()]))
        chat.start("f")

        with pytest.raises(ThreadlineError) as raised:
            chat.say("x", "r-1")

        assert ErrorCode.FLOW_INVALID == code_of(raised)


class TestRegistry:
    """`FlowManager` over a log, and flows found in modules."""

    def test_load_flows_finds_the_modules_flows_and_the_built_in_order(self) -> None:
        """Every `Flow` at a module's top level, by name, beside `order`."""
        flows = load_flows(["tests.support.example_flows"])

        assert ["bulk", "checkout", "order", "signup", "support"] == sorted(flows)
        assert SUPPORT is flows["support"]

    def test_a_module_that_cannot_be_imported_is_refused(self) -> None:
        """`flow-invalid` names the module."""
        with pytest.raises(ThreadlineError) as raised:
            load_flows(["tests.no_such_module"])

        assert ErrorCode.FLOW_INVALID == code_of(raised)

    def test_an_unknown_flow_is_refused(self) -> None:
        """`flow-unknown` for a name no registered flow has."""
        with pytest.raises(ThreadlineError) as raised:
            Conversation(FlowManager()).start("order")

        assert ErrorCode.FLOW_UNKNOWN == code_of(raised)

    def test_a_check_that_asks_a_model_needs_a_judgement(self) -> None:
        """Without a judgement made beforehand, an AI check cannot be decided over the log."""
        chat = Conversation(FlowManager([BULK]))
        chat.start("bulk")

        with pytest.raises(ThreadlineError) as raised:
            chat.say("two dozen", "r-1")
        taken = chat.say("two dozen", "r-2", judgement=Judgement(True, 24))

        assert ErrorCode.INVALID_REQUEST == code_of(raised)
        assert {"quantity": 24} == taken.flow_data

    def test_a_flow_no_longer_registered_is_abandoned_and_the_message_goes_on(self) -> None:
        """A deploy that dropped the flow: its run is abandoned (`changed`), the message is not the flow's."""
        chat = Conversation(FlowManager([CHECKOUT]))
        chat.start("checkout")
        chat.manager = FlowManager()

        exchange = chat.say("Pizza", "r-1")

        assert (False, ("abandoned",)) == (exchange.in_flow, exchange.events)
        assert (FlowState.ABANDONED, "changed") == (
            progress_of(chat.log()).state,
            chat.log().entries[-1]["data"]["reason"],
        )

    def test_the_collected_data_is_a_section_only_on_the_branch_through_the_completion(self) -> None:
        """The completed entry belongs to the last answer's turn: a branch before it is told nothing."""
        chat = Conversation(FlowManager([CHECKOUT]))
        first = chat.start("checkout")
        for i, text in enumerate(("Pizza", "3", "ada@example.com")):
            last = chat.say(text, f"r-{i}")

        log = chat.log()

        assert 1 == len(sections(log, last.turn))
        assert [] == sections(log, first.turn)
