-- Roles with per-app scopes, API tokens issued to users, run counts for the dashboard, and
-- no more `last_run_id` on tasks.

-- The apps a non-admin user may see and act on: `*` for every app, or names joined by commas.
ALTER TABLE users ADD COLUMN apps TEXT NOT NULL DEFAULT '*';

-- Tokens are looked up by their hash on every API call; a user's tokens are listed by user.
CREATE INDEX ix_api_tokens_user ON api_tokens (user_id, id);

-- Finished runs counted per minute and final status, for the dashboard's charts: a few
-- thousand rows a week however many runs there are, kept as long as the runs.
CREATE TABLE run_stats (
    minute INTEGER NOT NULL,
    status TEXT    NOT NULL,
    runs   INTEGER NOT NULL,
    PRIMARY KEY (minute, status)
);

-- A task's newest run is looked up in `runs` (by `uk_runs_attempt`) instead of being kept on
-- the task: keeping it cost a per-row CASE on every dispatch and report.
ALTER TABLE tasks DROP COLUMN last_run_id;
