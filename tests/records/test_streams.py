"""Per-turn text streams, in a folder and in PostgreSQL: pieces in order, tries that start over,
late writes, offsets to resume from, partial lines (a folder's), concurrent writers (PostgreSQL's)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from store.backends.locate import postgres_url
from store.backends.pgstreams import PostgresStreamLog
from store.backends.postgres import PostgresStore
from store.backends.streams import LINGER_S, StreamLog, StreamReader

TURN = "01926d00-0001-7000-8000-000000000000"

Log = StreamLog | PostgresStreamLog


@pytest.fixture(name="log", params=["folder", "postgres"])
def _log(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Log]:
    if request.param == "folder":
        yield StreamLog(tmp_path)
        return
    url, schema = postgres_url(request.getfixturevalue("pg_spec"))
    with PostgresStore(url, schema=schema) as store:
        yield PostgresStreamLog(store)


def read_all(log: Log) -> list[str | None]:
    reader = StreamReader()
    return reader.feed([event for _, event in log.read(TURN)])


def test_pieces_arrive_in_order_and_the_end_is_seen(log: Log) -> None:
    """A reader gets each piece once, in order, and learns how the try ended."""
    writer = log.writer(TURN, 1)
    for piece in ["Hel", "lo", "!"]:
        writer.text(piece)
    writer.end("done")
    reader = StreamReader()

    shown = reader.feed([event for _, event in log.read(TURN)])

    assert ["Hel", "lo", "!"] == shown
    assert ("done", "Hello!") == (reader.ended, reader.text)


def test_a_retried_try_voids_the_text_before_it(log: Log) -> None:
    """A new try starts over (None), and a late write of the replaced try is ignored."""
    first = log.writer(TURN, 1)
    first.text("half an ans")
    second = log.writer(TURN, 1)
    first.text("wer")  # the replaced try wakes up late
    second.text("A whole answer.")

    assert ["half an ans", None, "A whole answer."] == read_all(log)


def test_the_try_that_ends_the_turn_is_shown_whichever_started_last(log: Log) -> None:
    """A stale try that started after the healthy one (a frozen worker woken up) is shown while it writes;
    when the healthy try ends the turn, its text replaces it (None, then its pieces), and is the text."""
    frozen, healthy = log.writer(TURN, 1), log.writer(TURN, 2)
    healthy.text("The whole ")
    stale = log.writer(TURN, 1)
    stale.text("(offline)")
    healthy.text("answer.")
    healthy.end("done")
    frozen.text(" late words")
    stale.end("yielded")
    reader = StreamReader()

    shown = reader.feed([event for _, event in log.read(TURN)])

    assert ["The whole ", None, "(offline)", None, "The whole ", "answer."] == shown
    assert ("done", "The whole answer.") == (reader.ended, reader.text)


def test_tries_that_start_after_the_end_are_ignored(log: Log) -> None:
    """Once a try ended the turn, a try that starts later writes to a finished stream: nothing of it is read."""
    healthy = log.writer(TURN, 2)
    healthy.text("The answer.")
    healthy.end("done")
    late = log.writer(TURN, 1)
    late.text("(offline)")
    late.end("yielded")
    reader = StreamReader()

    shown = reader.feed([event for _, event in log.read(TURN)])

    assert ["The answer."] == shown
    assert ("done", "The answer.") == (reader.ended, reader.text)


def test_a_repair_voids_the_text_of_the_refused_reply(log: Log) -> None:
    """When a reply that did not fit is asked for again, its text is void."""
    writer = log.writer(TURN, 1)
    writer.text("{not json")
    writer.write({"restart": True})
    writer.text('{"ok": true}')

    assert ["{not json", None, '{"ok": true}'] == read_all(log)


def test_offsets_resume_after_each_event_and_skip_partial_lines(tmp_path: Path) -> None:
    """Each event carries the offset after it; a line still being written is left for later."""
    log = StreamLog(tmp_path)
    writer = log.writer(TURN, 1)
    writer.text("a")
    writer.text("b")
    with log.path(TURN).open("ab") as f:
        f.write(b'{"attempt":1,"text":"c"')
    events = log.read(TURN)

    after_first_text = events[1][0]

    assert ["b"] == [e["text"] for _, e in log.read(TURN, after_first_text)]
    assert 3 == len(events)
    assert [] == log.read("01926d00-0002-7000-8000-000000000000")


def test_offsets_resume_after_each_event(log: Log) -> None:
    """Reading from the offset after an event gives exactly the events after it; other turns are apart."""
    writer = log.writer(TURN, 1)
    for piece in "abc":
        writer.text(piece)
    events = log.read(TURN)

    resumed = log.read(TURN, events[1][0])

    assert ["b", "c"] == [e["text"] for _, e in resumed]
    assert events[2:] == log.read(TURN, events[1][0])
    assert [] == log.read(TURN, events[-1][0])
    assert [] == log.read("01926d00-0002-7000-8000-000000000000")


def test_concurrent_writers_of_a_turn_number_every_event_once(pg_spec: str) -> None:
    """Two writers of one turn at once (a try and its retry): events are numbered 1..n, none lost."""
    url, schema = postgres_url(pg_spec)
    with PostgresStore(url, schema=schema) as store:
        log = PostgresStreamLog(store)
        writers = [log.writer(TURN, attempt) for attempt in (1, 2)]

        def write(i: int) -> None:
            for n in range(40):
                writers[i].text(f"{i}:{n}")

        threads = [threading.Thread(target=write, args=(i,)) for i in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        events = log.read(TURN)

    assert list(range(1, 83)) == [offset for offset, _ in events]
    for i in range(2):
        assert [f"{i}:{n}" for n in range(40)] == [e.get("text") for _, e in events if e["run"] == writers[i].run][1:]


async def test_a_burst_of_pieces_is_written_together_within_the_linger(tmp_path: Path) -> None:
    """In an event loop, pieces that come within `LINGER_S` of a write wait for the pieces after them
    (one write per burst, not per token), and reach the file within that time, in order."""
    log = StreamLog(tmp_path)
    writer = log.writer(TURN, 1)
    for k in range(200):
        writer.text(f"{k} ")

    held_back = read_all(log)
    await asyncio.sleep(LINGER_S * 3)
    written = read_all(log)
    writer.text("last")
    writer.end("done")

    assert [] == held_back
    assert [f"{k} " for k in range(200)] == written
    assert [*written, "last"] == read_all(log)


async def test_a_try_that_ends_within_the_linger_is_written_in_one_go(tmp_path: Path) -> None:
    """In an event loop, a try's start waits `LINGER_S` for what follows it: a try that answers and ends
    within that time makes its file once, whole; a slower one's start is on disk within that time."""
    log = StreamLog(tmp_path)
    quick = log.writer(TURN, 1)
    quick.text("all at once")
    before_end = log.path(TURN).exists()
    quick.end("done")
    other = "01926d00-0002-7000-8000-000000000000"
    slow = log.writer(other, 1)
    started_at_once = log.path(other).exists()
    await asyncio.sleep(LINGER_S * 3)
    events = [event for _, event in log.read(other)]
    slow.end("stopped")

    assert not before_end
    assert ["all at once"] == read_all(log)
    assert 3 == len(log.read(TURN))
    assert not started_at_once
    assert [True] == [event.get("start") for event in events]
