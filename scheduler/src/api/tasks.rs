//! `/api/v1/tasks`: the delay queue — creating tasks one at a time or in batches, reading,
//! listing and cancelling them.

use axum::Extension;
use axum::extract::State;
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::AppState;
use super::error::{ApiError, ApiResult};
use super::extract::{Json, PageQuery, PathId, Query};
use super::openapi::{ErrorBody, TaskStatusName};
use super::validate::{self};
use super::views::{PageView, TASK_STATUSES, TaskPage, TaskView, parse_rfc3339};
use crate::access::Principal;
use crate::model::{Millis, TaskFilter, TaskState, TaskStatus};
use crate::usecase;
use crate::usecase::tasks::{Reschedule, TaskFields};

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
        (status = 404, description = "`job` names no job", body = ErrorBody),
        (status = 422, description = "An invalid value", body = ErrorBody),
    )
)]
pub async fn create(
    State(state): State<AppState>,
    Extension(who): Extension<Principal>,
    Json(fields): Json<TaskFields>,
) -> ApiResult<(StatusCode, Json<TaskView>)> {
    let (task, created) = usecase::tasks::create(&state.ports, &who, fields).await?;
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
        (status = 404, description = "An item's `job` names no job (the item is named by its index); nothing was created", body = ErrorBody),
        (status = 422, description = "An invalid item (named by its index); nothing was created", body = ErrorBody),
    )
)]
pub async fn create_batch(
    State(state): State<AppState>,
    Extension(who): Extension<Principal>,
    Json(body): Json<BatchBody>,
) -> ApiResult<(StatusCode, Json<BatchCreated>)> {
    let ids = usecase::tasks::create_batch(&state.ports, &who, body.tasks).await?;
    Ok((StatusCode::CREATED, Json(BatchCreated { ids })))
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
    let task = usecase::tasks::get(&state.ports, &who, id).await?;
    Ok(Json(task.into()))
}

/// `PATCH /api/v1/tasks/{id}`: moves a pending task to a new due time (`run_at` or
/// `delay_ms`), optionally with a new priority or payload.
#[utoipa::path(
    patch,
    path = "/api/v1/tasks/{id}",
    operation_id = "reschedule_task",
    params(("id" = i64, Path, description = TASK_ID)),
    request_body = Reschedule,
    responses(
        (status = 200, description = "The task, pending at its new time", body = TaskView),
        (status = 400, description = "Malformed JSON", body = ErrorBody),
        (status = 404, description = "No such task", body = ErrorBody),
        (status = 409, description = "The task is not pending (or already in a wheel, about to fire)", body = ErrorBody),
        (status = 413, description = "`payload` is too large", body = ErrorBody),
        (status = 422, description = "An invalid value", body = ErrorBody),
    )
)]
pub async fn reschedule(
    State(state): State<AppState>,
    Extension(who): Extension<Principal>,
    PathId(id): PathId,
    Json(body): Json<Reschedule>,
) -> ApiResult<Json<TaskView>> {
    let task = usecase::tasks::reschedule(&state.ports, &who, id, body).await?;
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
    let task = usecase::tasks::cancel(&state.ports, &who, id).await?;
    Ok(Json(task.into()))
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct CancelByKeyQuery {
    /// The job's name or id.
    #[param(required = true, min_length = 1)]
    job: Option<String>,
    /// The key the task was created with.
    #[param(required = true, min_length = 1)]
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
    let task = usecase::tasks::cancel_by_key(&state.ports, &who, &job, &key).await?;
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
    #[param(format = DateTime)]
    due_after: Option<String>,
    /// Only tasks due before this time (RFC 3339).
    #[param(format = DateTime)]
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
    let filter = TaskFilter {
        state: task_state(q.status.as_deref().filter(|s| !s.is_empty()))?,
        key: q.key.filter(|k| !k.is_empty()),
        due_from: due_param("due_after", q.due_after.as_deref())?,
        due_to: due_param("due_before", q.due_before.as_deref())?,
        before_id: page.before_id,
        limit: page.limit,
        ..TaskFilter::default()
    };
    let tasks = usecase::tasks::list(&state.ports, &who, q.job.as_deref(), filter).await?;
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
