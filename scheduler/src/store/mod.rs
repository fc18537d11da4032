//! Storage: every row Rota keeps, on MySQL (8.0.1+ / MariaDB 10.6+) or SQLite.
//!
//! [`Store`] is one type over two backends. Almost every statement is the same SQL on both
//! (`?` placeholders, epoch-millisecond integers), so each method is written once and the
//! [`on_pool!`] macro compiles its body against each backend's concrete pool; the few
//! dialect differences (`INSERT IGNORE` vs `INSERT OR IGNORE`, upserts, `SKIP LOCKED`) are
//! spelled out where they occur. One contract suite (`tests/store_contract.rs`) runs on both.
//!
//! Batching is the rule on hot paths: the scan claims a whole window in one transaction,
//! dispatches and run reports are written many rows per statement (`IN (…)`, `CASE id …`,
//! multi-row `VALUES`), so the statements per fire stay flat however large the backlog.

use std::collections::{BTreeMap, HashMap};
use std::str::FromStr;
use std::time::Duration;

use sqlx::mysql::{MySqlConnectOptions, MySqlPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{FromRow, MySqlPool, QueryBuilder, SqlitePool};

use crate::backoff::Backoff;
use crate::model::*;
use crate::schedule::{Misfire, Schedule};

/// Rows per multi-row statement: under both backends' placeholder limits for our widest rows.
const CHUNK: usize = 1000;

/// Whom a batch of run reports is about ([`Store::report_owners`]).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ReportOwners {
    /// Task → its job and the job's app (`None` for a job deleted since).
    pub tasks: HashMap<i64, (i64, Option<String>)>,
    /// Recorded run → its task and the executor it was sent to.
    pub runs: HashMap<i64, (i64, Option<String>)>,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0} not found")]
    NotFound(String),
    #[error("{0}")]
    Conflict(String),
    #[error("unsupported database url `{0}`: use mysql://… or sqlite:…")]
    UnsupportedUrl(String),
    #[error("database error: {0}")]
    Database(sqlx::Error),
    #[error("database migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("stored value is invalid: {0}")]
    Corrupt(String),
    /// This node's lease is gone: another node took over its claims (it had stopped
    /// heartbeating), or a newer process runs under its name. It must fire nothing more.
    #[error("this scheduler node was fenced: its claims were taken over")]
    Fenced,
}

impl From<sqlx::Error> for Error {
    fn from(e: sqlx::Error) -> Self {
        match &e {
            sqlx::Error::RowNotFound => Error::NotFound("row".into()),
            sqlx::Error::Database(d) if d.is_unique_violation() => {
                Error::Conflict(format!("already exists ({})", d.message()))
            }
            _ => Error::Database(e),
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Which database a [`Store`] talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    MySql,
    Sqlite,
}

#[derive(Clone)]
enum Pool {
    MySql(MySqlPool),
    Sqlite(SqlitePool),
}

/// Runs `$body` with `$pool` bound to the concrete pool and `$db` naming its database type.
macro_rules! on_pool {
    (@match $which:expr, |$pool:ident, $db:ident| $body:expr) => {
        match $which {
            Pool::MySql($pool) => {
                #[allow(dead_code)]
                type $db = sqlx::MySql;
                $body
            }
            Pool::Sqlite($pool) => {
                #[allow(dead_code)]
                type $db = sqlx::Sqlite;
                $body
            }
        }
    };
    (control $store:expr, |$pool:ident, $db:ident| $body:expr) => {
        on_pool!(@match &$store.control, |$pool, $db| $body)
    };
    ($store:expr, |$pool:ident, $db:ident| $body:expr) => {
        on_pool!(@match &$store.pool, |$pool, $db| $body)
    };
}

/// Inside a transaction: this node's epoch is still `lease`'s, and stays so until commit (a
/// shared lock on its `node_fences` row on MySQL; SQLite has one writer). Else
/// `Error::Fenced`: another node took this one over, and what it holds is no longer its
/// own. (The lock is not on the `nodes` row, which the heartbeat updates: the heartbeat
/// must never wait behind the node's own work.)
macro_rules! hold_lease {
    ($store:expr, $tx:ident, $lease:expr) => {{
        let share = if $store.is_mysql() {
            " LOCK IN SHARE MODE"
        } else {
            ""
        };
        let epoch: Option<i64> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT epoch FROM node_fences WHERE node_id = ?{share}"
        )))
        .bind($lease.node_id)
        .fetch_optional(&mut *$tx)
        .await?;
        if epoch != Some($lease.epoch) {
            return Err(Error::Fenced);
        }
    }};
}

/// The start of a query for [`DueRow`]s: what the wheel needs of a task.
macro_rules! due_select {
    () => {
        "SELECT id, job_id, kind, idem_key, due_at, attempt, priority, payload, params FROM tasks"
    };
}

/// SQL: is run status `$new` further along than `$old` (dispatched < running < final)?
macro_rules! run_advances {
    ($new:literal, $old:literal) => {
        concat!(
            "(CASE ",
            $new,
            " WHEN 'dispatched' THEN 0 WHEN 'running' THEN 1 ELSE 2 END > \
             CASE ",
            $old,
            " WHEN 'dispatched' THEN 0 WHEN 'running' THEN 1 ELSE 2 END)"
        )
    };
}

/// Limits a query over a table with a `job_id` column to the jobs of `apps` (none at all
/// for an empty list).
macro_rules! in_apps {
    ($qb:expr, $column:literal, $apps:expr) => {{
        let apps: &[String] = $apps;
        if apps.is_empty() {
            $qb.push(" AND 1 = 0");
        } else {
            $qb.push(concat!(
                " AND ",
                $column,
                " IN (SELECT sj.id FROM jobs sj JOIN apps sa ON sa.id = sj.app_id WHERE sa.name IN ("
            ));
            let mut names = $qb.separated(", ");
            for app in apps {
                names.push_bind(app.as_str());
            }
            $qb.push("))");
        }
    }};
}

/// Reserves `$n` task ids for rows transaction `$tx` is about to insert and evaluates to the
/// first. MySQL: from another connection, so the sequence row is never held for the
/// transaction (API inserts allocate from it too). SQLite: inside the transaction, on its
/// single connection.
macro_rules! task_ids_in_tx {
    ($store:expr, $tx:ident, $n:expr) => {
        if $store.is_mysql() {
            $store.allocate_ids("task", $n).await?
        } else {
            sqlx::query("UPDATE sequences SET next_value = next_value + ? WHERE name = 'task'")
                .bind($n)
                .execute(&mut *$tx)
                .await?;
            let end: i64 =
                sqlx::query_scalar("SELECT next_value FROM sequences WHERE name = 'task'")
                    .fetch_one(&mut *$tx)
                    .await?;
            end - $n
        }
    };
}

/// Runs `$body` with `$tx` bound to the concrete transaction of a [`Tx`] and `$db` naming
/// its database type: [`on_pool!`] for steps that share one transaction.
macro_rules! on_tx {
    ($which:expr, |$tx:ident, $db:ident| $body:expr) => {
        match $which {
            Tx::MySql($tx) => {
                #[allow(dead_code)]
                type $db = sqlx::MySql;
                $body
            }
            Tx::Sqlite($tx) => {
                #[allow(dead_code)]
                type $db = sqlx::Sqlite;
                $body
            }
        }
    };
}

/// A transaction on either backend, for methods written as named steps.
pub(crate) enum Tx {
    MySql(sqlx::Transaction<'static, sqlx::MySql>),
    Sqlite(sqlx::Transaction<'static, sqlx::Sqlite>),
}

impl Tx {
    async fn commit(self) -> Result<()> {
        match self {
            Tx::MySql(tx) => tx.commit().await?,
            Tx::Sqlite(tx) => tx.commit().await?,
        }
        Ok(())
    }
}

// Below the macros, which the submodules use.
mod migrate;
mod runs;

use migrate::is_retryable;

/// The id of the row an `INSERT` created, on either backend.
trait InsertId {
    fn insert_id(&self) -> i64;
    fn affected(&self) -> u64;
}

impl InsertId for sqlx::mysql::MySqlQueryResult {
    fn insert_id(&self) -> i64 {
        i64::try_from(self.last_insert_id()).unwrap_or(i64::MAX)
    }
    fn affected(&self) -> u64 {
        self.rows_affected()
    }
}

impl InsertId for sqlx::sqlite::SqliteQueryResult {
    fn insert_id(&self) -> i64 {
        self.last_insert_rowid()
    }
    fn affected(&self) -> u64 {
        self.rows_affected()
    }
}

/// Pushes `(?, ?, …)` binding each id, for `IN` lists.
fn push_ids<DB: sqlx::Database>(qb: &mut QueryBuilder<DB>, ids: impl IntoIterator<Item = i64>)
where
    i64: for<'t> sqlx::Encode<'t, DB> + sqlx::Type<DB>,
{
    qb.push("(");
    let mut sep = qb.separated(", ");
    for id in ids {
        sep.push_bind(id);
    }
    qb.push(")");
}

/// Pushes `CASE id WHEN ? THEN ? … END`.
fn push_case<DB: sqlx::Database, V>(
    qb: &mut QueryBuilder<DB>,
    pairs: impl IntoIterator<Item = (i64, V)>,
) where
    i64: for<'t> sqlx::Encode<'t, DB> + sqlx::Type<DB>,
    V: for<'t> sqlx::Encode<'t, DB> + sqlx::Type<DB>,
{
    qb.push("CASE id");
    for (id, v) in pairs {
        qb.push(" WHEN ").push_bind(id).push(" THEN ").push_bind(v);
    }
    qb.push(" END");
}

fn parse<T: FromStr>(s: &str) -> Result<T>
where
    T::Err: std::fmt::Display,
{
    s.parse().map_err(|e: T::Err| Error::Corrupt(e.to_string()))
}

fn parse_json<T: serde::de::DeserializeOwned>(s: &str) -> Result<T> {
    serde_json::from_str(s).map_err(|e| Error::Corrupt(format!("{e}: {s}")))
}

fn to_json<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_else(|_| "null".into())
}

const JOB_COLUMNS: &str = "j.id, j.name, a.name AS app, j.plugin, j.schedule, j.params, j.route, \
     j.block_strategy, j.misfire, j.timeout_ms, j.max_attempts, j.backoff, j.memory_mb, \
     j.max_concurrency, j.child_jobs, j.http_allow, j.enabled, j.no_executor_timeout_ms, \
     j.next_fire_at, j.generation, j.created_at, j.updated_at";

#[derive(FromRow)]
struct JobRow {
    id: i64,
    name: String,
    app: String,
    plugin: String,
    schedule: String,
    params: Option<String>,
    route: String,
    block_strategy: String,
    misfire: String,
    timeout_ms: i64,
    max_attempts: i32,
    backoff: String,
    memory_mb: i32,
    max_concurrency: Option<i32>,
    child_jobs: String,
    http_allow: Option<String>,
    enabled: bool,
    no_executor_timeout_ms: Option<i64>,
    next_fire_at: Option<i64>,
    generation: i64,
    created_at: i64,
    updated_at: i64,
}

impl TryFrom<JobRow> for Job {
    type Error = Error;
    fn try_from(r: JobRow) -> Result<Job> {
        Ok(Job {
            id: r.id,
            spec: JobSpec {
                name: r.name,
                app: r.app,
                plugin: r.plugin,
                schedule: parse_json(&r.schedule)?,
                params: r.params,
                route: parse(&r.route)?,
                block: parse(&r.block_strategy)?,
                misfire: parse(&r.misfire)?,
                timeout_ms: r.timeout_ms,
                max_attempts: r.max_attempts,
                backoff: parse_json(&r.backoff)?,
                memory_mb: r.memory_mb,
                max_concurrency: r.max_concurrency,
                child_jobs: parse_json(&r.child_jobs)?,
                http_allow: match r.http_allow.as_deref() {
                    None | Some("") => Vec::new(),
                    Some(json) => parse_json(json)?,
                },
                enabled: r.enabled,
                no_executor_timeout_ms: r.no_executor_timeout_ms,
            },
            next_fire_at: r.next_fire_at,
            generation: r.generation,
            created_at: r.created_at,
            updated_at: r.updated_at,
        })
    }
}

/// A task's columns for `SELECT … FROM tasks`. Its newest run is looked up (an index probe
/// of `uk_runs_attempt`) rather than kept on the row: writing it on every dispatch and
/// report took a per-row `CASE` that cost the database more than the rest of the hot path.
const TASK_COLUMNS: &str = "id, job_id, kind, idem_key, payload, params, status, due_at, attempt, \
     max_attempts, backoff, priority, \
     (SELECT MAX(r.id) FROM runs r WHERE r.task_id = tasks.id) AS last_run_id, created_at, updated_at";

#[derive(FromRow)]
struct TaskRow {
    id: i64,
    job_id: i64,
    kind: String,
    idem_key: Option<String>,
    payload: Option<String>,
    params: Option<String>,
    status: String,
    due_at: i64,
    attempt: i32,
    max_attempts: Option<i32>,
    backoff: Option<String>,
    priority: i32,
    last_run_id: Option<i64>,
    created_at: i64,
    updated_at: i64,
}

impl TryFrom<TaskRow> for Task {
    type Error = Error;
    fn try_from(r: TaskRow) -> Result<Task> {
        Ok(Task {
            id: r.id,
            job_id: r.job_id,
            kind: parse(&r.kind)?,
            key: r.idem_key,
            payload: r.payload,
            params: r.params,
            status: parse(&r.status)?,
            due_at: r.due_at,
            attempt: r.attempt,
            max_attempts: r.max_attempts,
            backoff: r.backoff.as_deref().map(parse_json).transpose()?,
            priority: r.priority,
            last_run_id: r.last_run_id,
            created_at: r.created_at,
            updated_at: r.updated_at,
        })
    }
}

#[derive(FromRow)]
struct DueRow {
    id: i64,
    job_id: i64,
    kind: String,
    idem_key: Option<String>,
    due_at: i64,
    attempt: i32,
    priority: i32,
    payload: Option<String>,
    params: Option<String>,
}

impl TryFrom<DueRow> for DueTask {
    type Error = Error;
    fn try_from(r: DueRow) -> Result<DueTask> {
        let kind: TaskKind = parse(&r.kind)?;
        let generation = match (kind, r.idem_key.as_deref()) {
            (TaskKind::Cron, Some(key)) => cron_key_gen(key),
            _ => 0,
        };
        Ok(DueTask {
            task_id: r.id,
            job_id: r.job_id,
            kind,
            due_at: r.due_at,
            attempt: r.attempt,
            priority: r.priority,
            payload: r.payload,
            params: r.params,
            epoch: 0,
            generation,
            waiting_since: None,
        })
    }
}

const RUN_COLUMNS: &str = "id, job_id, task_id, attempt, shard_index, shard_total, executor, status, \
     scheduled_at, dispatched_at, started_at, finished_at, exit_code, message";

#[derive(FromRow)]
struct RunRow {
    id: i64,
    job_id: i64,
    task_id: i64,
    attempt: i32,
    shard_index: i32,
    shard_total: i32,
    executor: Option<String>,
    status: String,
    scheduled_at: i64,
    dispatched_at: Option<i64>,
    started_at: Option<i64>,
    finished_at: Option<i64>,
    exit_code: Option<i32>,
    message: Option<String>,
}

impl TryFrom<RunRow> for Run {
    type Error = Error;
    fn try_from(r: RunRow) -> Result<Run> {
        Ok(Run {
            id: r.id,
            job_id: r.job_id,
            task_id: r.task_id,
            attempt: r.attempt,
            shard_index: r.shard_index,
            shard_total: r.shard_total,
            executor: r.executor,
            status: parse(&r.status)?,
            scheduled_at: r.scheduled_at,
            dispatched_at: r.dispatched_at,
            started_at: r.started_at,
            finished_at: r.finished_at,
            exit_code: r.exit_code,
            message: r.message,
        })
    }
}

#[derive(FromRow)]
struct ExecutorRow {
    app: String,
    address: String,
    capacity: i32,
    running: i32,
    registered_at: i64,
    last_heartbeat_at: i64,
}

impl From<ExecutorRow> for Executor {
    fn from(r: ExecutorRow) -> Self {
        Executor {
            app: r.app,
            address: r.address,
            capacity: r.capacity,
            running: r.running,
            registered_at: r.registered_at,
            last_heartbeat_at: r.last_heartbeat_at,
        }
    }
}

#[derive(FromRow)]
struct PluginRow {
    id: i64,
    name: String,
    version: i32,
    sha256: String,
    size: i64,
    created_at: i64,
}

impl From<PluginRow> for Plugin {
    fn from(r: PluginRow) -> Self {
        Plugin {
            id: r.id,
            name: r.name,
            version: r.version,
            sha256: r.sha256,
            size: r.size,
            created_at: r.created_at,
        }
    }
}

/// A job whose next fire time falls inside the scan window.
#[derive(Debug, Clone, PartialEq)]
pub struct DueJob {
    pub id: i64,
    pub schedule: Schedule,
    pub misfire: Misfire,
    pub next_fire_at: Millis,
}

/// The fire times the scan decided for one [`DueJob`] and its next fire time after them.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct JobFires {
    pub fires: Vec<Millis>,
    pub next_fire_at: Option<Millis>,
}

