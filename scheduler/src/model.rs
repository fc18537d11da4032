//! The domain's nouns as the scheduler holds them: apps, executors, plugins, jobs, tasks and
//! runs. The store reads and writes these; the API turns them into JSON; the pipeline moves
//! [`DueTask`]s from the scan through the wheel to dispatch.
//!
//! Times are epoch milliseconds ([`Millis`]) everywhere inside Rota; only the API renders them
//! as RFC 3339 strings.

use rota_proto::BlockStrategy;
use serde::{Deserialize, Serialize};

use crate::names::named_enum;

use crate::backoff::Backoff;
use crate::route::Route;
use crate::schedule::{Misfire, Schedule};

/// [`BlockStrategy`] in the OpenAPI document (its schema is `api::openapi`'s), since
/// `rota-proto` does not depend on utoipa.
pub enum BlockName {}

/// Epoch milliseconds.
pub type Millis = i64;

/// Where [`now_ms`] counts from: the database's time, in µs, at the zero of this process's
/// monotonic clock. Each heartbeat measures it again (`pipeline::lease`): on MySQL against
/// the database server's clock, NTP-style; on SQLite, whose clock is this machine's, against
/// the wall clock. Between measurements time runs on the monotonic clock, so a wall clock
/// stepped by seconds (NTP, an operator, a VM resumed) moves no due time, lease or
/// take-over before the next heartbeat sees it (SPEC §4 "Clocks"). `i64::MIN` until the
/// first measurement: the wall clock. One per process: a process is one node (or nodes of
/// one database, in tests).
static TIME_BASE_US: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(i64::MIN);

/// The zero of [`monotonic_us`].
static MONOTONIC_ZERO: std::sync::LazyLock<std::time::Instant> =
    std::sync::LazyLock::new(std::time::Instant::now);

/// Now, epoch milliseconds, in the database's time.
pub fn now_ms() -> Millis {
    now_us().div_euclid(1000)
}

/// Now, epoch microseconds, in the database's time (the wheel sleeps to the microsecond).
pub fn now_us() -> i64 {
    match TIME_BASE_US.load(std::sync::atomic::Ordering::Relaxed) {
        i64::MIN => wall_us(),
        base => base.saturating_add(monotonic_us()),
    }
}

/// This machine's wall clock, epoch milliseconds, uncorrected (signatures use it).
pub fn wall_ms() -> Millis {
    wall_us().div_euclid(1000)
}

pub(crate) fn wall_us() -> i64 {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(since.as_micros()).unwrap_or(i64::MAX)
}

/// This process's monotonic clock, µs since its first reading.
pub(crate) fn monotonic_us() -> i64 {
    i64::try_from(MONOTONIC_ZERO.elapsed().as_micros()).unwrap_or(i64::MAX)
}

/// How far the database's clock (as this node keeps it) is ahead of this machine's wall
/// clock, ms: what the metric, `/readyz`, the node list and the `clock_skew` alarm show.
pub fn clock_offset_ms() -> Millis {
    // Rounded, not floored: a base 300 µs behind is an offset of 0 ms, not −1.
    (now_us() - wall_us() + 500).div_euclid(1000)
}

/// The time base [`now_us`] adds to the monotonic clock; `None` before the first
/// measurement.
pub(crate) fn time_base_us() -> Option<i64> {
    Some(TIME_BASE_US.load(std::sync::atomic::Ordering::Relaxed)).filter(|b| *b != i64::MIN)
}

/// Sets the time base (a heartbeat's measurement).
pub(crate) fn set_time_base_us(base: i64) {
    TIME_BASE_US.store(base, std::sync::atomic::Ordering::Relaxed);
}

named_enum! {
    what = "task kind";
    /// Where a task came from.
    pub enum TaskKind {
        Delayed => "delayed",
        Manual => "manual",
        Cron => "cron",
        Child => "child",
        /// A workflow step's (or an element of a mapped step's).
        Step => "step",
    }
}

