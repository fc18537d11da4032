//! `/api/v1/jobs`: creating, reading, changing, deleting and triggering jobs.

use std::collections::HashSet;
use std::str::FromStr;

use axum::Extension;
use axum::extract::State;
use axum::http::StatusCode;
use rota_proto::BlockStrategy;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::AppState;
use super::error::{ApiError, ApiResult};
use super::extract::{
    Json, NameOrId, OptionalJson, PageQuery, PathParam, Query, nullable, query_flag,
};
use super::openapi::{BlockName, ErrorBody};
use super::tasks::store_tasks;
use super::validate::{self, invalid};
use super::views::{JobPage, JobView, PageView};
use crate::access::{Need, Principal};
use crate::backoff::Backoff;
use crate::model::{Job, JobSpec, NewTask, Run, Task, TaskKind, now_ms};
use crate::route::Route;
use crate::schedule::{CompiledSchedule, Misfire, Schedule};
use crate::store::{self, Store};

const DEFAULT_TIMEOUT_MS: i64 = 300_000;
const MAX_TIMEOUT_MS: i64 = 86_400_000;
const DEFAULT_MAX_ATTEMPTS: i64 = 1;
const MAX_ATTEMPTS: i64 = 100;
const DEFAULT_MEMORY_MB: i64 = 64;
const MAX_MEMORY_MB: i64 = 4096;
const MAX_CONCURRENCY: i64 = 1_000_000;
const MAX_CHILD_JOBS: usize = 100;
const MAX_NO_EXECUTOR_TIMEOUT_MS: i64 = 7 * 86_400_000;

/// A job's settings as sent to `POST` (name, app, plugin and schedule required) or `PATCH`
/// (any subset, merged onto the stored job). Integers are read as `i64` so that an
/// out-of-range value is a 422 naming its range rather than a serde overflow.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct JobFields {
    /// Unique; any text up to 200 characters.
    name: Option<String>,
    /// The executor group that runs it.
    app: Option<String>,
    /// The plugin's name or id; runs use its latest version.
    plugin: Option<NameOrId>,
    schedule: Option<Schedule>,
    /// The runs' stdin, `ROTA_PARAMS` and argv; `null` clears them.
    #[serde(default, deserialize_with = "nullable")]
    params: Option<Option<String>>,
    /// `first` by default.
    #[schema(value_type = Option<Route>)]
    route: Option<String>,
    /// `serial` by default.
    #[schema(value_type = Option<BlockName>)]
    block: Option<String>,
    /// `do_nothing` by default.
    #[schema(value_type = Option<Misfire>)]
    misfire: Option<String>,
    /// 300,000 (5 minutes) by default.
    timeout_ms: Option<i64>,
    /// 1 to 100; 1 by default.
    max_attempts: Option<i64>,
    /// Exponential from 1 s, factor 2, at most an hour, by default.
    backoff: Option<Backoff>,
    /// 64 by default, up to the executor's cap.
    memory_mb: Option<i64>,
    /// Runs of this job at once across executors; `null` for no limit.
    #[serde(default, deserialize_with = "nullable")]
    max_concurrency: Option<Option<i64>>,
    /// Jobs (names or ids) triggered after each successful run.
    child_jobs: Option<Vec<NameOrId>>,
    /// Where the plugin may send HTTP requests (the `rota` import `http_request`): origins
    /// such as `https://api.example.com` or URL prefixes such as
    /// `https://api.example.com/v1/orders`; at most 32. Empty (the default): no network.
    http_allow: Option<Vec<String>>,
    /// `true` by default; a disabled job does not fire on its schedule.
    enabled: Option<bool>,
    /// How long a fire waits for a live executor of the app before it fails as an attempt
    /// (1,000 to 604,800,000 ms); `null` for the default, 600,000 (10 minutes).
    #[serde(default, deserialize_with = "nullable")]
    no_executor_timeout_ms: Option<Option<i64>>,
}

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
        (status = 422, description = "An invalid value, or a plugin or child job that does not exist", body = ErrorBody),
    )
)]
pub async fn create(
    State(state): State<AppState>,
    Extension(who): Extension<Principal>,
    Json(fields): Json<JobFields>,
) -> ApiResult<(StatusCode, Json<JobView>)> {
    let (spec, schedule) = build_spec(&state, &who, fields, None).await?;
    who.check_app(&spec.app)?;
    let job = state.node.create_job(&spec, &schedule).await?;
    state
        .node
        .audit(&who.name, "create job", &job.spec.name)
        .await;
    tracing::info!(job.id = job.id, job.name = %job.spec.name, "job created");
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
    let job = find_job(state.node.store(), &id).await?;
    who.check(&job.spec.app, Need::Read, &format!("job `{id}`"))?;
    Ok(Json(job.into()))
}

