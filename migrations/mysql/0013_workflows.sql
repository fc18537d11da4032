-- Workflows (SPEC §10): a named graph of steps in one app, each step a task of a job.
-- A change makes a new version; an instance keeps the version it started with, so its
-- graph is read from `workflow_versions`, never from the workflow's current steps.
CREATE TABLE workflows (
    id          BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
    name        VARCHAR(200) NOT NULL,
    app_id      BIGINT       NOT NULL,
    version     INT          NOT NULL,
    enabled     BOOLEAN      NOT NULL DEFAULT 1,
    created_at  BIGINT       NOT NULL,
    updated_at  BIGINT       NOT NULL,
    UNIQUE KEY uk_workflows_name (name)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- Each version's steps, as JSON (`workflow::StepSpec`, jobs by id).
CREATE TABLE workflow_versions (
    workflow_id BIGINT NOT NULL,
    version     INT    NOT NULL,
    steps       MEDIUMTEXT NOT NULL,
    created_at  BIGINT NOT NULL,
    PRIMARY KEY (workflow_id, version)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- One run of a workflow. Its row is the lock every step ending takes (FOR UPDATE), so two
-- predecessors of one join ending at once, on one node or two, decide the join in turn.
CREATE TABLE workflow_instances (
    id          BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
    workflow_id BIGINT       NOT NULL,
    version     INT          NOT NULL,
    status      VARCHAR(16)  NOT NULL,
    input       MEDIUMTEXT   NULL,
    output      MEDIUMTEXT   NULL,
    idem_key    VARCHAR(200) NULL,
    created_at  BIGINT       NOT NULL,
    finished_at BIGINT       NULL,
    UNIQUE KEY uk_workflow_instances_key (workflow_id, idem_key),
    KEY ix_workflow_instances_workflow (workflow_id, id),
    KEY ix_workflow_instances_status (status, id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- Each step of an instance, by its index in the version's steps. `task_id`: the step's
-- task (a mapped step has one per element, in `workflow_tasks`).
CREATE TABLE workflow_steps (
    instance_id BIGINT      NOT NULL,
    step        INT         NOT NULL,
    status      VARCHAR(16) NOT NULL,
    task_id     BIGINT      NULL,
    output      MEDIUMTEXT  NULL,
    items       INT         NULL,
    message     TEXT        NULL,
    started_at  BIGINT      NULL,
    finished_at BIGINT      NULL,
    PRIMARY KEY (instance_id, step)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- Which step (and element of a map) a task runs: read only when a task of kind `step`
-- ends. An element's outcome and output are kept here until its step ends.
CREATE TABLE workflow_tasks (
    task_id     BIGINT      NOT NULL PRIMARY KEY,
    instance_id BIGINT      NOT NULL,
    step        INT         NOT NULL,
    item        INT         NULL,
    status      VARCHAR(16) NULL,
    output      MEDIUMTEXT  NULL,
    KEY ix_workflow_tasks_step (instance_id, step, item)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
