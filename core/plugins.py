"""The base of the worker's own plugins: each wraps a running worker, and changes nothing else."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager

from temporalio.client import WorkflowHistory
from temporalio.worker import Plugin, Replayer, ReplayerConfig, WorkerConfig, WorkflowReplayResult

Replays = AsyncIterator[WorkflowReplayResult]


class RunPlugin(Plugin):
    """A plugin that only wraps `run_worker`: the worker's and the replayer's configuration, and
    replays, go on as without it (a replayer opens no store and runs no long-lived process)."""

    def configure_worker(self, config: WorkerConfig) -> WorkerConfig:
        """Nothing to change."""
        return config

    def configure_replayer(self, config: ReplayerConfig) -> ReplayerConfig:
        """Nothing to change."""
        return config

    def run_replayer(
        self,
        replayer: Replayer,
        histories: AsyncIterator[WorkflowHistory],
        next: Callable[[Replayer, AsyncIterator[WorkflowHistory]], AbstractAsyncContextManager[Replays]],
    ) -> AbstractAsyncContextManager[Replays]:
        """Replay as without the plugin."""
        return next(replayer, histories)