/// `PATCH /api/v1/jobs/{id}`: the given fields replace the stored ones; everything is
/// validated again. The next fire time is recomputed when the schedule or `enabled`
/// changed, and kept otherwise (so an unrelated edit does not shift a fixed-rate phase).
#[utoipa::path(
    patch,
    path = "/api/v1/jobs/{id}",
    operation_id = "update_job",
    params(("id" = String, Path, description = JOB_ID)),
    request_body(content = JobFields, description = "The fields to change"),
    responses(
        (status = 200, description = "The changed job", body = JobView),
        (status = 400, description = "Malformed JSON", body = ErrorBody),
        (status = 404, description = "No such job", body = ErrorBody),
        (status = 409, description = "Another job has this name", body = ErrorBody),
        (status = 422, description = "An invalid value", body = ErrorBody),
    )
)]
pub async fn update(
    State(state): State<AppState>,
    Extension(who): Extension<Principal>,
    PathParam(id): PathParam,
    Json(fields): Json<JobFields>,
) -> ApiResult<Json<JobView>> {
    let job = find_job(state.node.store(), &id).await?;
    who.check(&job.spec.app, Need::Change, &format!("job `{id}`"))?;
    let (spec, schedule) = build_spec(&state, &who, fields, Some(&job)).await?;
    who.check_app(&spec.app)?;
    let job = state.node.update_job(&job, &spec, &schedule).await?;
    state
        .node
        .audit(&who.name, "update job", &job.spec.name)
        .await;
    Ok(Json(job.into()))
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
    let store = state.node.store();
    let job = find_job(store, &id).await?;
    who.check(&job.spec.app, Need::Change, &format!("job `{id}`"))?;
    let cancelled = state.node.delete_job(job.id, force).await?;
    state.node.job_changed(job.id).await;
    state
        .node
        .audit(&who.name, "delete job", &job.spec.name)
        .await;
    tracing::info!(
        job.id = job.id,
        cancelled_tasks = cancelled.len(),
        "job deleted"
    );
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
    if let Some(params) = &body.params {
        validate::max_bytes("params", params, state.node.config().max_payload_bytes)?;
    }
    let store = state.node.store();
    let job = find_job(store, &id).await?;
    who.check(&job.spec.app, Need::Change, &format!("job `{id}`"))?;
    let now = now_ms();
    let task = NewTask {
        job_id: job.id,
        kind: TaskKind::Manual,
        key: None,
        payload: None,
        params: body.params.or(job.spec.params),
        due_at: now,
        max_attempts: None,
        backoff: None,
        priority: 0,
    };
    let (task_id, _) = *store_tasks(&state, std::slice::from_ref(&task), now)
        .await?
        .first()
        .ok_or_else(|| ApiError::Internal(anyhow::anyhow!("inserting a task returned no id")))?;
    tracing::info!(job.id = job.id, task.id = task_id, "job triggered");
    state
        .node
        .audit(&who.name, "trigger job", &job.spec.name)
        .await;
    Ok((StatusCode::CREATED, Json(Triggered { task_id })))
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
    let jobs = state
        .node
        .store()
        .list_jobs(
            app.as_deref(),
            who.app_filter(),
            search.as_deref(),
            page.before_id,
            page.limit,
        )
        .await?;
    Ok(Json(PageView::of(jobs, JobView::from)))
}

/// A job named in a path: an integer is tried as an id first, then as a name (names are
/// any text, digits included).
pub(crate) async fn find_job(store: &Store, id_or_name: &str) -> ApiResult<Job> {
    if let Ok(id) = id_or_name.parse::<i64>() {
        match store.get_job(id).await {
            Err(store::Error::NotFound(_)) => {}
            other => return Ok(other?),
        }
    }
    match store.get_job_by_name(id_or_name).await {
        Err(store::Error::NotFound(_)) => {
            Err(ApiError::NotFound(format!("job `{id_or_name}` not found")))
        }
        other => Ok(other?),
    }
}

