//! Executors: the API's lists of live executors and of scheduler nodes, and the signed executor protocol
//! (`/api/executor/v1/*`: register, heartbeat, deregister, callback, plugin download).
//! `docs/protocol.md` describes the protocol end to end.

use std::collections::HashMap;

use axum::Extension;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use rota_proto::{CallbackAck, CallbackBatch, Deregistration, Registration, RegistrationAck};
use serde::{Deserialize, Serialize};
use utoipa::IntoParams;

use super::AppState;
use super::auth::{SignedAt, Signer};
use super::error::{ApiError, ApiResult};
use super::extract::{Json, PathParam, Query};
use super::openapi::ErrorBody;
use super::validate::{self, invalid};
use super::views::{ExecutorPage, ExecutorView, NodePage, NodeView, PageView};

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    /// Only this app's executors.
    app: Option<String>,
}

/// `GET /api/v1/executors?app=`: executors that sent a heartbeat within the dead-after
/// time, by app then address.
#[utoipa::path(
    get,
    path = "/api/v1/executors",
    operation_id = "list_executors",
    params(ListQuery),
    responses(
        (status = 200, description = "Live executors, on one page", body = ExecutorPage),
        (status = 400, description = "A malformed query string", body = ErrorBody),
    )
)]
pub async fn list(
    State(state): State<AppState>,
    Extension(who): Extension<crate::access::Principal>,
    Query(q): Query<ListQuery>,
) -> ApiResult<Json<ExecutorPage>> {
    let app = q.app.filter(|a| !a.is_empty());
    let executors = crate::usecase::cluster::executors(&state.node, &who, app.as_deref()).await?;
    Ok(Json(PageView::all(
        executors.into_iter().map(ExecutorView::from).collect(),
    )))
}

/// `GET /api/v1/nodes`: every scheduler node that ran on this database, live or not, with
/// its measured clock offset.
#[utoipa::path(
    get,
    path = "/api/v1/nodes",
    operation_id = "list_nodes",
    responses(
        (status = 200, description = "The scheduler nodes, by name, on one page", body = NodePage),
    )
)]
pub async fn nodes(State(state): State<AppState>) -> ApiResult<Json<NodePage>> {
    let nodes = crate::usecase::cluster::nodes(&state.node).await?;
    Ok(Json(PageView::all(
        nodes.into_iter().map(NodeView::from).collect(),
    )))
}

/// Longest executor address accepted.
const MAX_ADDRESS_LEN: usize = 2048;

fn check_executor(app: &str, address: &str) -> ApiResult<()> {
    validate::app("app", app)?;
    if !(address.starts_with("http://") || address.starts_with("https://"))
        || address.len() > MAX_ADDRESS_LEN
    {
        return Err(invalid(
            "address",
            format!(
                "must be the executor's base URL, `http://host:port` (at most {MAX_ADDRESS_LEN} bytes)"
            ),
        ));
    }
    Ok(())
}

/// How many plugins one answer names at most (an app with more compiles the rest at their
/// first trigger).
const PLUGINS_TO_WARM: u32 = 64;

/// The answer to a registration or heartbeat: when to beat next, the plugins the app's
/// jobs bind, for the executor to compile ahead of their first run, and this node's time
/// when the request arrived (`received_ms`) and when the answer leaves.
async fn registration_ack(
    state: &AppState,
    app: &str,
    received_ms: i64,
) -> ApiResult<Json<RegistrationAck>> {
    let plugins = state
        .node
        .store()
        .plugins_bound_by(app, PLUGINS_TO_WARM)
        .await?;
    Ok(Json(RegistrationAck {
        heartbeat_interval_ms: state.node.config().heartbeat_interval_ms,
        plugins,
        scheduler_time_ms: Some(crate::model::now_ms()),
        scheduler_received_ms: Some(received_ms),
    }))
}

/// `POST /api/executor/v1/register`: an executor (re)starting. Runs it was given and no
/// longer lists are lost at once.
pub async fn register(
    State(state): State<AppState>,
    Extension(signer): Extension<Signer>,
    Extension(SignedAt(signed_at)): Extension<SignedAt>,
    Json(reg): Json<Registration>,
) -> ApiResult<Json<RegistrationAck>> {
    let received_ms = crate::model::now_ms();
    check_executor(&reg.app, &reg.address)?;
    signer.check_app(&reg.app)?;
    state.node.executor_registered(&reg, signed_at).await?;
    tracing::info!(app = %reg.app, address = %reg.address, capacity = reg.capacity, "executor registered");
    registration_ack(&state, &reg.app, received_ms).await
}

/// `POST /api/executor/v1/heartbeat`: the same body as a registration.
pub async fn heartbeat(
    State(state): State<AppState>,
    Extension(signer): Extension<Signer>,
    Extension(SignedAt(signed_at)): Extension<SignedAt>,
    Json(reg): Json<Registration>,
) -> ApiResult<Json<RegistrationAck>> {
    let received_ms = crate::model::now_ms();
    check_executor(&reg.app, &reg.address)?;
    signer.check_app(&reg.app)?;
    state.node.executor_heartbeat(&reg, signed_at).await?;
    registration_ack(&state, &reg.app, received_ms).await
}

