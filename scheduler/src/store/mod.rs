//! Storage: every row Rota keeps, on MySQL (8.0.1+ / MariaDB 10.6+) or SQLite.
//!
//! [`Store`] is one type over two backends. Almost every statement is the same SQL on both
//! (`?` placeholders, epoch-millisecond integers), so each method is written once and the
//! `on_pool!` macro compiles its body against each backend's concrete pool; the few
//! dialect differences (`INSERT IGNORE` vs `INSERT OR IGNORE`, upserts, `SKIP LOCKED`) are
//! spelled out where they occur. One contract suite (`tests/integration/store_contract.rs`) runs on both.
//!
//! Batching is the rule on hot paths: the scan claims a whole window in one transaction,
//! dispatches and run reports are written many rows per statement (`IN (…)`, `CASE id …`,
//! multi-row `VALUES`), so the statements per fire stay flat however large the backlog.

use std::collections::{BTreeMap, HashMap};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use sqlx::mysql::{MySqlConnectOptions, MySqlPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{FromRow, MySqlPool, QueryBuilder, SqlitePool};

use crate::backoff::Backoff;
use crate::model::*;
use crate::schedule::{Misfire, Schedule};

/// Rows per multi-row statement: under both backends' placeholder limits for our widest rows.
const CHUNK: usize = 1000;

/// Task ids a node reserves at a time on MySQL ([`Store::task_ids`]).
const TASK_ID_BLOCK: i64 = 1000;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0} not found")]
    NotFound(String),
    #[error("{0}")]
    Conflict(String),
    #[error("unsupported database url `{0}`: use mysql://… or sqlite:…")]
    UnsupportedUrl(String),
    #[error("invalid database url: {0}")]
    InvalidUrl(String),
    /// No member of a multi-host database URL is ready ([`members`]).
    #[error("{0}")]
    Unavailable(String),
    /// A server Rota cannot be correct on (see [`server_support`]).
    #[error("{0}")]
    UnsupportedServer(String),
    #[error("database error: {0}")]
    Database(sqlx::Error),
    #[error("database migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("stored value is invalid: {0}")]
    Corrupt(String),
    /// What a change was decided on changed meanwhile (another node's update): read it
    /// again and decide again.
    #[error("{0} changed meanwhile")]
    Changed(String),
    /// This node's lease is gone: another node took over its claims (it had stopped
    /// heartbeating), or a newer process runs under its name. It must fire nothing more.
    #[error("this scheduler node was fenced: its claims were taken over")]
    Fenced,
}

/// A resource the database ran out of: what a request refused for it is answered with
/// (507 for space, 503 for a read-only database), and what `/readyz` reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exhausted {
    /// The database's disk is full (SQLite `SQLITE_FULL`; MySQL "table is full", "disk
    /// full", or errno 28 from the storage engine).
    Space,
    /// The database takes no writes (a read-only file or file system; MySQL `read_only`).
    ReadOnly,
}

impl std::fmt::Display for Exhausted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Exhausted::Space => "the database's disk is full",
            Exhausted::ReadOnly => "the database is read-only",
        })
    }
}

impl Error {
    /// Which resource the database ran out of, when that is why it failed.
    pub fn exhausted(&self) -> Option<Exhausted> {
        let Error::Database(sqlx::Error::Database(d)) = self else {
            return None;
        };
        if d.try_downcast_ref::<sqlx::sqlite::SqliteError>().is_some() {
            let code: i64 = d.code()?.parse().ok()?;
            // Extended result codes keep the primary code in their low byte.
            return match code & 0xff {
                13 => Some(Exhausted::Space),
                8 => Some(Exhausted::ReadOnly),
                _ => None,
            };
        }
        // MySQL's `code()` is the SQLSTATE (HY000 for most of these): go by the number.
        let mysql = d.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()?;
        let errno_28 = |m: &str| m.contains("error 28 ") || m.contains("Errcode: 28");
        match mysql.number() {
            1021 | 1114 => Some(Exhausted::Space),
            1030 if errno_28(mysql.message()) => Some(Exhausted::Space),
            1290 | 1792 | 1836 => Some(Exhausted::ReadOnly),
            _ => None,
        }
    }

