//! `/api/v1/workflows` and `/api/v1/workflow-instances` (SPEC §10): defining workflows,
//! starting instances, reading, cancelling and retrying them.

use axum::Extension;
use axum::extract::State;
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

use super::AppState;
use super::error::ApiResult;
use super::extract::{Json, NameOrId, OptionalJson, PageQuery, PathId, PathParam, Query};
use super::extract::{query_flag, query_param};
use super::openapi::{AnyJson, ErrorBody};
use super::views::{PageView, rfc3339, rfc3339_opt};
use crate::access::{Need, Principal};
use crate::schedule::{Misfire, Schedule};
use crate::store::{Instance, InstanceStep, Workflow};
use crate::usecase;
use crate::usecase::workflows::{StepFields, TimingFields, WorkflowChange, WorkflowFields};
use crate::workflow::{InstanceStatus, Overlap, StepStatus, When};

/// The path parameter of `/api/v1/workflows/{id}`.
const WORKFLOW_ID: &str = "The workflow's id, or its name";
/// The path parameter of `/api/v1/workflow-instances/{id}`.
const INSTANCE_ID: &str = "The instance's id";

/// A step of a workflow, as sent.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WorkflowStepBody {
    /// Unique in the workflow; what `after` and the payload's `steps` call it.
    name: String,
    /// The job whose task the step runs, by name or id, in the workflow's app.
    job: NameOrId,
    /// The steps it runs after (none: it starts with the instance).
    #[serde(default)]
    after: Vec<String>,
    /// When it runs once they are done; `all_succeeded` by default.
    #[schema(value_type = Option<When>)]
    when: Option<String>,
    /// Run once per element of its one predecessor's output (a JSON array).
    #[serde(default)]
    map: bool,
    /// The step's parameters (as a job's `params`).
    params: Option<String>,
}

impl WorkflowStepBody {
    fn into_fields(self) -> StepFields {
        StepFields {
            name: self.name,
            job: self.job,
            after: self.after,
            when: self.when,
            map: self.map,
            params: self.params,
        }
    }
}

/// `POST /api/v1/workflows`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WorkflowBody {
    name: String,
    app: String,
    /// At most 100.
    steps: Vec<WorkflowStepBody>,
    /// `true` by default.
    enabled: Option<bool>,
    /// Starts an instance on its own, as a job fires (none by default).
    schedule: Option<Schedule>,
    /// `do_nothing` by default, as jobs'.
    #[schema(value_type = Option<Misfire>)]
    misfire: Option<String>,
    /// What a scheduled fire does while an instance runs: `skip` (the default), `queue`
    /// or `allow`.
    #[schema(value_type = Option<Overlap>)]
    overlap: Option<String>,
}

