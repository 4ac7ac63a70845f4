"""What a conversation's workflow learns when it starts: the settings its starter may leave out.

A starter that is not Threadline's Python client (another SDK, the `temporal` CLI) knows the
conversation's identity and program, not the worker's settings: whether the namespace has
Threadline's search attributes, the idle timeout, how often attributes are written. Those it leaves
out come from the worker (the `worker_defaults` activity), so such a conversation idles, closes
and is listed like any other.
"""

from __future__ import annotations

from .models import ConversationConfig, Model

LEARNED = ("search_attributes", "idle_timeout_s", "attributes_every_s")
"""The config fields a starter may leave to the worker."""


class WorkerDefaults(Model):
    """The worker's values of the `LEARNED` fields."""

    search_attributes: bool
    """Whether the namespace has every one of Threadline's search attributes registered."""
    idle_timeout_s: float
    attributes_every_s: float

    def fill(self, config: ConversationConfig) -> ConversationConfig:
        """`config` with the learned fields its starter left out taken from here (those it gave stay)."""
        missing = [name for name in LEARNED if name not in config.model_fields_set]
        return config.model_copy(update={name: getattr(self, name) for name in missing})


def unlearned(config: ConversationConfig) -> bool:
    """Whether the starter left out any field the worker can fill in."""
    return any(name not in config.model_fields_set for name in LEARNED)