#[derive(Debug, Serialize)]
pub struct Empty {}

/// `POST /api/executor/v1/deregister`: graceful shutdown; nothing is dispatched to it
/// any more.
pub async fn deregister(
    State(state): State<AppState>,
    Extension(signer): Extension<Signer>,
    Extension(SignedAt(signed_at)): Extension<SignedAt>,
    Json(d): Json<Deregistration>,
) -> ApiResult<Json<Empty>> {
    signer.check_app(&d.app)?;
    state.node.executor_deregistered(&d, signed_at).await?;
    tracing::info!(app = %d.app, address = %d.address, "executor deregistered");
    Ok(Json(Empty {}))
}

/// `POST /api/executor/v1/callback`: run reports. Answered only once they are committed:
/// the executor keeps a batch until it gets a 2xx, so nothing acknowledged is lost.
///
/// Only reports about the signer's app are applied: a report's task must be of a job of
/// that app (or of a job deleted since), with the job it names, and a recorded run must be
/// of that task. Others are dropped and logged, not refused: one stray report (of a job
/// moved to another app meanwhile, say) must not hold up the executor's later ones.
pub async fn callback(
    State(state): State<AppState>,
    Extension(signer): Extension<Signer>,
    Json(batch): Json<CallbackBatch>,
) -> ApiResult<Json<CallbackAck>> {
    let app = signer.app()?;
    let store = state.node.store();
    let pairs: Vec<(i64, i64)> = batch
        .reports
        .iter()
        .map(|r| (r.run_id, r.task_id))
        .collect();
    let owners = store.report_owners(&pairs).await?;
    let mut reports = Vec::with_capacity(batch.reports.len());
    // Reports about tasks of deleted jobs name no app: one is taken only from an executor
    // of the signer's app that the run was recorded as sent to.
    let mut registered: HashMap<String, bool> = HashMap::new();
    for report in batch.reports.iter() {
        let recorded = owners.runs.get(&report.run_id);
        let run_fits = recorded.is_none_or(|(task, _)| *task == report.task_id);
        let verdict = match owners.tasks.get(&report.task_id) {
            Some((job, Some(owner))) if *job == report.job_id && run_fits => {
                if owner == app {
                    Verdict::Take
                } else {
                    Verdict::OtherApp
                }
            }
            Some((job, None)) if *job == report.job_id && run_fits => {
                let sent_to_it = recorded
                    .is_some_and(|(_, executor)| executor.as_deref() == Some(&report.executor));
                let of_app = match registered.get(&report.executor) {
                    Some(&known) => known,
                    None => {
                        let known = store
                            .executor_heartbeat_at(app, &report.executor)
                            .await?
                            .is_some();
                        registered.insert(report.executor.clone(), known);
                        known
                    }
                };
                if sent_to_it && of_app {
                    Verdict::Take
                } else {
                    Verdict::OtherApp
                }
            }
            Some(_) => Verdict::OtherApp,
            None => Verdict::Gone,
        };
        match verdict {
            Verdict::Take => reports.push(report.clone()),
            Verdict::OtherApp => {
                tracing::warn!(
                    app,
                    run.id = report.run_id,
                    task.id = report.task_id,
                    job.id = report.job_id,
                    "dropping a report that is not of the signing executor's app"
                );
            }
            Verdict::Gone => {
                tracing::info!(
                    run.id = report.run_id,
                    task.id = report.task_id,
                    "dropping the report of a task that no longer exists"
                );
            }
        }
    }
    let written = state.node.apply_reports(&reports).await?;
    tracing::debug!(reports = batch.reports.len(), written, "callback applied");
    // Repeats count as accepted: they are applied already and safe to forget.
    let accepted = u32::try_from(batch.reports.len()).unwrap_or(u32::MAX);
    Ok(Json(CallbackAck { accepted }))
}

/// What becomes of one report in a callback.
enum Verdict {
    Take,
    OtherApp,
    Gone,
}

/// `GET /api/executor/v1/plugins/{sha256}`: a module's bytes, for executors to cache.
///
/// Only a module that a job of the signer's app uses: an executor cannot fetch another
/// app's plugins.
pub async fn plugin_module(
    State(state): State<AppState>,
    Extension(signer): Extension<Signer>,
    PathParam(sha256): PathParam,
) -> ApiResult<impl IntoResponse> {
    let is_hash = sha256.len() == 64
        && sha256
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    if !is_hash {
        return Err(ApiError::BadRequest(
            "path parameter `sha256` must be 64 lower-case hex characters (a SHA-256)".into(),
        ));
    }
    let app = signer.app()?;
    if !state.node.store().app_uses_plugin(app, &sha256).await? {
        return Err(ApiError::NotFound(format!(
            "no plugin {sha256} used by a job of app `{app}`"
        )));
    }
    let module = state.node.store().plugin_module(&sha256).await?;
    Ok((
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/wasm")],
        module,
    ))
}
