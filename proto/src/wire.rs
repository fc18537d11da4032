//! The JSON bodies and paths of the scheduler ↔ executor protocol.
//!
//! Conventions (the same on every endpoint):
//!
//! - times are epoch milliseconds (`i64`), ids are 64-bit integers;
//! - enums are `snake_case` strings;
//! - `Option` fields are written as `null` and may be omitted when read;
//! - unknown fields are ignored when read, so a newer node can add a field without
//!   breaking an older one during a rolling upgrade;
//! - every request is signed (see [`crate::sign`](mod@crate::sign)); failures answer a 4xx or 5xx
//!   status with an [`ErrorBody`].
//!
//! `docs/protocol.md` walks through each endpoint with examples.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

// ---------------------------------------------------------------------------------------
// Paths
// ---------------------------------------------------------------------------------------

/// Executor → scheduler: `POST` a [`Registration`] → [`RegistrationAck`].
pub const PATH_REGISTER: &str = "/api/executor/v1/register";
/// Executor → scheduler: `POST` a [`Registration`] → [`RegistrationAck`], every
/// [`RegistrationAck::heartbeat_interval_ms`].
pub const PATH_HEARTBEAT: &str = "/api/executor/v1/heartbeat";
/// Executor → scheduler: `POST` a [`Deregistration`] on graceful shutdown → `204`.
pub const PATH_DEREGISTER: &str = "/api/executor/v1/deregister";
/// Executor → scheduler: `POST` a [`CallbackBatch`] → [`CallbackAck`].
pub const PATH_CALLBACK: &str = "/api/executor/v1/callback";
/// Executor → scheduler: `GET {PATH_PLUGIN_PREFIX}{sha256}` → the raw module bytes
/// (`application/wasm`). Build it with [`plugin_path`].
pub const PATH_PLUGIN_PREFIX: &str = "/api/executor/v1/plugins/";
/// A plugin's key-value state (the `rota` imports `kv_get`, `kv_set`, `kv_delete`):
/// [`KvRequest`] → [`KvReply`].
pub const PATH_KV: &str = "/api/executor/v1/kv";
/// A secret of the job's app (the `rota` import `secret_get`): [`SecretRequest`] →
/// [`SecretReply`].
pub const PATH_SECRET: &str = "/api/executor/v1/secret";

/// Scheduler → executor: `POST` a [`TriggerBatch`] → [`TriggerBatchAck`].
pub const PATH_TRIGGER: &str = "/trigger";
/// Scheduler → executor: `POST` a [`KillRequest`] → [`KillAck`].
pub const PATH_KILL: &str = "/kill";
/// Scheduler → executor: `POST` a [`LogRequest`] → [`LogPage`].
pub const PATH_LOG: &str = "/log";
/// Scheduler → executor: `POST` with an empty body → [`BeatAck`] (route `failover`).
pub const PATH_BEAT: &str = "/beat";
/// Scheduler → executor: `POST` an [`IdleBeatRequest`] → [`IdleBeatAck`] (route `busyover`).
pub const PATH_IDLE_BEAT: &str = "/idle-beat";
/// Scheduler → executor: `POST` a [`RunsKnownRequest`] → [`RunsKnownAck`].
pub const PATH_RUNS_KNOWN: &str = "/runs/known";
/// Scheduler → executor: `POST` a [`WarmRequest`] → `{}`, at once: the executor compiles
/// the plugins it lacks in the background.
pub const PATH_WARM: &str = "/plugins/warm";

/// Scheduler node → scheduler node: `POST` a [`PeerCancel`] → [`PeerCancelAck`]. A task
/// claimed by a node is cancelled there, where it sits in the wheel (`docs/cluster.md`).
pub const PATH_PEER_CANCEL: &str = "/api/node/v1/cancel";
/// Scheduler node → scheduler node: `POST` a [`PeerJobChanged`] → `{}`. The receiver
/// forgets its copy of the job and scans at once.
pub const PATH_PEER_JOB_CHANGED: &str = "/api/node/v1/job-changed";
/// Scheduler node → scheduler node: `POST` a [`PeerReady`] → `{}`. Tasks of these `pull`
/// jobs became ready on the sender's wheel: the receiver wakes as many of the pulls waiting
/// for them as there are tasks.
pub const PATH_PEER_READY: &str = "/api/node/v1/ready";

