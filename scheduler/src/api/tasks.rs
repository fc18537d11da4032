//! `/api/v1/tasks`: the delay queue — creating tasks one at a time or in batches, reading,
//! listing and cancelling them.

use std::collections::HashMap;
use std::collections::hash_map::Entry;

use axum::Extension;
use axum::extract::State;
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::AppState;
use super::error::{ApiError, ApiResult};
use super::extract::{Json, NameOrId, PageQuery, PathId, Query};
use super::jobs::cached_job_ref;
use super::openapi::{ErrorBody, TaskStatusName};
use super::validate::{self, invalid};
use super::views::{PageView, TASK_STATUSES, TaskPage, TaskView, parse_rfc3339};
use crate::access::{Need, Principal};
use crate::backoff::Backoff;
use crate::config::Config;
use crate::model::{Millis, NewTask, TaskFilter, TaskKind, TaskState, TaskStatus, now_ms};
use crate::schedule::FIRE_HORIZON_MS;
use crate::usecase::jobs::{find_job, job_filter, task_as};

/// Most tasks in one batch.
pub const MAX_BATCH: usize = 10_000;
const MAX_ATTEMPTS: i64 = 100;
const MAX_PRIORITY: i64 = 1000;

/// One task to create. Integers are read as `i64` so an out-of-range value is a 422 naming
/// its range rather than a serde overflow.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TaskFields {
    /// The job's name or id.
    job: NameOrId,
    /// The run's input (UTF-8).
    payload: Option<String>,
    /// Due this many milliseconds from now; not with `run_at`.
    delay_ms: Option<i64>,
    /// Due at this time (in the past: now); not with `delay_ms`.
    #[schema(format = DateTime)]
    run_at: Option<String>,
    /// Deduplicates: a second task of the job with this key is the first one.
    key: Option<String>,
    /// 1 to 100; the job's by default.
    max_attempts: Option<i64>,
    /// The job's by default.
    backoff: Option<Backoff>,
    /// −1000 to 1000, higher first; 0 by default.
    priority: Option<i64>,
}

/// `POST /api/v1/tasks`: 201 with the new task, or 200 with the existing one when a task
/// of the job already has this `key`.
#[utoipa::path(
    post,
    path = "/api/v1/tasks",
    operation_id = "create_task",
    request_body = TaskFields,
    responses(
        (status = 201, description = "The new task", body = TaskView),
        (status = 200, description = "The task of the job that already has this `key`", body = TaskView),
        (status = 400, description = "Malformed JSON", body = ErrorBody),
        (status = 413, description = "`payload` is too large", body = ErrorBody),
        (status = 422, description = "An invalid value, or a job that does not exist", body = ErrorBody),
    )
)]
pub async fn create(
    State(state): State<AppState>,
    Extension(who): Extension<Principal>,
    Json(fields): Json<TaskFields>,
) -> ApiResult<(StatusCode, Json<TaskView>)> {
    // Delays count from the moment the request is accepted.
    let now = now_ms();
    let store = state.node.store();
    let job = cached_job_ref(&state, "job", &fields.job).await?;
    who.check(
        &job.job.spec.app,
        Need::Change,
        &format!("job {}", fields.job),
    )?;
    let job_id = job.job.id;
    let task = new_task(fields, job_id, now, state.node.config())?;
    let (id, created) = *state
        .node
        .store_tasks(std::slice::from_ref(&task), now)
        .await?
        .first()
        .ok_or_else(|| ApiError::Internal(anyhow::anyhow!("inserting a task returned no id")))?;
    let task = store.get_task(id).await?;
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(task.into())))
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BatchBody {
    /// Up to 10,000 tasks.
    tasks: Vec<TaskFields>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct BatchCreated {
    /// The tasks' ids, in the order given (an existing key's task's id for its item).
    ids: Vec<i64>,
}

/// `POST /api/v1/tasks/batch`: all or nothing. An invalid item fails the whole batch with
/// its index in the message; an existing key yields the existing task's id.
#[utoipa::path(
    post,
    path = "/api/v1/tasks/batch",
    operation_id = "create_tasks",
    request_body = BatchBody,
    responses(
        (status = 201, description = "Every task was created (or already existed)", body = BatchCreated),
        (status = 400, description = "Malformed JSON", body = ErrorBody),
        (status = 413, description = "Too many tasks, or a payload too large", body = ErrorBody),
        (status = 422, description = "An invalid item (named by its index); nothing was created", body = ErrorBody),
    )
)]
pub async fn create_batch(
    State(state): State<AppState>,
    Extension(who): Extension<Principal>,
    Json(body): Json<BatchBody>,
) -> ApiResult<(StatusCode, Json<BatchCreated>)> {
    let now = now_ms();
    if body.tasks.len() > MAX_BATCH {
        return Err(ApiError::PayloadTooLarge(format!(
            "tasks: a batch holds at most {MAX_BATCH} tasks (got {}); split it",
            body.tasks.len()
        )));
    }
    let config = state.node.config();
    let mut jobs: HashMap<NameOrId, i64> = HashMap::new();
    let mut keys: HashMap<(i64, String), usize> = HashMap::new();
    let mut tasks = Vec::with_capacity(body.tasks.len());
    for (i, fields) in body.tasks.into_iter().enumerate() {
        let prefix = format!("tasks[{i}].");
        let job_id = match jobs.entry(fields.job.clone()) {
            Entry::Occupied(e) => *e.get(),
            Entry::Vacant(e) => {
                let job = cached_job_ref(&state, "job", &fields.job)
                    .await
                    .map_err(|e| e.prefixed(&prefix))?;
                who.check(
                    &job.job.spec.app,
                    Need::Change,
                    &format!("job {}", fields.job),
                )
                .map_err(|e| e.prefixed(&prefix))?;
                *e.insert(job.job.id)
            }
        };
        let task = new_task(fields, job_id, now, config).map_err(|e| e.prefixed(&prefix))?;
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
    let ids = state
        .node
        .store_tasks(&tasks, now)
        .await?
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    Ok((StatusCode::CREATED, Json(BatchCreated { ids })))
}

/// Validates one task; error messages start with the field.
fn new_task(f: TaskFields, job_id: i64, now: Millis, config: &Config) -> ApiResult<NewTask> {
    let due_at = match (f.delay_ms, f.run_at) {
        (Some(_), Some(_)) => {
            return Err(invalid(
                "delay_ms",
                "give either `delay_ms` or `run_at`, not both",
            ));
        }
        (Some(delay), None) => {
            if delay < 0 {
                return Err(invalid(
                    "delay_ms",
                    format!("must not be negative (got {delay})"),
                ));
            }
            not_too_far("delay_ms", now.saturating_add(delay), now)?
        }
        (None, Some(at)) => {
            let at = parse_rfc3339(&at).ok_or_else(|| {
                invalid(
                    "run_at",
                    format!("`{at}` is not an RFC 3339 time such as `2026-11-30T03:29:00.123Z`"),
                )
            })?;
            // In the past: due at once.
            not_too_far("run_at", at.max(now), now)?
        }
        (None, None) => now,
    };
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
    })
}