/// Checks `who` against the job `job_id` of a task or run (`what` names it in a 404). A
/// principal scoped to no app needs no lookup; the job of a deleted job's task is in no
/// app a scoped user has.
pub(crate) async fn check_job(
    store: &Store,
    who: &Principal,
    job_id: i64,
    need: Need,
    what: &str,
) -> ApiResult<()> {
    if who.app_filter().is_none() {
        return who.check("", need, what);
    }
    match store.get_job(job_id).await {
        Ok(job) => who.check(&job.spec.app, need, what),
        Err(store::Error::NotFound(_)) => Err(ApiError::NotFound(format!("{what} not found"))),
        Err(e) => Err(e.into()),
    }
}

/// Task `id`, if `who` may read (or change) it.
pub(crate) async fn task_as(
    store: &Store,
    who: &Principal,
    id: i64,
    need: Need,
) -> ApiResult<Task> {
    let task = store.get_task(id).await?;
    check_job(store, who, task.job_id, need, &format!("task {id}")).await?;
    Ok(task)
}

/// Run `id`, if `who` may read (or change) it.
pub(crate) async fn run_as(store: &Store, who: &Principal, id: i64, need: Need) -> ApiResult<Run> {
    let run = store.get_run(id).await?;
    check_job(store, who, run.job_id, need, &format!("run {id}")).await?;
    Ok(run)
}

/// The `job` filter of a list: an id is used as it is (so the tasks and runs of a deleted
/// job stay listable), a name must name an existing job.
pub(super) async fn job_filter(store: &Store, job: Option<&str>) -> ApiResult<Option<i64>> {
    match job.filter(|s| !s.is_empty()) {
        None => Ok(None),
        Some(job) => match job.parse::<i64>() {
            Ok(id) => Ok(Some(id)),
            Err(_) => Ok(Some(find_job(store, job).await?.id)),
        },
    }
}

/// A job referenced from a task (`job`) as the node's job cache has it: one that does not
/// exist is a 422 about `field`.
pub(super) async fn cached_job_ref(
    state: &AppState,
    field: &str,
    r: &NameOrId,
) -> ApiResult<std::sync::Arc<crate::node::JobEntry>> {
    let found = match r {
        NameOrId::Id(id) => state.node.cached_job(*id).await?,
        NameOrId::Name(name) => state.node.cached_job_named(name).await?,
    };
    found.ok_or_else(|| invalid(field, format!("job {r} does not exist")))
}

/// A job referenced from a body (`job`, `child_jobs`): one that does not exist is a 422
/// about `field`.
pub(super) async fn job_ref(store: &Store, field: &str, r: &NameOrId) -> ApiResult<Job> {
    let found = match r {
        NameOrId::Id(id) => store.get_job(*id).await,
        NameOrId::Name(name) => store.get_job_by_name(name).await,
    };
    match found {
        Err(store::Error::NotFound(_)) => Err(invalid(field, format!("job {r} does not exist"))),
        other => Ok(other?),
    }
}

/// Every field's problem with a job, in field order; converted to one [`ApiError`] (the
/// first one's status, every message) for the API, shown field by field in the console.
#[derive(Debug)]
pub struct SpecErrors(pub Vec<ApiError>);

impl From<SpecErrors> for ApiError {
    fn from(SpecErrors(errors): SpecErrors) -> ApiError {
        let message = errors
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ");
        match errors.into_iter().next() {
            Some(first) => first.with_message(message),
            None => ApiError::Internal(anyhow::anyhow!("a job was refused without a reason")),
        }
    }
}

/// Collects field errors: `take` keeps a value or files its error.
struct Collect(Vec<ApiError>);

impl Collect {
    fn take<T>(&mut self, r: ApiResult<T>) -> Option<T> {
        r.map_err(|e| self.0.push(e)).ok()
    }

    fn check(&mut self, r: ApiResult<impl Sized>) {
        self.take(r);
    }
}

