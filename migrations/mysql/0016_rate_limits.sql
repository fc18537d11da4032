-- Rate limits (SPEC §11): a job's `rate_limit` — JSON `{"key"?, "limit", "per_ms"}`, at most
-- `limit` run starts per value of `key` (a JSON Pointer into its payloads) in any window of
-- `per_ms` — and, per job and bucket, the start times granted inside the last window (a
-- JSON array of epoch ms, ascending, at most `limit`): the scan that claims a task under
-- the job's row lock reads its bucket's row, grants the earliest start that fits and
-- writes the row back. `bucket` is `=` and the value, or `-` for a payload with no value
-- there (or a job without a key): one bucket of its own.
ALTER TABLE jobs ADD COLUMN rate_limit TEXT NULL;
CREATE TABLE rate_windows (
    job_id  BIGINT       NOT NULL,
    bucket  VARCHAR(300) NOT NULL,
    starts  MEDIUMTEXT   NOT NULL,
    -- The last start granted: a row whose window has passed is of no use.
    last_at BIGINT       NOT NULL,
    PRIMARY KEY (job_id, bucket),
    KEY ix_rate_windows_last (last_at)
) ENGINE=InnoDB;
