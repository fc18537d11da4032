//! The JSON the API answers with: the model's types rendered for users (times as RFC 3339
//! UTC with milliseconds, ids as integers, the API's task statuses).

use serde::Serialize;
use utoipa::ToSchema;

use super::openapi::TaskStatusName;
use crate::backoff::Backoff;
use crate::limits::RateLimit;
use crate::model::BlockName;
use crate::model::{Delivery, Executor, Job, Millis, Page, Plugin, Run, RunStatus, Task, TaskKind};
use crate::route::Route;
use crate::schedule::{Misfire, Schedule};

pub use crate::model::rfc3339;

pub fn rfc3339_opt(ms: Option<Millis>) -> Option<String> {
    ms.map(rfc3339)
}

pub use crate::usecase::tasks::parse_rfc3339;

/// A list page: `next` is the cursor (an id, as a string) to pass back as `after`. Its
/// schema is written in [`super::openapi`].
#[derive(Debug, Serialize)]
pub struct PageView<T> {
    pub items: Vec<T>,
    pub next: Option<String>,
}

/// The API's lists, named: `#[utoipa::path]` takes a generic body only through a derived
/// schema, which would repeat the item's schema inside each list.
pub type PluginPage = PageView<PluginView>;
pub type JobPage = PageView<JobView>;
pub type TaskPage = PageView<TaskView>;
pub type RunPage = PageView<RunView>;
pub type ExecutorPage = PageView<ExecutorView>;
pub type NodePage = PageView<NodeView>;

impl<T> PageView<T> {
    pub fn of<M>(page: Page<M>, view: impl Fn(M) -> T) -> Self {
        PageView {
            items: page.items.into_iter().map(view).collect(),
            next: page.next.map(|id| id.to_string()),
        }
    }

