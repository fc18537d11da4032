-- Each scheduler node's clock offset from the database's, as it last measured it
-- (database minus node, ms), written with its heartbeat: the node list shows it and the
-- `clock_skew` alarm rule watches it cluster-wide.
ALTER TABLE nodes ADD COLUMN clock_offset_ms BIGINT NOT NULL DEFAULT 0;
