//! `/api/v1/runs`: reading runs, their logs (from the executor that has them) and killing
//! them.

use axum::extract::State;
use axum::http::StatusCode;
use rota_proto::LogPage;
use serde::{Deserialize, Serialize};

use super::AppState;
use super::error::{ApiError, ApiResult};
use super::extract::{Json, PageParams, PathId, Query, query_param};
use super::jobs::job_filter;
use super::views::{PageView, RunView};
use crate::model::{RunFilter, RunStatus};

/// Log lines per request by default, and at most.
const DEFAULT_LOG_LINES: u32 = 1_000;
const MAX_LOG_LINES: u32 = 10_000;

#[derive(Debug, Deserialize)]
pub struct ListQuery {
    job: Option<String>,
    task: Option<String>,
    status: Option<String>,
    limit: Option<String>,
    after: Option<String>,
}

/// `GET /api/v1/runs?job=&task=&status=&limit=&after=`: newest first.
pub async fn list(
    State(state): State<AppState>,
    Query(q): Query<ListQuery>,
) -> ApiResult<Json<PageView<RunView>>> {
    let page = PageParams::parse(q.limit.as_deref(), q.after.as_deref())?;
    let job_id = job_filter(state.node.store(), q.job.as_deref()).await?;
    let statuses: Vec<&str> = RunStatus::ALL.iter().map(|s| s.as_str()).collect();
    let filter = RunFilter {
        job_id,
        task_id: query_param("task", q.task.as_deref(), "a task id")?,
        status: query_param(
            "status",
            q.status.as_deref(),
            &format!("one of {}", statuses.join(", ")),
        )?,
        before_id: page.before_id,
        limit: page.limit,
    };
    let runs = state.node.store().list_runs(&filter).await?;
    Ok(Json(PageView::of(runs, RunView::from)))
}

/// `GET /api/v1/runs/{id}`.
pub async fn get(State(state): State<AppState>, PathId(id): PathId) -> ApiResult<Json<RunView>> {
    Ok(Json(state.node.store().get_run(id).await?.into()))
}

#[derive(Debug, Deserialize)]
pub struct LogQuery {
    from_line: Option<String>,
    limit: Option<String>,
}

/// `GET /api/v1/runs/{id}/log?from_line=N[&limit=M]`: lines from the executor that ran it.
pub async fn log(
    State(state): State<AppState>,
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
    let max_lines = query_param::<u32>("limit", q.limit.as_deref(), "a positive integer")?
        .unwrap_or(DEFAULT_LOG_LINES)
        .clamp(1, MAX_LOG_LINES);
    let run = state.node.store().get_run(id).await?;
    if run.executor.is_none() {
        // Not dispatched yet (or lost before it was): no log anywhere.
        return Ok(Json(LogPage {
            lines: Vec::new(),
            next_line: from_line,
            complete: run.status.is_final(),
        }));
    }
    Ok(Json(state.node.read_log(&run, from_line, max_lines).await?))
}

#[derive(Debug, Serialize)]
pub struct KillAnswer {
    id: i64,
    killed: bool,
    message: String,
}

/// `POST /api/v1/runs/{id}/kill`: 202 once the executor has the request; the run ends
/// `killed` when it reports back. A finished run is a 409.
pub async fn kill(
    State(state): State<AppState>,
    PathId(id): PathId,
) -> ApiResult<(StatusCode, Json<KillAnswer>)> {
    let run = state.node.store().get_run(id).await?;
    if run.status.is_final() {
        return Err(ApiError::Conflict(format!(
            "run {id} has already finished ({})",
            run.status
        )));
    }
    let ack = state.node.kill_run(&run).await?;
    tracing::info!(run.id = id, killed = ack.killed, "kill requested");
    Ok((
        StatusCode::ACCEPTED,
        Json(KillAnswer {
            id,
            killed: ack.killed,
            message: ack.message,
        }),
    ))
}
