-- Workflow schedules (SPEC §10): a workflow fires like a job (`schedule`, as jobs' JSON;
-- `misfire` as jobs'), `next_fire_at` is its next fire time (NULL: none), and `overlap`
-- says what a fire does while an earlier instance runs: `skip` it, `queue` it (its fire
-- time waits in `queued`, a JSON array, until an instance ends) or `allow` it.
ALTER TABLE workflows
    ADD COLUMN schedule     TEXT        NULL,
    ADD COLUMN misfire      VARCHAR(16) NOT NULL DEFAULT 'do_nothing',
    ADD COLUMN overlap      VARCHAR(8)  NOT NULL DEFAULT 'skip',
    ADD COLUMN next_fire_at BIGINT      NULL,
    ADD COLUMN queued       TEXT        NULL;
CREATE INDEX ix_workflows_next_fire ON workflows (next_fire_at);
