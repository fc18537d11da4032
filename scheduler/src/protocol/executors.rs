//! The signed executor protocol's handlers (`/api/executor/v1/*`: register, heartbeat,
//! deregister, callback, plugin download, and the `rota` imports a run calls — kv and
//! secret). `docs/protocol.md` describes it end to end. Each parses, checks that the
//! signing app is the one the request speaks for, calls `usecase::executors` and answers.

use axum::Extension;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use rota_proto::wire::{KvReply, KvRequest, SecretReply, SecretRequest};
use rota_proto::{CallbackAck, CallbackBatch, Deregistration, Registration, RegistrationAck};
use serde::Serialize;

use crate::api::AppState;
use crate::api::auth::{SignedAt, Signer};
use crate::api::error::ApiResult;
use crate::api::extract::{Json, PathParam};
use crate::usecase::executors::{self, Beat};

/// `POST /api/executor/v1/register`: an executor (re)starting. Runs it was given and no
/// longer lists are lost at once.
pub async fn register(
    State(state): State<AppState>,
    Extension(signer): Extension<Signer>,
    Extension(signed_at): Extension<SignedAt>,
    Json(reg): Json<Registration>,
) -> ApiResult<Json<RegistrationAck>> {
    beat(&state, &signer, signed_at, &reg, Beat::Register).await
}

/// `POST /api/executor/v1/heartbeat`: the same body as a registration.
pub async fn heartbeat(
    State(state): State<AppState>,
    Extension(signer): Extension<Signer>,
    Extension(signed_at): Extension<SignedAt>,
    Json(reg): Json<Registration>,
) -> ApiResult<Json<RegistrationAck>> {
    beat(&state, &signer, signed_at, &reg, Beat::Heartbeat).await
}

async fn beat(
    state: &AppState,
    signer: &Signer,
    SignedAt(signed_at): SignedAt,
    reg: &Registration,
    beat: Beat,
) -> ApiResult<Json<RegistrationAck>> {
    // Read first: the time the answer spends on the database is not flight time.
    let received_us = state.ports.clock().now_us();
    signer.check_app(&reg.app)?;
    Ok(Json(
        executors::beat(&state.ports, beat, reg, signed_at, received_us).await?,
    ))
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
    executors::deregister(&state.ports, &d, signed_at).await?;
    Ok(Json(Empty {}))
}

/// `POST /api/executor/v1/callback`: run reports. Answered only once they are committed:
/// the executor keeps a batch until it gets a 2xx, so nothing acknowledged is lost. Only
/// reports about the signer's app are applied (`usecase::executors::accept_reports`);
/// others are dropped and logged, not refused.
pub async fn callback(
    State(state): State<AppState>,
    Extension(signer): Extension<Signer>,
    Json(batch): Json<CallbackBatch>,
) -> ApiResult<Json<CallbackAck>> {
    let app = signer.app()?;
    executors::accept_reports(&state.ports, app, &batch.reports).await?;
    // Repeats count as accepted: they are applied already and safe to forget.
    let accepted = u32::try_from(batch.reports.len()).unwrap_or(u32::MAX);
    Ok(Json(CallbackAck { accepted }))
}

/// `GET /api/executor/v1/plugins/{sha256}`: a module's bytes, for executors to cache;
/// only a module that a job of the signer's app uses.
pub async fn plugin_module(
    State(state): State<AppState>,
    Extension(signer): Extension<Signer>,
    PathParam(sha256): PathParam,
) -> ApiResult<impl IntoResponse> {
    let app = signer.app()?;
    let module = executors::plugin_module(&state.ports, app, &sha256).await?;
    Ok((
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/wasm")],
        module,
    ))
}

/// `POST /api/executor/v1/kv`: get, set or delete a key of the job's state.
pub async fn kv(
    State(state): State<AppState>,
    Extension(signer): Extension<Signer>,
    Json(req): Json<KvRequest>,
) -> ApiResult<Json<KvReply>> {
    signer.check_app(&req.app)?;
    Ok(Json(executors::kv(&state.ports, req).await?))
}

/// `POST /api/executor/v1/secret`: a secret of the job's app, opened for the run.
pub async fn secret(
    State(state): State<AppState>,
    Extension(signer): Extension<Signer>,
    Json(req): Json<SecretRequest>,
) -> ApiResult<Json<SecretReply>> {
    signer.check_app(&req.app)?;
    Ok(Json(executors::secret(&state.ports, req).await?))
}
