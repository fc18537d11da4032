-- The signed time of the newest registration, heartbeat or goodbye accepted from each
-- executor, on any scheduler node: an older one (a captured request replayed to another
-- node within the signature window) is ignored, so it can neither report a stale list of
-- runs nor remove a live executor.
ALTER TABLE executors ADD COLUMN signed_at INTEGER NOT NULL DEFAULT 0;
