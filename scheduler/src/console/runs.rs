//! The runs' pages: the filtered list, one run with its live log, and killing it.

use askama::Template;
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Redirect, Response};
use axum::{Extension, Json};
use serde::Deserialize;

use super::auth::Session;
use super::pages::*;
use super::{Console, PREFIX, PageResult, When, render};
use crate::model::{RunFilter, RunStatus};
use crate::usecase;
use crate::usecase::Error;

pub struct RunRow {
    pub(super) id: i64,
    pub(super) job_id: i64,
    pub(super) task_id: i64,
    pub(super) attempt: i32,
    pub(super) shard: String,
    pub(super) executor: String,
    pub(super) status: String,
    pub(super) finished: bool,
    pub(super) scheduled: When,
    pub(super) started: Option<When>,
    pub(super) ended: Option<When>,
    pub(super) exit_code: String,
    pub(super) message: String,
}

impl From<&crate::model::Run> for RunRow {
    fn from(r: &crate::model::Run) -> Self {
        RunRow {
            id: r.id,
            job_id: r.job_id,
            task_id: r.task_id,
            attempt: r.attempt,
            shard: format!("{}/{}", r.shard_index + 1, r.shard_total),
            executor: r.executor.clone().unwrap_or_default(),
            status: r.status.to_string(),
            finished: r.status.is_final(),
            scheduled: When::of(r.scheduled_at),
            started: When::opt(r.started_at),
            ended: When::opt(r.finished_at),
            exit_code: r.exit_code.map(|c| c.to_string()).unwrap_or_default(),
            message: r.message.clone().unwrap_or_default(),
        }
    }
}

#[derive(Template)]
#[template(path = "runs.html")]
struct RunsPage {
    chrome: Chrome,
    job: String,
    statuses: Vec<Opt>,
    runs: Vec<RunRow>,
    next: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
pub struct RunsQuery {
    job: Option<String>,
    status: Option<String>,
    before: Option<i64>,
}

pub async fn runs(
    State(console): State<Console>,
    Extension(s): Extension<Session>,
    Query(q): Query<RunsQuery>,
) -> PageResult {
    let status = empty_none(&q.status);
    let parsed = match status {
        None => None,
        Some(st) => Some(st.parse::<RunStatus>().map_err(Error::BadRequest)?),
    };
    let filter = RunFilter {
        status: parsed,
        before_id: q.before,
        limit: PAGE,
        ..RunFilter::default()
    };
    let page = usecase::runs::list(&console.ports, &s.who, empty_none(&q.job), filter).await?;
    let next = next_url(
        "runs",
        &page,
        &[("job", empty_none(&q.job)), ("status", status)],
    );
    render(&RunsPage {
        chrome: Chrome::of(&s, "runs"),
        job: empty_none(&q.job).unwrap_or_default().to_owned(),
        statuses: options(
            std::iter::once("").chain(RunStatus::ALL.iter().map(|s| s.as_str())),
            status.unwrap_or_default(),
        ),
        runs: page.items.iter().map(RunRow::from).collect(),
        next,
    })
}

#[derive(Template)]
#[template(path = "run.html")]
struct RunPage {
    chrome: Chrome,
    run: RunRow,
    message: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
pub struct RunQuery {
    message: Option<String>,
}

pub async fn run(
    State(console): State<Console>,
    Extension(s): Extension<Session>,
    Path(id): Path<i64>,
    Query(q): Query<RunQuery>,
) -> PageResult {
    let run = usecase::runs::get(&console.ports, &s.who, id).await?;
    render(&RunPage {
        chrome: Chrome::of(&s, "runs"),
        run: RunRow::from(&run),
        message: q.message,
    })
}

#[derive(Debug, Default, Deserialize)]
pub struct LogQuery {
    from_line: Option<u64>,
}

/// `GET /console/runs/{id}/log?from_line=`: the next lines of the run's log as JSON, for
/// the live tail (`complete` tells the script to stop).
pub async fn run_log(
    State(console): State<Console>,
    Extension(s): Extension<Session>,
    Path(id): Path<i64>,
    Query(q): Query<LogQuery>,
) -> Response {
    let from_line = q.from_line.unwrap_or(1).max(1);
    match usecase::runs::log(&console.ports, &s.who, id, from_line, LOG_LINES).await {
        Ok(page) => Json(page).into_response(),
        Err(e) => e.into_response(),
    }
}

pub async fn kill_run(
    State(console): State<Console>,
    Extension(s): Extension<Session>,
    Path(id): Path<i64>,
) -> PageResult {
    let ack = usecase::runs::kill(&console.ports, &s.who, id).await?;
    let to = format!("{PREFIX}/runs/{id}?message={}", encode(&ack.message));
    Ok(Redirect::to(&to).into_response())
}
