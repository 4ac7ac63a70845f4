-- The claim check's payload store for a deployment whose stores are PostgreSQL databases
-- (store/backends/pgblobs.py): payloads too large for Temporal's history, by their SHA-256. Written once,
-- never changed; `created` lets an operator remove what is older than the namespace's retention.
CREATE TABLE payloads (
    key text COLLATE "C" PRIMARY KEY,
    data bytea NOT NULL,
    created timestamptz NOT NULL DEFAULT now()
);
