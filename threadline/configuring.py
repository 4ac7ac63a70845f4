"""A conversation's settings changed while it runs (methods of `Conversation`): its budget.

    chat = tl.conversation("tutor", id="alex", budget={"tokens": 50_000})
    await chat.configure(budget={"tokens": 80_000})   # from the next turn on
    print((await chat.settings()).budget)

The workflow learns the change with its `configure` update and carries it through continue-as-new;
it then holds over the budget each send carries (a handle's travels with its sends). A conversation
whose workflow closed for idleness starts again with its next sender's settings.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from temporalio.common import QueryRejectCondition

from core.errors import ErrorCode, ThreadlineError
from core.models import Budget, ConversationSettings, ConversationStatus, SettingsSend

from .crossing import crossing
from .handle import Handle
from .options import budget_of


class SettingsMethods(Handle):
    """What `Conversation` adds for the settings that may change while it runs."""

    async def configure(self, *, budget: Budget | Mapping[str, Any] | None = None) -> ConversationSettings:
        """Change what the conversation's next turns run with; a turn running now keeps its own. Its
        workflow starts if it was not running (a closed conversation reopens).

        Args:
            budget: What the conversation may spend in all, `{"tokens": N, "cost": X}`; `{}` is no limit
                (None leaves it as it is). It holds over the budget each send carries; a store's budget
                (`THREADLINE_BUDGETS`) still bounds it.

        Raises:
            ThreadlineError: `invalid-request` for a budget of another shape, or when nothing is named.
        """
        change = SettingsSend(budget=budget_of(budget))
        if change.budget is None:
            raise ThreadlineError(ErrorCode.INVALID_REQUEST, "name a setting to change: budget")
        settings = await self.delivery.update_with_start("configure", change, ConversationSettings)
        # this handle's next start (after the conversation closed) carries the same settings
        self.delivery.config = self.delivery.config.configure(change)
        return settings

    async def settings(self) -> ConversationSettings | None:
        """The settings the conversation's next turns run with; None when its workflow is not running
        (its next send starts it with that sender's settings)."""
        if not await self.delivery.is_open():
            return None
        handle = await self.delivery.workflow()
        try:
            with crossing():
                status: ConversationStatus = await handle.query(
                    "status", result_type=ConversationStatus, reject_condition=QueryRejectCondition.NOT_OPEN
                )
        except ThreadlineError as err:
            if err.code != ErrorCode.TURN_STATE:
                raise
            return None  # it closed meanwhile: not asked of a replay of its last run
        return status.settings
