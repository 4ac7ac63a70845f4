"""The call log of a PostgreSQL store: the lines a call-log folder holds, in the store's own table."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path

import functai
import psycopg
import pytest

from store.backends.locate import postgres_url
from store.backends.postgres import PostgresStore
from store.calls.folder import call_folder
from store.calls.log import backfill, call_log
from store.calls.postgres import PostgresCallLog
from store.calls.rated import rated
from store.calls.ratings import rate
from tests.support.calllog_kit import TUTOR, as_table, threadline_turn
from tests.support.functai_kit import tutor as functai_tutor


@pytest.fixture(name="pg")
def _pg(pg_spec: str) -> Iterator[PostgresStore]:
    url, schema = postgres_url(pg_spec)
    with PostgresStore(url, schema=schema) as store:
        yield store


def test_turns_ratings_and_rows_live_in_the_stores_table(pg: PostgresStore, tmp_path: Path) -> None:
    """Call records and ratings go to the schema's `call_log` table as exact lines; Threadline's rows
    from it are the rows functai reads from a folder copy of those lines."""
    first = threadline_turn(pg, "pg", "one", "A1")
    second = threadline_turn(pg, "pg", "two", "A2")
    rate(pg, first, "right", by="ana")
    rate(pg, second, "wrong", answer="B2", by="ana")
    log = call_log(pg)
    assert isinstance(log, PostgresCallLog)

    ours = rated(TUTOR, stores=[pg])
    call_folder(tmp_path / "copy").write(log.lines())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = functai.rated(functai_tutor, folder=str(tmp_path / "copy")).collect().to_dicts()

    assert [first, second] == [r["call"] for r in ours]
    assert ["A1", "B2"] == [r["result"] for r in ours]
    assert [[], [{"message": "one"}]] == [[e["inputs"] for e in r["earlier"]] for r in ours]
    assert theirs == as_table(ours)
    with psycopg.connect(pg.url) as conn:
        stored = conn.execute(f"SELECT line FROM {pg.schema}.call_log ORDER BY position").fetchall()
    assert [row[0].encode() + b"\n" for row in stored] == log.lines()
    assert 4 == len(stored)


def test_a_call_is_found_by_its_id_and_backfilled_once(pg: PostgresStore) -> None:
    """`find` reads one call's lines; backfill writes the calls the table lacks and nothing twice."""
    logged = threadline_turn(pg, "fill", "one", "A1")
    missing = threadline_turn(pg, "fill", "two", "A2", logged=False)
    log = call_log(pg)

    assert (logged, None) == ((log.find(logged) or {}).get("id"), log.find(missing))
    assert 1 == backfill(pg)
    assert 0 == backfill(pg)
    assert missing == (log.find(missing) or {}).get("id")
