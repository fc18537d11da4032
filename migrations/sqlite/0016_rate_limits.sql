-- Kept in step with the MySQL schema (0016_rate_limits.sql there): a job's rate limit and,
-- per job and bucket, the start times granted inside its last window.
ALTER TABLE jobs ADD COLUMN rate_limit TEXT NULL;
CREATE TABLE rate_windows (
    job_id  INTEGER NOT NULL,
    bucket  TEXT    NOT NULL,
    starts  TEXT    NOT NULL,
    last_at INTEGER NOT NULL,
    PRIMARY KEY (job_id, bucket)
);
CREATE INDEX ix_rate_windows_last ON rate_windows (last_at);