named_enum! {
    what = "task status";
    /// A task's state in the database. `Claimed` is internal (a node holds it in its wheel) and
    /// shows as `pending` in the API, and so do `Waiting` (it came due when no executor of
    /// its app was live, and waits for one) and `Ready` (a `pull` job's task that came due
    /// and waits for a consumer); such a task with `attempt > 1` waits for a retry and
    /// shows as `failed`. A `Running` task of a pull job is leased to a consumer.
    pub enum TaskStatus {
        Pending => "pending",
        /// Due, but over its job's concurrency bound: waits for a slot, spending no attempt.
        Throttled => "throttled",
        Claimed => "claimed",
        Waiting => "waiting",
        Ready => "ready",
        Running => "running",
        Succeeded => "succeeded",
        Dead => "dead",
        Cancelled => "cancelled",
    }
}

impl TaskStatus {
    /// True once the task will never run again.
    pub fn is_final(self) -> bool {
        matches!(self, Self::Succeeded | Self::Dead | Self::Cancelled)
    }

    /// Not started: what a cancel turns `cancelled` at once (the store's `unstarted!()`).
    pub fn is_unstarted(self) -> bool {
        matches!(
            self,
            Self::Pending | Self::Throttled | Self::Claimed | Self::Waiting | Self::Ready
        )
    }
}

/// A task's status as the API shows it, and how many attempts have started.
///
/// The database knows more states than users do: `claimed` (a node holds the task in its
/// wheel), `waiting` (for an executor) and `ready` (for a consumer) are still `pending` to
/// them, and such a task past its first attempt is waiting for a retry, which the API
/// calls `failed`.
pub fn task_status(status: TaskStatus, attempt: i32) -> (&'static str, i32) {
    match status {
        // Not started yet: a retry is due after a failure, else the first attempt.
        TaskStatus::Pending | TaskStatus::Claimed | TaskStatus::Waiting | TaskStatus::Ready
            if attempt > 1 =>
        {
            ("failed", attempt - 1)
        }
        TaskStatus::Pending | TaskStatus::Claimed | TaskStatus::Waiting | TaskStatus::Ready => {
            ("pending", attempt - 1)
        }
        // Waiting for a slot: no attempt spent on it.
        TaskStatus::Throttled => ("throttled", attempt - 1),
        other => (other.as_str(), attempt),
    }
}

/// Who receives a job's fires and tasks (SPEC §8).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(tag = "kind", rename_all = "snake_case", try_from = "DeliveryFields")]
pub enum Delivery {
    /// The job's plugin runs on an executor of its app.
    #[default]
    Wasm,
    /// Consumers pull them (`POST /api/v1/jobs/{job}/pull`) and ack each; no plugin.
    Pull,
    /// Each is POSTed to `url` by the scheduler (`pipeline/dispatch/webhook.rs`); `url`
    /// must be on the job's `http_allow` list; no plugin.
    Http {
        url: String,
        /// How long one delivery may take (1 to 300,000 ms; the job's `timeout_ms` if not
        /// given).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        timeout_ms: Option<i64>,
        /// A secret of the job's app: each delivery is signed with it (`x-rota-signature`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signing_secret: Option<String>,
    },
    /// Each fire runs `handler` (an `@XxlJob` name) on an XXL-JOB executor of the job's app
    /// (one built on `xxl-job-core`, registered with this node's XXL admin API; `xxl/`):
    /// the node calls it as xxl-job-admin does and its callback ends the run. No plugin.
    Xxl {
        #[schema(min_length = 1, max_length = 255, pattern = r"\S")]
        handler: String,
    },
}

impl Delivery {
    /// Every kind's name, as `kind` spells it.
    pub const KINDS: [&'static str; 4] = ["wasm", "pull", "http", "xxl"];
    /// The kinds that run no plugin: a job of one of them names none.
    pub const PLUGINLESS: [&'static str; 3] = ["pull", "http", "xxl"];
}

/// The longest XXL-JOB handler name (xxl-job-admin's `executor_handler` column).
pub const MAX_XXL_HANDLER: usize = 255;

/// A delivery as sent: every field of every kind, so that one that does not belong to the
/// kind is named in the error (serde's tagged enums let extra fields of unit variants by).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DeliveryFields {
    kind: String,
    url: Option<String>,
    timeout_ms: Option<i64>,
    signing_secret: Option<String>,
    handler: Option<String>,
}

impl TryFrom<DeliveryFields> for Delivery {
    type Error = String;