/// What a scan claimed.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Claimed {
    pub tasks: Vec<DueTask>,
    /// Recurring fire times the scan turned into tasks.
    pub cron_fires: usize,
}

/// The outcome of applying a batch of run updates.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Applied {
    /// Run rows written (one per run of the batch; a repeated or stale update is written
    /// too, and changes nothing).
    pub written: usize,
    /// Tasks whose attempt ended, with what happens next.
    pub tasks: Vec<(i64, TaskNext)>,
    /// Child-job tasks created because a parent succeeded.
    pub children: usize,
    /// An attempt of a job with `max_concurrency` ended: the scan may claim another.
    pub freed_limited: bool,
}

#[derive(Clone)]
pub struct Store {
    pool: Pool,
    /// Cluster coordination: MySQL connections of its own (see `connect`); SQLite's pool.
    control: Pool,
    /// MySQL: how the node heartbeat opens a connection of its own ([`Store::beat`]).
    beat_opts: Option<MySqlConnectOptions>,
}

/// The node heartbeat's own way to the database, made on the thread that beats
/// (`node.rs`). The heartbeat is the node's lease: were it to queue for a pooled connection
/// behind a burst of work (every connection busy applying reports), a busy node would look
/// dead and be taken over. On MySQL it is a connection of its own; SQLite's single
/// connection is shared (its writes are short, and its driver works from any runtime).
pub struct Beat {
    pool: Pool,
}

impl Beat {
    /// Refreshes the node's heartbeat; false when it was taken over (its epoch moved on).
    pub async fn heartbeat_node(&self, lease: NodeLease, now: Millis) -> Result<bool> {
        heartbeat_on(&self.pool, lease, now).await
    }
}

async fn heartbeat_on(pool: &Pool, lease: NodeLease, now: Millis) -> Result<bool> {
    on_pool!(@match pool, |pool, Db| {
        let r = sqlx::query("UPDATE nodes SET heartbeat_at = ? WHERE id = ? AND epoch = ?")
            .bind(now)
            .bind(lease.node_id)
            .bind(lease.epoch)
            .execute(pool)
            .await?;
        Ok(r.affected() > 0)
    })
}

