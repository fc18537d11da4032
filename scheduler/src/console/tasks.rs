//! The tasks' pages: the filtered list and one task, with cancelling.

use askama::Template;
use axum::Extension;
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Redirect};
use serde::Deserialize;

use super::auth::Session;
use super::pages::*;
use super::runs::RunRow;
use super::{Console, PREFIX, PageResult, When, render};
use crate::model::{Millis, RunFilter, TaskFilter, TaskState, TaskStatus};
use crate::usecase::{self, Error};

pub struct TaskRow {
    id: i64,
    job_id: i64,
    kind: String,
    key: String,
    status: String,
    due: When,
    attempt: i32,
    cancellable: bool,
    /// Dead: it can be re-driven.
    retryable: bool,
    /// Pending outside any wheel: it can be moved.
    movable: bool,
    priority: i32,
    /// The due time as a `datetime-local` field shows it (UTC, to the second).
    due_local: String,
    last_run_id: Option<i64>,
    payload: String,
    params: String,
    created: When,
    updated: When,
}

impl From<&crate::model::Task> for TaskRow {
    fn from(t: &crate::model::Task) -> Self {
        TaskRow {
            id: t.id,
            job_id: t.job_id,
            kind: t.kind.to_string(),
            key: t.key.clone().unwrap_or_default(),
            status: t.status.to_string(),
            due: When::of(t.due_at),
            attempt: t.attempt,
            cancellable: matches!(
                t.status,
                TaskStatus::Pending | TaskStatus::Claimed | TaskStatus::Waiting | TaskStatus::Ready
            ),
            retryable: t.status == TaskStatus::Dead,
            movable: matches!(
                t.status,
                TaskStatus::Pending | TaskStatus::Waiting | TaskStatus::Ready
            ),
            priority: t.priority,
            due_local: chrono::DateTime::from_timestamp_millis(t.due_at)
                .unwrap_or_default()
                .format("%Y-%m-%dT%H:%M:%S")
                .to_string(),
            last_run_id: t.last_run_id,
            payload: t.payload.clone().unwrap_or_default(),
            params: t.params.clone().unwrap_or_default(),
            created: When::of(t.created_at),
            updated: When::of(t.updated_at),
        }
    }
}