    /// A failure that says nothing about the request, only that the database could not take
    /// it now: the connection broke or none was free in time, a member is failing over, or
    /// a concurrent writer kept rolling it back after every retry. Nothing was stored; the
    /// same request may simply be sent again (an API answers 503).
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Unavailable(_) => true,
            Error::Database(e) => {
                is_retryable(e)
                    || matches!(
                        e,
                        sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed
                    )
            }
            _ => false,
        }
    }
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
///
/// On a Galera cluster row locks are local to a member, so the shared lock would not stop a
/// take-over committed through another member: there the transaction writes its fence row
/// (where the epoch is still its own), and certification makes a take-over and this
/// transaction conflict; the loser is retried ([`retry`]) and then sees the new epoch.
macro_rules! hold_lease {
    ($store:expr, $conn:expr, $lease:expr) => {{
        let held = if $store.galera {
            let r = sqlx::query(
                "UPDATE node_fences SET writes = writes + 1 WHERE node_id = ? AND epoch = ?",
            )
            .bind($lease.node_id)
            .bind($lease.epoch)
            .execute($conn)
            .await?;
            r.affected() == 1
        } else {
            let share = if $store.is_mysql() {
                " LOCK IN SHARE MODE"
            } else {
                ""
            };
            let epoch: Option<i64> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
                "SELECT epoch FROM node_fences WHERE node_id = ?{share}"
            )))
            .bind($lease.node_id)
            .fetch_optional($conn)
            .await?;
            epoch == Some($lease.epoch)
        };
        if !held {
            return Err(Error::Fenced);
        }
    }};
}

/// Runs `$body` (one whole transaction, or one statement, written as the body of an async
/// block: `?` and `return` leave the attempt) until it succeeds, fails for a reason other
/// than a concurrent writer, or was retried enough ([`retry`]); `$op` names it in
/// `rota_db_retries_total{op}`. A macro rather than a function taking a closure: the futures
/// of async closures borrowing the store are not provably `Send` to the spawning callers.
macro_rules! retrying {
    ($op:literal, $body:block) => {{
        let mut retries = 0u32;
        loop {
            let result: Result<_> = async $body.await;
            match result {
                Err(e) if $crate::store::retry::again(&e, $op, &mut retries).await => continue,
                other => break other,
            }
        }
    }};
}

/// The task statuses of an attempt that has not started, as an SQL list: pending, claimed
/// into a wheel, waiting for an executor, ready for a consumer
/// ([`TaskStatus::is_unstarted`]; a test holds the two to the same list).
macro_rules! unstarted {
    () => {
        "('pending', 'throttled', 'claimed', 'waiting', 'ready')"
    };
}

/// The columns of a [`DueRow`]: what the wheel needs of a task.
macro_rules! due_columns {
    () => {
        "id, job_id, kind, idem_key, due_at, attempt, priority, payload, params, traceparent"
    };
}

/// The start of a query for [`DueRow`]s.
macro_rules! due_select {
    () => {
        concat!("SELECT ", due_columns!(), " FROM tasks")
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

/// Runs `$body` with `$tx` bound to the concrete transaction of a [`Tx`] and `$db` naming
/// its database type: `on_pool!` for steps that share one transaction.
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

/// Begins a transaction that will write. On SQLite it takes the write lock at once
/// (`BEGIN IMMEDIATE`), so that it waits its turn (the busy timeout) instead of failing:
/// a transaction that reads first and writes later cannot take the lock once another
/// process (a second node on the same file) committed since its read (`SQLITE_BUSY_SNAPSHOT`).
trait BeginWrite {
    type Db: sqlx::Database;
    async fn begin_write(&self) -> Result<sqlx::Transaction<'static, Self::Db>>;
}

impl BeginWrite for MySqlPool {
    type Db = sqlx::MySql;
    async fn begin_write(&self) -> Result<sqlx::Transaction<'static, sqlx::MySql>> {
        Ok(self.begin().await?)
    }
}

impl BeginWrite for SqlitePool {
    type Db = sqlx::Sqlite;
    async fn begin_write(&self) -> Result<sqlx::Transaction<'static, sqlx::Sqlite>> {
        Ok(self.begin_with("BEGIN IMMEDIATE").await?)
    }
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

    async fn rollback(self) -> Result<()> {
        match self {
            Tx::MySql(tx) => tx.rollback().await?,
            Tx::Sqlite(tx) => tx.rollback().await?,
        }
        Ok(())
    }
}

