-- Rota's schema on MySQL 8.0.1+ / MariaDB 10.6+ (InnoDB, utf8mb4).
-- Times are epoch milliseconds (BIGINT) so both backends compare them the same way.

CREATE TABLE apps (
    id         BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
    name       VARCHAR(200) NOT NULL,
    created_at BIGINT       NOT NULL,
    UNIQUE KEY uk_apps_name (name)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- The executor registry lives in the database so that every scheduler node lists every executor.
CREATE TABLE executors (
    id                BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
    app_id            BIGINT       NOT NULL,
    address           VARCHAR(500) NOT NULL,
    capacity          INT          NOT NULL,
    running           INT          NOT NULL,
    registered_at     BIGINT       NOT NULL,
    last_heartbeat_at BIGINT       NOT NULL,
    UNIQUE KEY uk_executors_app_address (app_id, address),
    KEY ix_executors_heartbeat (last_heartbeat_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE plugins (
    id         BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
    name       VARCHAR(200) NOT NULL,
    version    INT          NOT NULL,
    sha256     CHAR(64)     NOT NULL,
    size       BIGINT       NOT NULL,
    module     LONGBLOB     NOT NULL,
    created_at BIGINT       NOT NULL,
    UNIQUE KEY uk_plugins_name_version (name, version),
    KEY ix_plugins_sha256 (sha256)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- A job binds a plugin by name: its runs use the newest version of that plugin.
CREATE TABLE jobs (
    id              BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
    name            VARCHAR(200) NOT NULL,
    app_id          BIGINT       NOT NULL,
    plugin          VARCHAR(200) NOT NULL,
    schedule        TEXT         NOT NULL,
    params          TEXT         NULL,
    route           VARCHAR(32)  NOT NULL,
    block_strategy  VARCHAR(32)  NOT NULL,
    misfire         VARCHAR(32)  NOT NULL,
    timeout_ms      BIGINT       NOT NULL,
    max_attempts    INT          NOT NULL,
    backoff         TEXT         NOT NULL,
    memory_mb       INT          NOT NULL,
    max_concurrency INT          NULL,
    child_jobs      TEXT         NOT NULL,
    enabled         BOOLEAN      NOT NULL,
    next_fire_at    BIGINT       NULL,
    created_at      BIGINT       NOT NULL,
    updated_at      BIGINT       NOT NULL,
    UNIQUE KEY uk_jobs_name (name),
    KEY ix_jobs_due (enabled, next_fire_at),
    KEY ix_jobs_app (app_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- Every trigger is a task row: delayed tasks, manual triggers, child-job triggers and each
-- recurring fire time (key `cron:<ms>`), so that a fire is durable once the scan wrote it.
-- status: pending (waiting for due_at; attempt > 1 means a retry), claimed (in a node's wheel),
-- running, succeeded, dead, cancelled.
CREATE TABLE tasks (
    id           BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
    job_id       BIGINT       NOT NULL,
    kind         VARCHAR(16)  NOT NULL,
    idem_key     VARCHAR(200) NULL,
    payload      MEDIUMTEXT   NULL,
    params       TEXT         NULL,
    status       VARCHAR(16)  NOT NULL,
    due_at       BIGINT       NOT NULL,
    attempt      INT          NOT NULL,
    lost_count   INT          NOT NULL DEFAULT 0,
    max_attempts INT          NULL,
    backoff      TEXT         NULL,
    priority     INT          NOT NULL,
    owner_node   BIGINT       NULL,
    owner_epoch  BIGINT       NULL,
    last_run_id  BIGINT       NULL,
    created_at   BIGINT       NOT NULL,
    updated_at   BIGINT       NOT NULL,
    UNIQUE KEY uk_tasks_job_key (job_id, idem_key),
    KEY ix_tasks_due (status, due_at),
    KEY ix_tasks_job (job_id, id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- One row per (task, attempt, shard): the unique key makes "one run per attempt" a database fact.
CREATE TABLE runs (
    id            BIGINT       NOT NULL PRIMARY KEY,
    job_id        BIGINT       NOT NULL,
    task_id       BIGINT       NOT NULL,
    attempt       INT          NOT NULL,
    shard_index   INT          NOT NULL,
    shard_total   INT          NOT NULL,
    executor      VARCHAR(500) NULL,
    status        VARCHAR(16)  NOT NULL,
    scheduled_at  BIGINT       NOT NULL,
    dispatched_at BIGINT       NULL,
    started_at    BIGINT       NULL,
    finished_at   BIGINT       NULL,
    exit_code     INT          NULL,
    message       TEXT         NULL,
    UNIQUE KEY uk_runs_attempt (task_id, attempt, shard_index),
    KEY ix_runs_job (job_id, id),
    KEY ix_runs_executor (executor, status)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- Blocks of ids handed to a node at a time (run ids are chosen before a run is written).
CREATE TABLE sequences (
    name       VARCHAR(32) NOT NULL PRIMARY KEY,
    next_value BIGINT      NOT NULL
) ENGINE = InnoDB;
INSERT INTO sequences (name, next_value) VALUES ('run', 1), ('task', 1);

-- Scheduler nodes: each start bumps the epoch, which fences claims made by an older incarnation.
CREATE TABLE nodes (
    id           BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
    name         VARCHAR(200) NOT NULL,
    address      VARCHAR(500) NOT NULL,
    epoch        BIGINT       NOT NULL,
    heartbeat_at BIGINT       NOT NULL,
    started_at   BIGINT       NOT NULL,
    UNIQUE KEY uk_nodes_name (name)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE users (
    id            BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
    name          VARCHAR(200) NOT NULL,
    password_hash VARCHAR(200) NOT NULL,
    role          VARCHAR(16)  NOT NULL,
    created_at    BIGINT       NOT NULL,
    UNIQUE KEY uk_users_name (name)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE api_tokens (
    id         BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
    user_id    BIGINT       NOT NULL,
    name       VARCHAR(200) NOT NULL,
    token_hash CHAR(64)     NOT NULL,
    created_at BIGINT       NOT NULL,
    revoked_at BIGINT       NULL,
    UNIQUE KEY uk_api_tokens_hash (token_hash)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
