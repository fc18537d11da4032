-- Kept in step with the MySQL schema (0015_concurrency_keys.sql there): a job's
-- concurrency key (a JSON Pointer into its payloads) and each claimed or throttled task's
-- value of it.
ALTER TABLE jobs ADD COLUMN concurrency_key TEXT NULL;
ALTER TABLE tasks ADD COLUMN limit_key TEXT NULL;
CREATE INDEX ix_tasks_job_limit ON tasks (job_id, status, limit_key);