    fn try_from(f: DeliveryFields) -> Result<Self, String> {
        // Each field and the kind it belongs to: one given to another kind is named.
        let given = [
            ("url", "http", f.url.is_some()),
            ("timeout_ms", "http", f.timeout_ms.is_some()),
            ("signing_secret", "http", f.signing_secret.is_some()),
            ("handler", "xxl", f.handler.is_some()),
        ];
        if let Some((field, owner, _)) = given
            .iter()
            .find(|(_, owner, given)| *given && *owner != f.kind)
            && Delivery::KINDS.contains(&f.kind.as_str())
        {
            return Err(format!(
                "delivery: `{field}` belongs to `{owner}` delivery, not `{}`",
                f.kind
            ));
        }
        match f.kind.as_str() {
            "wasm" => Ok(Delivery::Wasm),
            "pull" => Ok(Delivery::Pull),
            "http" => Ok(Delivery::Http {
                url: f.url.ok_or("delivery: `http` delivery needs a `url`")?,
                timeout_ms: f.timeout_ms,
                signing_secret: f.signing_secret,
            }),
            "xxl" => {
                let handler = f
                    .handler
                    .ok_or("delivery: `xxl` delivery needs a `handler` (the @XxlJob name)")?;
                let trimmed = handler.trim();
                if trimmed.is_empty() || trimmed.chars().count() > MAX_XXL_HANDLER {
                    return Err(format!(
                        "delivery: `handler` must be 1 to {MAX_XXL_HANDLER} characters"
                    ));
                }
                Ok(Delivery::Xxl {
                    handler: trimmed.to_owned(),
                })
            }
            other => Err(format!(
                "delivery: `{other}` is not a kind of delivery; expected one of: {}",
                Delivery::KINDS.join(", ")
            )),
        }
    }
}

impl Delivery {
    pub fn kind(&self) -> &'static str {
        match self {
            Delivery::Wasm => "wasm",
            Delivery::Pull => "pull",
            Delivery::Http { .. } => "http",
            Delivery::Xxl { .. } => "xxl",
        }
    }

    /// Does this delivery run a plugin?
    pub fn runs_plugin(&self) -> bool {
        *self == Delivery::Wasm
    }
}

named_enum! {
    what = "run status";
    /// A run's state.
    pub enum RunStatus {
        Dispatched => "dispatched",
        Running => "running",
        Succeeded => "succeeded",
        Failed => "failed",
        Timeout => "timeout",
        Killed => "killed",
        Lost => "lost",
    }
}

impl RunStatus {
    pub fn is_final(self) -> bool {
        !matches!(self, Self::Dispatched | Self::Running)
    }
}

impl From<rota_proto::ReportStatus> for RunStatus {
    fn from(s: rota_proto::ReportStatus) -> Self {
        use rota_proto::ReportStatus as R;
        match s {
            R::Running => Self::Running,
            R::Succeeded => Self::Succeeded,
            R::Failed => Self::Failed,
            R::Timeout => Self::Timeout,
            R::Killed => Self::Killed,
        }
    }
}

/// A group of executors that run the same jobs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct App {
    pub id: i64,
    pub name: String,
    pub created_at: Millis,
}

named_enum! {
    what = "executor protocol";
    /// How the scheduler talks to an executor.
    pub enum ExecutorProtocol {
        /// Rota's executor (`rota executor`): signed trigger batches, reports, heartbeats.
        Rota => "rota",
        /// An XXL-JOB executor (`xxl-job-core`): xxl-job-admin's calls and callbacks (`xxl/`).
        Xxl => "xxl",
    }
}