#[derive(Template)]
#[template(path = "tasks.html")]
struct TasksPage {
    chrome: Chrome,
    job: String,
    key: String,
    due_from: String,
    due_to: String,
    statuses: Vec<Opt>,
    tasks: Vec<TaskRow>,
    next: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
pub struct TasksQuery {
    job: Option<String>,
    status: Option<String>,
    key: Option<String>,
    /// Due from / before, as a `datetime-local` field sends it, in UTC.
    due_from: Option<String>,
    due_to: Option<String>,
    before: Option<i64>,
}

/// A `datetime-local` value (`2026-11-30T09:15`, seconds optional), read as UTC.
pub(super) fn utc_field(field: &str, text: Option<&str>) -> Result<Option<Millis>, Error> {
    let Some(text) = text else { return Ok(None) };
    ["%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S"]
        .iter()
        .find_map(|f| chrono::NaiveDateTime::parse_from_str(text, f).ok())
        .map(|t| Some(t.and_utc().timestamp_millis()))
        .ok_or_else(|| {
            Error::BadRequest(format!(
                "{field}: `{}` is not a date and time like 2026-11-30T09:15",
                usecase::validate::excerpt(text)
            ))
        })
}

pub async fn tasks(
    State(console): State<Console>,
    Extension(s): Extension<Session>,
    Query(q): Query<TasksQuery>,
) -> PageResult {
    let status = empty_none(&q.status);
    let state = match status {
        None => None,
        Some(st) => Some(TaskState::Is(
            st.parse::<TaskStatus>().map_err(Error::BadRequest)?,
        )),
    };
    let key = empty_none(&q.key).map(str::to_owned);
    let (due_from, due_to) = (empty_none(&q.due_from), empty_none(&q.due_to));
    let filter = TaskFilter {
        due_from: utc_field("due from", due_from)?,
        due_to: utc_field("due before", due_to)?,
        state,
        key: key.clone(),
        before_id: q.before,
        limit: PAGE,
        ..TaskFilter::default()
    };
    let page = usecase::tasks::list(&console.ports, &s.who, empty_none(&q.job), filter).await?;
    let next = next_url(
        "tasks",
        &page,
        &[
            ("job", empty_none(&q.job)),
            ("status", status),
            ("key", key.as_deref()),
            ("due_from", due_from),
            ("due_to", due_to),
        ],
    );
    render(&TasksPage {
        chrome: Chrome::of(&s, "tasks"),
        job: empty_none(&q.job).unwrap_or_default().to_owned(),
        key: key.unwrap_or_default(),
        due_from: due_from.unwrap_or_default().to_owned(),
        due_to: due_to.unwrap_or_default().to_owned(),
        statuses: options(
            std::iter::once("").chain(TaskStatus::ALL.iter().map(|s| s.as_str())),
            status.unwrap_or_default(),
        ),
        tasks: page.items.iter().map(TaskRow::from).collect(),
        next,
    })
}

#[derive(Template)]
#[template(path = "task.html")]
struct TaskPage {
    chrome: Chrome,
    task: TaskRow,
    runs: Vec<RunRow>,
}

pub async fn task(
    State(console): State<Console>,
    Extension(s): Extension<Session>,
    Path(id): Path<i64>,
) -> PageResult {
    let task = usecase::tasks::get(&console.ports, &s.who, id).await?;
    let runs = usecase::runs::list(
        &console.ports,
        &s.who,
        None,
        RunFilter {
            task_id: Some(id),
            limit: PAGE,
            ..RunFilter::default()
        },
    )
    .await?;
    render(&TaskPage {
        chrome: Chrome::of(&s, "tasks"),
        task: TaskRow::from(&task),
        runs: runs.items.iter().map(RunRow::from).collect(),
    })
}

pub async fn cancel_task(
    State(console): State<Console>,
    Extension(s): Extension<Session>,
    Path(id): Path<i64>,
) -> PageResult {
    usecase::tasks::cancel(&console.ports, &s.who, id).await?;
    Ok(Redirect::to(&format!("{PREFIX}/tasks/{id}")).into_response())
}

pub async fn retry_task(
    State(console): State<Console>,
    Extension(s): Extension<Session>,
    Path(id): Path<i64>,
) -> PageResult {
    usecase::queue::retry(&console.ports, &s.who, id).await?;
    Ok(Redirect::to(&format!("{PREFIX}/tasks/{id}")).into_response())
}

/// The reschedule form: a new due time (UTC, as a `datetime-local` field sends it) and
/// optionally a new priority.
#[derive(Debug, Default, Deserialize)]
pub struct RescheduleForm {
    run_at: String,
    #[serde(default)]
    priority: String,
}

pub async fn reschedule_task(
    State(console): State<Console>,
    Extension(s): Extension<Session>,
    Path(id): Path<i64>,
    axum::Form(form): axum::Form<RescheduleForm>,
) -> PageResult {
    let at = utc_field("run at", empty_none(&Some(form.run_at.clone())))?
        .ok_or_else(|| Error::BadRequest("run at: give the new due time".into()))?;
    let mut errors = Errors::new();
    let priority = super::jobs::int("priority", &form.priority, &mut errors);
    if let Some(e) = errors.get("priority") {
        return Err(Error::BadRequest(format!("priority: {e}")).into());
    }
    let change = usecase::tasks::Reschedule {
        run_at: Some(When::of(at).iso),
        priority,
        ..usecase::tasks::Reschedule::default()
    };
    usecase::tasks::reschedule(&console.ports, &s.who, id, change).await?;
    Ok(Redirect::to(&format!("{PREFIX}/tasks/{id}")).into_response())
}