/// Where an executor downloads the plugin module with this SHA-256 (lower-case hex).
pub fn plugin_path(sha256: &str) -> String {
    format!("{PATH_PLUGIN_PREFIX}{sha256}")
}

/// Heartbeat interval a scheduler hands out unless configured otherwise.
pub const DEFAULT_HEARTBEAT_INTERVAL_MS: i64 = 30_000;
/// An executor without a heartbeat for this long is dead: its runs are `lost`.
pub const DEFAULT_EXECUTOR_DEAD_AFTER_MS: i64 = 90_000;

/// The body of every non-2xx answer, on both sides (the REST API's error shape).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: String,
}

// ---------------------------------------------------------------------------------------
// Executor → scheduler
// ---------------------------------------------------------------------------------------

/// An executor announcing itself: sent on start ([`PATH_REGISTER`]) and as each heartbeat
/// ([`PATH_HEARTBEAT`]), so a scheduler that lost its registry (or a node that never saw
/// the registration) learns everything from the next heartbeat.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Registration {
    /// The executor group (app) whose jobs it runs.
    pub app: String,
    /// Base URL the scheduler calls, e.g. `http://127.0.0.1:9999`. Its identity.
    pub address: String,
    /// Runs it executes at once.
    pub capacity: u32,
    /// Runs executing now.
    pub running: u32,
    /// Run ids it still has: queued, running, or finished with the final report not yet
    /// acknowledged. A scheduler marks `lost` the unfinished runs of this address that
    /// are missing here and were dispatched before its previous heartbeat (or before
    /// this registration), so a restarted executor (empty list) releases its old runs at
    /// once rather than after the dead-after timeout.
    pub active_runs: Vec<i64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RegistrationAck {
    /// When to send the next heartbeat.
    pub heartbeat_interval_ms: i64,
    /// The SHA-256 of the plugin each enabled job of the executor's app binds now (the
    /// newest version of its name): the executor fetches and compiles those it lacks in
    /// the background, so a job's first run does not wait for its plugin's compile.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub plugins: Vec<String>,
    /// The scheduler's clock when it answered (epoch ms, itself corrected by the
    /// database's): the executor measures its own offset from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduler_time_ms: Option<i64>,
    /// The scheduler's clock when the request arrived: with `scheduler_time_ms`, the time
    /// the scheduler spent answering, which the executor takes out of the round trip (as
    /// NTP does) — under load that is most of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduler_received_ms: Option<i64>,
    /// `scheduler_time_ms` in epoch µs: a millisecond reading leaves the executor's clock
    /// up to a millisecond off, which is every run's reported start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduler_time_us: Option<i64>,
    /// `scheduler_received_ms` in epoch µs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduler_received_us: Option<i64>,
}

/// Graceful shutdown: the scheduler stops dispatching to `address` at once.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Deregistration {
    pub app: String,
    pub address: String,
}

/// Run reports, batched. Any scheduler node accepts them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallbackBatch {
    pub reports: Vec<RunReport>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallbackAck {
    /// Reports applied or already known (repeats count: they changed nothing but are
    /// safe to forget). The executor drops the whole batch from its spool on a 2xx.
    pub accepted: u32,
}

/// The state of one run, as the executor last saw it.
///
/// Self-contained on purpose: it carries everything needed to create the run row, so a
/// run survives a scheduler crash between sending a trigger and recording the dispatch.
/// Applying the same report twice changes nothing; a report never moves a run out of a
/// final status.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunReport {
    pub run_id: i64,
    pub job_id: i64,
    pub task_id: i64,
    /// 1-based attempt of the task.
    pub attempt: i32,
    pub shard_index: i32,
    pub shard_total: i32,
    /// The reporting executor's address.
    pub executor: String,
    /// The attempt's due time (`ROTA_SCHEDULED_AT`).
    pub scheduled_at: i64,
    /// When the scheduler sent the trigger (its [`Trigger::dispatched_at`]): a report that
    /// beats the scheduler's own record of the dispatch writes the whole run at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dispatched_at: Option<i64>,
    /// When the plugin started; `None` if it never did (e.g. killed while queued).
    pub started_at: Option<i64>,
    /// When the run reached a final status.
    pub finished_at: Option<i64>,
    pub status: ReportStatus,
    /// The plugin's exit status, if it exited (not on a trap or a limit).
    pub exit_code: Option<i32>,
    /// Why it failed, timed out or was killed, in words for the console.
    pub message: Option<String>,
    /// What the plugin gave as its output (`rota.output_set`), at most 64 KiB: a workflow
    /// step's, passed to the steps after it. Absent from executors that predate it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
    /// The W3C `traceparent` of the executor's run span, when it exports traces: the
    /// scheduler's handling of the report continues it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
}