/// A registered executor node.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Executor {
    pub app: String,
    pub address: String,
    pub protocol: ExecutorProtocol,
    pub capacity: i32,
    pub running: i32,
    pub registered_at: Millis,
    pub last_heartbeat_at: Millis,
}

/// One uploaded version of a plugin (the module bytes are fetched separately).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Plugin {
    pub id: i64,
    pub name: String,
    pub version: i32,
    pub sha256: String,
    pub size: i64,
    pub created_at: Millis,
    /// `module` (WASI preview 1) or `component`.
    pub kind: String,
    /// A component's world: `wasi:cli/command` or `rota:plugin/handler`.
    pub world: Option<String>,
    /// A component's imports (full names); empty for a module.
    pub imports: Vec<String>,
}

/// A job's settings, as created or replaced through the API (already validated).
#[derive(Debug, Clone, PartialEq)]
pub struct JobSpec {
    pub name: String,
    pub app: String,
    /// The plugin's name: runs use its newest version.
    pub plugin: String,
    pub schedule: Schedule,
    pub params: Option<String>,
    pub route: Route,
    pub block: BlockStrategy,
    pub misfire: Misfire,
    pub timeout_ms: i64,
    pub max_attempts: i32,
    pub backoff: Backoff,
    pub memory_mb: i32,
    /// Runs at once across every node and executor (SPEC §11 `concurrency.limit`): of the
    /// whole job, or per value of `concurrency_key`.
    pub max_concurrency: Option<i32>,
    /// A JSON Pointer (RFC 6901) into the tasks' payloads: `max_concurrency` bounds the
    /// runs per value found there (a missing value is its own bucket). Only with
    /// `max_concurrency`.
    pub concurrency_key: Option<String>,
    /// At most so many run starts in any window, of the whole job or per key (SPEC §11).
    pub rate_limit: Option<crate::limits::RateLimit>,
    /// A task created with the key of a pending task of the job replaces that task's
    /// payload and due time instead, its due time at most this long after the first such
    /// create (SPEC §11).
    pub debounce_ms: Option<i64>,
    pub child_jobs: Vec<i64>,
    /// Where the plugin may send HTTP requests (origins or URL prefixes); empty: nowhere.
    pub http_allow: Vec<String>,
    pub enabled: bool,
    /// How long a fire may wait for a live executor of the app before it is a failed
    /// attempt; `None`: [`DEFAULT_NO_EXECUTOR_TIMEOUT_MS`].
    pub no_executor_timeout_ms: Option<i64>,
    /// Who receives its fires; a `pull` or `http` job has no plugin (`plugin` is empty).
    pub delivery: Delivery,
}

/// How long a fire waits for an executor of its app by default (SPEC §4, "No executor yet").
pub const DEFAULT_NO_EXECUTOR_TIMEOUT_MS: i64 = 600_000;

impl JobSpec {
    pub fn no_executor_timeout_ms(&self) -> i64 {
        self.no_executor_timeout_ms
            .unwrap_or(DEFAULT_NO_EXECUTOR_TIMEOUT_MS)
    }

    /// Would changing this job to `new` change when it fires (so the fires already planned
    /// under this one are void)?
    pub fn replans(&self, new: &JobSpec) -> bool {
        self.schedule != new.schedule || self.enabled != new.enabled
    }
}

/// A stored job.
#[derive(Debug, Clone, PartialEq)]
pub struct Job {
    pub id: i64,
    pub spec: JobSpec,
    /// The next recurring fire time; `None` for schedule `none` or a disabled job.
    pub next_fire_at: Option<Millis>,
    /// Bumped by every change that re-plans the schedule (see [`JobSpec::replans`]):
    /// recurring fires planned under an older generation are void.
    pub generation: i64,
    pub created_at: Millis,
    pub updated_at: Millis,
}

