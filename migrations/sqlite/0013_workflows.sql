-- Kept in step with the MySQL schema (0013_workflows.sql there, which says what each
-- table is for).
CREATE TABLE workflows (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    name        TEXT    NOT NULL,
    app_id      INTEGER NOT NULL,
    version     INTEGER NOT NULL,
    enabled     BOOLEAN NOT NULL DEFAULT 1,
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL
);
CREATE UNIQUE INDEX uk_workflows_name ON workflows (name);

CREATE TABLE workflow_versions (
    workflow_id INTEGER NOT NULL,
    version     INTEGER NOT NULL,
    steps       TEXT    NOT NULL,
    created_at  INTEGER NOT NULL,
    PRIMARY KEY (workflow_id, version)
);

CREATE TABLE workflow_instances (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    workflow_id INTEGER NOT NULL,
    version     INTEGER NOT NULL,
    status      TEXT    NOT NULL,
    input       TEXT    NULL,
    output      TEXT    NULL,
    idem_key    TEXT    NULL,
    created_at  INTEGER NOT NULL,
    finished_at INTEGER NULL
);
CREATE UNIQUE INDEX uk_workflow_instances_key ON workflow_instances (workflow_id, idem_key);
CREATE INDEX ix_workflow_instances_workflow ON workflow_instances (workflow_id, id);
CREATE INDEX ix_workflow_instances_status ON workflow_instances (status, id);

CREATE TABLE workflow_steps (
    instance_id INTEGER NOT NULL,
    step        INTEGER NOT NULL,
    status      TEXT    NOT NULL,
    task_id     INTEGER NULL,
    output      TEXT    NULL,
    items       INTEGER NULL,
    message     TEXT    NULL,
    started_at  INTEGER NULL,
    finished_at INTEGER NULL,
    PRIMARY KEY (instance_id, step)
);

CREATE TABLE workflow_tasks (
    task_id     INTEGER NOT NULL PRIMARY KEY,
    instance_id INTEGER NOT NULL,
    step        INTEGER NOT NULL,
    item        INTEGER NULL,
    status      TEXT    NULL,
    output      TEXT    NULL
);
CREATE INDEX ix_workflow_tasks_step ON workflow_tasks (instance_id, step, item);
