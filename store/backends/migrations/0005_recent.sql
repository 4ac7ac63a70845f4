-- When each conversation was last appended to, so a worker that starts can read the logs of the
-- conversations most recently active before their next turns (store/backends/reader.py, `LogCache.warm`).
-- Conversations last appended to before this migration have none, and come after the others.
ALTER TABLE conversations ADD COLUMN appended_at timestamptz;
