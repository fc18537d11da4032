-- Delivery beyond wasm (SPEC §8). A job's `delivery` is JSON: NULL or {"kind":"wasm"} (its
-- plugin runs on an executor), {"kind":"pull"} (consumers pull its fires) or
-- {"kind":"http","url":…} (each fire is POSTed). A pull job's fires that came due wait with
-- status `ready` (out of every wheel) until a consumer leases them: the task is then
-- `running` with the lease's token and end; the lease's run is the attempt's run.
ALTER TABLE jobs ADD COLUMN delivery TEXT NULL;
ALTER TABLE tasks ADD COLUMN lease_token TEXT NULL;
ALTER TABLE tasks ADD COLUMN lease_expires_at INTEGER NULL;

-- A pull: a job's ready tasks, higher priority first, then earlier due.
CREATE INDEX ix_tasks_ready ON tasks (job_id, status, priority DESC, due_at);
-- The leases that expired.
CREATE INDEX ix_tasks_lease ON tasks (lease_expires_at);