/// Validates the fields (merged onto `base` for an update) into a job spec and its
/// compiled schedule, checking every field, so a form can show every problem at once.
pub(crate) async fn build_spec(
    state: &AppState,
    who: &Principal,
    f: JobFields,
    base: Option<&Job>,
) -> Result<(JobSpec, CompiledSchedule), SpecErrors> {
    let store = state.node.store();
    let config = state.node.config();
    let required = |field: &str| {
        ApiError::BadRequest(format!(
            "missing field `{field}`: a new job needs `name`, `app`, `plugin` and `schedule`"
        ))
    };
    let old = base.map(|j| &j.spec);
    let mut bad = Collect(Vec::new());

    let name = bad.take(
        f.name
            .or_else(|| old.map(|s| s.name.clone()))
            .ok_or_else(|| required("name")),
    );
    if let Some(name) = &name {
        bad.check(validate::name("name", name));
    }
    let app = bad.take(
        f.app
            .or_else(|| old.map(|s| s.app.clone()))
            .ok_or_else(|| required("app")),
    );
    if let Some(app) = &app {
        bad.check(validate::app("app", app));
    }

    let plugin = match (f.plugin, old) {
        (Some(r), _) => bad.take(plugin_ref(store, &r).await),
        (None, Some(old)) => Some(old.plugin.clone()),
        (None, None) => bad.take(Err(required("plugin"))),
    };

    let schedule = bad.take(
        f.schedule
            .or_else(|| old.map(|s| s.schedule.clone()))
            .ok_or_else(|| required("schedule")),
    );
    let compiled = match &schedule {
        Some(s) => bad.take(s.compile().map_err(|e| invalid("schedule", e))),
        None => None,
    };

    let params = match f.params {
        Some(p) => p,
        None => old.and_then(|s| s.params.clone()),
    };
    if let Some(p) = &params {
        bad.check(validate::max_bytes("params", p, config.max_payload_bytes));
    }

    let route = match f.route {
        Some(r) => bad.take(Route::from_str(&r).map_err(|e| invalid("route", e))),
        None => Some(old.map(|s| s.route).unwrap_or_default()),
    };
    let block = match f.block {
        Some(b) => bad.take(BlockStrategy::from_str(&b).map_err(|e| invalid("block", e))),
        None => Some(old.map(|s| s.block).unwrap_or_default()),
    };
    let misfire = match f.misfire {
        Some(m) => bad.take(Misfire::from_str(&m).map_err(|e| invalid("misfire", e))),
        None => Some(old.map(|s| s.misfire).unwrap_or_default()),
    };

    let timeout_ms = f
        .timeout_ms
        .or(old.map(|s| s.timeout_ms))
        .unwrap_or(DEFAULT_TIMEOUT_MS);
    bad.check(validate::within(
        "timeout_ms",
        timeout_ms,
        1..=MAX_TIMEOUT_MS,
    ));
    let max_attempts = f
        .max_attempts
        .or(old.map(|s| i64::from(s.max_attempts)))
        .unwrap_or(DEFAULT_MAX_ATTEMPTS);
    bad.check(validate::within(
        "max_attempts",
        max_attempts,
        1..=MAX_ATTEMPTS,
    ));
    let memory_mb = f
        .memory_mb
        .or(old.map(|s| i64::from(s.memory_mb)))
        .unwrap_or(DEFAULT_MEMORY_MB);
    bad.check(validate::within("memory_mb", memory_mb, 1..=MAX_MEMORY_MB));
    let max_concurrency = match f.max_concurrency {
        Some(m) => m,
        None => old.and_then(|s| s.max_concurrency).map(i64::from),
    };
    if let Some(m) = max_concurrency {
        bad.check(validate::within("max_concurrency", m, 1..=MAX_CONCURRENCY));
    }
    let no_executor_timeout_ms = match f.no_executor_timeout_ms {
        Some(t) => t,
        None => old.and_then(|s| s.no_executor_timeout_ms),
    };
    if let Some(t) = no_executor_timeout_ms {
        bad.check(validate::within(
            "no_executor_timeout_ms",
            t,
            1_000..=MAX_NO_EXECUTOR_TIMEOUT_MS,
        ));
    }

    let backoff = f
        .backoff
        .or_else(|| old.map(|s| s.backoff.clone()))
        .unwrap_or_default();
    bad.check(backoff.validate().map_err(|e| invalid("backoff", e)));

    let http_allow = f
        .http_allow
        .or_else(|| old.map(|s| s.http_allow.clone()))
        .unwrap_or_default();
    bad.check(
        rota_proto::allow::AllowList::parse(&http_allow).map_err(|e| invalid("http_allow", e)),
    );

    let child_jobs = match f.child_jobs {
        Some(refs) => bad.take(child_jobs(store, who, &refs, base.map(|j| j.id)).await),
        None => Some(old.map(|s| s.child_jobs.clone()).unwrap_or_default()),
    };

    let (
        Some(name),
        Some(app),
        Some(plugin),
        Some(schedule),
        Some(compiled),
        Some(route),
        Some(block),
        Some(misfire),
        Some(child_jobs),
        true,
    ) = (
        name,
        app,
        plugin,
        schedule,
        compiled,
        route,
        block,
        misfire,
        child_jobs,
        bad.0.is_empty(),
    )
    else {
        return Err(SpecErrors(bad.0));
    };
    let spec = JobSpec {
        name,
        app,
        plugin,
        schedule,
        params,
        route,
        block,
        misfire,
        timeout_ms,
        max_attempts: max_attempts as i32,
        backoff,
        memory_mb: memory_mb as i32,
        max_concurrency: max_concurrency.map(|m| m as i32),
        child_jobs,
        http_allow,
        enabled: f.enabled.or(old.map(|s| s.enabled)).unwrap_or(true),
        no_executor_timeout_ms,
    };
    Ok((spec, compiled))
}