/// A run's status as an executor reports it. The scheduler-only statuses
/// (`dispatched`, `lost`) never come from an executor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReportStatus {
    Running,
    Succeeded,
    Failed,
    Timeout,
    Killed,
}

impl ReportStatus {
    /// Whether the run is over; a final status is never changed by a later report.
    pub fn is_final(self) -> bool {
        !matches!(self, Self::Running)
    }

    /// The name used on the wire, in the database and the console.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
            Self::Timeout => "timeout",
            Self::Killed => "killed",
        }
    }
}

impl fmt::Display for ReportStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

// ---------------------------------------------------------------------------------------
// Scheduler → executor
// ---------------------------------------------------------------------------------------

/// Every trigger due for one executor in one tick, in one request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TriggerBatch {
    pub triggers: Vec<Trigger>,
    /// When the sending scheduler node's lease to fire ends (ms since the Unix epoch). A
    /// trigger the executor would take later is answered [`TriggerOutcome::Expired`]: the
    /// sender stalled between checking its lease and sending, and another node may own
    /// the attempt by now (`docs/cluster.md`). Absent: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_after: Option<i64>,
}

/// One ack per trigger, in the same order as [`TriggerBatch::triggers`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TriggerBatchAck {
    pub acks: Vec<TriggerAck>,
    /// How many more triggers the executor could take right after this batch. The sender
    /// sizes its next request to it, so a burst larger than the executor's queue is held
    /// by the scheduler instead of being sent, parsed and refused. Absent: not said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub room: Option<u32>,
}

/// Start one run: one attempt of one task, on one shard.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Trigger {
    /// Assigned by the scheduler before sending.
    pub run_id: i64,
    pub job_id: i64,
    pub job_name: String,
    pub task_id: i64,
    /// 1-based attempt of the task.
    pub attempt: i32,
    /// The attempt's due time; the run never starts before it.
    pub scheduled_at: i64,
    /// When the scheduler sent it (epoch ms); echoed in the run's reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dispatched_at: Option<i64>,
    pub plugin: PluginRef,
    /// The plugin's stdin: the task's payload, or the job's params for a recurring or
    /// manual fire.
    pub input: String,
    /// The job's params: split like a shell would into argv after the plugin name, and
    /// `ROTA_PARAMS` verbatim.
    pub params: Option<String>,
    pub shard_index: i32,
    pub shard_total: i32,
    /// Wall-time limit; past it the run is stopped and reported `timeout`.
    pub timeout_ms: i64,
    /// Linear memory limit (capped by the executor's own limit).
    pub memory_mb: u32,
    pub block: BlockStrategy,
    /// `true` for recurring and manual fires: [`Trigger::block`] applies against the
    /// job's other exclusive runs on this executor. `false` for delayed tasks, which run
    /// concurrently.
    pub exclusive: bool,
    /// Where the plugin may send HTTP requests (the `rota` import `http_request`): origins
    /// (`https://api.example.com`, `http://10.0.0.5:8080`) or URL prefixes
    /// (`https://api.example.com/v1/orders`). Empty: no network at all.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub http_allow: Vec<String>,
    /// The W3C `traceparent` of the scheduler's dispatch span, when it exports traces: the
    /// run's span continues it, and the module sees it as `TRACEPARENT`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
    /// Something waits on this run's result (a workflow's next steps, a job's children):
    /// the batch the run's final report joins closes at most this many
    /// ms after the report is queued, instead of at the end of the executor's batching
    /// window. Absent: the window applies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub report_within_ms: Option<u32>,
}

/// Which module to run, by content hash; the name is for argv and logs.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PluginRef {
    pub name: String,
    /// Lower-case hex SHA-256 of the binary module; fetch it with [`plugin_path`].
    pub sha256: String,
}

/// What an executor does with an exclusive trigger while a run of the same job is still
/// running or queued on it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BlockStrategy {
    /// Queue it behind the earlier runs.
    #[default]
    Serial,
    /// Refuse it ([`TriggerOutcome::Busy`]).
    DiscardLater,
    /// Kill the earlier runs (reported `killed`) and start this one.
    CoverEarly,
}

