//! The rows the store reads (one named type per query shape, never a tuple read by
//! position) and what its methods return.

use super::*;

/// Whom a batch of run reports is about ([`Store::report_owners`]).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ReportOwners {
    /// Task → its job and the job's app (`None` for a job deleted since).
    pub tasks: HashMap<i64, (i64, Option<String>)>,
    /// Recorded run → its task and the executor it was sent to.
    pub runs: HashMap<i64, (i64, Option<String>)>,
}

pub(super) const JOB_COLUMNS: &str = "j.id, j.name, a.name AS app, j.plugin, j.schedule, j.params, j.route, \
     j.block_strategy, j.misfire, j.timeout_ms, j.max_attempts, j.backoff, j.memory_mb, \
     j.max_concurrency, j.concurrency_key, j.rate_limit, j.debounce_ms, j.child_jobs, j.http_allow, j.enabled, j.no_executor_timeout_ms, \
     j.delivery, j.next_fire_at, j.generation, j.created_at, j.updated_at";

#[derive(FromRow)]
pub(super) struct JobRow {
    pub(super) id: i64,
    pub(super) name: String,
    pub(super) app: String,
    pub(super) plugin: String,
    pub(super) schedule: String,
    pub(super) params: Option<String>,
    pub(super) route: String,
    pub(super) block_strategy: String,
    pub(super) misfire: String,
    pub(super) timeout_ms: i64,
    pub(super) max_attempts: i32,
    pub(super) backoff: String,
    pub(super) memory_mb: i32,
    pub(super) max_concurrency: Option<i32>,
    pub(super) concurrency_key: Option<String>,
    pub(super) rate_limit: Option<String>,
    pub(super) debounce_ms: Option<i64>,
    pub(super) child_jobs: String,
    pub(super) http_allow: Option<String>,
    pub(super) enabled: bool,
    pub(super) no_executor_timeout_ms: Option<i64>,
    pub(super) delivery: Option<String>,
    pub(super) next_fire_at: Option<i64>,
    pub(super) generation: i64,
    pub(super) created_at: i64,
    pub(super) updated_at: i64,
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
                concurrency_key: r.concurrency_key,
                rate_limit: r.rate_limit.as_deref().map(parse_json).transpose()?,
                debounce_ms: r.debounce_ms,
                child_jobs: parse_json(&r.child_jobs)?,
                http_allow: match r.http_allow.as_deref() {
                    None | Some("") => Vec::new(),
                    Some(json) => parse_json(json)?,
                },
                enabled: r.enabled,
                no_executor_timeout_ms: r.no_executor_timeout_ms,
                delivery: match r.delivery.as_deref() {
                    None | Some("") => Delivery::Wasm,
                    Some(json) => parse_json(json)?,
                },
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
pub(super) const TASK_COLUMNS: &str = "id, job_id, kind, idem_key, payload, params, status, due_at, attempt, \
     max_attempts, backoff, priority, \
     (SELECT MAX(r.id) FROM runs r WHERE r.task_id = tasks.id) AS last_run_id, created_at, updated_at";

#[derive(FromRow)]
pub(super) struct TaskRow {
    pub(super) id: i64,
    pub(super) job_id: i64,
    pub(super) kind: String,
    pub(super) idem_key: Option<String>,
    pub(super) payload: Option<String>,
    pub(super) params: Option<String>,
    pub(super) status: String,
    pub(super) due_at: i64,
    pub(super) attempt: i32,
    pub(super) max_attempts: Option<i32>,
    pub(super) backoff: Option<String>,
    pub(super) priority: i32,
    pub(super) last_run_id: Option<i64>,
    pub(super) created_at: i64,
    pub(super) updated_at: i64,
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

/// A recurring job the scan plans fires for.
#[derive(FromRow)]
pub(super) struct RecurringRow {
    pub(super) id: i64,
    pub(super) schedule: String,
    pub(super) misfire: String,
    pub(super) next_fire_at: Option<i64>,
    pub(super) generation: i64,
}

#[derive(FromRow)]
pub(super) struct DueRow {
    pub(super) id: i64,
    pub(super) job_id: i64,
    pub(super) kind: String,
    pub(super) idem_key: Option<String>,
    pub(super) due_at: i64,
    pub(super) attempt: i32,
    pub(super) priority: i32,
    pub(super) payload: Option<String>,
    pub(super) params: Option<String>,
    pub(super) traceparent: Option<String>,
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
            traceparent: r.traceparent,
            key: r.idem_key,
        })
    }
}