/// The name of the plugin `r` refers to; it must have been uploaded.
async fn plugin_ref(store: &Store, r: &NameOrId) -> ApiResult<String> {
    let found = match r {
        NameOrId::Id(id) => store.get_plugin(*id).await,
        NameOrId::Name(name) => store.latest_plugin(name).await,
    };
    match found {
        Ok(plugin) => Ok(plugin.name),
        Err(store::Error::NotFound(_)) => Err(invalid(
            "plugin",
            format!("plugin {r} does not exist; upload it first with POST /api/v1/plugins?name=…"),
        )),
        Err(e) => Err(e.into()),
    }
}

/// Resolves child job references to ids, in order, without repeats; a job cannot be its
/// own child. A child fires with its parent's success, so naming one is triggering it:
/// `who` must be allowed to change it (else a user of one app could run another app's
/// jobs, XXL-JOB's CVE-2024-42681).
async fn child_jobs(
    store: &Store,
    who: &Principal,
    refs: &[NameOrId],
    this_job: Option<i64>,
) -> ApiResult<Vec<i64>> {
    if refs.len() > MAX_CHILD_JOBS {
        return Err(invalid(
            "child_jobs",
            format!("at most {MAX_CHILD_JOBS} child jobs (got {})", refs.len()),
        ));
    }
    let mut ids = Vec::with_capacity(refs.len());
    let mut seen = HashSet::new();
    for (i, r) in refs.iter().enumerate() {
        let field = format!("child_jobs[{i}]");
        let child = job_ref(store, &field, r).await?;
        who.check(
            &child.spec.app,
            Need::Change,
            &format!("{field}: job `{r}`"),
        )?;
        if Some(child.id) == this_job {
            return Err(invalid(&field, "a job cannot be its own child"));
        }
        if seen.insert(child.id) {
            ids.push(child.id);
        }
    }
    if let Some(this_job) = this_job {
        reject_cycle(store, &ids, this_job).await?;
    }
    Ok(ids)
}

/// A chain of child jobs that leads back to `this_job` would run forever: follow the
/// children of `children` and refuse one that does.
async fn reject_cycle(store: &Store, children: &[i64], this_job: i64) -> ApiResult<()> {
    let mut stack = children.to_vec();
    let mut visited = HashSet::new();
    while let Some(id) = stack.pop() {
        if !visited.insert(id) {
            continue;
        }
        let job = match store.get_job(id).await {
            Err(store::Error::NotFound(_)) => continue,
            other => other?,
        };
        if job.spec.child_jobs.contains(&this_job) {
            return Err(invalid(
                "child_jobs",
                format!(
                    "job {id} (`{}`) already runs job {this_job} after it: child jobs must not form a cycle",
                    job.spec.name
                ),
            ));
        }
        stack.extend(job.spec.child_jobs);
    }
    Ok(())
}
