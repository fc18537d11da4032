//! Tasks: creating them (one, or a batch all or nothing) with the checks every way of
//! making one goes through — the REST API and the console's "schedule a task" form — and
//! changing them (cancel, reschedule), each checked and audited here for both adapters.

use std::collections::HashMap;
use std::collections::hash_map::Entry;

use serde::Deserialize;
use tracing::Instrument;
use utoipa::ToSchema;

use super::fields::{NameOrId, nullable};
use super::jobs::{cached_job, find_job, job_filter, task_as};
use super::validate::{self, invalid};
use super::{Error, Result};
use crate::access::{Need, Principal};
use crate::backoff::Backoff;
use crate::config::Config;
use crate::model::{Millis, NewTask, Page, Task, TaskFilter, TaskKind, TaskStatus, task_status};
use crate::ports::Ports;
use crate::schedule::FIRE_HORIZON_MS;

/// Most tasks in one batch.
pub const MAX_BATCH: usize = 10_000;
pub const MAX_ATTEMPTS: i64 = 100;
pub const MAX_PRIORITY: i64 = 1000;

/// One task to create. Integers are read as `i64` so an out-of-range value is a 422 naming
/// its range rather than a serde overflow.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TaskFields {
    /// The job's name or id.
    pub job: NameOrId,
    /// The run's input (UTF-8).
    pub payload: Option<String>,
    /// Due this many milliseconds from now; not with `run_at`.
    pub delay_ms: Option<i64>,
    /// Due at this time (in the past: now); not with `delay_ms`.
    #[schema(format = DateTime)]
    pub run_at: Option<String>,
    /// Deduplicates: a second task of the job with this key is the first one.
    pub key: Option<String>,
    /// 1 to 100; the job's by default.
    pub max_attempts: Option<i64>,
    /// The job's by default.
    pub backoff: Option<Backoff>,
    /// −1000 to 1000, higher first; 0 by default.
    pub priority: Option<i64>,
}

impl TaskFields {
    /// A task of `job` due now, with every other field its default.
    pub fn for_job(job: NameOrId) -> Self {
        TaskFields {
            job,
            payload: None,
            delay_ms: None,
            run_at: None,
            key: None,
            max_attempts: None,
            backoff: None,
            priority: None,
        }
    }
}

/// Creates one task of a job `who` may change; the task, and whether it is new (`false`:
/// a task of the job already had this `key`, and it is that one — on a job with
/// `debounce_ms`, with this task's payload and due time when it was still pending).
pub async fn create(ports: &Ports, who: &Principal, fields: TaskFields) -> Result<(Task, bool)> {
    if !ports.config().traces {
        return create_in_trace(ports, who, fields, None).await;
    }
    // A span of its own inside the request's (`crate::api`), so that a trace shows the
    // task it made: the task's id and its job.
    let job = match &fields.job {
        NameOrId::Name(name) => name.clone(),
        NameOrId::Id(id) => id.to_string(),
    };
    let span = tracing::info_span!(
        "create task",
        otel.kind = "internal",
        rota.job = %job,
        rota.task.id = tracing::field::Empty,
    );
    // The task's fires and runs continue the trace from this span (`rota_net::trace`).
    let traceparent = rota_net::trace::traceparent(&span);
    let created = create_in_trace(ports, who, fields, traceparent)
        .instrument(span.clone())
        .await;
    if let Ok((task, _)) = &created {
        span.record("rota.task.id", task.id);
    }
    created
}

async fn create_in_trace(
    ports: &Ports,
    who: &Principal,
    fields: TaskFields,
    traceparent: Option<String>,
) -> Result<(Task, bool)> {
    // Delays count from the moment the request is accepted.
    let now = ports.clock().now_ms();
    let (job_id, debounce_ms) = job_to_change(ports, who, &fields.job).await?;
    let task = NewTask {
        traceparent,
        ..new_task(fields, job_id, now, ports.config())?
    };
    let (id, created) = *ports
        .store_tasks(std::slice::from_ref(&task), now)
        .await?
        .first()
        .ok_or_else(|| Error::Internal(anyhow::anyhow!("inserting a task returned no id")))?;
    let id = match debounce_ms {
        Some(ms) if !created => ports.debounce_task(id, &task, ms, now).await?,
        _ => id,
    };
    Ok((ports.store().get_task(id).await?, created))
}

