//! `/api/v1/jobs`: creating, reading, changing, deleting and triggering jobs.

use axum::Extension;
use axum::extract::State;
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::AppState;
use super::error::ApiResult;
use super::extract::{Json, OptionalJson, PageQuery, PathParam, Query, query_flag};
use super::openapi::ErrorBody;
use super::views::{JobPage, JobView, PageView};
use crate::access::Principal;
use crate::usecase::{
    self,
    backfill::{BackfillRange, Backfilled},
    jobs::{JobFields, build_spec},
};

/// The path parameter of `/api/v1/jobs/{id}`.
const JOB_ID: &str = "The job's id, or its name";

/// `POST /api/v1/jobs`: creates a job; its first fire time is computed at once.
#[utoipa::path(
    post,
    path = "/api/v1/jobs",
    operation_id = "create_job",
    request_body(content = JobFields, description = "`name`, `app`, `plugin` and `schedule` are required"),
    responses(
        (status = 201, description = "The new job", body = JobView),
        (status = 400, description = "Malformed JSON, or a required field is missing", body = ErrorBody),
        (status = 409, description = "A job with this name exists", body = ErrorBody),
        (status = 404, description = "`plugin` or a child job names nothing that exists", body = ErrorBody),
        (status = 422, description = "An invalid value", body = ErrorBody),
    )
)]
pub async fn create(
    State(state): State<AppState>,
    Extension(who): Extension<Principal>,
    Json(fields): Json<JobFields>,
) -> ApiResult<(StatusCode, Json<JobView>)> {
    let (spec, schedule) = build_spec(&state.ports, &who, fields, None).await?;
    let job = usecase::jobs::create(&state.ports, &who, &spec, &schedule).await?;
    Ok((StatusCode::CREATED, Json(job.into())))
}

/// `GET /api/v1/jobs/{id}`: one job, by id or by name.
#[utoipa::path(
    get,
    path = "/api/v1/jobs/{id}",
    operation_id = "get_job",
    params(("id" = String, Path, description = JOB_ID)),
    responses(
        (status = 200, description = "The job", body = JobView),
        (status = 404, description = "No such job", body = ErrorBody),
    )
)]
pub async fn get(
    State(state): State<AppState>,
    Extension(who): Extension<Principal>,
    PathParam(id): PathParam,
) -> ApiResult<Json<JobView>> {
    Ok(Json(
        usecase::jobs::get(&state.ports, &who, &id).await?.into(),
    ))
}