/// MySQL pool options with the session settings every connection needs.
fn mysql_pool(max_connections: u32) -> MySqlPoolOptions {
    MySqlPoolOptions::new()
        .max_connections(max_connections)
        // Correctness rests on row locks and conditional updates, never on repeatable
        // snapshots; READ COMMITTED spares the scan and the writers InnoDB's gap locks.
        .after_connect(|conn, _| {
            Box::pin(async move {
                sqlx::query("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
                    .execute(&mut *conn)
                    .await?;
                // A process that stalls inside a transaction (SIGSTOP, a long pause)
                // would hold its row locks, and with them its claims and its node row,
                // until the connection dies; no other node could take it over. MariaDB
                // rolls such a transaction back after this many idle seconds (ours
                // never wait between statements), which releases them (docs/cluster.md).
                // MySQL has no such setting: there the stall lasts until the connection
                // times out.
                let version: String = sqlx::query_scalar("SELECT VERSION()")
                    .fetch_one(&mut *conn)
                    .await?;
                if version.contains("MariaDB") {
                    sqlx::query("SET SESSION idle_transaction_timeout = 2")
                        .execute(&mut *conn)
                        .await?;
                }
                Ok(())
            })
        })
}

impl Store {
    /// Connects, creating the SQLite file if needed, and applies pending migrations (one node
    /// at a time, see [`migrate`], so several nodes starting at once is safe).
    pub async fn connect(url: &str) -> Result<Store> {
        let mut beat_opts = None;
        let mut control = None;
        let pool = if url.starts_with("mysql:") || url.starts_with("mariadb:") {
            let url = url.replacen("mariadb:", "mysql:", 1);
            let opts = MySqlConnectOptions::from_str(&url)?;
            beat_opts = Some(opts.clone());
            let pool = mysql_pool(16)
                .min_connections(2)
                .acquire_timeout(Duration::from_secs(10))
                .connect_with(opts.clone())
                .await?;
            // Cluster coordination (take-overs, adopting claims) on connections of its own:
            // a take-over must not queue for a connection behind a burst of reports.
            control = Some(Pool::MySql(
                mysql_pool(2)
                    .acquire_timeout(Duration::from_secs(5))
                    .connect_lazy_with(opts),
            ));
            Pool::MySql(pool)
        } else if url.starts_with("sqlite:") {
            let opts = SqliteConnectOptions::from_str(url)?
                .create_if_missing(true)
                .journal_mode(SqliteJournalMode::Wal)
                // WAL + NORMAL survives a process crash (SIGKILL); only a power cut can lose
                // the last commits. Use MySQL where that matters.
                .synchronous(SqliteSynchronous::Normal)
                .busy_timeout(Duration::from_secs(10));
            // One connection: SQLite has one writer anyway, and a single connection never
            // meets SQLITE_BUSY on a read-then-write transaction.
            // Switching a new file to WAL takes its lock without waiting for it: processes
            // opening one file at once (nodes booting together) retry that briefly.
            let mut attempt = 0;
            let pool = loop {
                match SqlitePoolOptions::new()
                    .max_connections(1)
                    .acquire_timeout(Duration::from_secs(30))
                    .connect_with(opts.clone())
                    .await
                {
                    Err(e) if is_retryable(&e) && attempt < 50 => {
                        attempt += 1;
                        tokio::time::sleep(Duration::from_millis(20 + rand::random::<u64>() % 80))
                            .await;
                    }
                    other => break other?,
                }
            };
            Pool::Sqlite(pool)
        } else {
            return Err(Error::UnsupportedUrl(url.chars().take(40).collect()));
        };
        migrate::run(&pool).await?;
        let control = control.unwrap_or_else(|| pool.clone());
        Ok(Store {
            pool,
            control,
            beat_opts,
        })
    }

    /// The heartbeat's own connection (see [`Beat`]); call it on the runtime that will use it.
    pub async fn beat(&self) -> Result<Beat> {
        let pool = match (&self.beat_opts, &self.pool) {
            (Some(opts), _) => Pool::MySql(
                MySqlPoolOptions::new()
                    .max_connections(1)
                    .acquire_timeout(Duration::from_secs(2))
                    .connect_with(opts.clone())
                    .await?,
            ),
            (None, pool) => pool.clone(),
        };
        Ok(Beat { pool })
    }

    pub fn backend(&self) -> Backend {
        match self.pool {
            Pool::MySql(_) => Backend::MySql,
            Pool::Sqlite(_) => Backend::Sqlite,
        }
    }

    fn is_mysql(&self) -> bool {
        self.backend() == Backend::MySql
    }

    fn insert_ignore(&self) -> &'static str {
        if self.is_mysql() {
            "INSERT IGNORE"
        } else {
            "INSERT OR IGNORE"
        }
    }

    /// Row locks for a claim: MySQL skips rows another node is claiming; SQLite has one writer.
    fn skip_locked(&self) -> &'static str {
        if self.is_mysql() {
            " FOR UPDATE SKIP LOCKED"
        } else {
            ""
        }
    }

    pub async fn close(&self) {
        on_pool!(control self, |pool, Db| pool.close().await);
        on_pool!(self, |pool, Db| pool.close().await)
    }

    /// A transaction on the main pool.
    async fn begin(&self) -> Result<Tx> {
        Ok(match &self.pool {
            Pool::MySql(p) => Tx::MySql(p.begin().await?),
            Pool::Sqlite(p) => Tx::Sqlite(p.begin().await?),
        })
    }

    /// `n` consecutive task ids for rows `tx` is about to insert; the first. MySQL: from
    /// another connection, so the sequence row is never held for the transaction (API
    /// inserts allocate from it too). SQLite: inside the transaction, on its one connection.
    async fn task_ids_in(&self, tx: &mut Tx, n: i64) -> Result<i64> {
        match tx {
            Tx::MySql(_) => self.allocate_ids("task", n).await,
            Tx::Sqlite(tx) => {
                let end: i64 = sqlx::query_scalar(
                    "UPDATE sequences SET next_value = next_value + ? WHERE name = 'task' RETURNING next_value",
                )
                .bind(n)
                .fetch_one(&mut **tx)
                .await?;
                Ok(end - n)
            }
        }
    }

    /// Is the database answering?
    pub async fn ping(&self) -> Result<()> {
        on_pool!(self, |pool, Db| {
            sqlx::query("SELECT 1").execute(pool).await?;
        });
        Ok(())
    }

    // ----- ids -------------------------------------------------------------------------

    /// Reserves `n` consecutive ids of sequence `name` and returns the first. Ids are chosen
    /// before rows are written, so a batch needs no read-back and a run id can travel to the
    /// executor before the run row exists.
    pub async fn allocate_ids(&self, name: &str, n: i64) -> Result<i64> {
        let n = n.max(1);
        // One statement, outside any transaction: MySQL hands the new value back through
        // `LAST_INSERT_ID(expr)` in the statement's answer, SQLite through `RETURNING`.
        let end: i64 = match &self.pool {
            Pool::MySql(pool) => {
                let r = sqlx::query(
                    "UPDATE sequences SET next_value = LAST_INSERT_ID(next_value + ?) WHERE name = ?",
                )
                .bind(n)
                .bind(name)
                .execute(pool)
                .await?;
                if r.rows_affected() == 0 {
                    return Err(Error::Corrupt(format!("no sequence `{name}`")));
                }
                r.insert_id()
            }
            Pool::Sqlite(pool) => {
                sqlx::query_scalar(
                    "UPDATE sequences SET next_value = next_value + ? WHERE name = ? RETURNING next_value",
                )
                .bind(n)
                .bind(name)
                .fetch_one(pool)
                .await?
            }
        };
        Ok(end - n)
    }

    // ----- nodes -----------------------------------------------------------------------

    /// Registers this scheduler node (by its stable name) and starts a new epoch for it.
    pub async fn start_node(&self, name: &str, address: &str, now: Millis) -> Result<NodeLease> {
        let upsert = if self.is_mysql() {
            "INSERT INTO nodes (name, address, epoch, heartbeat_at, started_at) VALUES (?, ?, 1, ?, ?) \
             ON DUPLICATE KEY UPDATE epoch = epoch + 1, address = VALUES(address), \
             heartbeat_at = VALUES(heartbeat_at), started_at = VALUES(started_at)"
        } else {
            "INSERT INTO nodes (name, address, epoch, heartbeat_at, started_at) VALUES (?, ?, 1, ?, ?) \
             ON CONFLICT(name) DO UPDATE SET epoch = epoch + 1, address = excluded.address, \
             heartbeat_at = excluded.heartbeat_at, started_at = excluded.started_at"
        };
        on_pool!(self, |pool, Db| {
            let mut tx = pool.begin().await?;
            sqlx::query(upsert)
                .bind(name)
                .bind(address)
                .bind(now)
                .bind(now)
                .execute(&mut *tx)
                .await?;
            let (node_id, epoch): (i64, i64) =
                sqlx::query_as("SELECT id, epoch FROM nodes WHERE name = ?")
                    .bind(name)
                    .fetch_one(&mut *tx)
                    .await?;
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "{} INTO node_fences (node_id, epoch) VALUES (?, ?)",
                self.insert_ignore()
            )))
            .bind(node_id)
            .bind(epoch)
            .execute(&mut *tx)
            .await?;
            sqlx::query("UPDATE node_fences SET epoch = ? WHERE node_id = ?")
                .bind(epoch)
                .bind(node_id)
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            Ok(NodeLease { node_id, epoch })
        })
    }

    /// Refreshes this node's heartbeat. False when a newer incarnation of the same node name
    /// has taken over (its epoch is higher): this process must stop scheduling.
    pub async fn heartbeat_node(&self, lease: NodeLease, now: Millis) -> Result<bool> {
        heartbeat_on(&self.pool, lease, now).await
    }

    /// The node holding a claimed task (its id and address); `None` if it is not claimed.
    pub async fn task_owner(&self, task_id: i64) -> Result<Option<(i64, String)>> {
        on_pool!(self, |pool, Db| {
            Ok(sqlx::query_as(
                "SELECT n.id, n.address FROM tasks t JOIN nodes n ON n.id = t.owner_node \
                 WHERE t.id = ? AND t.status = 'claimed'",
            )
            .bind(task_id)
            .fetch_optional(pool)
            .await?)
        })
    }

    /// Takes over the claims of every other node whose heartbeat is older than
    /// `dead_before`: its epoch is bumped (if it only stalled, its next heartbeat or claim
    /// finds itself fenced) and its claimed tasks move to `lease`, in one transaction.
    /// Returns the names of the nodes taken over and the claims now held by `lease`.
    pub async fn take_over_dead(
        &self,
        lease: NodeLease,
        dead_before: Millis,
    ) -> Result<(Vec<String>, Vec<DueTask>)> {
        let skip_locked = self.skip_locked();
        on_pool!(control self, |pool, Db| {
            let mut tx = pool.begin().await?;
            // Only a node that is itself still live takes others over: a fenced one would
            // move their claims to an epoch nobody holds any more.
            hold_lease!(self, tx, lease);
            // `heartbeat_at` 0 marks a node already taken over (until it starts again).
            let dead: Vec<(i64, String)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
                "SELECT id, name FROM nodes WHERE id <> ? AND heartbeat_at > 0 \
                 AND heartbeat_at < ? ORDER BY id{skip_locked}"
            )))
            .bind(lease.node_id)
            .bind(dead_before)
            .fetch_all(&mut *tx)
            .await?;
            if dead.is_empty() {
                return Ok((Vec::new(), Vec::new()));
            }
            let mut names = Vec::with_capacity(dead.len());
            let mut moved = Vec::new();
            for (id, name) in dead {
                // Its fence, exclusively: a write of its still in flight (a claim, a record)
                // holds it shared; skip the node this round rather than wait (MariaDB rolls
                // a stalled writer's transaction back after `idle_transaction_timeout`).
                let fence: Option<i64> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
                    "SELECT epoch FROM node_fences WHERE node_id = ?{skip_locked}"
                )))
                .bind(id)
                .fetch_optional(&mut *tx)
                .await?;
                if fence.is_none() {
                    continue;
                }
                sqlx::query("UPDATE node_fences SET epoch = epoch + 1 WHERE node_id = ?")
                    .bind(id)
                    .execute(&mut *tx)
                    .await?;
                sqlx::query("UPDATE nodes SET epoch = epoch + 1, heartbeat_at = 0 WHERE id = ?")
                    .bind(id)
                    .execute(&mut *tx)
                    .await?;
                let rows: Vec<DueRow> = sqlx::query_as(concat!(
                    due_select!(),
                    " WHERE status = 'claimed' AND owner_node = ? ORDER BY due_at"
                ))
                .bind(id)
                .fetch_all(&mut *tx)
                .await?;
                sqlx::query(
                    "UPDATE tasks SET owner_node = ?, owner_epoch = ? \
                     WHERE status = 'claimed' AND owner_node = ?",
                )
                .bind(lease.node_id)
                .bind(lease.epoch)
                .bind(id)
                .execute(&mut *tx)
                .await?;
                for row in rows {
                    moved.push(DueTask::try_from(row)?);
                }
                names.push(name);
            }
            tx.commit().await?;
            Ok((names, moved))
        })
    }

    /// Scheduler nodes that heartbeat after `alive_after`: (id, address).
    pub async fn live_nodes(&self, alive_after: Millis) -> Result<Vec<(i64, String)>> {
        on_pool!(self, |pool, Db| {
            Ok(
                sqlx::query_as("SELECT id, address FROM nodes WHERE heartbeat_at > ? ORDER BY id")
                    .bind(alive_after)
                    .fetch_all(pool)
                    .await?,
            )
        })
    }

    /// The last heartbeat of the node called `name`, if it ever ran.
    pub async fn node_heartbeat_at(&self, name: &str) -> Result<Option<Millis>> {
        on_pool!(self, |pool, Db| {
            let at: Option<i64> =
                sqlx::query_scalar("SELECT heartbeat_at FROM nodes WHERE name = ?")
                    .bind(name)
                    .fetch_optional(pool)
                    .await?;
            Ok(at)
        })
    }

    // ----- secrets and key-value state (the plugins' `rota` imports) --------------------

    /// Stores a sealed secret of `app` (created if new), replacing one of the same name.
    pub async fn set_secret(
        &self,
        app: &str,
        name: &str,
        sealed: &[u8],
        now: Millis,
    ) -> Result<()> {
        let app_id = self.ensure_app(app, now).await?;
        let upsert = if self.is_mysql() {
            "INSERT INTO secrets (app_id, name, sealed, created_at, updated_at) VALUES (?, ?, ?, ?, ?) \
             ON DUPLICATE KEY UPDATE sealed = VALUES(sealed), updated_at = VALUES(updated_at)"
        } else {
            "INSERT INTO secrets (app_id, name, sealed, created_at, updated_at) VALUES (?, ?, ?, ?, ?) \
             ON CONFLICT(app_id, name) DO UPDATE SET sealed = excluded.sealed, updated_at = excluded.updated_at"
        };
        on_pool!(self, |pool, Db| {
            sqlx::query(upsert)
                .bind(app_id)
                .bind(name)
                .bind(sealed)
                .bind(now)
                .bind(now)
                .execute(pool)
                .await?;
        });
        Ok(())
    }

    /// The sealed value of `app`'s secret `name`.
    pub async fn secret(&self, app: &str, name: &str) -> Result<Option<Vec<u8>>> {
        on_pool!(self, |pool, Db| {
            Ok(sqlx::query_scalar(
                "SELECT s.sealed FROM secrets s JOIN apps a ON a.id = s.app_id \
                 WHERE a.name = ? AND s.name = ?",
            )
            .bind(app)
            .bind(name)
            .fetch_optional(pool)
            .await?)
        })
    }

    /// `app`'s secrets by name: (name, created_at, updated_at), never their values.
    pub async fn list_secrets(&self, app: &str) -> Result<Vec<(String, Millis, Millis)>> {
        on_pool!(self, |pool, Db| {
            Ok(sqlx::query_as(
                "SELECT s.name, s.created_at, s.updated_at FROM secrets s \
                 JOIN apps a ON a.id = s.app_id WHERE a.name = ? ORDER BY s.name",
            )
            .bind(app)
            .fetch_all(pool)
            .await?)
        })
    }

    /// Deletes `app`'s secret `name`; false if there was none.
    pub async fn delete_secret(&self, app: &str, name: &str) -> Result<bool> {
        on_pool!(self, |pool, Db| {
            let r = sqlx::query(
                "DELETE FROM secrets WHERE name = ? AND app_id = (SELECT id FROM apps WHERE name = ?)",
            )
            .bind(name)
            .bind(app)
            .execute(pool)
            .await?;
            Ok(r.affected() > 0)
        })
    }

    pub async fn kv_get(&self, job_id: i64, key: &str) -> Result<Option<Vec<u8>>> {
        on_pool!(self, |pool, Db| {
            Ok(
                sqlx::query_scalar("SELECT v FROM kv WHERE job_id = ? AND k = ?")
                    .bind(job_id)
                    .bind(key)
                    .fetch_optional(pool)
                    .await?,
            )
        })
    }

    pub async fn kv_set(&self, job_id: i64, key: &str, value: &[u8], now: Millis) -> Result<()> {
        let upsert = if self.is_mysql() {
            "INSERT INTO kv (job_id, k, v, updated_at) VALUES (?, ?, ?, ?) \
             ON DUPLICATE KEY UPDATE v = VALUES(v), updated_at = VALUES(updated_at)"
        } else {
            "INSERT INTO kv (job_id, k, v, updated_at) VALUES (?, ?, ?, ?) \
             ON CONFLICT(job_id, k) DO UPDATE SET v = excluded.v, updated_at = excluded.updated_at"
        };
        on_pool!(self, |pool, Db| {
            sqlx::query(upsert)
                .bind(job_id)
                .bind(key)
                .bind(value)
                .bind(now)
                .execute(pool)
                .await?;
        });
        Ok(())
    }

    /// How many keys, and bytes of keys and values, job `job_id`'s state holds besides
    /// `except`.
    pub async fn kv_usage(&self, job_id: i64, except: &str) -> Result<(usize, usize)> {
        on_pool!(self, |pool, Db| {
            let (keys, bytes): (i64, i64) = sqlx::query_as(
                "SELECT COUNT(*), CAST(COALESCE(SUM(LENGTH(k) + LENGTH(v)), 0) AS SIGNED) \
                 FROM kv WHERE job_id = ? AND k <> ?",
            )
            .bind(job_id)
            .bind(except)
            .fetch_one(pool)
            .await?;
            Ok((keys.max(0) as usize, bytes.max(0) as usize))
        })
    }

    /// False if the key was not there.
    pub async fn kv_delete(&self, job_id: i64, key: &str) -> Result<bool> {
        on_pool!(self, |pool, Db| {
            let r = sqlx::query("DELETE FROM kv WHERE job_id = ? AND k = ?")
                .bind(job_id)
                .bind(key)
                .execute(pool)
                .await?;
            Ok(r.affected() > 0)
        })
    }

    // ----- apps and executors ----------------------------------------------------------

    /// The id of app `name`, creating it on first use.
    pub async fn ensure_app(&self, name: &str, now: Millis) -> Result<i64> {
        let insert = format!(
            "{} INTO apps (name, created_at) VALUES (?, ?)",
            self.insert_ignore()
        );
        on_pool!(self, |pool, Db| {
            sqlx::query(sqlx::AssertSqlSafe(insert))
                .bind(name)
                .bind(now)
                .execute(pool)
                .await?;
            let id: i64 = sqlx::query_scalar("SELECT id FROM apps WHERE name = ?")
                .bind(name)
                .fetch_one(pool)
                .await?;
            Ok(id)
        })
    }

    pub async fn list_apps(&self) -> Result<Vec<App>> {
        on_pool!(self, |pool, Db| {
            let rows: Vec<(i64, String, i64)> =
                sqlx::query_as("SELECT id, name, created_at FROM apps ORDER BY name")
                    .fetch_all(pool)
                    .await?;
            Ok(rows
                .into_iter()
                .map(|(id, name, created_at)| App {
                    id,
                    name,
                    created_at,
                })
                .collect())
        })
    }

    /// Registers an executor or refreshes its heartbeat.
    pub async fn upsert_executor(
        &self,
        app: &str,
        address: &str,
        capacity: i32,
        running: i32,
        now: Millis,
    ) -> Result<()> {
        let app_id = self.ensure_app(app, now).await?;
        let sql = if self.is_mysql() {
            "INSERT INTO executors (app_id, address, capacity, running, registered_at, last_heartbeat_at) \
             VALUES (?, ?, ?, ?, ?, ?) ON DUPLICATE KEY UPDATE capacity = VALUES(capacity), \
             running = VALUES(running), last_heartbeat_at = VALUES(last_heartbeat_at)"
        } else {
            "INSERT INTO executors (app_id, address, capacity, running, registered_at, last_heartbeat_at) \
             VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT(app_id, address) DO UPDATE SET \
             capacity = excluded.capacity, running = excluded.running, \
             last_heartbeat_at = excluded.last_heartbeat_at"
        };
        on_pool!(self, |pool, Db| {
            sqlx::query(sql)
                .bind(app_id)
                .bind(address)
                .bind(capacity)
                .bind(running)
                .bind(now)
                .bind(now)
                .execute(pool)
                .await?;
        });
        Ok(())
    }

    /// When the registry last heard from this executor.
    pub async fn executor_heartbeat_at(&self, app: &str, address: &str) -> Result<Option<Millis>> {
        on_pool!(self, |pool, Db| {
            let at: Option<i64> = sqlx::query_scalar(
                "SELECT e.last_heartbeat_at FROM executors e JOIN apps a ON a.id = e.app_id \
                 WHERE a.name = ? AND e.address = ?",
            )
            .bind(app)
            .bind(address)
            .fetch_optional(pool)
            .await?;
            Ok(at)
        })
    }

    /// Removes an executor from the registry; false if it was not registered, or (with
    /// `signed_before`) if it sent something signed at that time or later.
    pub async fn remove_executor(
        &self,
        app: &str,
        address: &str,
        signed_before: Option<Millis>,
    ) -> Result<bool> {
        on_pool!(self, |pool, Db| {
            let r = sqlx::query(
                "DELETE FROM executors WHERE address = ? AND app_id = (SELECT id FROM apps WHERE name = ?) \
                 AND signed_at < ?",
            )
            .bind(address)
            .bind(app)
            .bind(signed_before.unwrap_or(i64::MAX))
            .execute(pool)
            .await?;
            Ok(r.affected() > 0)
        })
    }

    /// The signed time of the newest registration or heartbeat accepted from an executor;
    /// `None` if it is not registered.
    pub async fn executor_clock(&self, app: &str, address: &str) -> Result<Option<Millis>> {
        on_pool!(self, |pool, Db| {
            Ok(sqlx::query_scalar(
                "SELECT e.signed_at FROM executors e JOIN apps a ON a.id = e.app_id \
                 WHERE a.name = ? AND e.address = ?",
            )
            .bind(app)
            .bind(address)
            .fetch_optional(pool)
            .await?)
        })
    }

    /// Moves an executor's clock forward to `signed_at` (never back).
    pub async fn advance_executor_clock(
        &self,
        app: &str,
        address: &str,
        signed_at: Millis,
    ) -> Result<()> {
        on_pool!(self, |pool, Db| {
            sqlx::query(
                "UPDATE executors SET signed_at = ? WHERE address = ? \
                 AND app_id = (SELECT id FROM apps WHERE name = ?) AND signed_at < ?",
            )
            .bind(signed_at)
            .bind(address)
            .bind(app)
            .bind(signed_at)
            .execute(pool)
            .await?;
        });
        Ok(())
    }

    /// Executors whose last heartbeat is after `alive_after`, of one app or all, sorted by
    /// app then address (route strategies rely on a stable order).
    pub async fn list_executors(
        &self,
        app: Option<&str>,
        alive_after: Millis,
    ) -> Result<Vec<Executor>> {
        on_pool!(self, |pool, Db| {
            let mut qb = QueryBuilder::<Db>::new(
                "SELECT a.name AS app, e.address, e.capacity, e.running, e.registered_at, \
                 e.last_heartbeat_at FROM executors e JOIN apps a ON a.id = e.app_id \
                 WHERE e.last_heartbeat_at > ",
            );
            qb.push_bind(alive_after);
            if let Some(app) = app {
                qb.push(" AND a.name = ").push_bind(app);
            }
            qb.push(" ORDER BY a.name, e.address");
            let rows: Vec<ExecutorRow> = qb.build_query_as().fetch_all(pool).await?;
            Ok(rows.into_iter().map(Executor::from).collect())
        })
    }

    /// Executors whose last heartbeat is at or before `alive_after` (dead).
    pub async fn dead_executors(&self, alive_after: Millis) -> Result<Vec<Executor>> {
        on_pool!(self, |pool, Db| {
            let rows: Vec<ExecutorRow> = sqlx::query_as(
                "SELECT a.name AS app, e.address, e.capacity, e.running, e.registered_at, \
                 e.last_heartbeat_at FROM executors e JOIN apps a ON a.id = e.app_id \
                 WHERE e.last_heartbeat_at <= ? ORDER BY e.address",
            )
            .bind(alive_after)
            .fetch_all(pool)
            .await?;
            Ok(rows.into_iter().map(Executor::from).collect())
        })
    }

    // ----- plugins ---------------------------------------------------------------------

    /// Stores a validated module under `name`. The same bytes under the same name return the
    /// existing version (`false`); new bytes make the next version (`true`).
    pub async fn insert_plugin(
        &self,
        name: &str,
        sha256: &str,
        module: &[u8],
        now: Millis,
    ) -> Result<(Plugin, bool)> {
        let size = i64::try_from(module.len()).unwrap_or(i64::MAX);
        for _ in 0..3 {
            let attempt: Result<(Plugin, bool)> = on_pool!(self, |pool, Db| {
                let mut tx = pool.begin().await?;
                let existing: Option<PluginRow> = sqlx::query_as(
                    "SELECT id, name, version, sha256, size, created_at FROM plugins \
                     WHERE name = ? AND sha256 = ? ORDER BY version DESC LIMIT 1",
                )
                .bind(name)
                .bind(sha256)
                .fetch_optional(&mut *tx)
                .await?;
                if let Some(row) = existing {
                    return Ok((row.into(), false));
                }
                let latest: Option<i32> = sqlx::query_scalar(
                    "SELECT version FROM plugins WHERE name = ? ORDER BY version DESC LIMIT 1",
                )
                .bind(name)
                .fetch_optional(&mut *tx)
                .await?;
                let version = latest.unwrap_or(0) + 1;
                let r = sqlx::query(
                    "INSERT INTO plugins (name, version, sha256, size, module, created_at) \
                     VALUES (?, ?, ?, ?, ?, ?)",
                )
                .bind(name)
                .bind(version)
                .bind(sha256)
                .bind(size)
                .bind(module)
                .bind(now)
                .execute(&mut *tx)
                .await;
                let id = match r {
                    Ok(r) => r.insert_id(),
                    Err(e) => return Err(e.into()),
                };
                tx.commit().await?;
                Ok((
                    Plugin {
                        id,
                        name: name.to_owned(),
                        version,
                        sha256: sha256.to_owned(),
                        size,
                        created_at: now,
                    },
                    true,
                ))
            });
            match attempt {
                // A concurrent upload took this version number: try the next.
                Err(Error::Conflict(_)) => continue,
                other => return other,
            }
        }
        Err(Error::Conflict(format!(
            "plugin `{name}` is being uploaded concurrently; try again"
        )))
    }

    pub async fn list_plugins(&self) -> Result<Vec<Plugin>> {
        on_pool!(self, |pool, Db| {
            let rows: Vec<PluginRow> = sqlx::query_as(
                "SELECT id, name, version, sha256, size, created_at FROM plugins ORDER BY name, version DESC",
            )
            .fetch_all(pool)
            .await?;
            Ok(rows.into_iter().map(Plugin::from).collect())
        })
    }

    pub async fn get_plugin(&self, id: i64) -> Result<Plugin> {
        on_pool!(self, |pool, Db| {
            let row: Option<PluginRow> = sqlx::query_as(
                "SELECT id, name, version, sha256, size, created_at FROM plugins WHERE id = ?",
            )
            .bind(id)
            .fetch_optional(pool)
            .await?;
            row.map(Plugin::from)
                .ok_or_else(|| Error::NotFound(format!("plugin {id}")))
        })
    }

    /// Which jobs use which plugin: (plugin name, job id, job name), by plugin and job name.
    pub async fn plugin_users(&self) -> Result<Vec<(String, i64, String)>> {
        on_pool!(self, |pool, Db| {
            Ok(
                sqlx::query_as("SELECT plugin, id, name FROM jobs ORDER BY plugin, name")
                    .fetch_all(pool)
                    .await?,
            )
        })
    }

    /// Deletes every version of plugin `name`, which no job may use (a conflict naming
    /// them otherwise). Returns the versions deleted.
    pub async fn delete_plugin(&self, name: &str) -> Result<u64> {
        on_pool!(self, |pool, Db| {
            let mut tx = pool.begin().await?;
            let users: Vec<String> =
                sqlx::query_scalar("SELECT name FROM jobs WHERE plugin = ? ORDER BY name LIMIT 6")
                    .bind(name)
                    .fetch_all(&mut *tx)
                    .await?;
            if !users.is_empty() {
                let more = if users.len() > 5 { ", …" } else { "" };
                let listed: Vec<String> = users.iter().take(5).map(|j| format!("`{j}`")).collect();
                return Err(Error::Conflict(format!(
                    "plugin `{name}` is used by job {}{more}; change or delete those jobs first",
                    listed.join(", ")
                )));
            }
            let deleted = sqlx::query("DELETE FROM plugins WHERE name = ?")
                .bind(name)
                .execute(&mut *tx)
                .await?
                .affected();
            if deleted == 0 {
                return Err(Error::NotFound(format!("plugin `{name}`")));
            }
            tx.commit().await?;
            Ok(deleted)
        })
    }

    /// The newest version of plugin `name`.
    pub async fn latest_plugin(&self, name: &str) -> Result<Plugin> {
        on_pool!(self, |pool, Db| {
            let row: Option<PluginRow> = sqlx::query_as(
                "SELECT id, name, version, sha256, size, created_at FROM plugins \
                 WHERE name = ? ORDER BY version DESC LIMIT 1",
            )
            .bind(name)
            .fetch_optional(pool)
            .await?;
            row.map(Plugin::from)
                .ok_or_else(|| Error::NotFound(format!("plugin `{name}`")))
        })
    }

    /// The module bytes with this SHA-256.
    pub async fn plugin_module(&self, sha256: &str) -> Result<Vec<u8>> {
        on_pool!(self, |pool, Db| {
            let bytes: Option<Vec<u8>> =
                sqlx::query_scalar("SELECT module FROM plugins WHERE sha256 = ? LIMIT 1")
                    .bind(sha256)
                    .fetch_optional(pool)
                    .await?;
            bytes.ok_or_else(|| Error::NotFound(format!("plugin module {sha256}")))
        })
    }

    /// Whether a job of `app` binds a plugin with this hash (any version of its name): what
    /// an executor of `app` may download.
    pub async fn app_uses_plugin(&self, app: &str, sha256: &str) -> Result<bool> {
        on_pool!(self, |pool, Db| {
            let found: Option<i64> = sqlx::query_scalar(
                "SELECT p.id FROM plugins p JOIN jobs j ON j.plugin = p.name \
                 JOIN apps a ON a.id = j.app_id WHERE p.sha256 = ? AND a.name = ? LIMIT 1",
            )
            .bind(sha256)
            .bind(app)
            .fetch_optional(pool)
            .await?;
            Ok(found.is_some())
        })
    }

    /// Whom run reports, given as `(run id, task id)`, are about: each task that exists with
    /// its job and the job's app (`None` once the job is deleted: a forced delete leaves
    /// running tasks to finish), and each run that is recorded with its task. One statement
    /// per 1,000 reports.
    pub async fn report_owners(&self, reports: &[(i64, i64)]) -> Result<ReportOwners> {
        let mut owners = ReportOwners::default();
        for chunk in reports.chunks(CHUNK) {
            on_pool!(self, |pool, Db| {
                let mut qb = QueryBuilder::<Db>::new(
                    "SELECT 0, t.id, t.job_id, a.name FROM tasks t LEFT JOIN jobs j ON j.id = t.job_id \
                     LEFT JOIN apps a ON a.id = j.app_id WHERE t.id IN ",
                );
                push_ids(&mut qb, chunk.iter().map(|&(_, task)| task));
                qb.push(
                    " UNION ALL SELECT 1, r.id, r.task_id, r.executor FROM runs r WHERE r.id IN ",
                );
                push_ids(&mut qb, chunk.iter().map(|&(run, _)| run));
                let rows: Vec<(i64, i64, i64, Option<String>)> =
                    qb.build_query_as().fetch_all(pool).await?;
                for (kind, id, of, name) in rows {
                    if kind == 0 {
                        owners.tasks.insert(id, (of, name));
                    } else {
                        owners.runs.insert(id, (of, name));
                    }
                }
            });
        }
        Ok(owners)
    }

    /// The apps an executor address is registered under (one, in practice).
    pub async fn apps_at_address(&self, address: &str) -> Result<Vec<String>> {
        on_pool!(self, |pool, Db| {
            Ok(sqlx::query_scalar(
                "SELECT a.name FROM executors e JOIN apps a ON a.id = e.app_id WHERE e.address = ?",
            )
            .bind(address)
            .fetch_all(pool)
            .await?)
        })
    }

    // ----- jobs ------------------------------------------------------------------------

    pub async fn insert_job(
        &self,
        spec: &JobSpec,
        next_fire_at: Option<Millis>,
        now: Millis,
    ) -> Result<Job> {
        let app_id = self.ensure_app(&spec.app, now).await?;
        let id = on_pool!(self, |pool, Db| {
            let r = sqlx::query(
                "INSERT INTO jobs (name, app_id, plugin, schedule, params, route, block_strategy, misfire, \
                 timeout_ms, max_attempts, backoff, memory_mb, max_concurrency, child_jobs, http_allow, \
                 enabled, no_executor_timeout_ms, next_fire_at, created_at, updated_at) \
                 VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            )
            .bind(&spec.name)
            .bind(app_id)
            .bind(&spec.plugin)
            .bind(to_json(&spec.schedule))
            .bind(&spec.params)
            .bind(spec.route.as_str())
            .bind(spec.block.as_str())
            .bind(spec.misfire.as_str())
            .bind(spec.timeout_ms)
            .bind(spec.max_attempts)
            .bind(to_json(&spec.backoff))
            .bind(spec.memory_mb)
            .bind(spec.max_concurrency)
            .bind(to_json(&spec.child_jobs))
            .bind(to_json(&spec.http_allow))
            .bind(spec.enabled)
            .bind(spec.no_executor_timeout_ms)
            .bind(next_fire_at)
            .bind(now)
            .bind(now)
            .execute(pool)
            .await
            .map_err(|e| match Error::from(e) {
                Error::Conflict(_) => Error::Conflict(format!("a job named `{}` already exists", spec.name)),
                other => other,
            })?;
            r.insert_id()
        });
        self.get_job(id).await
    }

    /// Replaces a job's settings and its next fire time. With `replan` (the schedule or
    /// `enabled` changed, [`JobSpec::replans`]), in the same transaction, the job's
    /// generation moves on and the recurring fires planned under the old one that have not
    /// been dispatched are deleted: wherever a copy of one still sits (a wheel, a pool), it
    /// is of an older generation and is dropped at dispatch.
    pub async fn update_job(
        &self,
        id: i64,
        spec: &JobSpec,
        next_fire_at: Option<Millis>,
        replan: bool,
        now: Millis,
    ) -> Result<Job> {
        let app_id = self.ensure_app(&spec.app, now).await?;
        on_pool!(self, |pool, Db| {
            let mut tx = pool.begin().await?;
            sqlx::query(
                "UPDATE jobs SET name = ?, app_id = ?, plugin = ?, schedule = ?, params = ?, route = ?, \
                 block_strategy = ?, misfire = ?, timeout_ms = ?, max_attempts = ?, backoff = ?, \
                 memory_mb = ?, max_concurrency = ?, child_jobs = ?, http_allow = ?, enabled = ?, \
                 no_executor_timeout_ms = ?, next_fire_at = ?, generation = generation + ?, updated_at = ? WHERE id = ?",
            )
            .bind(&spec.name)
            .bind(app_id)
            .bind(&spec.plugin)
            .bind(to_json(&spec.schedule))
            .bind(&spec.params)
            .bind(spec.route.as_str())
            .bind(spec.block.as_str())
            .bind(spec.misfire.as_str())
            .bind(spec.timeout_ms)
            .bind(spec.max_attempts)
            .bind(to_json(&spec.backoff))
            .bind(spec.memory_mb)
            .bind(spec.max_concurrency)
            .bind(to_json(&spec.child_jobs))
            .bind(to_json(&spec.http_allow))
            .bind(spec.enabled)
            .bind(spec.no_executor_timeout_ms)
            .bind(next_fire_at)
            .bind(i64::from(replan))
            .bind(now)
            .bind(id)
            .execute(&mut *tx)
            .await
            .map_err(|e| match Error::from(e) {
                Error::Conflict(_) => Error::Conflict(format!("a job named `{}` already exists", spec.name)),
                other => other,
            })?;
            if replan {
                sqlx::query(
                    "DELETE FROM tasks WHERE job_id = ? AND kind = 'cron' \
                     AND status IN ('pending', 'claimed', 'waiting')",
                )
                .bind(id)
                .execute(&mut *tx)
                .await?;
            }
            tx.commit().await?;
        });
        self.get_job(id).await
    }

    pub async fn get_job(&self, id: i64) -> Result<Job> {
        let sql = format!(
            "SELECT {JOB_COLUMNS} FROM jobs j JOIN apps a ON a.id = j.app_id WHERE j.id = ?"
        );
        on_pool!(self, |pool, Db| {
            let row: Option<JobRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
                .bind(id)
                .fetch_optional(pool)
                .await?;
            row.ok_or_else(|| Error::NotFound(format!("job {id}")))?
                .try_into()
        })
    }

    pub async fn get_job_by_name(&self, name: &str) -> Result<Job> {
        let sql = format!(
            "SELECT {JOB_COLUMNS} FROM jobs j JOIN apps a ON a.id = j.app_id WHERE j.name = ?"
        );
        on_pool!(self, |pool, Db| {
            let row: Option<JobRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
                .bind(name)
                .fetch_optional(pool)
                .await?;
            row.ok_or_else(|| Error::NotFound(format!("job `{name}`")))?
                .try_into()
        })
    }

    /// Jobs, newest first, `limit` per page, optionally of one app or whose name contains
    /// `search`.
    /// Jobs, newest first: of `app`, of `apps` (a scoped user's view), matching `search`.
    pub async fn list_jobs(
        &self,
        app: Option<&str>,
        apps: Option<&[String]>,
        search: Option<&str>,
        before_id: Option<i64>,
        limit: u32,
    ) -> Result<Page<Job>> {
        let limit = limit.clamp(1, 1000);
        on_pool!(self, |pool, Db| {
            let mut qb = QueryBuilder::<Db>::new(format!(
                "SELECT {JOB_COLUMNS} FROM jobs j JOIN apps a ON a.id = j.app_id WHERE 1 = 1"
            ));
            if let Some(app) = app {
                qb.push(" AND a.name = ").push_bind(app);
            }
            if let Some(apps) = apps {
                in_apps!(qb, "j.id", apps);
            }
            if let Some(search) = search {
                // `!` escapes LIKE metacharacters the same way on both backends (a backslash
                // would itself need escaping in MySQL string literals).
                let pattern = format!(
                    "%{}%",
                    search
                        .replace('!', "!!")
                        .replace('%', "!%")
                        .replace('_', "!_")
                );
                qb.push(" AND j.name LIKE ")
                    .push_bind(pattern)
                    .push(" ESCAPE '!'");
            }
            if let Some(before) = before_id {
                qb.push(" AND j.id < ").push_bind(before);
            }
            qb.push(" ORDER BY j.id DESC LIMIT ")
                .push_bind(i64::from(limit) + 1);
            let rows: Vec<JobRow> = qb.build_query_as().fetch_all(pool).await?;
            page(rows, limit, |r| r.id)
        })
    }

    /// Deletes a job. With pending or running tasks it is a conflict unless `force`, which
    /// cancels the pending ones first (running ones finish on their own).
    pub async fn delete_job(&self, id: i64, force: bool, now: Millis) -> Result<Vec<i64>> {
        on_pool!(self, |pool, Db| {
            let mut tx = pool.begin().await?;
            let exists: Option<i64> = sqlx::query_scalar("SELECT id FROM jobs WHERE id = ?")
                .bind(id)
                .fetch_optional(&mut *tx)
                .await?;
            if exists.is_none() {
                return Err(Error::NotFound(format!("job {id}")));
            }
            let active: Vec<(i64, String)> = sqlx::query_as(
                "SELECT id, status FROM tasks WHERE job_id = ? AND status IN ('pending', 'claimed', 'waiting', 'running')",
            )
            .bind(id)
            .fetch_all(&mut *tx)
            .await?;
            if !active.is_empty() && !force {
                return Err(Error::Conflict(format!(
                    "job {id} has {} pending or running task(s); cancel them or delete with ?force=true",
                    active.len()
                )));
            }
            let cancelled: Vec<i64> = active
                .iter()
                .filter(|(_, s)| s != "running")
                .map(|(id, _)| *id)
                .collect();
            for chunk in cancelled.chunks(CHUNK) {
                let mut qb =
                    QueryBuilder::<Db>::new("UPDATE tasks SET status = 'cancelled', updated_at = ");
                qb.push_bind(now)
                    .push(" WHERE status IN ('pending', 'claimed', 'waiting') AND id IN ");
                push_ids(&mut qb, chunk.iter().copied());
                qb.build().execute(&mut *tx).await?;
            }
            sqlx::query("DELETE FROM kv WHERE job_id = ?")
                .bind(id)
                .execute(&mut *tx)
                .await?;
            sqlx::query("DELETE FROM jobs WHERE id = ?")
                .bind(id)
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            Ok(cancelled)
        })
    }

    // ----- tasks -----------------------------------------------------------------------

    /// Creates tasks in one transaction, all or nothing. A task whose `key` already exists for
    /// its job is not created again: its existing id comes back with `false`.
    pub async fn insert_tasks(&self, tasks: &[NewTask], now: Millis) -> Result<Vec<(i64, bool)>> {
        self.insert_tasks_claiming(tasks, None, now).await
    }

    /// [`Store::insert_tasks`], and those of `claim`'s tasks marked `true` (due inside the
    /// window, of a job without `max_concurrency`) are created already claimed by its
    /// lease, in the same transaction: the node that took them puts them straight into
    /// its wheel, with no claim of their own. `Error::Fenced` if the lease is gone.
    pub async fn insert_tasks_claiming(
        &self,
        tasks: &[NewTask],
        claim: Option<(NodeLease, &[bool])>,
        now: Millis,
    ) -> Result<Vec<(i64, bool)>> {
        match self.insert_tasks_once(tasks, claim, now).await {
            // A concurrent create took one of the keys between our lookup and our insert: the
            // second look finds it, and the caller gets the existing task as it should.
            Err(Error::Conflict(_)) => self.insert_tasks_once(tasks, claim, now).await,
            other => other,
        }
    }

    async fn insert_tasks_once(
        &self,
        tasks: &[NewTask],
        claim: Option<(NodeLease, &[bool])>,
        now: Millis,
    ) -> Result<Vec<(i64, bool)>> {
        if tasks.is_empty() {
            return Ok(Vec::new());
        }
        let first_id = self.allocate_ids("task", tasks.len() as i64).await?;
        on_pool!(self, |pool, Db| {
            let mut tx = pool.begin().await?;
            // Existing keys, looked up in chunks.
            let keyed: Vec<(i64, &str)> = tasks
                .iter()
                .filter_map(|t| t.key.as_deref().map(|k| (t.job_id, k)))
                .collect();
            let mut existing: HashMap<(i64, String), i64> = HashMap::new();
            for chunk in keyed.chunks(CHUNK) {
                // An OR of equalities is a set of unique-key lookups on both backends (SQLite
                // scans the whole index for a row-value IN).
                let mut qb =
                    QueryBuilder::<Db>::new("SELECT id, job_id, idem_key FROM tasks WHERE ");
                let mut sep = qb.separated(" OR ");
                for (job, key) in chunk {
                    sep.push("(job_id = ")
                        .push_bind_unseparated(*job)
                        .push_unseparated(" AND idem_key = ")
                        .push_bind_unseparated(*key)
                        .push_unseparated(")");
                }
                let rows: Vec<(i64, i64, String)> = qb.build_query_as().fetch_all(&mut *tx).await?;
                existing.extend(rows.into_iter().map(|(id, job, key)| ((job, key), id)));
            }
            let mut out = Vec::with_capacity(tasks.len());
            let mut fresh = Vec::with_capacity(tasks.len());
            let claimable = |i: usize| claim.is_some_and(|(_, which)| which.get(i) == Some(&true));
            for (i, t) in tasks.iter().enumerate() {
                match t
                    .key
                    .as_ref()
                    .and_then(|k| existing.get(&(t.job_id, k.clone())))
                {
                    Some(&id) => out.push((id, false)),
                    None => {
                        let id = first_id + i as i64;
                        out.push((id, true));
                        fresh.push((id, t, claimable(i)));
                    }
                }
            }
            let owner = match claim {
                Some((lease, _)) if fresh.iter().any(|(_, _, c)| *c) => {
                    // Claimed by a live lease only, held until commit, like the scan's.
                    hold_lease!(self, tx, lease);
                    Some(lease)
                }
                _ => None,
            };
            for chunk in fresh.chunks(CHUNK) {
                let mut qb = QueryBuilder::<Db>::new(
                    "INSERT INTO tasks (id, job_id, kind, idem_key, payload, params, status, due_at, attempt, \
                     lost_count, max_attempts, backoff, priority, owner_node, owner_epoch, created_at, updated_at) ",
                );
                qb.push_values(chunk, |mut b, (id, t, claimed)| {
                    let owner = owner.filter(|_| *claimed);
                    let status = if owner.is_some() {
                        TaskStatus::Claimed
                    } else {
                        TaskStatus::Pending
                    };
                    b.push_bind(*id)
                        .push_bind(t.job_id)
                        .push_bind(t.kind.as_str())
                        .push_bind(t.key.as_deref())
                        .push_bind(t.payload.as_deref())
                        .push_bind(t.params.as_deref())
                        .push_bind(status.as_str())
                        .push_bind(t.due_at)
                        .push_bind(1_i32)
                        .push_bind(0_i32)
                        .push_bind(t.max_attempts)
                        .push_bind(t.backoff.as_ref().map(to_json))
                        .push_bind(t.priority)
                        .push_bind(owner.map(|l| l.node_id))
                        .push_bind(owner.map(|l| l.epoch))
                        .push_bind(now)
                        .push_bind(now);
                });
                qb.build()
                    .execute(&mut *tx)
                    .await
                    .map_err(|e| match Error::from(e) {
                        Error::Conflict(_) => Error::Conflict(
                            "a task with this key was created concurrently; retry".into(),
                        ),
                        other => other,
                    })?;
            }
            tx.commit().await?;
            Ok(out)
        })
    }

    pub async fn get_task(&self, id: i64) -> Result<Task> {
        let sql = format!("SELECT {TASK_COLUMNS} FROM tasks WHERE id = ?");
        on_pool!(self, |pool, Db| {
            let row: Option<TaskRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
                .bind(id)
                .fetch_optional(pool)
                .await?;
            row.ok_or_else(|| Error::NotFound(format!("task {id}")))?
                .try_into()
        })
    }

    /// The task of `job_id` created with `key`.
    pub async fn get_task_by_key(&self, job_id: i64, key: &str) -> Result<Task> {
        let sql = format!("SELECT {TASK_COLUMNS} FROM tasks WHERE job_id = ? AND idem_key = ?");
        on_pool!(self, |pool, Db| {
            let row: Option<TaskRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
                .bind(job_id)
                .bind(key)
                .fetch_optional(pool)
                .await?;
            row.ok_or_else(|| Error::NotFound(format!("task with key `{key}` of job {job_id}")))?
                .try_into()
        })
    }

    /// Tasks, newest first.
    pub async fn list_tasks(&self, f: &TaskFilter) -> Result<Page<Task>> {
        let limit = f.limit.clamp(1, 1000);
        on_pool!(self, |pool, Db| {
            let mut qb =
                QueryBuilder::<Db>::new(format!("SELECT {TASK_COLUMNS} FROM tasks WHERE 1 = 1"));
            if let Some(job) = f.job_id {
                qb.push(" AND job_id = ").push_bind(job);
            }
            if let Some(apps) = &f.apps {
                in_apps!(qb, "job_id", apps);
            }
            match f.state {
                None => {}
                Some(TaskState::Pending) => {
                    qb.push(
                        " AND (status = 'claimed' OR (status IN ('pending', 'waiting') AND attempt = 1))",
                    );
                }
                Some(TaskState::Failed) => {
                    qb.push(" AND status IN ('pending', 'waiting') AND attempt > 1");
                }
                Some(TaskState::Is(status)) => {
                    qb.push(" AND status = ").push_bind(status.as_str());
                }
            }
            if let Some(key) = &f.key {
                qb.push(" AND idem_key = ").push_bind(key.as_str());
            }
            if let Some(from) = f.due_from {
                qb.push(" AND due_at >= ").push_bind(from);
            }
            if let Some(to) = f.due_to {
                qb.push(" AND due_at < ").push_bind(to);
            }
            if let Some(before) = f.before_id {
                qb.push(" AND id < ").push_bind(before);
            }
            qb.push(" ORDER BY id DESC LIMIT ")
                .push_bind(i64::from(limit) + 1);
            let rows: Vec<TaskRow> = qb.build_query_as().fetch_all(pool).await?;
            page(rows, limit, |r| r.id)
        })
    }

    /// Cancels a task that has not started. Returns the task as it now is and whether this
    /// call cancelled it (false: it was already cancelled). Running or finished → conflict.
    pub async fn cancel_task(&self, id: i64, now: Millis) -> Result<(Task, bool)> {
        let changed = on_pool!(self, |pool, Db| {
            sqlx::query(
                "UPDATE tasks SET status = 'cancelled', updated_at = ? \
                 WHERE id = ? AND status IN ('pending', 'claimed', 'waiting')",
            )
            .bind(now)
            .bind(id)
            .execute(pool)
            .await?
            .affected()
                > 0
        });
        let task = self.get_task(id).await?;
        match task.status {
            TaskStatus::Cancelled => Ok((task, changed)),
            s => Err(Error::Conflict(format!(
                "task {id} is {s}; only a pending task can be cancelled"
            ))),
        }
    }

    // ----- the scan --------------------------------------------------------------------

    /// One scan, in one transaction: turns the recurring fire times due by `until` into task
    /// rows (one per job and fire time, whatever races), advances those jobs' next fire times,
    /// and claims up to `limit` pending tasks due by `until` for this node's wheel.
    ///
    /// The claim is durable: a claimed task stays `claimed` by `lease` until its dispatch is
    /// recorded, so a node that restarts finds it again ([`Store::claims_of`]) instead of losing
    /// it, and no other node takes it while the lease holds.
    pub async fn claim_due(
        &self,
        lease: NodeLease,
        now: Millis,
        until: Millis,
        limit: u32,
        plan: &mut (dyn FnMut(&DueJob) -> JobFires + Send),
    ) -> Result<Claimed> {
        let skip_locked = self.skip_locked();
        let insert_ignore = self.insert_ignore();
        let mut claimed = Claimed::default();
        on_pool!(self, |pool, Db| {
            let mut tx = pool.begin().await?;
            // Claim only under a live lease, holding it for the transaction: a take-over
            // (which bumps the epoch) waits for this claim and then moves it too, or runs
            // first and this claim is refused.
            hold_lease!(self, tx, lease);
            let jobs: Vec<(i64, String, String, Option<i64>, i64)> =
                sqlx::query_as(sqlx::AssertSqlSafe(format!(
                    "SELECT id, schedule, misfire, next_fire_at, generation FROM jobs \
                 WHERE enabled = 1 AND next_fire_at <= ? ORDER BY next_fire_at LIMIT ?{skip_locked}"
                )))
                .bind(until)
                .bind(i64::from(limit))
                .fetch_all(&mut *tx)
                .await?;

            let mut fires: Vec<(i64, i64, Millis)> = Vec::new();
            let mut next: Vec<(i64, Option<Millis>)> = Vec::with_capacity(jobs.len());
            for (id, schedule, misfire, next_fire_at, generation) in jobs {
                let Some(next_fire_at) = next_fire_at else {
                    continue;
                };
                let job = DueJob {
                    id,
                    schedule: parse_json(&schedule)?,
                    misfire: parse(&misfire)?,
                    next_fire_at,
                };
                let planned = plan(&job);
                fires.extend(planned.fires.iter().map(|&t| (id, generation, t)));
                next.push((id, planned.next_fire_at));
            }
            if !fires.is_empty() {
                let n = fires.len() as i64;
                let first = task_ids_in_tx!(self, tx, n);
                for (chunk_no, chunk) in fires.chunks(CHUNK).enumerate() {
                    let mut qb = QueryBuilder::<Db>::new(format!(
                        "{insert_ignore} INTO tasks (id, job_id, kind, idem_key, status, due_at, attempt, \
                         lost_count, priority, created_at, updated_at) "
                    ));
                    let base = first + (chunk_no * CHUNK) as i64;
                    qb.push_values(
                        chunk.iter().enumerate(),
                        |mut b, (i, (job, generation, t))| {
                            b.push_bind(base + i as i64)
                                .push_bind(*job)
                                .push_bind(TaskKind::Cron.as_str())
                                .push_bind(cron_key(*generation, *t))
                                .push_bind("pending")
                                .push_bind(*t)
                                .push_bind(1_i32)
                                .push_bind(0_i32)
                                .push_bind(0_i32)
                                .push_bind(now)
                                .push_bind(now);
                        },
                    );
                    qb.build().execute(&mut *tx).await?;
                }
                claimed.cron_fires = fires.len();
            }
            for chunk in next.chunks(CHUNK) {
                let mut qb = QueryBuilder::<Db>::new("UPDATE jobs SET next_fire_at = ");
                push_case(&mut qb, chunk.iter().copied());
                qb.push(" WHERE id IN ");
                push_ids(&mut qb, chunk.iter().map(|(id, _)| *id));
                qb.build().execute(&mut *tx).await?;
            }

            // Jobs with `max_concurrency` are claimed one by one below, never here.
            let limited: Vec<(i64, i64)> = sqlx::query_as(
                "SELECT id, max_concurrency FROM jobs WHERE max_concurrency IS NOT NULL ORDER BY id",
            )
            .fetch_all(&mut *tx)
            .await?;
            let mut qb = QueryBuilder::<Db>::new(concat!(
                due_select!(),
                " WHERE status = 'pending' AND due_at <= "
            ));
            qb.push_bind(until);
            if !limited.is_empty() {
                qb.push(" AND job_id NOT IN ");
                push_ids(&mut qb, limited.iter().map(|(id, _)| *id));
            }
            qb.push(" ORDER BY due_at LIMIT ")
                .push_bind(i64::from(limit))
                .push(skip_locked);
            let mut rows: Vec<DueRow> = qb.build_query_as().fetch_all(&mut *tx).await?;
            // A limited job's tasks: at most `max_concurrency` claimed or running at once,
            // across all nodes. Its row is locked while its tasks are counted and claimed, so
            // two nodes' scans take turns (a node that finds it locked skips it this time).
            let lock_job = if self.is_mysql() {
                " FOR UPDATE SKIP LOCKED"
            } else {
                ""
            };
            for (job_id, max) in limited {
                let room = (i64::from(limit) - rows.len() as i64).min(max);
                if room <= 0 {
                    break;
                }
                let locked: Option<i64> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
                    "SELECT id FROM jobs WHERE id = ?{lock_job}"
                )))
                .bind(job_id)
                .fetch_optional(&mut *tx)
                .await?;
                if locked.is_none() {
                    continue;
                }
                let busy: i64 = sqlx::query_scalar(
                    "SELECT COUNT(*) FROM tasks WHERE job_id = ? AND status IN ('claimed', 'running')",
                )
                .bind(job_id)
                .fetch_one(&mut *tx)
                .await?;
                let room = room.min(max - busy);
                if room <= 0 {
                    continue;
                }
                let more: Vec<DueRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
                    concat!(
                        due_select!(),
                        " WHERE job_id = ? AND status = 'pending' AND due_at <= ? \
                         ORDER BY due_at LIMIT ?{}"
                    ),
                    skip_locked
                )))
                .bind(job_id)
                .bind(until)
                .bind(room)
                .fetch_all(&mut *tx)
                .await?;
                rows.extend(more);
            }
            for chunk in rows.chunks(CHUNK) {
                let mut qb =
                    QueryBuilder::<Db>::new("UPDATE tasks SET status = 'claimed', owner_node = ");
                qb.push_bind(lease.node_id)
                    .push(", owner_epoch = ")
                    .push_bind(lease.epoch)
                    .push(" WHERE id IN ");
                push_ids(&mut qb, chunk.iter().map(|r| r.id));
                qb.build().execute(&mut *tx).await?;
            }
            tx.commit().await?;
            claimed.tasks = rows
                .into_iter()
                .map(DueTask::try_from)
                .collect::<Result<_>>()?;
            Ok(claimed)
        })
    }

    /// Tasks still claimed by an earlier epoch of this node (it crashed or was killed after
    /// claiming them and before recording their dispatch).
    pub async fn claims_of(&self, lease: NodeLease) -> Result<Vec<DueTask>> {
        on_pool!(self, |pool, Db| {
            let rows: Vec<DueRow> = sqlx::query_as(concat!(
                due_select!(),
                " WHERE status = 'claimed' AND owner_node = ? AND owner_epoch < ? ORDER BY due_at"
            ))
            .bind(lease.node_id)
            .bind(lease.epoch)
            .fetch_all(pool)
            .await?;
            rows.into_iter().map(DueTask::try_from).collect()
        })
    }

    /// Moves this node's claims to `lease` (an earlier epoch's claims after a restart, or
    /// claims just taken over). `Error::Fenced` if this node was itself taken over meanwhile:
    /// the claims are the taker's then, and must not be pulled back.
    pub async fn adopt_claims(&self, lease: NodeLease, task_ids: &[i64]) -> Result<()> {
        on_pool!(control self, |pool, Db| {
            let mut tx = pool.begin().await?;
            hold_lease!(self, tx, lease);
            for chunk in task_ids.chunks(CHUNK) {
                let mut qb = QueryBuilder::<Db>::new("UPDATE tasks SET owner_node = ");
                qb.push_bind(lease.node_id)
                    .push(", owner_epoch = ")
                    .push_bind(lease.epoch)
                    .push(" WHERE status = 'claimed' AND owner_node = ")
                    .push_bind(lease.node_id)
                    .push(" AND id IN ");
                push_ids(&mut qb, chunk.iter().copied());
                qb.build().execute(&mut *tx).await?;
            }
            tx.commit().await?;
        });
        Ok(())
    }

    /// Hands claims back (graceful shutdown): the tasks become pending for any node.
    pub async fn release_claims(&self, lease: NodeLease, task_ids: &[i64]) -> Result<()> {
        on_pool!(self, |pool, Db| {
            for chunk in task_ids.chunks(CHUNK) {
                let mut qb = QueryBuilder::<Db>::new(
                    "UPDATE tasks SET status = 'pending', owner_node = NULL, owner_epoch = NULL \
                     WHERE status = 'claimed' AND owner_node = ",
                );
                qb.push_bind(lease.node_id)
                    .push(" AND owner_epoch = ")
                    .push_bind(lease.epoch)
                    .push(" AND id IN ");
                push_ids(&mut qb, chunk.iter().copied());
                qb.build().execute(pool).await?;
            }
        });
        Ok(())
    }

    /// Claimed fires that found no live executor of their app: out of `lease`'s wheel, they
    /// wait in the database (`waiting`, since `since`) until one registers
    /// ([`Store::wake_waiting`]) or they wait too long ([`Store::claim_expired_waiting`]).
    /// A wait is not an attempt.
    pub async fn park_waiting(&self, lease: NodeLease, task_ids: &[(i64, Millis)]) -> Result<()> {
        let mut by_since: BTreeMap<Millis, Vec<i64>> = BTreeMap::new();
        for &(id, since) in task_ids {
            by_since.entry(since).or_default().push(id);
        }
        on_pool!(self, |pool, Db| {
            for (since, ids) in by_since {
                for chunk in ids.chunks(CHUNK) {
                    let mut qb = QueryBuilder::<Db>::new(
                        "UPDATE tasks SET status = 'waiting', owner_node = NULL, owner_epoch = NULL, updated_at = ",
                    );
                    qb.push_bind(since)
                        .push(" WHERE status = 'claimed' AND owner_node = ")
                        .push_bind(lease.node_id)
                        .push(" AND owner_epoch = ")
                        .push_bind(lease.epoch)
                        .push(" AND id IN ");
                    push_ids(&mut qb, chunk.iter().copied());
                    qb.build().execute(pool).await?;
                }
            }
        });
        Ok(())
    }

    /// Waiting fires of these apps' jobs become pending again (an executor of the app is
    /// live); returns how many.
    pub async fn wake_waiting(&self, apps: &[String]) -> Result<u64> {
        if apps.is_empty() {
            return Ok(0);
        }
        on_pool!(self, |pool, Db| {
            let mut qb = QueryBuilder::<Db>::new(
                "UPDATE tasks SET status = 'pending' WHERE status = 'waiting'",
            );
            in_apps!(qb, "job_id", apps);
            Ok(qb.build().execute(pool).await?.affected())
        })
    }

    /// Claims, for `lease`, up to `limit` waiting fires that have waited longer than their
    /// job's `no_executor_timeout_ms`, with their job's app: the caller fails each as an
    /// attempt.
    pub async fn claim_expired_waiting(
        &self,
        lease: NodeLease,
        now: Millis,
        limit: u32,
    ) -> Result<Vec<(DueTask, String, Millis)>> {
        #[derive(FromRow)]
        struct Expired {
            id: i64,
            app: String,
            since: i64,
        }
        let skip_locked = self.skip_locked();
        on_pool!(self, |pool, Db| {
            let mut tx = pool.begin().await?;
            hold_lease!(self, tx, lease);
            let expired: Vec<Expired> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
                "SELECT t.id, a.name AS app, t.updated_at AS since FROM tasks t \
                 JOIN jobs j ON j.id = t.job_id JOIN apps a ON a.id = j.app_id \
                 WHERE t.status = 'waiting' \
                 AND t.updated_at < ? - COALESCE(j.no_executor_timeout_ms, {DEFAULT_NO_EXECUTOR_TIMEOUT_MS}) \
                 ORDER BY t.updated_at LIMIT ?{skip_locked}"
            )))
            .bind(now)
            .bind(i64::from(limit))
            .fetch_all(&mut *tx)
            .await?;
            if expired.is_empty() {
                return Ok(Vec::new());
            }
            let mut qb =
                QueryBuilder::<Db>::new("UPDATE tasks SET status = 'claimed', owner_node = ");
            qb.push_bind(lease.node_id)
                .push(", owner_epoch = ")
                .push_bind(lease.epoch)
                .push(" WHERE status = 'waiting' AND id IN ");
            push_ids(&mut qb, expired.iter().map(|e| e.id));
            qb.build().execute(&mut *tx).await?;
            let mut qb = QueryBuilder::<Db>::new(concat!(due_select!(), " WHERE id IN "));
            push_ids(&mut qb, expired.iter().map(|e| e.id));
            let rows: Vec<DueRow> = qb.build_query_as().fetch_all(&mut *tx).await?;
            tx.commit().await?;
            let meta: HashMap<i64, (String, Millis)> = expired
                .into_iter()
                .map(|e| (e.id, (e.app, e.since)))
                .collect();
            rows.into_iter()
                .map(|r| {
                    let (app, since) = meta.get(&r.id).cloned().unwrap_or_default();
                    Ok((DueTask::try_from(r)?, app, since))
                })
                .collect()
        })
    }

    /// Claimed tasks whose job was deleted: cancelled (a forced delete cancelled its
    /// pending tasks; these were created or claimed as it happened).
    pub async fn cancel_orphans(&self, task_ids: &[i64], now: Millis) -> Result<()> {
        on_pool!(self, |pool, Db| {
            for chunk in task_ids.chunks(CHUNK) {
                let mut qb =
                    QueryBuilder::<Db>::new("UPDATE tasks SET status = 'cancelled', updated_at = ");
                qb.push_bind(now).push(
                    ", owner_node = NULL, owner_epoch = NULL WHERE status = 'claimed' \
                           AND job_id NOT IN (SELECT id FROM jobs) AND id IN ",
                );
                push_ids(&mut qb, chunk.iter().copied());
                qb.build().execute(pool).await?;
            }
        });
        Ok(())
    }

    // ----- dispatch and runs -----------------------------------------------------------

    /// Records runs that `lease` sent to executors: the run rows (kept if a report created
    /// them first) and their tasks' move from `claimed` to `running`. Only for tasks this
    /// lease still holds, unfinished, at the attempt that was sent: a task whose attempt
    /// already ended was written whole by its report (which carries the trigger's
    /// `dispatched_at`), so under load — reports applied before the record, the usual
    /// case — a batch costs one read and no write. A node taken over while its sends were
    /// unanswered (it stalled) records nothing for claims that moved on: the taker learnt
    /// from the executors what had arrived, and recorded that. Returns how many of `runs`
    /// belong to another lease now; `Error::Fenced` if `lease` is no longer this node's
    /// and there was something to write.
    pub async fn record_dispatches(
        &self,
        lease: NodeLease,
        runs: &[Dispatched],
        now: Millis,
    ) -> Result<usize> {
        #[derive(FromRow)]
        struct Held {
            id: i64,
            status: String,
            attempt: i32,
            owner_node: Option<i64>,
            owner_epoch: Option<i64>,
        }
        if runs.is_empty() {
            return Ok(0);
        }
        let upsert_tail = if self.is_mysql() {
            " ON DUPLICATE KEY UPDATE dispatched_at = VALUES(dispatched_at), \
             executor = COALESCE(executor, VALUES(executor))"
        } else {
            " ON CONFLICT(id) DO UPDATE SET dispatched_at = excluded.dispatched_at, \
             executor = COALESCE(runs.executor, excluded.executor) ON CONFLICT DO NOTHING"
        };
        // Rows in run-id order, as `apply_run_updates` writes them: two transactions touching
        // the same runs lock them in the same order and cannot deadlock.
        let mut runs: Vec<&Dispatched> = runs.iter().collect();
        runs.sort_by_key(|r| r.run_id);
        let mut elsewhere = 0;
        on_pool!(self, |pool, Db| {
            let mut tx = pool.begin().await?;
            let mut leased = false;
            for chunk in runs.chunks(CHUNK) {
                let mut qb = QueryBuilder::<Db>::new(
                    "SELECT id, status, attempt, owner_node, owner_epoch FROM tasks WHERE id IN ",
                );
                push_ids(&mut qb, chunk.iter().map(|r| r.task_id));
                let tasks: HashMap<i64, Held> = qb
                    .build_query_as::<Held>()
                    .fetch_all(&mut *tx)
                    .await?
                    .into_iter()
                    .map(|t| (t.id, t))
                    .collect();
                let mut write: Vec<&Dispatched> = Vec::new();
                for r in chunk {
                    let Some(t) = tasks.get(&r.task_id) else {
                        continue;
                    };
                    let ours =
                        t.owner_node == Some(lease.node_id) && t.owner_epoch == Some(lease.epoch);
                    if t.owner_node.is_some() && !ours {
                        elsewhere += 1;
                    } else if ours
                        && t.attempt == r.attempt
                        && t.status == TaskStatus::Claimed.as_str()
                    {
                        write.push(r);
                    }
                }
                if write.is_empty() {
                    continue;
                }
                if !leased {
                    // The lease is held (a shared lock on this node's fence) until commit:
                    // no take-over of this node can move the claims read as its own above.
                    // (Locking the task rows instead would take them before the runs, the
                    // opposite order of applying reports, and deadlock with it.)
                    hold_lease!(self, tx, lease);
                    leased = true;
                }
                let mut qb = QueryBuilder::<Db>::new(
                    "INSERT INTO runs (id, job_id, task_id, attempt, shard_index, shard_total, executor, status, \
                     scheduled_at, dispatched_at) ",
                );
                qb.push_values(write.iter(), |mut b, r| {
                    b.push_bind(r.run_id)
                        .push_bind(r.job_id)
                        .push_bind(r.task_id)
                        .push_bind(r.attempt)
                        .push_bind(r.shard_index)
                        .push_bind(r.shard_total)
                        .push_bind(r.executor.as_str())
                        .push_bind(RunStatus::Dispatched.as_str())
                        .push_bind(r.scheduled_at)
                        .push_bind(r.dispatched_at);
                });
                qb.push(upsert_tail);
                qb.build().execute(&mut *tx).await?;

                // Tasks by the attempt that was sent (nearly always one group): only that
                // attempt moves on, since a fast failure report may have moved the task to
                // its next attempt, claimed again, since it was read.
                let mut by_attempt: BTreeMap<i32, Vec<i64>> = BTreeMap::new();
                for r in &write {
                    by_attempt.entry(r.attempt).or_default().push(r.task_id);
                }
                for (attempt, mut task_ids) in by_attempt {
                    task_ids.sort_unstable();
                    task_ids.dedup();
                    let mut qb = QueryBuilder::<Db>::new(
                        "UPDATE tasks SET status = 'running', updated_at = ",
                    );
                    qb.push_bind(now)
                        .push(" WHERE status = 'claimed' AND attempt = ")
                        .push_bind(attempt)
                        .push(" AND id IN ");
                    push_ids(&mut qb, task_ids.into_iter());
                    qb.build().execute(&mut *tx).await?;
                }
            }
            tx.commit().await?;
        });
        Ok(elsewhere)
    }

    /// Deletes up to `limit` finished tasks (succeeded, dead, cancelled) whose last due time
    /// is before `before`, with their runs. Returns how many tasks went. Small batches on an
    /// index range, so retention never holds locks the scan would wait for.
    pub async fn purge_finished(&self, before: Millis, limit: u32) -> Result<usize> {
        on_pool!(self, |pool, Db| {
            let mut ids: Vec<i64> = Vec::new();
            for status in ["succeeded", "dead", "cancelled"] {
                let room = i64::from(limit) - ids.len() as i64;
                if room <= 0 {
                    break;
                }
                let found: Vec<i64> = sqlx::query_scalar(
                    "SELECT id FROM tasks WHERE status = ? AND due_at < ? ORDER BY due_at LIMIT ?",
                )
                .bind(status)
                .bind(before)
                .bind(room)
                .fetch_all(pool)
                .await?;
                ids.extend(found);
            }
            if ids.is_empty() {
                return Ok(0);
            }
            let mut tx = pool.begin().await?;
            let mut qb = QueryBuilder::<Db>::new("DELETE FROM runs WHERE task_id IN ");
            push_ids(&mut qb, ids.iter().copied());
            qb.build().execute(&mut *tx).await?;
            let mut qb = QueryBuilder::<Db>::new(
                "DELETE FROM tasks WHERE status IN ('succeeded', 'dead', 'cancelled') AND id IN ",
            );
            push_ids(&mut qb, ids.iter().copied());
            let deleted = qb.build().execute(&mut *tx).await?.affected();
            // The dashboard's counts go with the runs they counted.
            sqlx::query("DELETE FROM run_stats WHERE minute < ?")
                .bind(before)
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            Ok(deleted as usize)
        })
    }

    pub async fn get_run(&self, id: i64) -> Result<Run> {
        let sql = format!("SELECT {RUN_COLUMNS} FROM runs WHERE id = ?");
        on_pool!(self, |pool, Db| {
            let row: Option<RunRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
                .bind(id)
                .fetch_optional(pool)
                .await?;
            row.ok_or_else(|| Error::NotFound(format!("run {id}")))?
                .try_into()
        })
    }

    /// Runs, newest first.
    pub async fn list_runs(&self, f: &RunFilter) -> Result<Page<Run>> {
        let limit = f.limit.clamp(1, 1000);
        on_pool!(self, |pool, Db| {
            let mut qb =
                QueryBuilder::<Db>::new(format!("SELECT {RUN_COLUMNS} FROM runs WHERE 1 = 1"));
            if let Some(job) = f.job_id {
                qb.push(" AND job_id = ").push_bind(job);
            }
            if let Some(apps) = &f.apps {
                in_apps!(qb, "job_id", apps);
            }
            if let Some(task) = f.task_id {
                qb.push(" AND task_id = ").push_bind(task);
            }
            if let Some(status) = f.status {
                qb.push(" AND status = ").push_bind(status.as_str());
            }
            if let Some(before) = f.before_id {
                qb.push(" AND id < ").push_bind(before);
            }
            qb.push(" ORDER BY id DESC LIMIT ")
                .push_bind(i64::from(limit) + 1);
            let rows: Vec<RunRow> = qb.build_query_as().fetch_all(pool).await?;
            page(rows, limit, |r| r.id)
        })
    }

    /// Runs not yet finished on any of these executors (to mark them lost when they die).
    /// The dispatched and running runs of these executors, each `(app, address)`: runs at
    /// the address of that app's jobs (or of jobs deleted since), so one app's executor can
    /// never speak for runs another app's executor has at the same address.
    pub async fn unfinished_runs_on(&self, executors: &[(String, String)]) -> Result<Vec<Run>> {
        if executors.is_empty() {
            return Ok(Vec::new());
        }
        on_pool!(self, |pool, Db| {
            let mut qb = QueryBuilder::<Db>::new(format!(
                "SELECT {RUN_COLUMNS} FROM runs WHERE status IN ('dispatched', 'running') AND ("
            ));
            for (i, (app, address)) in executors.iter().enumerate() {
                if i > 0 {
                    qb.push(" OR ");
                }
                qb.push("(executor = ")
                    .push_bind(address.as_str())
                    .push(
                        " AND (job_id IN (SELECT sj.id FROM jobs sj JOIN apps sa ON sa.id = sj.app_id \
                         WHERE sa.name = ",
                    )
                    .push_bind(app.as_str())
                    .push(") OR job_id NOT IN (SELECT id FROM jobs)))");
            }
            qb.push(")");
            let rows: Vec<RunRow> = qb.build_query_as().fetch_all(pool).await?;
            rows.into_iter().map(Run::try_from).collect()
        })
    }

    // ----- the console: users, sessions, audit -----------------------------------------

    pub async fn count_users(&self) -> Result<i64> {
        on_pool!(self, |pool, Db| {
            Ok(sqlx::query_scalar("SELECT COUNT(*) FROM users")
                .fetch_one(pool)
                .await?)
        })
    }

    /// A new user; a taken name is a [`Error::Conflict`].
    pub async fn insert_user(
        &self,
        name: &str,
        password_hash: &str,
        role: &str,
        apps: &str,
        now: Millis,
    ) -> Result<i64> {
        on_pool!(self, |pool, Db| {
            Ok(sqlx::query(
                "INSERT INTO users (name, password_hash, role, apps, created_at) \
                 VALUES (?, ?, ?, ?, ?)",
            )
            .bind(name)
            .bind(password_hash)
            .bind(role)
            .bind(apps)
            .bind(now)
            .execute(pool)
            .await?
            .insert_id())
        })
    }

    pub async fn user_by_name(&self, name: &str) -> Result<Option<crate::console::User>> {
        on_pool!(self, |pool, Db| {
            Ok(sqlx::query_as(
                "SELECT id, name, password_hash, role, apps, created_at FROM users WHERE name = ?",
            )
            .bind(name)
            .fetch_optional(pool)
            .await?)
        })
    }

    /// Stores a new session (by its token's hash) and drops the expired ones.
    pub async fn insert_session(
        &self,
        token_hash: &str,
        user_id: i64,
        now: Millis,
        expires_at: Millis,
    ) -> Result<()> {
        on_pool!(self, |pool, Db| {
            sqlx::query("DELETE FROM sessions WHERE expires_at <= ?")
                .bind(now)
                .execute(pool)
                .await?;
            sqlx::query(
                "INSERT INTO sessions (token_hash, user_id, created_at, expires_at) \
                 VALUES (?, ?, ?, ?)",
            )
            .bind(token_hash)
            .bind(user_id)
            .bind(now)
            .bind(expires_at)
            .execute(pool)
            .await?;
            Ok(())
        })
    }

    /// The user of an unexpired session.
    pub async fn session_user(
        &self,
        token_hash: &str,
        now: Millis,
    ) -> Result<Option<crate::console::User>> {
        on_pool!(self, |pool, Db| {
            Ok(sqlx::query_as(
                "SELECT u.id, u.name, u.password_hash, u.role, u.apps, u.created_at FROM sessions s \
                 JOIN users u ON u.id = s.user_id WHERE s.token_hash = ? AND s.expires_at > ?",
            )
            .bind(token_hash)
            .bind(now)
            .fetch_optional(pool)
            .await?)
        })
    }

    pub async fn delete_session(&self, token_hash: &str) -> Result<()> {
        on_pool!(self, |pool, Db| {
            sqlx::query("DELETE FROM sessions WHERE token_hash = ?")
                .bind(token_hash)
                .execute(pool)
                .await?;
            Ok(())
        })
    }

    pub async fn record_audit(
        &self,
        user_name: &str,
        action: &str,
        target: &str,
        now: Millis,
    ) -> Result<()> {
        on_pool!(self, |pool, Db| {
            sqlx::query(
                "INSERT INTO audit_log (user_name, action, target, at) VALUES (?, ?, ?, ?)",
            )
            .bind(user_name)
            .bind(action)
            .bind(target)
            .bind(now)
            .execute(pool)
            .await?;
            Ok(())
        })
    }

    /// Changes a user's password and ends their other sessions (all but `keep_session`).
    pub async fn set_password(
        &self,
        user_id: i64,
        password_hash: &str,
        keep_session: &str,
    ) -> Result<()> {
        on_pool!(self, |pool, Db| {
            let mut tx = pool.begin().await?;
            sqlx::query("UPDATE users SET password_hash = ? WHERE id = ?")
                .bind(password_hash)
                .bind(user_id)
                .execute(&mut *tx)
                .await?;
            sqlx::query("DELETE FROM sessions WHERE user_id = ? AND token_hash <> ?")
                .bind(user_id)
                .bind(keep_session)
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            Ok(())
        })
    }

    /// Every user, by name.
    pub async fn list_users(&self) -> Result<Vec<crate::console::User>> {
        on_pool!(self, |pool, Db| {
            Ok(sqlx::query_as(
                "SELECT id, name, password_hash, role, apps, created_at FROM users ORDER BY name",
            )
            .fetch_all(pool)
            .await?)
        })
    }

    pub async fn get_user(&self, id: i64) -> Result<crate::console::User> {
        on_pool!(self, |pool, Db| {
            sqlx::query_as(
                "SELECT id, name, password_hash, role, apps, created_at FROM users WHERE id = ?",
            )
            .bind(id)
            .fetch_optional(pool)
            .await?
            .ok_or_else(|| Error::NotFound(format!("user {id} does not exist")))
        })
    }

    /// Changes a user's role and apps; their sessions and tokens carry the change at once.
    pub async fn set_user_access(&self, id: i64, role: &str, apps: &str) -> Result<()> {
        on_pool!(self, |pool, Db| {
            let done = sqlx::query("UPDATE users SET role = ?, apps = ? WHERE id = ?")
                .bind(role)
                .bind(apps)
                .bind(id)
                .execute(pool)
                .await?;
            if done.rows_affected() == 0 {
                return Err(Error::NotFound(format!("user {id} does not exist")));
            }
            Ok(())
        })
    }

    /// Deletes a user with their sessions and tokens.
    pub async fn delete_user(&self, id: i64) -> Result<()> {
        on_pool!(self, |pool, Db| {
            let mut tx = pool.begin().await?;
            for sql in [
                "DELETE FROM sessions WHERE user_id = ?",
                "DELETE FROM api_tokens WHERE user_id = ?",
                "DELETE FROM users WHERE id = ?",
            ] {
                sqlx::query(sql).bind(id).execute(&mut *tx).await?;
            }
            tx.commit().await?;
            Ok(())
        })
    }

    /// Stores a new API token of `user_id` by its hash.
    pub async fn insert_token(
        &self,
        user_id: i64,
        name: &str,
        token_hash: &str,
        now: Millis,
    ) -> Result<i64> {
        on_pool!(self, |pool, Db| {
            Ok(sqlx::query(
                "INSERT INTO api_tokens (user_id, name, token_hash, created_at) VALUES (?, ?, ?, ?)",
            )
            .bind(user_id)
            .bind(name)
            .bind(token_hash)
            .bind(now)
            .execute(pool)
            .await?
            .insert_id())
        })
    }

    /// API tokens, newest first: one user's, or everyone's (`None`).
    pub async fn list_tokens(&self, user_id: Option<i64>) -> Result<Vec<crate::console::ApiToken>> {
        on_pool!(self, |pool, Db| {
            let mut qb = QueryBuilder::<Db>::new(
                "SELECT t.id, t.user_id, u.name AS user_name, t.name, t.created_at, t.revoked_at \
                 FROM api_tokens t JOIN users u ON u.id = t.user_id",
            );
            if let Some(user_id) = user_id {
                qb.push(" WHERE t.user_id = ").push_bind(user_id);
            }
            qb.push(" ORDER BY t.id DESC");
            Ok(qb.build_query_as().fetch_all(pool).await?)
        })
    }

    /// Revokes a token (of `user_id` only, when given); whether one was live.
    pub async fn revoke_token(&self, id: i64, user_id: Option<i64>, now: Millis) -> Result<bool> {
        on_pool!(self, |pool, Db| {
            let mut qb = QueryBuilder::<Db>::new("UPDATE api_tokens SET revoked_at = ");
            qb.push_bind(now)
                .push(" WHERE revoked_at IS NULL AND id = ")
                .push_bind(id);
            if let Some(user_id) = user_id {
                qb.push(" AND user_id = ").push_bind(user_id);
            }
            Ok(qb.build().execute(pool).await?.rows_affected() > 0)
        })
    }

    /// The user behind a live API token: (name, role, apps).
    pub async fn token_user(&self, token_hash: &str) -> Result<Option<(String, String, String)>> {
        on_pool!(self, |pool, Db| {
            Ok(sqlx::query_as(
                "SELECT u.name, u.role, u.apps FROM api_tokens t JOIN users u ON u.id = t.user_id \
                 WHERE t.token_hash = ? AND t.revoked_at IS NULL",
            )
            .bind(token_hash)
            .fetch_optional(pool)
            .await?)
        })
    }

    /// Audit entries, newest first, older than `before_id`; `limit + 1` rows so the caller
    /// knows whether there is a next page.
    pub async fn list_audit(
        &self,
        before_id: Option<i64>,
        limit: u32,
    ) -> Result<Vec<crate::console::AuditEntry>> {
        on_pool!(self, |pool, Db| {
            Ok(sqlx::query_as(
                "SELECT id, user_name, action, target, at FROM audit_log \
                 WHERE id < ? ORDER BY id DESC LIMIT ?",
            )
            .bind(before_id.unwrap_or(i64::MAX))
            .bind(i64::from(limit) + 1)
            .fetch_all(pool)
            .await?)
        })
    }

    /// Finished runs per `bucket_ms` (a multiple of a minute) and status from `since`:
    /// (bucket start, status, runs), in time order.
    pub async fn run_stats(
        &self,
        since: Millis,
        bucket_ms: Millis,
    ) -> Result<Vec<(Millis, String, i64)>> {
        let bucket = bucket_ms.max(60_000);
        on_pool!(self, |pool, Db| {
            Ok(sqlx::query_as(
                "SELECT minute - (minute % ?) AS bucket, status, CAST(SUM(runs) AS SIGNED) \
                 FROM run_stats WHERE minute >= ? GROUP BY bucket, status ORDER BY bucket",
            )
            .bind(bucket)
            .bind(since)
            .fetch_all(pool)
            .await?)
        })
    }

    /// The dashboard's numbers: jobs, tasks waiting to run, runs scheduled since `since` by
    /// status; of `apps`' jobs only, when given.
    pub async fn console_counts(
        &self,
        since: Millis,
        apps: Option<&[String]>,
    ) -> Result<crate::console::Counts> {
        on_pool!(self, |pool, Db| {
            let mut qb = QueryBuilder::<Db>::new("SELECT COUNT(*) FROM jobs WHERE 1 = 1");
            if let Some(apps) = apps {
                in_apps!(qb, "id", apps);
            }
            let jobs: i64 = qb.build_query_scalar().fetch_one(pool).await?;
            let mut qb = QueryBuilder::<Db>::new(
                "SELECT COUNT(*) FROM tasks WHERE status IN ('pending', 'claimed', 'waiting')",
            );
            if let Some(apps) = apps {
                in_apps!(qb, "job_id", apps);
            }
            let tasks_pending: i64 = qb.build_query_scalar().fetch_one(pool).await?;
            let mut qb =
                QueryBuilder::<Db>::new("SELECT status, COUNT(*) FROM runs WHERE scheduled_at >= ");
            qb.push_bind(since);
            if let Some(apps) = apps {
                in_apps!(qb, "job_id", apps);
            }
            qb.push(" GROUP BY status");
            let runs_by_status: Vec<(String, i64)> = qb.build_query_as().fetch_all(pool).await?;
            Ok(crate::console::Counts {
                jobs,
                tasks_pending,
                runs_by_status,
            })
        })
    }
}