/// Creates a batch of tasks, all or nothing: an invalid item fails the whole batch with its
/// index in the message; an existing key yields the existing task's id. The ids, in order.
pub async fn create_batch(
    ports: &Ports,
    who: &Principal,
    items: Vec<TaskFields>,
) -> Result<Vec<i64>> {
    let now = ports.clock().now_ms();
    if items.len() > MAX_BATCH {
        return Err(Error::PayloadTooLarge(format!(
            "tasks: a batch holds at most {MAX_BATCH} tasks (got {}); split it",
            items.len()
        )));
    }
    let mut jobs: HashMap<NameOrId, (i64, Option<Millis>)> = HashMap::new();
    let mut keys: HashMap<(i64, String), usize> = HashMap::new();
    let mut tasks = Vec::with_capacity(items.len());
    // The batch's tasks continue the request's trace, side by side.
    let traceparent = ports
        .config()
        .traces
        .then(|| rota_net::trace::traceparent(&tracing::Span::current()))
        .flatten();
    for (i, fields) in items.into_iter().enumerate() {
        let prefix = format!("tasks[{i}].");
        let (job_id, _) = match jobs.entry(fields.job.clone()) {
            Entry::Occupied(e) => *e.get(),
            Entry::Vacant(e) => *e.insert(
                job_to_change(ports, who, &fields.job)
                    .await
                    .map_err(|e| e.prefixed(&prefix))?,
            ),
        };
        let task = NewTask {
            traceparent: traceparent.clone(),
            ..new_task(fields, job_id, now, ports.config()).map_err(|e| e.prefixed(&prefix))?
        };
        if let Some(key) = &task.key
            && let Some(first) = keys.insert((job_id, key.clone()), i)
        {
            return Err(invalid(
                &format!("tasks[{i}].key"),
                format!(
                    "`{key}` is already used by tasks[{first}] of the same job; keys must be unique in a batch"
                ),
            ));
        }
        tasks.push(task);
    }
    let debounced: HashMap<i64, Millis> = jobs
        .into_values()
        .filter_map(|(id, ms)| Some((id, ms?)))
        .collect();
    let mut ids = Vec::with_capacity(tasks.len());
    for ((id, created), task) in ports
        .store_tasks(&tasks, now)
        .await?
        .into_iter()
        .zip(&tasks)
    {
        ids.push(match debounced.get(&task.job_id) {
            Some(&ms) if !created => ports.debounce_task(id, task, ms, now).await?,
            _ => id,
        });
    }
    Ok(ids)
}

/// The id of the job `r` names (from the node's cache), if `who` may change it, with its
/// debounce.
async fn job_to_change(
    ports: &Ports,
    who: &Principal,
    r: &NameOrId,
) -> Result<(i64, Option<Millis>)> {
    let job = cached_job(ports, "job", r).await?;
    who.check(&job.job.spec.app, Need::Change, &format!("job {r}"))?;
    Ok((job.job.id, job.job.spec.debounce_ms))
}

/// Validates one task; error messages start with the field.
pub fn new_task(f: TaskFields, job_id: i64, now: Millis, config: &Config) -> Result<NewTask> {
    let due_at = due_at(f.delay_ms, f.run_at, now)?;
    if let Some(payload) = &f.payload {
        validate::max_bytes("payload", payload, config.max_payload_bytes)?;
    }
    if let Some(key) = &f.key {
        validate::name("key", key)?;
    }
    let max_attempts = f
        .max_attempts
        .map(|n| validate::within("max_attempts", n, 1..=MAX_ATTEMPTS).map(|n| n as i32))
        .transpose()?;
    let priority = validate::within(
        "priority",
        f.priority.unwrap_or(0),
        -MAX_PRIORITY..=MAX_PRIORITY,
    )? as i32;
    if let Some(backoff) = &f.backoff {
        backoff.validate().map_err(|e| invalid("backoff", e))?;
    }
    Ok(NewTask {
        job_id,
        kind: TaskKind::Delayed,
        key: f.key,
        payload: f.payload,
        params: None,
        due_at,
        max_attempts,
        backoff: f.backoff,
        priority,
        traceparent: None,
        limit_key: None,
    })
}

/// When a task given `delay_ms` or `run_at` (or neither: now) is due.
fn due_at(delay_ms: Option<i64>, run_at: Option<String>, now: Millis) -> Result<Millis> {
    match (delay_ms, run_at) {
        (Some(_), Some(_)) => Err(invalid(
            "delay_ms",
            "give either `delay_ms` or `run_at`, not both",
        )),
        (Some(delay), None) => {
            if delay < 0 {
                return Err(invalid(
                    "delay_ms",
                    format!("must not be negative (got {delay})"),
                ));
            }
            not_too_far("delay_ms", now.saturating_add(delay), now)
        }
        (None, Some(at)) => {
            let at = parse_rfc3339(&at).ok_or_else(|| {
                invalid(
                    "run_at",
                    format!("`{at}` is not an RFC 3339 time such as `2026-11-30T03:29:00.123Z`"),
                )
            })?;
            // In the past: due at once.
            not_too_far("run_at", at.max(now), now)
        }
        (None, None) => Ok(now),
    }
}

fn not_too_far(field: &str, due_at: Millis, now: Millis) -> Result<Millis> {
    if due_at - now > FIRE_HORIZON_MS {
        return Err(invalid(field, "is more than 10 years ahead"));
    }
    Ok(due_at)
}

/// Parses an RFC 3339 time into epoch milliseconds.
pub fn parse_rfc3339(s: &str) -> Option<Millis> {
    chrono::DateTime::parse_from_rfc3339(s)
        .ok()
        .map(|t| t.timestamp_millis())
}