    pub fn all(items: Vec<T>) -> Self {
        PageView { items, next: None }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct PluginView {
    pub id: i64,
    pub name: String,
    pub version: i32,
    pub sha256: String,
    pub size: i64,
    #[schema(format = DateTime)]
    pub created_at: String,
    /// `module` (a WASI preview 1 command module) or `component`.
    pub kind: String,
    /// A component's world: `wasi:cli/command` or `rota:plugin/handler`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub world: Option<String>,
    /// A component's imports, by full name (`wasi:http/outgoing-handler@0.2.12`, …).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub imports: Vec<String>,
}

impl From<Plugin> for PluginView {
    fn from(p: Plugin) -> Self {
        PluginView {
            id: p.id,
            name: p.name,
            version: p.version,
            sha256: p.sha256,
            size: p.size,
            created_at: rfc3339(p.created_at),
            kind: p.kind,
            world: p.world,
            imports: p.imports,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct JobView {
    pub id: i64,
    pub name: String,
    pub app: String,
    /// `null` for a job whose delivery runs no plugin.
    pub plugin: Option<String>,
    pub schedule: Schedule,
    pub params: Option<String>,
    #[schema(value_type = Route)]
    pub route: &'static str,
    #[schema(value_type = BlockName)]
    pub block: &'static str,
    #[schema(value_type = Misfire)]
    pub misfire: &'static str,
    pub timeout_ms: i64,
    pub max_attempts: i32,
    pub backoff: Backoff,
    pub memory_mb: i32,
    /// `concurrency.limit` (kept for clients of the older spelling).
    pub max_concurrency: Option<i32>,
    /// At most `limit` runs at once, of the whole job or per value of `key`; `null`: no
    /// bound.
    pub concurrency: Option<ConcurrencyView>,
    /// At most `limit` run starts in any window of `per_ms`, of the whole job or per value
    /// of `key`; `null`: no limit.
    pub rate_limit: Option<RateLimit>,
    /// A create with the key of a pending task replaces it, its due time at most this
    /// long after the first such create; `null`: keys deduplicate.
    pub debounce_ms: Option<i64>,
    pub child_jobs: Vec<i64>,
    /// Where the plugin may send HTTP requests; empty: nowhere.
    pub http_allow: Vec<String>,
    pub enabled: bool,
    /// How long a fire waits for a live executor before it fails as an attempt.
    pub no_executor_timeout_ms: i64,
    /// Who receives its fires (`wasm`: its plugin on an executor; `pull`: consumers).
    pub delivery: Delivery,
    #[schema(format = DateTime)]
    pub next_fire_at: Option<String>,
    #[schema(format = DateTime)]
    pub created_at: String,
    #[schema(format = DateTime)]
    pub updated_at: String,
}

/// A job's concurrency bound (SPEC §11).
#[derive(Debug, Serialize, ToSchema)]
pub struct ConcurrencyView {
    /// The JSON Pointer into the payload whose value each bound is per; absent: the whole
    /// job.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    pub limit: i32,
}

impl From<Job> for JobView {
    fn from(j: Job) -> Self {
        let s = j.spec;
        let no_executor_timeout_ms = s.no_executor_timeout_ms();
        JobView {
            id: j.id,
            name: s.name,
            app: s.app,
            plugin: Some(s.plugin).filter(|p| !p.is_empty()),
            schedule: s.schedule,
            params: s.params,
            route: s.route.as_str(),
            block: s.block.as_str(),
            misfire: s.misfire.as_str(),
            timeout_ms: s.timeout_ms,
            max_attempts: s.max_attempts,
            backoff: s.backoff,
            memory_mb: s.memory_mb,
            max_concurrency: s.max_concurrency,
            concurrency: s.max_concurrency.map(|limit| ConcurrencyView {
                key: s.concurrency_key,
                limit,
            }),
            rate_limit: s.rate_limit,
            debounce_ms: s.debounce_ms,
            child_jobs: s.child_jobs,
            no_executor_timeout_ms,
            http_allow: s.http_allow,
            enabled: s.enabled,
            delivery: s.delivery,
            next_fire_at: rfc3339_opt(j.next_fire_at),
            created_at: rfc3339(j.created_at),
            updated_at: rfc3339(j.updated_at),
        }
    }
}

pub use crate::model::task_status;

/// The API's task statuses, in the order the docs list them.
pub const TASK_STATUSES: [&str; 7] = [
    "pending",
    "throttled",
    "running",
    "succeeded",
    "failed",
    "dead",
    "cancelled",
];

#[derive(Debug, Serialize, ToSchema)]
pub struct TaskView {
    pub id: i64,
    pub job: i64,
    #[schema(value_type = TaskKind)]
    pub kind: &'static str,
    #[schema(value_type = TaskStatusName)]
    pub status: &'static str,
    #[schema(format = DateTime)]
    pub due_at: String,
    pub attempts: i32,
    pub max_attempts: Option<i32>,
    pub key: Option<String>,
    pub priority: i32,
    pub payload: Option<String>,
    pub last_run_id: Option<i64>,
    #[schema(format = DateTime)]
    pub created_at: String,
    #[schema(format = DateTime)]
    pub updated_at: String,
}

impl From<Task> for TaskView {
    fn from(t: Task) -> Self {
        let (status, attempts) = task_status(t.status, t.attempt);
        TaskView {
            id: t.id,
            job: t.job_id,
            kind: t.kind.as_str(),
            status,
            due_at: rfc3339(t.due_at),
            attempts,
            max_attempts: t.max_attempts,
            key: t.key,
            priority: t.priority,
            payload: t.payload,
            last_run_id: t.last_run_id,
            created_at: rfc3339(t.created_at),
            updated_at: rfc3339(t.updated_at),
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct RunView {
    pub id: i64,
    pub job: i64,
    pub task: i64,
    pub attempt: i32,
    pub shard_index: i32,
    pub shard_total: i32,
    pub executor: Option<String>,
    #[schema(format = DateTime)]
    pub scheduled_at: String,
    #[schema(format = DateTime)]
    pub dispatched_at: Option<String>,
    #[schema(format = DateTime)]
    pub started_at: Option<String>,
    #[schema(format = DateTime)]
    pub finished_at: Option<String>,
    #[schema(value_type = RunStatus)]
    pub status: &'static str,
    pub exit_code: Option<i32>,
    pub message: Option<String>,
}

impl From<Run> for RunView {
    fn from(r: Run) -> Self {
        RunView {
            id: r.id,
            job: r.job_id,
            task: r.task_id,
            attempt: r.attempt,
            shard_index: r.shard_index,
            shard_total: r.shard_total,
            executor: r.executor,
            scheduled_at: rfc3339(r.scheduled_at),
            dispatched_at: rfc3339_opt(r.dispatched_at),
            started_at: rfc3339_opt(r.started_at),
            finished_at: rfc3339_opt(r.finished_at),
            status: r.status.as_str(),
            exit_code: r.exit_code,
            message: r.message,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ExecutorView {
    pub app: String,
    pub address: String,
    /// `rota` (`rota executor`) or `xxl` (an executor built on `xxl-job-core`).
    #[schema(value_type = String, example = "rota")]
    pub protocol: &'static str,
    #[schema(format = DateTime)]
    pub registered_at: String,
    #[schema(format = DateTime)]
    pub last_heartbeat_at: String,
    pub running: i32,
    pub capacity: i32,
}

/// A scheduler node of the cluster.
#[derive(Debug, Serialize, ToSchema)]
pub struct NodeView {
    pub name: String,
    pub address: String,
    #[schema(format = DateTime)]
    pub started_at: String,
    /// Its last heartbeat; absent once it stopped or was taken over.
    #[schema(format = DateTime)]
    pub last_heartbeat_at: Option<String>,
    /// It heartbeat within `node_dead_after_ms`.
    pub live: bool,
    /// How far the database's clock is ahead of the node's (ms), as the node last
    /// measured it; its times are corrected by it.
    pub clock_offset_ms: i64,
    /// The offset is beyond the cluster's `max_clock_offset_ms`: fix the node's time sync.
    pub clock_off: bool,
}

impl From<crate::usecase::cluster::NodeState> for NodeView {
    fn from(n: crate::usecase::cluster::NodeState) -> Self {
        NodeView {
            name: n.name,
            address: n.address,
            started_at: rfc3339(n.started_at),
            last_heartbeat_at: rfc3339_opt(n.heartbeat_at),
            live: n.live,
            clock_offset_ms: n.clock_offset_ms,
            clock_off: n.clock_off,
        }
    }
}

impl From<Executor> for ExecutorView {
    fn from(e: Executor) -> Self {
        ExecutorView {
            app: e.app,
            address: e.address,
            protocol: e.protocol.as_str(),
            registered_at: rfc3339(e.registered_at),
            last_heartbeat_at: rfc3339(e.last_heartbeat_at),
            running: e.running,
            capacity: e.capacity,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::TaskStatus;

    #[test]
    fn times_are_utc_with_milliseconds() {
        assert_eq!(rfc3339(1_796_009_340_123), "2026-11-30T03:29:00.123Z");
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339_opt(None), None);
        assert_eq!(rfc3339(i64::MAX), i64::MAX.to_string());
        assert_eq!(
            parse_rfc3339("2026-11-30T11:29:00.123+08:00"),
            Some(1_796_009_340_123)
        );
        assert_eq!(parse_rfc3339("tomorrow"), None);
    }

    #[test]
    fn internal_task_states_map_to_api_states() {
        assert_eq!(task_status(TaskStatus::Pending, 1), ("pending", 0));
        assert_eq!(task_status(TaskStatus::Claimed, 1), ("pending", 0));
        // A retry that is due stays `failed` (will retry) wherever it waits: in a wheel,
        // for an executor, or for a consumer.
        assert_eq!(task_status(TaskStatus::Claimed, 3), ("failed", 2));
        assert_eq!(task_status(TaskStatus::Waiting, 2), ("failed", 1));
        assert_eq!(task_status(TaskStatus::Ready, 2), ("failed", 1));
        assert_eq!(task_status(TaskStatus::Ready, 1), ("pending", 0));
        assert_eq!(task_status(TaskStatus::Pending, 2), ("failed", 1));
        assert_eq!(task_status(TaskStatus::Running, 2), ("running", 2));
        assert_eq!(task_status(TaskStatus::Dead, 5), ("dead", 5));
        assert_eq!(task_status(TaskStatus::Succeeded, 1), ("succeeded", 1));
        assert_eq!(task_status(TaskStatus::Cancelled, 1), ("cancelled", 1));
    }
}
