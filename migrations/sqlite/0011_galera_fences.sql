-- Kept in step with the MySQL schema (0011_galera_fences.sql there): a counter a node's
-- lease-holding transactions bump on a Galera cluster, where row locks are local to a
-- member. Unused on SQLite.
ALTER TABLE node_fences ADD COLUMN writes INTEGER NOT NULL DEFAULT 0;
