//! Pull delivery and re-drive (SPEC §8): `POST /api/v1/jobs/{id}/pull`, the lease's ack,
//! nack and extend, the batch ack, and `POST /api/v1/tasks/{id}/retry` /
//! `POST /api/v1/tasks/retry`. Each parses, calls `usecase::queue` and renders.

use axum::Extension;
use axum::extract::State;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::AppState;
use super::error::ApiResult;
use super::extract::{Json, OptionalJson, PathId, PathParam};
use super::openapi::ErrorBody;
use super::views::{TaskView, rfc3339};
use crate::access::Principal;
use crate::store::Leased;
use crate::usecase::queue::{
    self, Ack, AckItem, AckResult, BulkRetry, LeaseEnd, LeaseExtension, PullFields,
};

/// A task handed to a consumer.
#[derive(Debug, Serialize, ToSchema)]
pub struct PulledTask {
    pub task: i64,
    pub attempt: i32,
    /// Give it back to ack, nack or extend; only the current lease's holder can.
    pub lease: String,
    pub payload: Option<String>,
    pub key: Option<String>,
    pub priority: i32,
    pub due_at: String,
    pub lease_expires_at: String,
    /// The W3C `traceparent` of the trace the task was created in, when the node exports
    /// traces: the consumer's work on it continues that trace.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
}

impl From<Leased> for PulledTask {
    fn from(l: Leased) -> Self {
        PulledTask {
            task: l.task_id,
            attempt: l.attempt,
            lease: l.lease,
            payload: l.payload,
            key: l.key,
            priority: l.priority,
            due_at: rfc3339(l.due_at),
            lease_expires_at: rfc3339(l.lease_expires_at),
            traceparent: l.traceparent,
        }
    }
}

const JOB_ID: &str = "The job's name or id";
const TASK_ID: &str = "The task's id";

#[derive(Debug, Serialize, ToSchema)]
pub struct Pulled {
    /// Due tasks, higher priority first, then earlier due; empty if none fell due in time.
    items: Vec<PulledTask>,
}

/// `POST /api/v1/jobs/{id}/pull`: leases up to `max` due tasks of a `pull` job to the
/// caller, waiting up to `wait_ms` for one to fall due.
#[utoipa::path(
    post,
    path = "/api/v1/jobs/{id}/pull",
    operation_id = "pull_tasks",
    params(("id" = String, Path, description = JOB_ID)),
    request_body(content = Option<PullFields>, description = "May be left out"),
    responses(
        (status = 200, description = "The leased tasks (maybe none)", body = Pulled),
        (status = 400, description = "Malformed JSON", body = ErrorBody),
        (status = 404, description = "No such job", body = ErrorBody),
        (status = 409, description = "The job is not delivered by `pull`", body = ErrorBody),
        (status = 422, description = "A value out of range", body = ErrorBody),
    )
)]
pub async fn pull(
    State(state): State<AppState>,
    Extension(who): Extension<Principal>,
    PathParam(id): PathParam,
    OptionalJson(body): OptionalJson<PullFields>,
) -> ApiResult<Json<Pulled>> {
    let leased = queue::pull(&state.ports, &who, &id, body.unwrap_or_default()).await?;
    Ok(Json(Pulled {
        items: leased.into_iter().map(PulledTask::from).collect(),
    }))
}

/// `POST /api/v1/tasks/{id}/ack`: the lease's attempt succeeded.
#[utoipa::path(
    post,
    path = "/api/v1/tasks/{id}/ack",
    operation_id = "ack_task",
    params(("id" = i64, Path, description = TASK_ID)),
    request_body = Ack,
    responses(
        (status = 200, description = "The task, succeeded", body = TaskView),
        (status = 400, description = "Malformed JSON", body = ErrorBody),
        (status = 404, description = "No such task", body = ErrorBody),
        (status = 409, description = "The lease is not the task's current one; nothing changed", body = ErrorBody),
    )
)]
pub async fn ack(
    State(state): State<AppState>,
    Extension(who): Extension<Principal>,
    PathId(id): PathId,
    Json(body): Json<Ack>,
) -> ApiResult<Json<TaskView>> {
    let task = queue::ack(&state.ports, &who, id, body).await?;
    Ok(Json(task.into()))
}