fn not_too_far(field: &str, due_at: Millis, now: Millis) -> ApiResult<Millis> {
    if due_at - now > FIRE_HORIZON_MS {
        return Err(invalid(field, "is more than 10 years ahead"));
    }
    Ok(due_at)
}

/// The path parameter of `/api/v1/tasks/{id}`.
const TASK_ID: &str = "The task's id";

/// `GET /api/v1/tasks/{id}`: one task.
#[utoipa::path(
    get,
    path = "/api/v1/tasks/{id}",
    operation_id = "get_task",
    params(("id" = i64, Path, description = TASK_ID)),
    responses(
        (status = 200, description = "The task", body = TaskView),
        (status = 400, description = "`id` is not an integer", body = ErrorBody),
        (status = 404, description = "No such task", body = ErrorBody),
    )
)]
pub async fn get(
    State(state): State<AppState>,
    Extension(who): Extension<Principal>,
    PathId(id): PathId,
) -> ApiResult<Json<TaskView>> {
    let task = task_as(state.node.store(), &who, id, Need::Read).await?;
    Ok(Json(task.into()))
}

/// `DELETE /api/v1/tasks/{id}`: cancels a task that has not started (also one already in
/// a node's wheel); cancelling it again is a 200, a running or finished one a 409.
#[utoipa::path(
    delete,
    path = "/api/v1/tasks/{id}",
    operation_id = "cancel_task",
    params(("id" = i64, Path, description = TASK_ID)),
    responses(
        (status = 200, description = "The task, cancelled", body = TaskView),
        (status = 400, description = "`id` is not an integer", body = ErrorBody),
        (status = 404, description = "No such task", body = ErrorBody),
        (status = 409, description = "The task is running or finished", body = ErrorBody),
    )
)]
pub async fn cancel(
    State(state): State<AppState>,
    Extension(who): Extension<Principal>,
    PathId(id): PathId,
) -> ApiResult<Json<TaskView>> {
    task_as(state.node.store(), &who, id, Need::Change).await?;
    let (task, _) = state.node.cancel_task(id).await?;
    Ok(Json(task.into()))
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct CancelByKeyQuery {
    /// The job's name or id.
    #[param(required = true)]
    job: Option<String>,
    /// The key the task was created with.
    #[param(required = true)]
    key: Option<String>,
}

/// `DELETE /api/v1/tasks?job=J&key=K`: cancels the task of job `J` created with key `K`.
#[utoipa::path(
    delete,
    path = "/api/v1/tasks",
    operation_id = "cancel_task_by_key",
    params(CancelByKeyQuery),
    responses(
        (status = 200, description = "The task, cancelled", body = TaskView),
        (status = 400, description = "`job` or `key` is missing", body = ErrorBody),
        (status = 404, description = "No such job, or no task of it with this key", body = ErrorBody),
        (status = 409, description = "The task is running or finished", body = ErrorBody),
    )
)]
pub async fn cancel_by_key(
    State(state): State<AppState>,
    Extension(who): Extension<Principal>,
    Query(q): Query<CancelByKeyQuery>,
) -> ApiResult<Json<TaskView>> {
    let (Some(job), Some(key)) = (
        q.job.filter(|s| !s.is_empty()),
        q.key.filter(|s| !s.is_empty()),
    ) else {
        return Err(ApiError::BadRequest(
            "query parameters `job` and `key` are required: DELETE /api/v1/tasks?job=…&key=… (or DELETE /api/v1/tasks/{id})".into(),
        ));
    };
    let store = state.node.store();
    let found = find_job(store, &job).await?;
    who.check(&found.spec.app, Need::Change, &format!("job `{job}`"))?;
    let task = store.get_task_by_key(found.id, &key).await?;
    let (task, _) = state.node.cancel_task(task.id).await?;
    Ok(Json(task.into()))
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    /// Only this job's tasks (a name or an id).
    job: Option<String>,
    /// Only tasks in this status.
    #[param(value_type = Option<TaskStatusName>)]
    status: Option<String>,
    /// Only the task with this key.
    key: Option<String>,
    /// Only tasks due at or after this time (RFC 3339).
    due_after: Option<String>,
    /// Only tasks due before this time (RFC 3339).
    due_before: Option<String>,
}