// Below the macros, which the submodules use: one file per aggregate.
mod access;
mod alarms;
mod cluster;
mod executors;
mod ids;
mod job_rules;
mod jobs;
mod limits;
mod members;
mod migrate;
mod plugins;
mod queue;
mod retry;
mod rows;
mod runs;
mod secrets;
mod tasks;
mod workflows;
mod xxl;

pub use alarms::{
    AlarmChannelRow, AlarmDelivery, AlarmEvent, AlarmRow, AlarmRuleRow, Folded, Pending, Problems,
    WaitingEvents,
};
pub use job_rules::JobRules;
use members::Members;
pub use members::database_endpoints;
pub use plugins::{NewPlugin, PART_BYTES};
pub use queue::{Handover, HeldLease, LeaseEnding, Leased, LeasesEnded, QueueFacts, lease_token};
use retry::is_retryable;
use rows::*;
pub use rows::{
    ApiToken, Applied, AuditEntry, Bucket, Claimed, Counts, DueJob, JobFires, KvUsage, NodeRef,
    NodeRow, PluginUser, ReportOwners, RunStat, ScheduleDrift, SecretMeta, TokenUser, User,
};
pub use runs::Completing;
use workflows::StepTaskEnded;
pub use workflows::{
    Cancelled, FiresDone, Instance, InstanceEnded, InstanceStart, InstanceStep, ItemCounts,
    Scheduled, Timing, Workflow,
};

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

/// Pushes `(?, ?, …)` binding each id, for `IN` lists, padded to a power of two with the
/// last id again (the same list to `IN`). Each distinct length is another statement to
/// prepare and cache per connection: with lists of every length from 1 to a chunk, the
/// caches churned and a report batch's apply paid several extra round trips preparing.
fn push_ids<DB: sqlx::Database>(qb: &mut QueryBuilder<DB>, ids: impl IntoIterator<Item = i64>)
where
    i64: for<'t> sqlx::Encode<'t, DB> + sqlx::Type<DB>,
{
    let ids: Vec<i64> = ids.into_iter().collect();
    qb.push("(");
    let mut sep = qb.separated(", ");
    for &id in ids.iter().chain(padding(&ids)) {
        sep.push_bind(id);
    }
    qb.push(")");
}

/// Pushes `CASE column WHEN ? THEN ? … END`, padded as [`push_ids`] pads (a repeated
/// `WHEN` never matches: the first one did).
fn push_case<DB: sqlx::Database, V>(
    qb: &mut QueryBuilder<DB>,
    column: &'static str,
    pairs: impl IntoIterator<Item = (i64, V)>,
) where
    i64: for<'t> sqlx::Encode<'t, DB> + sqlx::Type<DB>,
    V: for<'t> sqlx::Encode<'t, DB> + sqlx::Type<DB> + Clone,
{
    let pairs: Vec<(i64, V)> = pairs.into_iter().collect();
    qb.push("CASE ").push(column);
    for (id, v) in pairs.iter().cloned().chain(padding(&pairs).cloned()) {
        qb.push(" WHEN ").push_bind(id).push(" THEN ").push_bind(v);
    }
    qb.push(" END");
}

