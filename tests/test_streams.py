"""Per-turn text streams: pieces in order, tries that start over, late writes, partial lines."""

from __future__ import annotations

from pathlib import Path

from store.streams import StreamLog, StreamReader

TURN = "01926d00-0001-7000-8000-000000000000"


def read_all(log: StreamLog) -> list[str | None]:
    reader = StreamReader()
    return reader.feed([event for _, event in log.read(TURN)])


def test_pieces_arrive_in_order_and_the_end_is_seen(tmp_path: Path) -> None:
    """A reader gets each piece once, in order, and learns how the try ended."""
    log = StreamLog(tmp_path)
    writer = log.writer(TURN, 1)
    for piece in ["Hel", "lo", "!"]:
        writer.text(piece)
    writer.end("done")
    reader = StreamReader()

    shown = reader.feed([event for _, event in log.read(TURN)])

    assert ["Hel", "lo", "!"] == shown
    assert ("done", "Hello!") == (reader.ended, reader.text)


def test_a_retried_try_voids_the_text_before_it(tmp_path: Path) -> None:
    """A new try starts over (None), and a late write of the replaced try is ignored."""
    log = StreamLog(tmp_path)
    first = log.writer(TURN, 1)
    first.text("half an ans")
    second = log.writer(TURN, 1)
    first.text("wer")  # the replaced try wakes up late
    second.text("A whole answer.")

    assert ["half an ans", None, "A whole answer."] == read_all(log)


def test_a_repair_voids_the_text_of_the_refused_reply(tmp_path: Path) -> None:
    """When a reply that did not fit is asked for again, its text is void."""
    log = StreamLog(tmp_path)
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
