//! Executors: the API's list of live executors, and the signed executor protocol
//! (`/api/executor/v1/*`: register, heartbeat, deregister, callback, plugin download).
//! `docs/protocol.md` describes the protocol end to end.

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use rota_proto::{CallbackAck, CallbackBatch, Deregistration, Registration, RegistrationAck};
use serde::{Deserialize, Serialize};
use utoipa::IntoParams;

use super::AppState;
use super::error::{ApiError, ApiResult};
use super::extract::{Json, PathParam, Query};
use super::openapi::ErrorBody;
use super::validate::{self, invalid};
use super::views::{ExecutorPage, ExecutorView, PageView};
use crate::model::now_ms;

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
    Query(q): Query<ListQuery>,
) -> ApiResult<Json<ExecutorPage>> {
    let alive_after = now_ms() - state.node.config().executor_dead_after_ms;
    let app = q.app.filter(|a| !a.is_empty());
    let executors = state
        .node
        .store()
        .list_executors(app.as_deref(), alive_after)
        .await?;
    Ok(Json(PageView::all(
        executors.into_iter().map(ExecutorView::from).collect(),
    )))
}

/// Longest executor address accepted.
const MAX_ADDRESS_LEN: usize = 2048;

fn check_executor(app: &str, address: &str) -> ApiResult<()> {
    validate::name("app", app)?;
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

fn registration_ack(state: &AppState) -> Json<RegistrationAck> {
    Json(RegistrationAck {
        heartbeat_interval_ms: state.node.config().heartbeat_interval_ms,
    })
}

/// `POST /api/executor/v1/register`: an executor (re)starting. Runs it was given and no
/// longer lists are lost at once.
pub async fn register(
    State(state): State<AppState>,
    Json(reg): Json<Registration>,
) -> ApiResult<Json<RegistrationAck>> {
    check_executor(&reg.app, &reg.address)?;
    state.node.executor_registered(&reg).await?;
    tracing::info!(app = %reg.app, address = %reg.address, capacity = reg.capacity, "executor registered");
    Ok(registration_ack(&state))
}

/// `POST /api/executor/v1/heartbeat`: the same body as a registration.
pub async fn heartbeat(
    State(state): State<AppState>,
    Json(reg): Json<Registration>,
) -> ApiResult<Json<RegistrationAck>> {
    check_executor(&reg.app, &reg.address)?;
    state.node.executor_heartbeat(&reg).await?;
    Ok(registration_ack(&state))
}

#[derive(Debug, Serialize)]
pub struct Empty {}

/// `POST /api/executor/v1/deregister`: graceful shutdown; nothing is dispatched to it
/// any more.
pub async fn deregister(
    State(state): State<AppState>,
    Json(d): Json<Deregistration>,
) -> ApiResult<Json<Empty>> {
    state.node.executor_deregistered(&d).await?;
    tracing::info!(app = %d.app, address = %d.address, "executor deregistered");
    Ok(Json(Empty {}))
}

/// `POST /api/executor/v1/callback`: run reports. Answered only once they are committed:
/// the executor keeps a batch until it gets a 2xx, so nothing acknowledged is lost.
pub async fn callback(
    State(state): State<AppState>,
    Json(batch): Json<CallbackBatch>,
) -> ApiResult<Json<CallbackAck>> {
    let changed = state.node.apply_reports(&batch.reports).await?;
    tracing::debug!(reports = batch.reports.len(), changed, "callback applied");
    // Repeats count as accepted: they are applied already and safe to forget.
    let accepted = u32::try_from(batch.reports.len()).unwrap_or(u32::MAX);
    Ok(Json(CallbackAck { accepted }))
}

/// `GET /api/executor/v1/plugins/{sha256}`: a module's bytes, for executors to cache.
pub async fn plugin_module(
    State(state): State<AppState>,
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
    let module = state.node.store().plugin_module(&sha256).await?;
    Ok((
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/wasm")],
        module,
    ))
}
