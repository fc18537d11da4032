//! `/api/v1/runs`: reading runs, their logs (from the executor that has them) and killing
//! them.

use axum::Extension;
use axum::extract::State;
use axum::http::StatusCode;
use rota_proto::LogPage;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::AppState;
use super::error::{ApiError, ApiResult};
use super::extract::{Json, PageQuery, PathId, Query, capped_count, query_param};
use super::openapi::{self, ErrorBody};
use super::views::{PageView, RunPage, RunView};
use crate::access::Principal;
use crate::model::{RunFilter, RunStatus};
use crate::usecase::{self};

/// Log lines per request by default, and at most.
const DEFAULT_LOG_LINES: u32 = 1_000;
const MAX_LOG_LINES: u32 = 10_000;

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    /// Only this job's runs (a name or an id).
    job: Option<String>,
    /// Only this task's runs.
    #[param(value_type = Option<i64>)]
    task: Option<String>,
    /// Only runs in this status.
    #[param(value_type = Option<RunStatus>)]
    status: Option<String>,
}

/// `GET /api/v1/runs?job=&task=&status=&limit=&after=`: newest first.
#[utoipa::path(
    get,
    path = "/api/v1/runs",
    operation_id = "list_runs",
    params(ListQuery, PageQuery),
    responses(
        (status = 200, description = "A page of runs, newest first", body = RunPage),
        (status = 400, description = "A malformed filter, `limit` or `after`", body = ErrorBody),
        (status = 404, description = "No job has this name", body = ErrorBody),
    )
)]
pub async fn list(
    State(state): State<AppState>,
    Extension(who): Extension<Principal>,
    Query(q): Query<ListQuery>,
    Query(page): Query<PageQuery>,
) -> ApiResult<Json<RunPage>> {
    let page = page.parse()?;
    let statuses: Vec<&str> = RunStatus::ALL.iter().map(|s| s.as_str()).collect();
    let filter = RunFilter {
        task_id: query_param("task", q.task.as_deref(), "a task id")?,
        status: query_param(
            "status",
            q.status.as_deref(),
            &format!("one of {}", statuses.join(", ")),
        )?,
        before_id: page.before_id,
        limit: page.limit,
        ..RunFilter::default()
    };
    let runs = usecase::runs::list(&state.ports, &who, q.job.as_deref(), filter).await?;
    Ok(Json(PageView::of(runs, RunView::from)))
}

/// The path parameter of `/api/v1/runs/{id}`.
const RUN_ID: &str = "The run's id";

/// `GET /api/v1/runs/{id}`: one run (one attempt on one executor).
#[utoipa::path(
    get,
    path = "/api/v1/runs/{id}",
    operation_id = "get_run",
    params(("id" = i64, Path, description = RUN_ID)),
    responses(
        (status = 200, description = "The run", body = RunView),
        (status = 400, description = "`id` is not an integer", body = ErrorBody),
        (status = 404, description = "No such run", body = ErrorBody),
    )
)]
pub async fn get(
    State(state): State<AppState>,
    Extension(who): Extension<Principal>,
    PathId(id): PathId,
) -> ApiResult<Json<RunView>> {
    Ok(Json(
        usecase::runs::get(&state.ports, &who, id).await?.into(),
    ))
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct LogQuery {
    /// The first line to return (1-based); 1 by default.
    #[param(value_type = Option<u64>, minimum = 1)]
    from_line: Option<String>,
    /// Lines to return at most: 1,000 by default, capped at 10,000.
    #[param(value_type = Option<u64>, minimum = 1)]
    limit: Option<String>,
}

/// `GET /api/v1/runs/{id}/log?from_line=N[&limit=M]`: lines from the executor that ran it.
#[utoipa::path(
    get,
    path = "/api/v1/runs/{id}/log",
    operation_id = "run_log",
    params(("id" = i64, Path, description = RUN_ID), LogQuery),
    responses(
        (status = 200, description = "A page of the run's log", body = openapi::LogPage),
        (status = 400, description = "A malformed `id`, `from_line` or `limit`", body = ErrorBody),
        (status = 404, description = "No such run", body = ErrorBody),
        (status = 503, description = "The executor that has the log does not answer", body = ErrorBody),
    )
)]
pub async fn log(
    State(state): State<AppState>,
    Extension(who): Extension<Principal>,
    PathId(id): PathId,
    Query(q): Query<LogQuery>,
) -> ApiResult<Json<LogPage>> {
    let from_line =
        query_param::<u64>("from_line", q.from_line.as_deref(), "a line number from 1")?
            .unwrap_or(1);
    if from_line == 0 {
        return Err(ApiError::BadRequest(
            "query parameter `from_line` is 1-based: the first line is 1".into(),
        ));
    }
    let max_lines =
        capped_count("limit", q.limit.as_deref(), MAX_LOG_LINES)?.unwrap_or(DEFAULT_LOG_LINES);
    Ok(Json(
        usecase::runs::log(&state.ports, &who, id, from_line, max_lines).await?,
    ))
}

#[derive(Debug, Serialize, ToSchema)]
pub struct KillAnswer {
    /// The run's id.
    id: i64,
    /// The executor stopped the run (`false`: it had already ended there).
    killed: bool,
    /// The executor's words.
    message: String,
}

/// `POST /api/v1/runs/{id}/kill`: 202 once the executor has the request; the run ends
/// `killed` when it reports back. A finished run is a 409.
#[utoipa::path(
    post,
    path = "/api/v1/runs/{id}/kill",
    operation_id = "kill_run",
    params(("id" = i64, Path, description = RUN_ID)),
    responses(
        (status = 202, description = "The executor has the request", body = KillAnswer),
        (status = 400, description = "`id` is not an integer", body = ErrorBody),
        (status = 404, description = "No such run", body = ErrorBody),
        (status = 409, description = "The run has finished, or no executor has it", body = ErrorBody),
        (status = 503, description = "The executor does not answer", body = ErrorBody),
    )
)]
pub async fn kill(
    State(state): State<AppState>,
    Extension(who): Extension<Principal>,
    PathId(id): PathId,
) -> ApiResult<(StatusCode, Json<KillAnswer>)> {
    let ack = usecase::runs::kill(&state.ports, &who, id).await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(KillAnswer {
            id,
            killed: ack.killed,
            message: ack.message,
        }),
    ))
}
