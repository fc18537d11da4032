-- Job changes and the fires they supersede: `generation` counts the changes that re-plan a job's
-- schedule (schedule, enabled). Recurring fire times are keyed `cron:<generation>:<ms>`, so the
-- fires planned under an older generation are told apart from the new plan's, wherever
-- they sit (a wheel, a pool), and never block the new plan's keys.
ALTER TABLE jobs ADD COLUMN generation INTEGER NOT NULL DEFAULT 0;

-- How long a fire may wait for an executor of the job's app before it counts as a failed
-- attempt (NULL: the default, 10 minutes). Tasks waiting for one have status `waiting`,
-- with `updated_at` the moment they began to wait.
ALTER TABLE jobs ADD COLUMN no_executor_timeout_ms INTEGER NULL;

-- `max_concurrency`: the scan counts a job's claimed and running tasks, and claims its
-- due ones in due order.
CREATE INDEX ix_tasks_job_status ON tasks (job_id, status, due_at);