/// `POST /api/v1/tasks/{id}/nack`: the lease's attempt failed; retried after `delay_ms`
/// or the backoff while attempts remain, else `dead`.
#[utoipa::path(
    post,
    path = "/api/v1/tasks/{id}/nack",
    operation_id = "nack_task",
    params(("id" = i64, Path, description = TASK_ID)),
    request_body = LeaseEnd,
    responses(
        (status = 200, description = "The task: failed (a retry is due) or dead", body = TaskView),
        (status = 400, description = "Malformed JSON", body = ErrorBody),
        (status = 404, description = "No such task", body = ErrorBody),
        (status = 409, description = "The lease is not the task's current one; nothing changed", body = ErrorBody),
        (status = 422, description = "A value out of range", body = ErrorBody),
    )
)]
pub async fn nack(
    State(state): State<AppState>,
    Extension(who): Extension<Principal>,
    PathId(id): PathId,
    Json(body): Json<LeaseEnd>,
) -> ApiResult<Json<TaskView>> {
    let task = queue::nack(&state.ports, &who, id, body).await?;
    Ok(Json(task.into()))
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Extended {
    lease_expires_at: String,
}

/// `POST /api/v1/tasks/{id}/extend`: the lease now ends `lease_ms` from now.
#[utoipa::path(
    post,
    path = "/api/v1/tasks/{id}/extend",
    operation_id = "extend_lease",
    params(("id" = i64, Path, description = TASK_ID)),
    request_body = LeaseExtension,
    responses(
        (status = 200, description = "The lease's new end", body = Extended),
        (status = 400, description = "Malformed JSON", body = ErrorBody),
        (status = 404, description = "No such task", body = ErrorBody),
        (status = 409, description = "The lease is not the task's current one", body = ErrorBody),
        (status = 422, description = "`lease_ms` out of range", body = ErrorBody),
    )
)]
pub async fn extend(
    State(state): State<AppState>,
    Extension(who): Extension<Principal>,
    PathId(id): PathId,
    Json(body): Json<LeaseExtension>,
) -> ApiResult<Json<Extended>> {
    let until = queue::extend(&state.ports, &who, id, body).await?;
    Ok(Json(Extended {
        lease_expires_at: rfc3339(until),
    }))
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AckBatch {
    /// Up to 1,000 leases of this job's tasks.
    acks: Vec<AckItem>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct AckResults {
    results: Vec<AckResult>,
}

/// `POST /api/v1/jobs/{id}/ack`: acks many leases at once; each item's result.
#[utoipa::path(
    post,
    path = "/api/v1/jobs/{id}/ack",
    operation_id = "ack_tasks",
    params(("id" = String, Path, description = JOB_ID)),
    request_body = AckBatch,
    responses(
        (status = 200, description = "What became of each ack", body = AckResults),
        (status = 400, description = "Malformed JSON", body = ErrorBody),
        (status = 404, description = "No such job", body = ErrorBody),
        (status = 413, description = "More than 1,000 acks", body = ErrorBody),
    )
)]
pub async fn ack_batch(
    State(state): State<AppState>,
    Extension(who): Extension<Principal>,
    PathParam(id): PathParam,
    Json(body): Json<AckBatch>,
) -> ApiResult<Json<AckResults>> {
    let results = queue::ack_batch(&state.ports, &who, &id, body.acks).await?;
    Ok(Json(AckResults { results }))
}

/// `POST /api/v1/tasks/{id}/retry`: re-drives a dead task (a new attempt, due now).
#[utoipa::path(
    post,
    path = "/api/v1/tasks/{id}/retry",
    operation_id = "retry_task",
    params(("id" = i64, Path, description = TASK_ID)),
    responses(
        (status = 200, description = "The task, due again: `failed`, as every task is whose retry is due", body = TaskView),
        (status = 404, description = "No such task", body = ErrorBody),
        (status = 409, description = "The task is not dead", body = ErrorBody),
    )
)]
pub async fn retry(
    State(state): State<AppState>,
    Extension(who): Extension<Principal>,
    PathId(id): PathId,
) -> ApiResult<Json<TaskView>> {
    let task = queue::retry(&state.ports, &who, id).await?;
    Ok(Json(task.into()))
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Retried {
    /// How many dead tasks are pending again.
    retried: u64,
}

/// `POST /api/v1/tasks/retry`: re-drives a job's dead tasks, oldest due first.
#[utoipa::path(
    post,
    path = "/api/v1/tasks/retry",
    operation_id = "retry_tasks",
    request_body = BulkRetry,
    responses(
        (status = 200, description = "How many were re-driven", body = Retried),
        (status = 400, description = "Malformed JSON", body = ErrorBody),
        (status = 404, description = "`job` names no job", body = ErrorBody),
        (status = 422, description = "A status other than `dead`, or a limit out of range", body = ErrorBody),
    )
)]
pub async fn retry_dead(
    State(state): State<AppState>,
    Extension(who): Extension<Principal>,
    Json(body): Json<BulkRetry>,
) -> ApiResult<Json<Retried>> {
    let retried = queue::retry_dead(&state.ports, &who, body).await?;
    Ok(Json(Retried { retried }))
}