/// `PATCH /api/v1/jobs/{id}`: the given fields replace the stored ones; everything is
/// validated again. The next fire time is recomputed when the schedule or `enabled`
/// changed, and kept otherwise (so an unrelated edit does not shift a fixed-rate phase).
#[utoipa::path(
    patch,
    path = "/api/v1/jobs/{id}",
    operation_id = "update_job",
    params(("id" = String, Path, description = JOB_ID), UpdateQuery),
    request_body(content = JobFields, description = "The fields to change"),
    responses(
        (status = 200, description = "The changed job", body = JobView),
        (status = 400, description = "Malformed JSON, or `force` is not `true` or `false`", body = ErrorBody),
        (status = 404, description = "No such job, or `plugin` or a child job names nothing that exists", body = ErrorBody),
        (status = 409, description = "Another job has this name, or its delivery changes while tasks are on their way (without `force`)", body = ErrorBody),
        (status = 422, description = "An invalid value", body = ErrorBody),
    )
)]
pub async fn update(
    State(state): State<AppState>,
    Extension(who): Extension<Principal>,
    PathParam(id): PathParam,
    Query(q): Query<UpdateQuery>,
    Json(fields): Json<JobFields>,
) -> ApiResult<Json<JobView>> {
    let force = query_flag("force", q.force.as_deref())?;
    let job = usecase::jobs::to_change(&state.ports, &who, &id).await?;
    let (spec, schedule) = build_spec(&state.ports, &who, fields, Some(&job)).await?;
    let job = usecase::jobs::update(&state.ports, &who, &job, &spec, &schedule, force).await?;
    Ok(Json(job.into()))
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct UpdateQuery {
    /// Change the delivery even while tasks are on their way to the old receivers.
    #[param(value_type = Option<bool>)]
    force: Option<String>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct DeleteQuery {
    /// Cancel the job's pending tasks first; without it, a job with pending or running
    /// tasks is not deleted.
    #[param(value_type = Option<bool>)]
    force: Option<String>,
}

/// `DELETE /api/v1/jobs/{id}[?force=true]`: a job with pending or running tasks is a 409
/// unless forced, which cancels the pending ones first.
#[utoipa::path(
    delete,
    path = "/api/v1/jobs/{id}",
    operation_id = "delete_job",
    params(("id" = String, Path, description = JOB_ID), DeleteQuery),
    responses(
        (status = 204, description = "Deleted"),
        (status = 400, description = "`force` is not `true` or `false`", body = ErrorBody),
        (status = 404, description = "No such job", body = ErrorBody),
        (status = 409, description = "The job has pending or running tasks", body = ErrorBody),
    )
)]
pub async fn delete(
    State(state): State<AppState>,
    Extension(who): Extension<Principal>,
    PathParam(id): PathParam,
    Query(q): Query<DeleteQuery>,
) -> ApiResult<StatusCode> {
    let force = query_flag("force", q.force.as_deref())?;
    usecase::jobs::delete(&state.ports, &who, &id, force).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TriggerBody {
    /// This run's params instead of the job's.
    params: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Triggered {
    task_id: i64,
}

/// `POST /api/v1/jobs/{id}/trigger` with an optional `{"params": "…"}`: a task due now,
/// run with these params (or the job's) under the job's retry policy.
#[utoipa::path(
    post,
    path = "/api/v1/jobs/{id}/trigger",
    operation_id = "trigger_job",
    params(("id" = String, Path, description = JOB_ID)),
    request_body(content = Option<TriggerBody>, description = "May be left out"),
    responses(
        (status = 201, description = "The task, due now", body = Triggered),
        (status = 400, description = "Malformed JSON", body = ErrorBody),
        (status = 404, description = "No such job", body = ErrorBody),
        (status = 413, description = "`params` is too large", body = ErrorBody),
    )
)]
pub async fn trigger(
    State(state): State<AppState>,
    Extension(who): Extension<Principal>,
    PathParam(id): PathParam,
    OptionalJson(body): OptionalJson<TriggerBody>,
) -> ApiResult<(StatusCode, Json<Triggered>)> {
    let body = body.unwrap_or_default();
    let task_id = usecase::jobs::trigger(&state.ports, &who, &id, body.params).await?;
    Ok((StatusCode::CREATED, Json(Triggered { task_id })))
}

/// `POST /api/v1/jobs/{id}/backfill {"from", "to", "max"?}`: a task for each fire time of
/// the job's schedule in `[from, to)`, once per fire time however often it is called.
#[utoipa::path(
    post,
    path = "/api/v1/jobs/{id}/backfill",
    operation_id = "backfill_job",
    params(("id" = String, Path, description = JOB_ID)),
    request_body = BackfillRange,
    responses(
        (status = 200, description = "The range's fire times, and how many were created now", body = Backfilled),
        (status = 400, description = "Malformed JSON", body = ErrorBody),
        (status = 404, description = "No such job", body = ErrorBody),
        (status = 422, description = "A time that is not RFC 3339, `to` not after `from`, a range holding more than `max` fire times, a job without a schedule", body = ErrorBody),
    )
)]
pub async fn backfill(
    State(state): State<AppState>,
    Extension(who): Extension<Principal>,
    PathParam(id): PathParam,
    Json(range): Json<BackfillRange>,
) -> ApiResult<Json<Backfilled>> {
    Ok(Json(
        usecase::backfill::backfill(&state.ports, &who, &id, &range).await?,
    ))
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    /// Only this app's jobs.
    app: Option<String>,
    /// Only jobs whose name contains this.
    q: Option<String>,
}

/// `GET /api/v1/jobs?app=&q=&limit=&after=`: newest first; `q` matches part of the name.
#[utoipa::path(
    get,
    path = "/api/v1/jobs",
    operation_id = "list_jobs",
    params(ListQuery, PageQuery),
    responses(
        (status = 200, description = "A page of jobs, newest first", body = JobPage),
        (status = 400, description = "A malformed `limit` or `after`", body = ErrorBody),
    )
)]
pub async fn list(
    State(state): State<AppState>,
    Extension(who): Extension<Principal>,
    Query(q): Query<ListQuery>,
    Query(page): Query<PageQuery>,
) -> ApiResult<Json<JobPage>> {
    let page = page.parse()?;
    let non_empty = |s: &Option<String>| s.as_deref().filter(|s| !s.is_empty()).map(str::to_owned);
    let (app, search) = (non_empty(&q.app), non_empty(&q.q));
    let jobs = usecase::jobs::list(
        &state.ports,
        &who,
        app.as_deref(),
        search.as_deref(),
        page.before_id,
        page.limit,
    )
    .await?;
    Ok(Json(PageView::of(jobs, JobView::from)))
}