pub(super) const RUN_COLUMNS: &str = "id, job_id, task_id, attempt, shard_index, shard_total, executor, status, \
     scheduled_at, dispatched_at, started_at, finished_at, exit_code, message";

#[derive(FromRow)]
pub(super) struct RunRow {
    pub(super) id: i64,
    pub(super) job_id: i64,
    pub(super) task_id: i64,
    pub(super) attempt: i32,
    pub(super) shard_index: i32,
    pub(super) shard_total: i32,
    pub(super) executor: Option<String>,
    pub(super) status: String,
    pub(super) scheduled_at: i64,
    pub(super) dispatched_at: Option<i64>,
    pub(super) started_at: Option<i64>,
    pub(super) finished_at: Option<i64>,
    pub(super) exit_code: Option<i32>,
    pub(super) message: Option<String>,
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
pub(super) struct ExecutorRow {
    pub(super) app: String,
    pub(super) address: String,
    pub(super) protocol: String,
    pub(super) capacity: i32,
    pub(super) running: i32,
    pub(super) registered_at: i64,
    pub(super) last_heartbeat_at: i64,
}

impl From<ExecutorRow> for Executor {
    fn from(r: ExecutorRow) -> Self {
        Executor {
            app: r.app,
            address: r.address,
            // Written by this code only; an unknown one is read as Rota's own.
            protocol: r.protocol.parse().unwrap_or(ExecutorProtocol::Rota),
            capacity: r.capacity,
            running: r.running,
            registered_at: r.registered_at,
            last_heartbeat_at: r.last_heartbeat_at,
        }
    }
}

#[derive(FromRow)]
pub(super) struct PluginRow {
    pub(super) id: i64,
    pub(super) name: String,
    pub(super) version: i32,
    pub(super) sha256: String,
    pub(super) size: i64,
    pub(super) created_at: i64,
    pub(super) kind: String,
    pub(super) world: Option<String>,
    pub(super) imports: Option<String>,
}

/// The columns a [`PluginRow`] is read from.
pub(super) const PLUGIN_COLUMNS: &str =
    "id, name, version, sha256, size, created_at, kind, world, imports";

impl From<PluginRow> for Plugin {
    fn from(r: PluginRow) -> Self {
        Plugin {
            id: r.id,
            name: r.name,
            version: r.version,
            sha256: r.sha256,
            size: r.size,
            created_at: r.created_at,
            kind: r.kind,
            world: r.world,
            imports: r
                .imports
                .unwrap_or_default()
                .lines()
                .map(str::to_owned)
                .collect(),
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
    /// Due tasks it found over their job's concurrency bound and throttled, by job.
    pub throttled: Vec<(i64, u64)>,
    /// The earliest due time of a task of a job with a concurrency bound that the scan left
    /// unclaimed, being due after its bounded window: the next scan should come by then,
    /// less half that window (`pipeline::scan`).
    pub bounded_next: Option<Millis>,
    /// The jobs with a concurrency bound it decided for, each with whether tasks of it
    /// wait `throttled` for a slot or a bucket of it is at its bound (whose runs' ends are
    /// then awaited).
    pub slot_waits: Vec<(i64, bool)>,
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
    /// Workflow step tasks the batch created (the steps its endings made ready), due now.
    pub step_tasks: usize,
    /// Those of them created claimed by the batch's lease: for this node's wheel.
    pub claimed: Vec<DueTask>,
    /// Workflow instances the batch ended.
    pub instances: Vec<InstanceEnded>,
    /// Queued workflow instances those endings started (`overlap: queue`).
    pub instances_started: usize,
    /// For each step ending that started the steps after it: from its run's end to the
    /// commit that created their tasks, in ms.
    pub handoffs_ms: Vec<Millis>,
    /// The earliest next fire of the fixed-delay jobs whose fires the batch ended.
    pub fires_resumed: Option<Millis>,
    /// How far behind their schedules the recurring fires the batch ended ran, by job.
    pub drifts: Vec<(i64, Drift)>,
}

// ----- read models handed to callers ---------------------------------------------------------

/// How far behind its schedule a recurring job's last fires ran, as its page shows it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScheduleDrift {
    /// The fires looked at (the last ones that ended).
    pub fires: usize,
    /// The most and the last of their start − fire time, in ms, of those that started.
    pub most_ms: Option<Millis>,
    pub last_ms: Option<Millis>,
    /// Those that never started.
    pub skipped: usize,
}

/// One bucket of a bounded job, as its page shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct Bucket {
    /// The value of the job's key; `None`: the tasks without one (or the whole job).
    pub key: Option<String>,
    /// Tasks waiting for a slot.
    pub throttled: i64,
    /// Slots held (claimed, waiting, ready or running).
    pub holding: i64,
}

/// A console user, as the store reads it.
#[derive(Debug, Clone, FromRow)]
pub struct User {
    pub id: i64,
    pub name: String,
    pub password_hash: String,
    pub role: String,
    /// `*` or app names joined by commas (see [`crate::access::Apps`]).
    pub apps: String,
    pub created_at: Millis,
    /// Where it signs in: `local` (its password is here) or a directory (`ldap`).
    pub source: String,
    /// Its identity in that directory (its DN); `None` for a local user.
    pub subject: Option<String>,
    /// When the directory last said what its groups give (a directory user).
    pub checked_at: Option<Millis>,
    /// The groups the directory or provider named at its last sign-in, a JSON array of
    /// names (a directory user).
    pub sso_groups: Option<String>,
}

impl User {
    /// What this user may do.
    pub fn principal(&self) -> crate::access::Principal {
        crate::access::Principal::of_user(&self.name, &self.role, &self.apps)
    }
}

/// An API token as listed (never the token itself: only its hash is stored).
#[derive(Debug, Clone, FromRow)]
pub struct ApiToken {
    pub id: i64,
    pub user_id: i64,
    pub user_name: String,
    pub name: String,
    pub created_at: Millis,
    pub revoked_at: Option<Millis>,
}

/// One line of the audit log: who did what to which thing, when.
#[derive(Debug, Clone, FromRow)]
pub struct AuditEntry {
    pub id: i64,
    pub user_name: String,
    pub action: String,
    pub target: String,
    pub at: Millis,
}

/// The dashboard's numbers from the store.
#[derive(Debug, Clone, Default)]
pub struct Counts {
    pub jobs: i64,
    pub tasks_pending: i64,
    pub runs_by_status: Vec<(String, i64)>,
}

/// The user behind a live API token.
#[derive(Debug, Clone, PartialEq, Eq, FromRow)]
pub struct TokenUser {
    pub name: String,
    pub role: String,
    /// `*` or app names joined by commas (see [`crate::access::Apps`]).
    pub apps: String,
}

/// A scheduler node as its peers reach it.
#[derive(Debug, Clone, PartialEq, Eq, FromRow)]
pub struct NodeRef {
    pub id: i64,
    pub address: String,
}

/// A scheduler node as the node list shows it.
#[derive(Debug, Clone, PartialEq, Eq, FromRow)]
pub struct NodeRow {
    pub name: String,
    pub address: String,
    pub started_at: Millis,
    /// 0 once it stopped (a graceful stop or a take-over clears it).
    pub heartbeat_at: Millis,
    /// Its clock's offset from the database's (database minus node), as last measured.
    pub clock_offset_ms: Millis,
}

/// A job using a plugin.
#[derive(Debug, Clone, PartialEq, Eq, FromRow)]
pub struct PluginUser {
    pub plugin: String,
    pub job_id: i64,
    pub job_name: String,
}

/// A secret as listed: never its value.
#[derive(Debug, Clone, PartialEq, Eq, FromRow)]
pub struct SecretMeta {
    pub name: String,
    pub created_at: Millis,
    pub updated_at: Millis,
}

/// What a job's key-value state holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvUsage {
    pub keys: usize,
    pub bytes: usize,
}

/// Finished runs of one status in one time bucket.
#[derive(Debug, Clone, PartialEq, Eq, FromRow)]
pub struct RunStat {
    pub bucket: Millis,
    pub status: String,
    pub runs: i64,
}

/// `INSERT INTO runs … VALUES …` of `rows` as `dispatched`, for the caller's `ON …` tail.
pub(super) fn insert_dispatched<'r, DB: sqlx::Database>(
    rows: impl IntoIterator<Item = &'r Dispatched>,
) -> QueryBuilder<DB>
where
    i64: for<'t> sqlx::Encode<'t, DB> + sqlx::Type<DB>,
    i32: for<'t> sqlx::Encode<'t, DB> + sqlx::Type<DB>,
    for<'s> &'s str: sqlx::Encode<'s, DB> + sqlx::Type<DB>,
{
    let mut qb = QueryBuilder::<DB>::new(
        "INSERT INTO runs (id, job_id, task_id, attempt, shard_index, shard_total, executor, \
         status, scheduled_at, dispatched_at) ",
    );
    qb.push_values(rows, |mut b, r| {
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
    qb
}
