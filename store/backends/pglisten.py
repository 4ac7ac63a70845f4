"""One LISTEN connection per store object, so `wait` blocks on notifications, not on a polling loop.

A thread owns a connection of its own (not one of the pool's, which a waiter would otherwise hold
for its whole wait) that LISTENs on the store's channel; each notification carries a conversation
id and wakes the waiters subscribed to it. Waiters subscribe *before* they count the records, and
the thread is listening before `subscribe` returns, so no append that commits after the count can
go unnoticed. When the connection is lost, every waiter is woken to count again, and the thread
connects again with a growing pause; once it listens again it wakes everyone once more, since
notifications sent meanwhile are lost.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg

from core.logs import get_logger

logger = get_logger(__name__)

Wake = Callable[[], None]

_POLL_S = 0.25
"""How often the thread looks up from the connection to see whether it should stop."""


class Listener:
    """Wakes the waiters of a conversation when a notification names it.

    Args:
        url: The database's connection URL.
        listen: The `LISTEN` statement of the store's channel.
    """

    def __init__(self, url: str, listen: bytes, **connect: Any) -> None:
        self._url, self._listen, self._connect = url, listen, connect
        self._guard = threading.Lock()
        self._waiters: dict[str, set[Wake]] = {}
        self._ready = threading.Event()
        self._closed = False
        self._thread: threading.Thread | None = None

    @property
    def listening(self) -> bool:
        """Whether the thread is listening now."""
        return self._ready.is_set()

    def subscribe(self, conversation: str, wake: Wake) -> None:
        """Call `wake` on every notification for `conversation` from now on, until `unsubscribe`.

        Starts the thread on first use; `ready` says when it listens. A waiter counts the records
        only after both, so that an append committed after the count always wakes it.
        """
        with self._guard:
            self._waiters.setdefault(conversation, set()).add(wake)
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(target=self._run, name="threadline-store-listener", daemon=True)
                self._thread.start()

    def ready(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds for the thread to listen; return whether it does."""
        return self._ready.wait(timeout)

    def unsubscribe(self, conversation: str, wake: Wake) -> None:
        """Stop calling `wake` for `conversation`."""
        with self._guard:
            found = self._waiters.get(conversation)
            if found is not None:
                found.discard(wake)
                if not found:
                    del self._waiters[conversation]

    def close(self) -> None:
        """Stop the thread (within about a quarter of a second) and close its connection."""
        with self._guard:
            self._closed = True
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=2 * _POLL_S)

    def _wake(self, conversation: str | None) -> None:
        with self._guard:
            if conversation is None:
                found = [wake for wakes in self._waiters.values() for wake in wakes]
            else:
                found = list(self._waiters.get(conversation, ()))
        for wake in found:
            wake()

    def _run(self) -> None:
        pause = 0.05
        while not self._closed:
            try:
                with psycopg.connect(self._url, autocommit=True, **self._connect) as conn:
                    conn.execute(self._listen)
                    self._ready.set()
                    self._wake(None)  # anything sent while we were not listening is lost: count again
                    pause = 0.05
                    self._serve(conn)
            except psycopg.Error as err:
                logger.warning("store.listener_lost", error=type(err).__name__, retry_in_s=pause)
            self._ready.clear()
            self._wake(None)
            if not self._closed:
                time.sleep(pause)
                pause = min(pause * 2, 2.0)

    def _serve(self, conn: psycopg.Connection[Any]) -> None:
        while not self._closed:
            for note in conn.notifies(timeout=_POLL_S):
                self._wake(note.payload)
