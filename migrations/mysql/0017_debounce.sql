-- Debounce (SPEC §11): a job's `debounce_ms`. A task created with a key that a pending
-- task of the job holds replaces that task's payload and moves its due time — at most
-- `debounce_ms` after the first of those creates (the task's `created_at`).
ALTER TABLE jobs ADD COLUMN debounce_ms BIGINT NULL;
