-- Kept in step with the MySQL schema (0014_workflow_schedules.sql there): a workflow's
-- schedule, misfire policy, overlap policy, next fire time and queued fire times.
ALTER TABLE workflows ADD COLUMN schedule TEXT NULL;
ALTER TABLE workflows ADD COLUMN misfire TEXT NOT NULL DEFAULT 'do_nothing';
ALTER TABLE workflows ADD COLUMN overlap TEXT NOT NULL DEFAULT 'skip';
ALTER TABLE workflows ADD COLUMN next_fire_at INTEGER NULL;
ALTER TABLE workflows ADD COLUMN queued TEXT NULL;
CREATE INDEX ix_workflows_next_fire ON workflows (next_fire_at);
