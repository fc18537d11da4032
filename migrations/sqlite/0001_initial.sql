-- Rota's schema on SQLite (the embedded default). Same tables and meaning as migrations/mysql.
-- Times are epoch milliseconds (INTEGER).

CREATE TABLE apps (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL,
    created_at INTEGER NOT NULL
);
CREATE UNIQUE INDEX uk_apps_name ON apps (name);

-- The executor registry lives in the database so that every scheduler node lists every executor.
CREATE TABLE executors (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    app_id INTEGER NOT NULL,
    address TEXT NOT NULL,
    capacity INTEGER NOT NULL,
    running INTEGER NOT NULL,
    registered_at INTEGER NOT NULL,
    last_heartbeat_at INTEGER NOT NULL
);
CREATE UNIQUE INDEX uk_executors_app_address ON executors (app_id, address);
CREATE INDEX ix_executors_heartbeat ON executors (last_heartbeat_at);

CREATE TABLE plugins (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL,
    version INTEGER NOT NULL,
    sha256 TEXT NOT NULL,
    size INTEGER NOT NULL,
    module BLOB NOT NULL,
    created_at INTEGER NOT NULL
);
CREATE UNIQUE INDEX uk_plugins_name_version ON plugins (name, version);
CREATE INDEX ix_plugins_sha256 ON plugins (sha256);

-- A job binds a plugin by name: its runs use the newest version of that plugin.
CREATE TABLE jobs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL,
    app_id INTEGER NOT NULL,
    plugin TEXT NOT NULL,
    schedule TEXT NOT NULL,
    params TEXT NULL,
    route TEXT NOT NULL,
    block_strategy TEXT NOT NULL,
    misfire TEXT NOT NULL,
    timeout_ms INTEGER NOT NULL,
    max_attempts INTEGER NOT NULL,
    backoff TEXT NOT NULL,
    memory_mb INTEGER NOT NULL,
    max_concurrency INTEGER NULL,
    child_jobs TEXT NOT NULL,
    enabled INTEGER NOT NULL,
    next_fire_at INTEGER NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
);
CREATE UNIQUE INDEX uk_jobs_name ON jobs (name);
CREATE INDEX ix_jobs_due ON jobs (enabled, next_fire_at);
CREATE INDEX ix_jobs_app ON jobs (app_id);

-- Every trigger is a task row: delayed tasks, manual triggers, child-job triggers and each
-- recurring fire time (key `cron:<ms>`), so that a fire is durable once the scan wrote it.
-- status: pending (waiting for due_at; attempt > 1 means a retry), claimed (in a node's wheel),
-- running, succeeded, dead, cancelled.
CREATE TABLE tasks (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id INTEGER NOT NULL,
    kind TEXT NOT NULL,
    idem_key TEXT NULL,
    payload TEXT NULL,
    params TEXT NULL,
    status TEXT NOT NULL,
    due_at INTEGER NOT NULL,
    attempt INTEGER NOT NULL,
    lost_count INTEGER NOT NULL DEFAULT 0,
    max_attempts INTEGER NULL,
    backoff TEXT NULL,
    priority INTEGER NOT NULL,
    owner_node INTEGER NULL,
    owner_epoch INTEGER NULL,
    last_run_id INTEGER NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
);
CREATE UNIQUE INDEX uk_tasks_job_key ON tasks (job_id, idem_key);
CREATE INDEX ix_tasks_due ON tasks (status, due_at);
CREATE INDEX ix_tasks_job ON tasks (job_id, id);

-- One row per (task, attempt, shard): the unique key makes "one run per attempt" a database fact.
CREATE TABLE runs (
    id INTEGER NOT NULL PRIMARY KEY,
    job_id INTEGER NOT NULL,
    task_id INTEGER NOT NULL,
    attempt INTEGER NOT NULL,
    shard_index INTEGER NOT NULL,
    shard_total INTEGER NOT NULL,
    executor TEXT NULL,
    status TEXT NOT NULL,
    scheduled_at INTEGER NOT NULL,
    dispatched_at INTEGER NULL,
    started_at INTEGER NULL,
    finished_at INTEGER NULL,
    exit_code INTEGER NULL,
    message TEXT NULL
);
CREATE UNIQUE INDEX uk_runs_attempt ON runs (task_id, attempt, shard_index);
CREATE INDEX ix_runs_job ON runs (job_id, id);
CREATE INDEX ix_runs_executor ON runs (executor, status);

-- Blocks of ids handed to a node at a time (run ids are chosen before a run is written).
CREATE TABLE sequences (
    name TEXT NOT NULL PRIMARY KEY,
    next_value INTEGER NOT NULL
);


INSERT INTO sequences (name, next_value) VALUES ('run', 1), ('task', 1);

-- Scheduler nodes: each start bumps the epoch, which fences claims made by an older incarnation.
CREATE TABLE nodes (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL,
    address TEXT NOT NULL,
    epoch INTEGER NOT NULL,
    heartbeat_at INTEGER NOT NULL,
    started_at INTEGER NOT NULL
);
CREATE UNIQUE INDEX uk_nodes_name ON nodes (name);

CREATE TABLE users (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL,
    password_hash TEXT NOT NULL,
    role TEXT NOT NULL,
    created_at INTEGER NOT NULL
);
CREATE UNIQUE INDEX uk_users_name ON users (name);

CREATE TABLE api_tokens (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    user_id INTEGER NOT NULL,
    name TEXT NOT NULL,
    token_hash TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    revoked_at INTEGER NULL
);
CREATE UNIQUE INDEX uk_api_tokens_hash ON api_tokens (token_hash);