/// The last of `items` repeated up to the next power of two of their number.
fn padding<T>(items: &[T]) -> impl Iterator<Item = &T> {
    let extra = items.len().next_power_of_two() - items.len();
    items.last().into_iter().cycle().take(extra)
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

/// Workflow versions' steps by (workflow, version) ([`Store`]'s `versions`).
type Versions = HashMap<(i64, i32), Arc<Vec<crate::workflow::StepSpec>>>;

#[derive(Clone)]
pub struct Store {
    pool: Pool,
    /// Cluster coordination: MySQL connections of its own (see `connect`); SQLite's pool.
    control: Pool,
    /// MySQL: how the node heartbeat opens a connection of its own ([`Store::beat`]).
    beat_opts: Option<MySqlConnectOptions>,
    /// The members of a multi-host URL, which every MySQL pool follows ([`members`]).
    members: Option<Arc<Members>>,
    /// A MariaDB Galera cluster: row locks are local to a member ([`hold_lease!`]).
    galera: bool,
    /// The task ids this node reserved and has not handed out: `[next, end)`.
    task_block: Arc<std::sync::Mutex<(i64, i64)>>,
    /// Workflow versions' steps by (workflow, version), read once: a version never changes
    /// and its ids are never reused (AUTOINCREMENT on SQLite; InnoDB keeps its counter), so
    /// neither a report batch that moves instances nor a read of them reads the steps'
    /// definitions again (`store/workflows/moving.rs`).
    versions: Arc<std::sync::Mutex<Versions>>,
    /// Where the workflow step tasks this node created or read are: a report batch ending
    /// them reads no `workflow_tasks` (`store/workflows/moving.rs`).
    placements: Arc<std::sync::Mutex<workflows::Placements>>,
}

/// The node heartbeat's own way to the database, made on the thread that beats
/// (`pipeline/lease.rs`). The heartbeat is the node's lease: were it to queue for a pooled connection
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

    /// The database server's clock; `None` on SQLite, whose clock is this machine's own.
    pub async fn database_time(&self) -> Result<Option<ClockReading>> {
        database_time_on(&self.pool).await
    }
}

/// One reading of the database server's clock (epoch ms) between two readings of this
/// process's monotonic clock (µs, [`crate::model::monotonic_us`]) taken around the
/// statement alone: waiting for a pooled connection is not in the round trip, so a busy
/// pool does not skew the reading.
#[derive(Debug, Clone, Copy)]
pub struct ClockReading {
    pub before_us: i64,
    pub database_ms: Millis,
    pub after_us: i64,
}

async fn database_time_on(pool: &Pool) -> Result<Option<ClockReading>> {
    match pool {
        Pool::MySql(pool) => {
            let mut conn = pool.acquire().await?;
            let before_us = crate::model::monotonic_us();
            let database_ms: i64 =
                sqlx::query_scalar("SELECT CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)")
                    .fetch_one(&mut *conn)
                    .await?;
            Ok(Some(ClockReading {
                before_us,
                database_ms,
                after_us: crate::model::monotonic_us(),
            }))
        }
        Pool::Sqlite(_) => Ok(None),
    }
}

async fn heartbeat_on(pool: &Pool, lease: NodeLease, now: Millis) -> Result<bool> {
    on_pool!(@match pool, |pool, Db| {
        let r = sqlx::query(
            "UPDATE nodes SET heartbeat_at = ?, clock_offset_ms = ? WHERE id = ? AND epoch = ?",
        )
        .bind(now)
        .bind(crate::model::clock_offset_ms())
        .bind(lease.node_id)
            .bind(lease.epoch)
            .execute(pool)
            .await?;
        Ok(r.affected() > 0)
    })
}

/// Whether Rota is correct on the MySQL-protocol server that reports `version`
/// (`SELECT VERSION()`). Claims rest on `SELECT … FOR UPDATE SKIP LOCKED`: MySQL has it
/// from 8.0.1, MariaDB from 10.6. TiDB does not support `SKIP LOCKED` and (v8.5) drops
/// `FOR UPDATE` when given it, so two nodes could claim one task: refused whatever its
/// version. A server whose version does not parse is let through (a fork that reports
/// something else); `docs/cluster.md` says what was tested.
pub fn server_support(version: &str) -> std::result::Result<(), String> {
    let numbers = |v: &str| -> Option<(u32, u32, u32)> {
        let mut parts = v
            .split(|c: char| !c.is_ascii_digit())
            .filter(|p| !p.is_empty())
            .map(|p| p.parse::<u32>().ok());
        Some((
            parts.next()??,
            parts.next()??,
            parts.next().flatten().unwrap_or(0),
        ))
    };
    let lower = version.to_ascii_lowercase();
    if lower.contains("tidb") {
        return Err(format!(
            "the database server is TiDB ({version}): TiDB does not support SELECT … FOR UPDATE \
             SKIP LOCKED and drops FOR UPDATE when given it, so two scheduler nodes could claim \
             one task; use MySQL 8.0.1+ or MariaDB 10.6+ (docs/cluster.md, \"Beyond one database\")"
        ));
    }
    let (name, needed) = if lower.contains("mariadb") {
        // MariaDB may report `5.5.5-10.11.6-MariaDB…` over the protocol; VERSION() does not,
        // but skip such a prefix if it is there.
        let v = version.strip_prefix("5.5.5-").unwrap_or(version);
        ("MariaDB", (numbers(v), (10, 6, 0)))
    } else {
        ("MySQL", (numbers(version), (8, 0, 1)))
    };
    match needed {
        (Some(have), need) if have < need => Err(format!(
            "the database server is {name} {version}: Rota needs {name} {}.{}.{}+ \
             (SELECT … FOR UPDATE SKIP LOCKED)",
            need.0, need.1, need.2
        )),
        _ => Ok(()),
    }
}

