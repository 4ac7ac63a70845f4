"""Programs called on their own, outside any conversation, as functai's are: `tutor("Hi")` asks the
model `THREADLINE_MODEL` names (providers configured from the environment, as a worker's) and answers;
nothing is recorded anywhere. A program with code runs its body here, its helpers answering the same way.

`threadline.ai` and `threadline.program` come from here, so a program made through them can answer on its
own (the store layer that defines programs knows no model).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from typing import Any

from activities.language_model import Providers, build_request
from activities.providers import build_providers, new_http_client
from core.errors import ErrorCode, ThreadlineError
from core.settings import Settings
from store.programs.alone import answers_alone
from store.programs.making import ai, program
from store.programs.program import Program

__all__ = ["ModelAlone", "ai", "program"]


class ModelAlone:
    """Answers a program's call with one model request: no earlier turns, no record."""

    def ask(self, helper: Program, inputs: dict[str, Any]) -> Any:
        """The answer, waited for here; on a thread of its own when an event loop runs here (a notebook)."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(self.answer(helper, inputs))
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            return pool.submit(asyncio.run, self.answer(helper, inputs)).result()

    async def answer(self, helper: Program, inputs: dict[str, Any]) -> Any:
        """The answer, on the caller's event loop.

        Raises:
            ThreadlineError: `turn-state` for a program with tools (its tool calls are run and approved in a
                conversation's turn); `provider-unconfigured`, `inputs-invalid`, `parse-failed` as in a turn.
        """
        if helper.tools:
            message = f"{helper.name} has tools: it answers in a conversation's turn, where its tool calls are run"
            raise ThreadlineError(ErrorCode.TURN_STATE, message)
        bound = helper.validate_inputs(inputs)
        settings = Settings.from_env()
        async with new_http_client() as http:
            provider, name = Providers(build_providers(settings, http)).resolve(settings.model)
            reply = await provider.complete(build_request(helper, [], bound, model=name))
        outputs = helper.validate_outputs(reply.outputs)
        return helper.typed(helper.answer, outputs.get(helper.answer))


answers_alone(ModelAlone())
