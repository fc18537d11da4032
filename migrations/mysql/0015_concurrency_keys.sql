-- Flow control (SPEC §11): a job's concurrency bound may be per value of a key — a JSON
-- Pointer (RFC 6901) into its tasks' payloads, `concurrency_key` (NULL: one bound for the
-- whole job, `max_concurrency` as before, which is the limit either way). A task's value of
-- it is written to `limit_key` when a scan claims or throttles the task (NULL: the job
-- has no key, or the payload has no value there — one bucket of its own); a task over
-- the bound waits as `throttled`, spending no attempt. The index counts a job's busy
-- tasks per key and finds its throttled ones by key.
ALTER TABLE jobs ADD COLUMN concurrency_key VARCHAR(200) NULL;
ALTER TABLE tasks ADD COLUMN limit_key VARCHAR(255) NULL;
CREATE INDEX ix_tasks_job_limit ON tasks (job_id, status, limit_key);
