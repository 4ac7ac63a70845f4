-- functai's call log for a PostgreSQL store (store/calls/postgres.py): call records and ratings, each as the
-- exact line a call-log folder holds, without its newline: `text`, not jsonb, which would reorder keys.
-- `call` is the call a line is about (a call record's own id, a rating's judged call), so finding a
-- call, or the ratings of a call, is an index scan; `at` is a call's `started` or a rating's `at`
-- (RFC 3339 UTC, which sorts as text) for reading only what is recent. `position` is the order of the
-- lines, as a folder's files and lines give it.
CREATE TABLE call_log (
    position bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    call text COLLATE "C" NOT NULL,
    at text COLLATE "C" NOT NULL,
    line text NOT NULL
);
CREATE INDEX call_log_call ON call_log (call);
CREATE INDEX call_log_at ON call_log (at);