/// `GET /api/v1/tasks?job=&status=&key=&due_after=&due_before=&limit=&after=`: newest first.
#[utoipa::path(
    get,
    path = "/api/v1/tasks",
    operation_id = "list_tasks",
    params(ListQuery, PageQuery),
    responses(
        (status = 200, description = "A page of tasks, newest first", body = TaskPage),
        (status = 400, description = "A malformed filter, `limit` or `after`", body = ErrorBody),
        (status = 404, description = "No job has this name", body = ErrorBody),
    )
)]
pub async fn list(
    State(state): State<AppState>,
    Extension(who): Extension<Principal>,
    Query(q): Query<ListQuery>,
    Query(page): Query<PageQuery>,
) -> ApiResult<Json<TaskPage>> {
    let page = page.parse()?;
    let store = state.node.store();
    let job_id = job_filter(store, q.job.as_deref()).await?;
    let filter = TaskFilter {
        job_id,
        apps: who.app_filter().map(<[String]>::to_vec),
        state: task_state(q.status.as_deref().filter(|s| !s.is_empty()))?,
        key: q.key.filter(|k| !k.is_empty()),
        due_from: due_param("due_after", q.due_after.as_deref())?,
        due_to: due_param("due_before", q.due_before.as_deref())?,
        before_id: page.before_id,
        limit: page.limit,
    };
    let tasks = store.list_tasks(&filter).await?;
    Ok(Json(PageView::of(tasks, TaskView::from)))
}

/// A due-time filter of task lists: RFC 3339.
fn due_param(name: &str, value: Option<&str>) -> ApiResult<Option<Millis>> {
    match value.filter(|v| !v.is_empty()) {
        None => Ok(None),
        Some(v) => parse_rfc3339(v).map(Some).ok_or_else(|| {
            ApiError::BadRequest(format!(
                "query parameter `{name}`: `{}` is not an RFC 3339 time like 2026-11-30T09:15:00Z",
                validate::excerpt(v)
            ))
        }),
    }
}

/// The `status` filter of task lists, in the API's words.
fn task_state(status: Option<&str>) -> ApiResult<Option<TaskState>> {
    Ok(match status {
        None => None,
        Some("pending") => Some(TaskState::Pending),
        Some("failed") => Some(TaskState::Failed),
        Some(s) => match s.parse::<TaskStatus>() {
            Ok(status) if TASK_STATUSES.contains(&s) => Some(TaskState::Is(status)),
            _ => {
                return Err(ApiError::BadRequest(format!(
                    "query parameter `status`: `{s}` is not a task status; expected one of: {}",
                    TASK_STATUSES.join(", ")
                )));
            }
        },
    })
}
