-- Kept in step with the MySQL schema (0012_node_clock.sql there): each node's measured
-- clock offset from the database's, written with its heartbeat. Always 0 on SQLite, whose
-- clock is this machine's.
ALTER TABLE nodes ADD COLUMN clock_offset_ms INTEGER NOT NULL DEFAULT 0;