/// `PATCH /api/v1/workflows/{id}`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WorkflowPatch {
    /// New steps: a new version (running instances keep theirs).
    steps: Option<Vec<WorkflowStepBody>>,
    enabled: Option<bool>,
    /// A new schedule (`{"kind": "none"}` removes it).
    schedule: Option<Schedule>,
    #[schema(value_type = Option<Misfire>)]
    misfire: Option<String>,
    #[schema(value_type = Option<Overlap>)]
    overlap: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct StepView {
    pub name: String,
    /// The job's id.
    pub job: i64,
    pub after: Vec<String>,
    #[schema(value_type = When)]
    pub when: String,
    pub map: bool,
    pub params: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct WorkflowView {
    pub id: i64,
    pub name: String,
    pub app: String,
    pub version: i32,
    pub steps: Vec<StepView>,
    pub enabled: bool,
    /// `null`: it starts only when asked.
    pub schedule: Option<Schedule>,
    #[schema(value_type = Misfire)]
    pub misfire: String,
    #[schema(value_type = Overlap)]
    pub overlap: String,
    /// Its next scheduled fire.
    #[schema(format = DateTime)]
    pub next_fire_at: Option<String>,
    #[schema(format = DateTime)]
    pub created_at: String,
    #[schema(format = DateTime)]
    pub updated_at: String,
}

impl From<Workflow> for WorkflowView {
    fn from(w: Workflow) -> Self {
        WorkflowView {
            id: w.id,
            name: w.name,
            app: w.app,
            version: w.version,
            steps: w
                .steps
                .into_iter()
                .map(|s| StepView {
                    name: s.name,
                    job: s.job_id,
                    after: s.after,
                    when: s
                        .when
                        .unwrap_or_else(|| When::AllSucceeded.as_str().to_owned()),
                    map: s.map,
                    params: s.params,
                })
                .collect(),
            enabled: w.enabled,
            schedule: w.timing.schedule,
            misfire: w.timing.misfire.as_str().to_owned(),
            overlap: w.timing.overlap.as_str().to_owned(),
            next_fire_at: w.next_fire_at.filter(|_| w.enabled).map(rfc3339),
            created_at: rfc3339(w.created_at),
            updated_at: rfc3339(w.updated_at),
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct InstanceStepView {
    pub name: String,
    pub status: StepStatus,
    /// The step's task (a mapped step's first element's).
    pub task: Option<i64>,
    /// Every run of the step's tasks, oldest first.
    pub runs: Vec<i64>,
    #[schema(value_type = AnyJson)]
    pub output: Option<Value>,
    /// A mapped step's elements.
    pub items: Option<ItemsView>,
    /// Why the step failed, when the workflow says so (not its task).
    pub message: Option<String>,
    #[schema(format = DateTime)]
    pub started_at: Option<String>,
    #[schema(format = DateTime)]
    pub finished_at: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ItemsView {
    pub total: i64,
    pub succeeded: i64,
    pub failed: i64,
    pub running: i64,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct InstanceView {
    pub id: i64,
    /// The workflow's id.
    pub workflow: i64,
    pub version: i32,
    pub status: InstanceStatus,
    #[schema(value_type = AnyJson)]
    pub input: Value,
    /// `{"<last step>": its output, …}` once it ended.
    #[schema(value_type = AnyJson)]
    pub output: Option<Value>,
    pub key: Option<String>,
    #[schema(format = DateTime)]
    pub created_at: String,
    #[schema(format = DateTime)]
    pub finished_at: Option<String>,
    pub steps: Vec<InstanceStepView>,
}

impl From<InstanceStep> for InstanceStepView {
    fn from(s: InstanceStep) -> Self {
        InstanceStepView {
            name: s.name,
            status: s.status,
            task: s.task_id,
            runs: s.runs,
            output: s.output,
            items: s.items.map(|i| ItemsView {
                total: i.total,
                succeeded: i.succeeded,
                failed: i.failed,
                running: i.running,
            }),
            message: s.message,
            started_at: rfc3339_opt(s.started_at),
            finished_at: rfc3339_opt(s.finished_at),
        }
    }
}

impl From<Instance> for InstanceView {
    fn from(i: Instance) -> Self {
        InstanceView {
            id: i.id,
            workflow: i.workflow_id,
            version: i.version,
            status: i.status,
            input: i.input,
            output: i.output,
            key: i.key,
            created_at: rfc3339(i.created_at),
            finished_at: rfc3339_opt(i.finished_at),
            steps: i.steps.into_iter().map(Into::into).collect(),
        }
    }
}

pub type WorkflowPage = PageView<WorkflowView>;
pub type InstancePage = PageView<InstanceView>;

/// `POST /api/v1/workflows`: a workflow at version 1.
#[utoipa::path(
    post,
    path = "/api/v1/workflows",
    operation_id = "create_workflow",
    tag = "workflows",
    request_body = WorkflowBody,
    responses(
        (status = 201, description = "The new workflow", body = WorkflowView),
        (status = 400, description = "Malformed JSON, or a required field is missing", body = ErrorBody),
        (status = 404, description = "A step's job does not exist", body = ErrorBody),
        (status = 409, description = "A workflow with this name exists", body = ErrorBody),
        (status = 422, description = "An invalid graph (a cycle, an unknown or duplicate step, `map` without one predecessor, more than 100 steps, an unknown `when`) or a job of another app, named", body = ErrorBody),
    )
)]
pub async fn create(
    State(state): State<AppState>,
    Extension(who): Extension<Principal>,
    Json(body): Json<WorkflowBody>,
) -> ApiResult<(StatusCode, Json<WorkflowView>)> {
    let fields = WorkflowFields {
        name: body.name,
        app: body.app,
        steps: body
            .steps
            .into_iter()
            .map(WorkflowStepBody::into_fields)
            .collect(),
        enabled: body.enabled.unwrap_or(true),
        timing: TimingFields {
            schedule: body.schedule,
            misfire: body.misfire,
            overlap: body.overlap,
        },
    };
    let wf = usecase::workflows::create(&state.ports, &who, fields).await?;
    Ok((StatusCode::CREATED, Json(wf.into())))
}

/// `GET /api/v1/workflows`: every workflow the caller sees, by name.
#[utoipa::path(
    get,
    path = "/api/v1/workflows",
    operation_id = "list_workflows",
    tag = "workflows",
    responses((status = 200, description = "The workflows", body = WorkflowPage))
)]
pub async fn list(
    State(state): State<AppState>,
    Extension(who): Extension<Principal>,
) -> ApiResult<Json<WorkflowPage>> {
    let all = usecase::workflows::list(&state.ports, &who).await?;
    Ok(Json(PageView::all(
        all.into_iter().map(Into::into).collect(),
    )))
}

/// `GET /api/v1/workflows/{id}`.
#[utoipa::path(
    get,
    path = "/api/v1/workflows/{id}",
    operation_id = "get_workflow",
    tag = "workflows",
    params(("id" = String, Path, description = WORKFLOW_ID)),
    responses(
        (status = 200, description = "The workflow at its current version", body = WorkflowView),
        (status = 404, description = "No such workflow", body = ErrorBody),
    )
)]
pub async fn get(
    State(state): State<AppState>,
    Extension(who): Extension<Principal>,
    PathParam(id): PathParam,
) -> ApiResult<Json<WorkflowView>> {
    let wf = usecase::workflows::get_as(&state.ports, &who, &id, Need::Read).await?;
    Ok(Json(wf.into()))
}

