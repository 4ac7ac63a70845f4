"""The worker's defaults, asked by a conversation's workflow that was started without them
(`core.starting`): an activity, because knowing what the namespace has registered is I/O."""

from __future__ import annotations

from collections.abc import Sequence

import structlog
from temporalio import activity
from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest
from temporalio.service import RPCError

from core.models import ConversationRef
from core.starting import WorkerDefaults

logger = structlog.get_logger(__name__)


class StartActivities:
    """What this worker would have a conversation use.

    Args:
        attributes: The names of the search attributes a conversation's workflow writes.
        idle_timeout_s: The worker's idle timeout (`THREADLINE_IDLE_TIMEOUT_S`).
        attributes_every_s: How often attributes are written (`THREADLINE_ATTRIBUTES_EVERY_S`).
    """

    def __init__(self, attributes: Sequence[str], *, idle_timeout_s: float, attributes_every_s: float) -> None:
        self.attributes = tuple(attributes)
        self.idle_timeout_s = idle_timeout_s
        self.attributes_every_s = attributes_every_s
        self._registered = False
        """Kept once seen: attributes are not unregistered under a running deployment."""

    @activity.defn(name="worker_defaults")
    async def worker_defaults(self, ref: ConversationRef) -> WorkerDefaults:
        """The worker's settings, and whether the namespace has every search attribute registered."""
        if not self._registered:
            self._registered = await self._look_up()
        logger.info("conversation.defaults", conversation=ref.conversation, search_attributes=self._registered)
        return WorkerDefaults(
            search_attributes=self._registered,
            idle_timeout_s=self.idle_timeout_s,
            attributes_every_s=self.attributes_every_s,
        )

    async def _look_up(self) -> bool:
        client = activity.client()
        request = ListSearchAttributesRequest(namespace=activity.info().namespace)
        try:
            found = await client.operator_service.list_search_attributes(request)
        except RPCError:  # asked again by the next conversation that starts so
            return False
        return all(name in found.custom_attributes for name in self.attributes)