impl BlockStrategy {
    pub const ALL: [Self; 3] = [Self::Serial, Self::DiscardLater, Self::CoverEarly];

    /// The name used on the wire, in the database and in the REST API.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Serial => "serial",
            Self::DiscardLater => "discard_later",
            Self::CoverEarly => "cover_early",
        }
    }
}

impl fmt::Display for BlockStrategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for BlockStrategy {
    type Err = UnknownBlockStrategy;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|b| b.as_str() == s)
            .ok_or_else(|| UnknownBlockStrategy(s.chars().take(64).collect()))
    }
}

/// A block strategy name that is not one of [`BlockStrategy::ALL`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown block strategy `{0}`; expected one of: serial, discard_later, cover_early")]
pub struct UnknownBlockStrategy(pub String);

/// The executor's answer to one trigger.
///
/// On the wire the outcome is flattened into the ack, so JSON stays flat:
/// `{"run_id":7,"outcome":"accepted"}`,
/// `{"run_id":8,"outcome":"rejected","reason":"…"}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TriggerAck {
    pub run_id: i64,
    #[serde(flatten)]
    pub outcome: TriggerOutcome,
}

/// Internally tagged by `outcome` (see [`TriggerAck`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum TriggerOutcome {
    /// Queued or started; its reports will follow.
    Accepted,
    /// The executor already has this (task, attempt, shard), under this or another run
    /// id; it was not started twice. The scheduler treats it as dispatched.
    Duplicate,
    /// Refused by the block strategy `discard_later`: a run of the same job is still
    /// running or queued here.
    Busy,
    /// The executor's run queue is full; route the trigger elsewhere or retry later.
    Full,
    /// Cannot run here at all (e.g. the plugin cannot be fetched or fails to compile);
    /// the reason is kept as the run's message.
    Rejected { reason: String },
    /// Not taken: it came after [`TriggerBatch::not_after`]. The sender must not count it
    /// as dispatched (it holds it until it knows whether it still owns it).
    Expired,
}