/// `PATCH /api/v1/workflows/{id}`: new steps make a new version; running instances keep
/// theirs.
#[utoipa::path(
    patch,
    path = "/api/v1/workflows/{id}",
    operation_id = "update_workflow",
    tag = "workflows",
    params(("id" = String, Path, description = WORKFLOW_ID)),
    request_body = WorkflowPatch,
    responses(
        (status = 200, description = "The workflow", body = WorkflowView),
        (status = 400, description = "Malformed JSON", body = ErrorBody),
        (status = 404, description = "No such workflow, or a step's job does not exist", body = ErrorBody),
        (status = 422, description = "An invalid graph, named", body = ErrorBody),
    )
)]
pub async fn update(
    State(state): State<AppState>,
    Extension(who): Extension<Principal>,
    PathParam(id): PathParam,
    Json(body): Json<WorkflowPatch>,
) -> ApiResult<Json<WorkflowView>> {
    let change = WorkflowChange {
        steps: body
            .steps
            .map(|s| s.into_iter().map(WorkflowStepBody::into_fields).collect()),
        enabled: body.enabled,
        timing: TimingFields {
            schedule: body.schedule,
            misfire: body.misfire,
            overlap: body.overlap,
        },
    };
    let wf = usecase::workflows::update(&state.ports, &who, &id, change).await?;
    Ok(Json(wf.into()))
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct DeleteQuery {
    /// Delete it even while instances run (they run on to their end).
    #[param(value_type = Option<bool>)]
    force: Option<String>,
}

/// `DELETE /api/v1/workflows/{id}[?force=true]`.
#[utoipa::path(
    delete,
    path = "/api/v1/workflows/{id}",
    operation_id = "delete_workflow",
    tag = "workflows",
    params(("id" = String, Path, description = WORKFLOW_ID), DeleteQuery),
    responses(
        (status = 204, description = "Deleted"),
        (status = 400, description = "`force` is not `true` or `false`", body = ErrorBody),
        (status = 404, description = "No such workflow", body = ErrorBody),
        (status = 409, description = "Instances are running (without `force`)", body = ErrorBody),
    )
)]
pub async fn delete(
    State(state): State<AppState>,
    Extension(who): Extension<Principal>,
    PathParam(id): PathParam,
    Query(q): Query<DeleteQuery>,
) -> ApiResult<StatusCode> {
    let force = query_flag("force", q.force.as_deref())?;
    usecase::workflows::delete(&state.ports, &who, &id, force).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /api/v1/workflows/{id}/instances`.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct InstanceStart {
    /// Any JSON: every step's payload carries it as `input` (`null` when left out).
    #[serde(default)]
    #[schema(value_type = AnyJson, required = false)]
    input: Option<Value>,
    /// An idempotency key: a second start with it returns the first instance.
    key: Option<String>,
}

/// `POST /api/v1/workflows/{id}/instances`: starts an instance (its first steps' tasks are
/// created at once); with a known `key`, that instance, 200.
#[utoipa::path(
    post,
    path = "/api/v1/workflows/{id}/instances",
    operation_id = "start_workflow",
    tag = "workflows",
    params(("id" = String, Path, description = WORKFLOW_ID)),
    request_body(content = Option<InstanceStart>, description = "May be left out"),
    responses(
        (status = 201, description = "The new instance", body = InstanceView),
        (status = 200, description = "The instance this `key` started before", body = InstanceView),
        (status = 400, description = "Malformed JSON", body = ErrorBody),
        (status = 404, description = "No such workflow", body = ErrorBody),
        (status = 409, description = "The workflow is disabled", body = ErrorBody),
        (status = 413, description = "`input` is larger than the scheduler accepts", body = ErrorBody),
        (status = 422, description = "An invalid `key`", body = ErrorBody),
    )
)]
pub async fn start(
    State(state): State<AppState>,
    Extension(who): Extension<Principal>,
    PathParam(id): PathParam,
    OptionalJson(body): OptionalJson<InstanceStart>,
) -> ApiResult<(StatusCode, Json<InstanceView>)> {
    let body = body.unwrap_or_default();
    let input = body.input.unwrap_or(Value::Null);
    let (instance, created) =
        usecase::workflows::start(&state.ports, &who, &id, input, body.key).await?;
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(instance.into())))
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct InstancesQuery {
    /// Only this workflow's instances (a name or an id).
    workflow: Option<String>,
    /// Only instances in this status.
    #[param(value_type = Option<InstanceStatus>)]
    status: Option<String>,
}

/// `GET /api/v1/workflow-instances?workflow=&status=&limit=&after=`: newest first.
#[utoipa::path(
    get,
    path = "/api/v1/workflow-instances",
    operation_id = "list_workflow_instances",
    tag = "workflows",
    params(InstancesQuery, PageQuery),
    responses(
        (status = 200, description = "A page of instances, newest first", body = InstancePage),
        (status = 400, description = "A malformed `status`, `limit` or `after`", body = ErrorBody),
        (status = 404, description = "No such workflow", body = ErrorBody),
    )
)]
pub async fn list_instances(
    State(state): State<AppState>,
    Extension(who): Extension<Principal>,
    Query(q): Query<InstancesQuery>,
    Query(page): Query<PageQuery>,
) -> ApiResult<Json<InstancePage>> {
    let page = page.parse()?;
    let statuses: Vec<&str> = InstanceStatus::ALL.iter().map(|s| s.as_str()).collect();
    let status: Option<InstanceStatus> = query_param(
        "status",
        q.status.as_deref(),
        &format!("one of {}", statuses.join(", ")),
    )?;
    let found = usecase::workflows::list_instances(
        &state.ports,
        &who,
        q.workflow.as_deref(),
        status,
        page.before_id,
        page.limit,
    )
    .await?;
    Ok(Json(PageView::of(found, InstanceView::from)))
}

/// `GET /api/v1/workflow-instances/{id}`: the instance with each step's status, task,
/// runs and output.
#[utoipa::path(
    get,
    path = "/api/v1/workflow-instances/{id}",
    operation_id = "get_workflow_instance",
    tag = "workflows",
    params(("id" = i64, Path, description = INSTANCE_ID)),
    responses(
        (status = 200, description = "The instance", body = InstanceView),
        (status = 400, description = "`id` is not an integer", body = ErrorBody),
        (status = 404, description = "No such instance", body = ErrorBody),
    )
)]
pub async fn get_instance(
    State(state): State<AppState>,
    Extension(who): Extension<Principal>,
    PathId(id): PathId,
) -> ApiResult<Json<InstanceView>> {
    let instance = usecase::workflows::instance_as(&state.ports, &who, id, Need::Read).await?;
    Ok(Json(instance.into()))
}

/// `POST /api/v1/workflow-instances/{id}/cancel`: pending steps cancelled, running ones'
/// runs killed; the instance `cancelled`.
#[utoipa::path(
    post,
    path = "/api/v1/workflow-instances/{id}/cancel",
    operation_id = "cancel_workflow_instance",
    tag = "workflows",
    params(("id" = i64, Path, description = INSTANCE_ID)),
    responses(
        (status = 200, description = "The cancelled instance", body = InstanceView),
        (status = 400, description = "`id` is not an integer", body = ErrorBody),
        (status = 404, description = "No such instance", body = ErrorBody),
        (status = 409, description = "The instance has already ended", body = ErrorBody),
    )
)]
pub async fn cancel(
    State(state): State<AppState>,
    Extension(who): Extension<Principal>,
    PathId(id): PathId,
) -> ApiResult<Json<InstanceView>> {
    let instance = usecase::workflows::cancel(&state.ports, &who, id).await?;
    Ok(Json(instance.into()))
}

/// `POST /api/v1/workflow-instances/{id}/retry`: a failed instance's failed steps run again
/// (a fresh attempt budget; a map's failed elements only) and what they gate is judged
/// again.
#[utoipa::path(
    post,
    path = "/api/v1/workflow-instances/{id}/retry",
    operation_id = "retry_workflow_instance",
    tag = "workflows",
    params(("id" = i64, Path, description = INSTANCE_ID)),
    responses(
        (status = 200, description = "The instance, running again", body = InstanceView),
        (status = 400, description = "`id` is not an integer", body = ErrorBody),
        (status = 404, description = "No such instance", body = ErrorBody),
        (status = 409, description = "The instance has not failed", body = ErrorBody),
    )
)]
pub async fn retry(
    State(state): State<AppState>,
    Extension(who): Extension<Principal>,
    PathId(id): PathId,
) -> ApiResult<Json<InstanceView>> {
    let instance = usecase::workflows::retry(&state.ports, &who, id).await?;
    Ok(Json(instance.into()))
}