/// A task to create.
#[derive(Debug, Clone, PartialEq)]
pub struct NewTask {
    pub job_id: i64,
    pub kind: TaskKind,
    pub key: Option<String>,
    pub payload: Option<String>,
    pub params: Option<String>,
    pub due_at: Millis,
    pub max_attempts: Option<i32>,
    pub backoff: Option<Backoff>,
    pub priority: i32,
    /// The W3C `traceparent` of the span that created it, when the node exports traces:
    /// its fires and runs continue that trace (`rota_net::trace`).
    pub traceparent: Option<String>,
    /// The bucket its job's limits count it in (SPEC §11), when the creating node knew the
    /// job's limits: stored with it, so a scan that claims it has nothing to write but its
    /// status. `None` for tasks of unlimited jobs and where it is not known at creation
    /// (the scan reads it from the payload and writes it when it claims or throttles).
    pub limit_key: Option<String>,
}

/// A stored task.
#[derive(Debug, Clone, PartialEq)]
pub struct Task {
    pub id: i64,
    pub job_id: i64,
    pub kind: TaskKind,
    pub key: Option<String>,
    pub payload: Option<String>,
    pub params: Option<String>,
    pub status: TaskStatus,
    pub due_at: Millis,
    pub attempt: i32,
    pub max_attempts: Option<i32>,
    pub backoff: Option<Backoff>,
    pub priority: i32,
    pub last_run_id: Option<i64>,
    pub created_at: Millis,
    pub updated_at: Millis,
}

/// A run: one attempt of a task on one executor (one per shard for sharding broadcast).
#[derive(Debug, Clone, PartialEq)]
pub struct Run {
    pub id: i64,
    pub job_id: i64,
    pub task_id: i64,
    pub attempt: i32,
    pub shard_index: i32,
    pub shard_total: i32,
    pub executor: Option<String>,
    pub status: RunStatus,
    pub scheduled_at: Millis,
    pub dispatched_at: Option<Millis>,
    pub started_at: Option<Millis>,
    pub finished_at: Option<Millis>,
    pub exit_code: Option<i32>,
    pub message: Option<String>,
}

/// A task a node has claimed for its wheel: everything dispatch needs except the job itself.
#[derive(Debug, Clone, PartialEq)]
pub struct DueTask {
    pub task_id: i64,
    pub job_id: i64,
    pub kind: TaskKind,
    pub due_at: Millis,
    pub attempt: i32,
    pub priority: i32,
    pub payload: Option<String>,
    pub params: Option<String>,
    /// The epoch of this node's lease the task is held under (its claim's, see
    /// [`DueTask::held_under`]). A node that was taken over rejoins under a new epoch;
    /// whatever it still carries of the old one is the taker's and is dropped, never sent.
    pub epoch: i64,
    /// For a recurring fire: the job generation it was planned under ([`Job::generation`]); a
    /// fire of an older generation is void and dropped at dispatch.
    pub generation: i64,
    /// Since when this fire has found no executor of its app able to take it (all of them
    /// unreachable); it fails as an attempt once that lasts the job's
    /// `no_executor_timeout_ms`.
    pub waiting_since: Option<Millis>,
    /// The trace its creation began ([`NewTask::traceparent`]); `None` for a schedule's
    /// fires, whose dispatch starts a trace of its own.
    pub traceparent: Option<String>,
    /// Its key ([`NewTask::key`]; a recurring fire's names its fire time), which a pull
    /// consumer it is leased to is given.
    pub key: Option<String>,
}

impl DueTask {
    /// What the fire hands its receiver (a plugin's stdin, a webhook's body, …): a delayed
    /// task's payload or a workflow step's (its input and its predecessors' outputs), else
    /// the fire's params or the job's (`job_params`).
    pub fn input(&self, job_params: Option<&str>) -> String {
        match self.kind {
            TaskKind::Delayed | TaskKind::Step => self.payload.clone(),
            _ => self
                .params
                .clone()
                .or_else(|| job_params.map(str::to_owned)),
        }
        .unwrap_or_default()
    }
}

/// The key of a recurring fire time: one task per job, generation and fire time.
pub fn cron_key(generation: i64, fire_at: Millis) -> String {
    format!("cron:{generation}:{fire_at}")
}