/// Whether a connection released to its pool may be used again: only outside a
/// transaction. After a failed COMMIT or ROLLBACK sqlx still counts the transaction open —
/// SQLite rolls a transaction back by itself on `SQLITE_FULL` or an I/O error, so the
/// ROLLBACK sent when it is dropped fails too — and every later BEGIN on that connection
/// would fail ("non-zero transaction depth"): the node would be wedged until restarted.
/// Such a connection is closed instead, and the pool opens a fresh one. The ping first
/// lets a ROLLBACK still queued on the connection (a dropped transaction's) run.
fn reusable<C: sqlx::Connection>(
    conn: &mut C,
) -> futures_util::future::BoxFuture<'_, std::result::Result<bool, sqlx::Error>> {
    Box::pin(async move {
        if conn.is_in_transaction() {
            let _ = conn.ping().await;
        }
        let clean = !conn.is_in_transaction();
        if !clean {
            tracing::warn!("closing a database connection left inside a failed transaction");
        }
        Ok(clean)
    })
}

/// MySQL pool options with the session settings every connection needs.
fn mysql_pool(max_connections: u32, members: &Option<Arc<Members>>) -> MySqlPoolOptions {
    let options = MySqlPoolOptions::new().after_release(|conn, _| reusable(conn));
    // After a move to another member, connections to the one left behind are closed.
    let options = match members {
        Some(members) => {
            let members = members.clone();
            options.before_acquire(move |_, meta| {
                let fresh = !members.is_stale(meta.age);
                Box::pin(async move { Ok(fresh) })
            })
        }
        None => options,
    };
    options
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
        let mut members = None;
        let mut galera = false;
        let pool = if url.starts_with("mysql:") || url.starts_with("mariadb:") {
            let url = url.replacen("mariadb:", "mysql:", 1);
            members = Members::of(&url)?;
            let opts = match &members {
                Some(members) => {
                    members.choose().await?;
                    members.options()
                }
                None => MySqlConnectOptions::from_str(&url)?,
            };
            beat_opts = Some(opts.clone());
            let pool = mysql_pool(16, &members)
                .min_connections(2)
                .acquire_timeout(Duration::from_secs(10))
                .connect_with(opts.clone())
                .await?;
            let version: String = sqlx::query_scalar("SELECT VERSION()")
                .fetch_one(&pool)
                .await?;
            server_support(&version).map_err(Error::UnsupportedServer)?;
            let wsrep: Option<(String, String)> =
                sqlx::query_as("SHOW GLOBAL VARIABLES LIKE 'wsrep_on'")
                    .fetch_optional(&pool)
                    .await?;
            galera = wsrep.is_some_and(|(_, on)| on.eq_ignore_ascii_case("ON"));
            // Cluster coordination (take-overs, adopting claims) on connections of its own:
            // a take-over must not queue for a connection behind a burst of reports.
            let control_pool = mysql_pool(2, &members)
                .acquire_timeout(Duration::from_secs(5))
                .connect_lazy_with(opts);
            if let Some(members) = &members {
                members.follow(&pool);
                members.follow(&control_pool);
                members.watch();
            }
            control = Some(Pool::MySql(control_pool));
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
                    .after_release(|conn, _| reusable(conn))
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
            members,
            galera,
            task_block: Arc::new(std::sync::Mutex::new((0, 0))),
            versions: Arc::default(),
            placements: Arc::default(),
        })
    }

    /// This store's database as another node has it: the same pools, nothing of this
    /// node's remembered (no task ids reserved, no workflow version, no step task's
    /// place). For tests of what one node does with rows another wrote.
    pub fn as_another_node(&self) -> Store {
        Store {
            task_block: Arc::new(std::sync::Mutex::new((0, 0))),
            versions: Arc::default(),
            placements: Arc::default(),
            ..self.clone()
        }
    }

    /// The database server's clock; `None` on SQLite ([`Store::database_time`]).
    pub async fn database_time(&self) -> Result<Option<ClockReading>> {
        database_time_on(&self.pool).await
    }

    /// The heartbeat's own connection (see [`Beat`]); call it on the runtime that will use it.
    pub async fn beat(&self) -> Result<Beat> {
        let pool = match (&self.beat_opts, &self.pool) {
            (Some(opts), _) => {
                let opts = match &self.members {
                    Some(members) => members.options(),
                    None => opts.clone(),
                };
                let pool = mysql_pool(1, &self.members)
                    .acquire_timeout(Duration::from_secs(2))
                    .connect_with(opts)
                    .await?;
                if let Some(members) = &self.members {
                    members.follow(&pool);
                }
                Pool::MySql(pool)
            }
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
            Pool::MySql(p) => Tx::MySql(p.begin_write().await?),
            Pool::Sqlite(p) => Tx::Sqlite(p.begin_write().await?),
        })
    }

    /// Is the database answering?
    pub async fn ping(&self) -> Result<()> {
        on_pool!(self, |pool, Db| {
            sqlx::query("SELECT 1").execute(pool).await?;
        });
        Ok(())
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

#[cfg(test)]
mod tests {
    use super::server_support;
    use crate::model::TaskStatus;

    #[test]
    fn in_lists_come_in_powers_of_two_of_the_same_ids() {
        let sql = |ids: Vec<i64>| {
            let mut qb = sqlx::QueryBuilder::<sqlx::Sqlite>::new("");
            super::push_ids(&mut qb, ids);
            qb.into_sql()
        };
        assert_eq!(sql(vec![7]), "(?)");
        assert_eq!(sql(vec![1, 2, 3]), "(?, ?, ?, ?)");
        assert_eq!(sql((1..=5).collect()), sql((1..=8).collect()));
        let padded: Vec<i64> = super::padding(&[1, 2, 3, 4, 5]).copied().collect();
        assert_eq!(padded, [5, 5, 5]);
        assert_eq!(super::padding::<i64>(&[]).count(), 0);
        assert_eq!(super::padding(&[1, 2, 3, 4]).count(), 0);
    }

    #[test]
    fn unstarted_in_sql_is_the_model_s_unstarted() {
        let all = [
            "pending",
            "claimed",
            "waiting",
            "ready",
            "running",
            "succeeded",
            "dead",
            "cancelled",
        ];
        let listed: Vec<&str> = all
            .into_iter()
            .filter(|s| unstarted!().contains(&format!("'{s}'")))
            .collect();
        let unstarted: Vec<&str> = all
            .into_iter()
            .filter(|s| s.parse::<TaskStatus>().unwrap().is_unstarted())
            .collect();
        assert_eq!(listed, unstarted);
    }

    #[test]
    fn servers_without_working_skip_locked_are_refused_naming_why() {
        for ok in [
            "8.0.1",
            "8.0.36",
            "8.4.3-0ubuntu0.24.04.1",
            "9.1.0",
            "10.6.0-MariaDB",
            "10.11.6-MariaDB-0+deb12u1",
            "11.4.2-MariaDB-log",
            "5.5.5-10.11.6-MariaDB",
            "8.0.30-Vitess",
            "something else entirely",
        ] {
            assert_eq!(server_support(ok), Ok(()), "{ok}");
        }
        for (bad, says) in [
            ("8.0.0", "MySQL 8.0.1+"),
            ("5.7.44-log", "MySQL 8.0.1+"),
            ("10.5.23-MariaDB", "MariaDB 10.6.0+"),
            ("10.3.39-MariaDB-0+deb10u2", "MariaDB 10.6.0+"),
            ("8.0.11-TiDB-v8.5.0", "TiDB does not support"),
            (
                "5.7.25-TiDB-v7.1.0",
                "two scheduler nodes could claim one task",
            ),
        ] {
            let err = server_support(bad).unwrap_err();
            assert!(err.contains(says) && err.contains(bad), "{bad}: {err}");
        }
    }
}
