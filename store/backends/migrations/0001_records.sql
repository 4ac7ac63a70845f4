-- The record log (docs/format-1.md 1.3-1.5, 7) and the store's identity.
-- Applied by store.backends.migrate with search_path set to the store's schema.

-- One row per conversation: its record count, and the row every append locks (FOR UPDATE), so the
-- appends of one conversation are serialised while other conversations append in parallel.
CREATE TABLE conversations (
    id text COLLATE "C" PRIMARY KEY,
    length bigint NOT NULL CHECK (length >= 0)
);

-- Each record as the exact line a FolderStore writes, without its newline: `text`, not jsonb, which
-- would reorder keys. A line that is not UTF-8 text (a torn line copied from a folder) is kept in
-- `raw` instead, so a copy folder -> PostgreSQL -> folder is byte-identical.
CREATE TABLE records (
    conversation text COLLATE "C" NOT NULL,
    seq bigint NOT NULL CHECK (seq >= 1),
    line text,
    raw bytea,
    PRIMARY KEY (conversation, seq),
    CHECK ((line IS NULL) <> (raw IS NULL))
);

-- The store's identity: one row, created once with the schema and never changed.
CREATE TABLE store (
    only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    id uuid NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO store (id) VALUES (gen_random_uuid());