/// The generation of a recurring fire from its key (keys from before generations,
/// `cron:<ms>`, are generation 0).
pub fn cron_key_gen(key: &str) -> i64 {
    key.strip_prefix("cron:")
        .and_then(|rest| rest.split_once(':'))
        .and_then(|(generation, _)| generation.parse().ok())
        .unwrap_or(0)
}

impl DueTask {
    /// A first attempt of delayed task `task_id` of job `job_id`, due at `due_at`, held
    /// under epoch 1, with nothing else set: what the wheel's and dispatch's unit tests fire.
    #[cfg(test)]
    pub(crate) fn for_test(task_id: i64, job_id: i64, due_at: Millis) -> DueTask {
        DueTask {
            task_id,
            job_id,
            kind: TaskKind::Delayed,
            due_at,
            attempt: 1,
            priority: 0,
            payload: None,
            params: None,
            epoch: 1,
            generation: 0,
            waiting_since: None,
            traceparent: None,
            key: None,
        }
    }

    /// Stamps claims with the lease they were claimed (or adopted) under.
    pub fn held_under(tasks: Vec<DueTask>, lease: NodeLease) -> Vec<DueTask> {
        tasks
            .into_iter()
            .map(|t| DueTask {
                epoch: lease.epoch,
                ..t
            })
            .collect()
    }
}

/// A scheduler node's identity and the epoch of its current incarnation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeLease {
    pub node_id: i64,
    pub epoch: i64,
}

/// A run the scheduler has sent to an executor (recorded after the send, in batches).
#[derive(Debug, Clone, PartialEq)]
pub struct Dispatched {
    pub run_id: i64,
    pub job_id: i64,
    pub task_id: i64,
    pub attempt: i32,
    pub shard_index: i32,
    pub shard_total: i32,
    pub executor: String,
    pub scheduled_at: Millis,
    pub dispatched_at: Millis,
}

/// The end (or start) of a run, from an executor's report or from the scheduler itself (a
/// dispatch that could not be delivered, an executor declared dead).
#[derive(Debug, Clone, PartialEq)]
pub struct RunUpdate {
    pub run_id: i64,
    pub job_id: i64,
    pub task_id: i64,
    pub attempt: i32,
    pub shard_index: i32,
    pub shard_total: i32,
    pub executor: Option<String>,
    pub scheduled_at: Millis,
    pub dispatched_at: Option<Millis>,
    pub started_at: Option<Millis>,
    pub finished_at: Option<Millis>,
    pub status: RunStatus,
    pub exit_code: Option<i32>,
    pub message: Option<String>,
    /// What the run gave as its output (a workflow step's, for the steps after it).
    pub output: Option<String>,
}

#[cfg(test)]
impl RunUpdate {
    /// Run `run_id` of task `task_id` (job 1, attempt 1, one shard) in `status`: a test's.
    pub(crate) fn sample(run_id: i64, task_id: i64, status: RunStatus) -> Self {
        Self {
            run_id,
            job_id: 1,
            task_id,
            attempt: 1,
            shard_index: 0,
            shard_total: 1,
            executor: None,
            scheduled_at: 0,
            dispatched_at: None,
            started_at: None,
            finished_at: None,
            status,
            exit_code: None,
            message: None,
            output: None,
        }
    }
}

impl RunUpdate {
    pub fn from_report(r: &rota_proto::RunReport) -> Self {
        Self {
            run_id: r.run_id,
            job_id: r.job_id,
            task_id: r.task_id,
            attempt: r.attempt,
            shard_index: r.shard_index,
            shard_total: r.shard_total,
            executor: Some(r.executor.clone()),
            scheduled_at: r.scheduled_at,
            dispatched_at: r.dispatched_at,
            started_at: r.started_at,
            finished_at: r.finished_at,
            status: r.status.into(),
            exit_code: r.exit_code,
            message: r.message.clone(),
            output: r.output.clone(),
        }
    }
}