/// The tasks of `filter` that `who` may see, newest first. `job` is a job's id or name (an
/// id is used as it is, so the tasks of a deleted job stay listable); the filter's own
/// `job_id` and `apps` are set here.
pub async fn list(
    ports: &Ports,
    who: &Principal,
    job: Option<&str>,
    filter: TaskFilter,
) -> Result<Page<Task>> {
    let filter = TaskFilter {
        job_id: job_filter(ports.store(), job).await?,
        apps: who.app_filter().map(<[String]>::to_vec),
        ..filter
    };
    Ok(ports.store().list_tasks(&filter).await?)
}

/// `PATCH /api/v1/tasks/{id}`: moves a pending task. One of `run_at` and `delay_ms` is
/// required.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Reschedule {
    /// Due this many milliseconds from now; not with `run_at`.
    pub delay_ms: Option<i64>,
    /// Due at this time (in the past: now); not with `delay_ms`.
    #[schema(format = DateTime)]
    pub run_at: Option<String>,
    /// −1000 to 1000, higher first.
    pub priority: Option<i64>,
    /// The run's input; `null` clears it.
    #[serde(default, deserialize_with = "nullable")]
    pub payload: Option<Option<String>>,
}

/// Cancels a task that has not started, on whichever node holds it (`DELETE
/// /api/v1/tasks/{id}`, the console's Cancel); audited when it cancelled it (a second
/// cancel answers the task, unchanged).
pub async fn cancel(ports: &Ports, who: &Principal, id: i64) -> Result<Task> {
    task_as(ports.store(), who, id, Need::Change).await?;
    let (task, cancelled) = ports.cancel_task(id).await?;
    if cancelled {
        ports.audit(&who.name, "cancel task", &id.to_string()).await;
    }
    Ok(task)
}

/// Cancels the task of `job` (a name or an id) created with `key`, as [`cancel`] does.
pub async fn cancel_by_key(ports: &Ports, who: &Principal, job: &str, key: &str) -> Result<Task> {
    let found = find_job(ports.store(), job).await?;
    who.check(&found.spec.app, Need::Change, &format!("job `{job}`"))?;
    let task = ports.store().get_task_by_key(found.id, key).await?;
    cancel(ports, who, task.id).await
}

/// Moves a pending task (not yet in a scheduler's wheel, or waiting for an executor or a
/// consumer) to a new due time, and optionally a new priority or payload.
pub async fn reschedule(ports: &Ports, who: &Principal, id: i64, f: Reschedule) -> Result<Task> {
    let now = ports.clock().now_ms();
    if f.delay_ms.is_none() && f.run_at.is_none() {
        return Err(invalid(
            "run_at",
            "give `run_at` or `delay_ms`: when the task is now due",
        ));
    }
    let due_at = due_at(f.delay_ms, f.run_at, now)?;
    let priority = f
        .priority
        .map(|p| validate::within("priority", p, -MAX_PRIORITY..=MAX_PRIORITY).map(|p| p as i32))
        .transpose()?;
    if let Some(Some(payload)) = &f.payload {
        validate::max_bytes("payload", payload, ports.config().max_payload_bytes)?;
    }
    task_as(ports.store(), who, id, Need::Change).await?;
    let payload = f.payload.as_ref().map(|p| p.as_deref());
    let moved = ports
        .store()
        .reschedule_task(id, due_at, priority, payload, now)
        .await?;
    let task = ports.store().get_task(id).await?;
    if !moved {
        return Err(Error::Conflict(match task.status {
            TaskStatus::Claimed => format!(
                "task {id} is about to fire (due within seconds, it is already in a scheduler's \
                 wheel): it can no longer be moved, only cancelled"
            ),
            status => format!(
                "task {id} is {}; only a pending task can be rescheduled",
                task_status(status, task.attempt).0
            ),
        }));
    }
    if due_at - now <= ports.config().window_ms {
        ports.wake_scan();
    }
    ports
        .audit(&who.name, "reschedule task", &id.to_string())
        .await;
    Ok(task)
}

/// Task `id`, if `who` may read it.
pub async fn get(ports: &Ports, who: &Principal, id: i64) -> Result<Task> {
    super::jobs::task_as(ports.store(), who, id, Need::Read).await
}

/// An operator schedules one task of a job by hand, due in `delay_s` seconds (up to the
/// fire horizon): created as [`create`] does, and audited as the operator's action (tasks
/// created by programs through the API are the queue's data, not audited one by one).
pub async fn schedule(
    ports: &Ports,
    who: &Principal,
    fields: TaskFields,
    delay_s: i64,
) -> Result<Task> {
    let horizon_s = crate::schedule::FIRE_HORIZON_MS / 1000;
    super::validate::within("delay", delay_s, 0..=horizon_s)?;
    let fields = TaskFields {
        delay_ms: Some(delay_s * 1000),
        ..fields
    };
    let (task, _) = create(ports, who, fields).await?;
    let job = ports.store().get_job(task.job_id).await?;
    ports
        .audit(
            &who.name,
            "schedule task",
            &format!("{} in {delay_s} s", job.spec.name),
        )
        .await;
    Ok(task)
}
