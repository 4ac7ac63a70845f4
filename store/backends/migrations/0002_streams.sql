-- Per-turn text streams (store/backends/streams.py): what a model call has said so far. A view for whoever
-- watches a turn, not a record, so the table is UNLOGGED, as the stream files are written without
-- fsync: a write costs no WAL flush, and a database crash empties it. `position` numbers a turn's
-- events 1, 2, ... in commit order; a reader keeps the last position it read as its offset.
CREATE UNLOGGED TABLE streams (
    turn text COLLATE "C" NOT NULL,
    position bigint NOT NULL CHECK (position >= 1),
    line text NOT NULL,
    PRIMARY KEY (turn, position)
);