/// What the retry policy needs to know about a task whose attempt just ended.
#[derive(Debug, Clone, PartialEq)]
pub struct AttemptEnded {
    pub task_id: i64,
    pub job_id: i64,
    pub attempt: i32,
    pub lost_count: i32,
    pub status: RunStatus,
    pub max_attempts: i32,
    pub backoff: Backoff,
    pub child_jobs: Vec<i64>,
}

/// The retry policy's verdict for a task after an attempt ended.
#[derive(Debug, Clone, PartialEq)]
pub enum TaskNext {
    Succeeded,
    Retry { due_at: Millis, lost: bool },
    Dead,
    Cancelled,
}

/// `2026-11-30T03:29:00.123Z`.
pub fn rfc3339(ms: Millis) -> String {
    match chrono::DateTime::from_timestamp_millis(ms) {
        Some(t) => t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        // Out of chrono's range (±262,000 years): never stored by Rota, but never a panic.
        None => ms.to_string(),
    }
}

/// An attempt that ended, with its verdict: what alarm rules watch at completion.
#[derive(Debug, Clone, PartialEq)]
pub struct EndedAttempt {
    pub task_id: i64,
    pub job_id: i64,
    pub attempt: i32,
    pub run_id: i64,
    pub status: RunStatus,
    pub next: TaskNext,
    pub message: Option<String>,
    /// For a recurring job's fire: how far behind its schedule it ran (SPEC §11 drift).
    pub drift: Option<Drift>,
}

/// How far a recurring job's fire fell behind its schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Drift {
    /// It started this many ms after its fire time.
    Late(Millis),
    /// It never started: its executor was still running the job (`discard_later`), or
    /// none took it.
    Skipped,
}

/// A page of a list, newest first, with the cursor of the next page.
#[derive(Debug, Clone, PartialEq)]
pub struct Page<T> {
    pub items: Vec<T>,
    pub next: Option<i64>,
}

/// A task state as the API names it: `pending` covers claimed tasks and first attempts,
/// `failed` is a pending retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskState {
    Pending,
    Failed,
    Is(TaskStatus),
}

/// Filters for task lists.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TaskFilter {
    pub job_id: Option<i64>,
    /// Only tasks of these apps' jobs (a scoped user's view); `None` for every app.
    pub apps: Option<Vec<String>>,
    pub state: Option<TaskState>,
    /// Only tasks due at or after this time (ms).
    pub due_from: Option<Millis>,
    /// Only tasks due before this time (ms).
    pub due_to: Option<Millis>,
    pub key: Option<String>,
    pub before_id: Option<i64>,
    pub limit: u32,
}

/// Filters for run lists.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunFilter {
    pub job_id: Option<i64>,
    /// Only runs of these apps' jobs (a scoped user's view); `None` for every app.
    pub apps: Option<Vec<String>>,
    pub task_id: Option<i64>,
    pub status: Option<RunStatus>,
    pub before_id: Option<i64>,
    pub limit: u32,
}

#[cfg(test)]
mod tests {
    use super::Delivery;

    #[test]
    fn every_kind_but_wasm_is_pluginless() {
        let pluginless: Vec<_> = Delivery::KINDS
            .into_iter()
            .filter(|k| *k != "wasm")
            .collect();
        assert_eq!(pluginless, Delivery::PLUGINLESS);
        for kind in Delivery::KINDS {
            let fields = match kind {
                "http" => serde_json::json!({"kind": kind, "url": "http://127.0.0.1/"}),
                "xxl" => serde_json::json!({"kind": kind, "handler": "demoJobHandler"}),
                _ => serde_json::json!({"kind": kind}),
            };
            let parsed: Delivery = serde_json::from_value(fields).expect(kind);
            assert_eq!(serde_json::to_value(&parsed).unwrap()["kind"], kind);
        }
        let unknown = serde_json::from_value::<Delivery>(serde_json::json!({"kind": "grpc"}));
        assert!(
            unknown
                .unwrap_err()
                .to_string()
                .contains("wasm, pull, http, xxl")
        );
    }
}