impl TriggerOutcome {
    /// Whether the executor has the run, so the scheduler must not send it elsewhere.
    pub fn is_taken(&self) -> bool {
        matches!(self, Self::Accepted | Self::Duplicate)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KillRequest {
    pub run_id: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KillAck {
    /// `true` if the run was running or queued here and is now stopped (its `killed`
    /// report follows through the callbacks); `false` if it was unknown or already over.
    pub killed: bool,
    pub message: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LogRequest {
    pub run_id: i64,
    /// 1-based line to start from.
    pub from_line: u64,
    /// At most this many lines are returned.
    pub max_lines: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LogPage {
    pub lines: Vec<String>,
    /// The line to ask for next.
    pub next_line: u64,
    /// The run is over and every line was returned.
    pub complete: bool,
}

/// The plugins an app's jobs bind now (SHA-256 each), sent to its executors when a job is
/// bound to a plugin or a new version of a bound plugin is uploaded, so that they compile
/// it before the job's first trigger ([`RegistrationAck::plugins`] repeats the list).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WarmRequest {
    pub plugins: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BeatAck {
    pub running: u32,
    pub capacity: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IdleBeatRequest {
    pub job_id: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IdleBeatAck {
    /// No run of this job is running or queued here.
    pub idle: bool,
}

/// Asked by a restarted scheduler: which of the attempts it claimed before the crash
/// does this executor already have? Those are never dispatched again.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunsKnownRequest {
    pub runs: Vec<TaskAttempt>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TaskAttempt {
    pub task_id: i64,
    pub attempt: i32,
}

/// Only the attempts the executor has (running, queued or finished and not yet
/// forgotten); one entry per shard.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunsKnownAck {
    pub known: Vec<KnownRun>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct KnownRun {
    pub task_id: i64,
    pub attempt: i32,
    pub run_id: i64,
    pub shard_index: i32,
}

/// Longest key of a plugin's key-value state (bytes of UTF-8).
pub const KV_KEY_MAX: usize = 256;
/// Largest value of a plugin's key-value state (bytes).
pub const KV_VALUE_MAX: usize = 64 * 1024;
/// Most keys one job's state may hold: a plugin cannot fill the database through
/// `kv_set` for its whole timeout.
pub const KV_KEYS_PER_JOB: usize = 10_000;
/// Most bytes (keys and values) one job's state may hold.
pub const KV_BYTES_PER_JOB: usize = 16 << 20;

/// Why a `set` does not fit in a job's state that holds `keys` keys and `bytes` bytes
/// besides the key being set; `None` when it fits.
pub fn kv_over_quota(keys: usize, bytes: usize, key: &str, value_len: usize) -> Option<String> {
    let after = bytes + key.len() + value_len;
    (keys + 1 > KV_KEYS_PER_JOB || after > KV_BYTES_PER_JOB).then(|| {
        format!(
            "the job's key-value state is full: it may hold {KV_KEYS_PER_JOB} keys and {} MiB, \
             and holds {keys} other keys and {bytes} bytes; delete keys first",
            KV_BYTES_PER_JOB >> 20
        )
    })
}

/// A plugin's key-value state, kept by the scheduler per job. `value` is base64 for `set`
/// and in the reply to `get`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KvRequest {
    /// The app the executor serves (the job must belong to it).
    pub app: String,
    pub job_id: i64,
    pub op: KvOp,
    pub key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KvOp {
    Get,
    Set,
    Delete,
}

/// `value` (base64) for a `get` of a key that exists; `None` otherwise.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KvReply {
    #[serde(default)]
    pub value: Option<String>,
}

/// A secret of the job's app, by name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SecretRequest {
    pub app: String,
    pub job_id: i64,
    pub name: String,
}

/// The secret's value; `None` if the app has no secret of that name.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
pub struct SecretReply {
    #[serde(default)]
    pub value: Option<String>,
}

impl std::fmt::Debug for SecretReply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecretReply")
            .field("value", &self.value.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

// ---------------------------------------------------------------------------------------
// Scheduler node → scheduler node (signed with the shared secret)
// ---------------------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PeerCancel {
    pub task_id: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PeerCancelAck {
    /// This call cancelled it (`false`: it was cancelled already).
    pub cancelled: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PeerJobChanged {
    pub job_id: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PeerReady {
    pub job_ids: Vec<i64>,
    /// How many tasks of each job (in `job_ids`' order) became ready: the receiver wakes as
    /// many of its waiting pulls. Absent (a node from before it was sent): all of them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tasks: Vec<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::de::DeserializeOwned;
    use serde_json::json;

    fn round_trip<T>(value: T)
    where
        T: Serialize + DeserializeOwned + PartialEq + fmt::Debug,
    {
        let text = serde_json::to_string(&value).unwrap();
        let back: T = serde_json::from_str(&text).unwrap();
        assert_eq!(back, value, "{text}");
    }

    fn trigger() -> Trigger {
        Trigger {
            run_id: 9001,
            job_id: 7,
            job_name: "close-order".into(),
            task_id: 42,
            attempt: 2,
            scheduled_at: 1_767_225_600_123,
            dispatched_at: None,
            plugin: PluginRef {
                name: "close_order".into(),
                sha256: "5f70bf18a086007016e948b04aed3b82103a36bea41755b6cddfaf10ace3c6ef".into(),
            },
            input: r#"{"order":42}"#.into(),
            params: Some("--dry-run".into()),
            shard_index: 0,
            shard_total: 1,
            timeout_ms: 300_000,
            memory_mb: 64,
            block: BlockStrategy::DiscardLater,
            exclusive: false,
            http_allow: Vec::new(),
            traceparent: Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".into()),
            report_within_ms: Some(10),
        }
    }

    fn report() -> RunReport {
        RunReport {
            run_id: 9001,
            job_id: 7,
            task_id: 42,
            attempt: 2,
            shard_index: 0,
            shard_total: 1,
            executor: "http://127.0.0.1:9999".into(),
            scheduled_at: 1_767_225_600_123,
            dispatched_at: None,
            started_at: Some(1_767_225_600_125),
            finished_at: Some(1_767_225_600_140),
            status: ReportStatus::Failed,
            exit_code: Some(3),
            message: Some("exited with status 3".into()),
            output: None,
            traceparent: None,
        }
    }

    #[test]
    fn every_type_round_trips() {
        round_trip(ErrorBody {
            error: "bad".into(),
        });
        round_trip(Registration {
            app: "default".into(),
            address: "http://127.0.0.1:9999".into(),
            capacity: 64,
            running: 3,
            active_runs: vec![1, 2, 3],
        });
        round_trip(RegistrationAck {
            heartbeat_interval_ms: DEFAULT_HEARTBEAT_INTERVAL_MS,
            plugins: vec!["ab".repeat(32)],
            scheduler_time_ms: Some(1_700_000_000_000),
            scheduler_received_ms: Some(1_699_999_999_990),
            scheduler_time_us: Some(1_700_000_000_000_250),
            scheduler_received_us: Some(1_699_999_999_990_750),
        });
        round_trip(Deregistration {
            app: "default".into(),
            address: "http://127.0.0.1:9999".into(),
        });
        let mut running = report();
        running.status = ReportStatus::Running;
        running.finished_at = None;
        running.exit_code = None;
        running.message = None;
        round_trip(CallbackBatch {
            reports: vec![report(), running],
        });
        round_trip(CallbackAck { accepted: 2 });
        for status in [
            ReportStatus::Running,
            ReportStatus::Succeeded,
            ReportStatus::Failed,
            ReportStatus::Timeout,
            ReportStatus::Killed,
        ] {
            round_trip(status);
            assert_eq!(
                serde_json::to_value(status).unwrap(),
                json!(status.as_str())
            );
        }
        let mut manual = trigger();
        manual.params = None;
        manual.exclusive = true;
        manual.block = BlockStrategy::CoverEarly;
        round_trip(TriggerBatch {
            triggers: vec![trigger(), manual.clone()],
            not_after: None,
        });
        round_trip(TriggerBatch {
            triggers: vec![manual],
            not_after: Some(1_767_225_603_000),
        });
        round_trip(TriggerBatchAck {
            acks: vec![
                TriggerAck {
                    run_id: 1,
                    outcome: TriggerOutcome::Accepted,
                },
                TriggerAck {
                    run_id: 2,
                    outcome: TriggerOutcome::Duplicate,
                },
                TriggerAck {
                    run_id: 3,
                    outcome: TriggerOutcome::Busy,
                },
                TriggerAck {
                    run_id: 4,
                    outcome: TriggerOutcome::Full,
                },
                TriggerAck {
                    run_id: 5,
                    outcome: TriggerOutcome::Rejected {
                        reason: "plugin not found".into(),
                    },
                },
            ],
            room: None,
        });
        round_trip(TriggerBatchAck {
            acks: Vec::new(),
            room: Some(7),
        });
        round_trip(KillRequest { run_id: 1 });
        round_trip(KillAck {
            killed: true,
            message: "killed".into(),
        });
        round_trip(LogRequest {
            run_id: 1,
            from_line: 1,
            max_lines: 1000,
        });
        round_trip(LogPage {
            lines: vec!["hello".into(), String::new()],
            next_line: 3,
            complete: false,
        });
        round_trip(BeatAck {
            running: 1,
            capacity: 64,
        });
        round_trip(IdleBeatRequest { job_id: 7 });
        round_trip(IdleBeatAck { idle: true });
        round_trip(RunsKnownRequest {
            runs: vec![TaskAttempt {
                task_id: 42,
                attempt: 2,
            }],
        });
        round_trip(RunsKnownAck {
            known: vec![KnownRun {
                task_id: 42,
                attempt: 2,
                run_id: 9001,
                shard_index: 0,
            }],
        });
    }

    #[test]
    fn trigger_wire_shape_is_pinned() {
        let golden = json!({
            "run_id": 9001,
            "job_id": 7,
            "job_name": "close-order",
            "task_id": 42,
            "attempt": 2,
            "scheduled_at": 1_767_225_600_123_i64,
            "plugin": {
                "name": "close_order",
                "sha256": "5f70bf18a086007016e948b04aed3b82103a36bea41755b6cddfaf10ace3c6ef"
            },
            "input": "{\"order\":42}",
            "params": "--dry-run",
            "shard_index": 0,
            "shard_total": 1,
            "timeout_ms": 300_000,
            "memory_mb": 64,
            "block": "discard_later",
            "exclusive": false,
            "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "report_within_ms": 10
        });
        assert_eq!(serde_json::to_value(trigger()).unwrap(), golden);
        assert_eq!(
            serde_json::from_value::<Trigger>(golden.clone()).unwrap(),
            trigger()
        );
        // From a node that predates the field: nothing is awaited.
        let mut older = golden;
        older.as_object_mut().unwrap().remove("report_within_ms");
        let read = serde_json::from_value::<Trigger>(older).unwrap();
        assert_eq!(read.report_within_ms, None);
    }

    #[test]
    fn run_report_wire_shape_is_pinned() {
        let golden = json!({
            "run_id": 9001,
            "job_id": 7,
            "task_id": 42,
            "attempt": 2,
            "shard_index": 0,
            "shard_total": 1,
            "executor": "http://127.0.0.1:9999",
            "scheduled_at": 1_767_225_600_123_i64,
            "started_at": 1_767_225_600_125_i64,
            "finished_at": 1_767_225_600_140_i64,
            "status": "failed",
            "exit_code": 3,
            "message": "exited with status 3"
        });
        assert_eq!(serde_json::to_value(report()).unwrap(), golden);
        assert_eq!(
            serde_json::from_value::<RunReport>(golden).unwrap(),
            report()
        );
    }

    #[test]
    fn trigger_ack_is_flat() {
        let acks = [
            (
                TriggerOutcome::Accepted,
                json!({"run_id": 1, "outcome": "accepted"}),
            ),
            (
                TriggerOutcome::Duplicate,
                json!({"run_id": 1, "outcome": "duplicate"}),
            ),
            (
                TriggerOutcome::Busy,
                json!({"run_id": 1, "outcome": "busy"}),
            ),
            (
                TriggerOutcome::Full,
                json!({"run_id": 1, "outcome": "full"}),
            ),
            (
                TriggerOutcome::Rejected {
                    reason: "no such plugin".into(),
                },
                json!({"run_id": 1, "outcome": "rejected", "reason": "no such plugin"}),
            ),
        ];
        for (outcome, golden) in acks {
            let ack = TriggerAck { run_id: 1, outcome };
            assert_eq!(serde_json::to_value(&ack).unwrap(), golden);
            assert_eq!(serde_json::from_value::<TriggerAck>(golden).unwrap(), ack);
        }
        assert!(TriggerOutcome::Duplicate.is_taken());
        assert!(!TriggerOutcome::Full.is_taken());
    }

    #[test]
    fn optional_and_unknown_fields_are_tolerated() {
        let mut value = serde_json::to_value(report()).unwrap();
        let object = value.as_object_mut().unwrap();
        for field in ["started_at", "finished_at", "exit_code", "message"] {
            object.remove(field);
        }
        object.insert("added_in_a_later_version".into(), json!(true));
        let read: RunReport = serde_json::from_value(value).unwrap();
        assert_eq!(read.started_at, None);
        assert_eq!(read.message, None);
    }

    #[test]
    fn block_strategy_names() {
        assert_eq!(BlockStrategy::default(), BlockStrategy::Serial);
        for block in BlockStrategy::ALL {
            assert_eq!(block.as_str().parse::<BlockStrategy>(), Ok(block));
            assert_eq!(serde_json::to_value(block).unwrap(), json!(block.as_str()));
        }
        let err = "serial_execution".parse::<BlockStrategy>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown block strategy `serial_execution`; expected one of: serial, discard_later, cover_early"
        );
    }

    #[test]
    fn report_status_finality() {
        assert!(!ReportStatus::Running.is_final());
        for status in [
            ReportStatus::Succeeded,
            ReportStatus::Failed,
            ReportStatus::Timeout,
            ReportStatus::Killed,
        ] {
            assert!(status.is_final(), "{status}");
        }
    }

    #[test]
    fn plugin_paths() {
        assert_eq!(plugin_path("ab12"), "/api/executor/v1/plugins/ab12");
        for path in [
            PATH_REGISTER,
            PATH_HEARTBEAT,
            PATH_DEREGISTER,
            PATH_CALLBACK,
        ] {
            assert!(path.starts_with("/api/executor/v1/"));
        }
    }

    #[test]
    fn a_ready_notice_carries_its_counts_and_one_without_them_still_reads() {
        round_trip(PeerReady {
            job_ids: vec![7, 9],
            tasks: vec![1, 40],
        });
        // From a node that sends no counts (its receiver wakes every waiting pull).
        let old: PeerReady = serde_json::from_value(json!({"job_ids": [7]})).unwrap();
        assert_eq!(old.tasks, Vec::<u64>::new());
        assert_eq!(
            serde_json::to_value(&old).unwrap(),
            json!({"job_ids": [7]}),
            "no counts, none sent"
        );
    }
}