/// The combined outcome of a broadcast attempt: succeeded only if every shard did; a failure
/// outranks a loss (the plugin failed somewhere), a loss outranks success.
fn combine_shards(statuses: impl IntoIterator<Item = RunStatus>) -> RunStatus {
    let mut worst = RunStatus::Succeeded;
    for s in statuses {
        worst = match (worst, s) {
            (_, RunStatus::Succeeded) => worst,
            (RunStatus::Succeeded, s) => s,
            (RunStatus::Lost, s) => s,
            (w, _) => w,
        };
    }
    worst
}

fn collect_ids(outcomes: &[(i64, TaskNext)], pred: impl Fn(&TaskNext) -> bool) -> Vec<i64> {
    outcomes
        .iter()
        .filter(|(_, n)| pred(n))
        .map(|(t, _)| *t)
        .collect()
}

/// Run messages are for people; keep them bounded (XXL-JOB truncates at 15,000 chars too).
fn truncate_message(m: &str) -> String {
    const MAX: usize = 4000;
    if m.len() <= MAX {
        return m.to_owned();
    }
    let mut end = MAX;
    while !m.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… (truncated)", &m[..end])
}

/// Turns `limit + 1` rows into a page and its cursor.
fn page<R, T>(mut rows: Vec<R>, limit: u32, id: impl Fn(&R) -> i64) -> Result<Page<T>>
where
    T: TryFrom<R, Error = Error>,
{
    let more = rows.len() > limit as usize;
    rows.truncate(limit as usize);
    let next = if more { rows.last().map(&id) } else { None };
    let items = rows.into_iter().map(T::try_from).collect::<Result<_>>()?;
    Ok(Page { items, next })
}
