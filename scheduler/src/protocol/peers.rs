//! Calls between scheduler nodes, signed with the shared secret like the executor
//! protocol (every node of a cluster has the same `ROTA_EXECUTOR_SECRET`).
//!
//! `POST /api/node/v1/cancel`: a task claimed by this node is cancelled here, where it sits
//! in the wheel, so the cancel and the fire cannot cross (`docs/cluster.md`). Another node
//! that receives the user's cancel forwards it.
//!
//! `POST /api/node/v1/job-changed`: a job was changed on another node; this one forgets its
//! cached copy (so fires planned under the job's old schedule are dropped at dispatch, not
//! sent) and scans at once (so the new schedule is planned now).
//!
//! `POST /api/node/v1/ready`: tasks of pull jobs became ready on another node's wheel; the
//! pulls waiting for them here wake (SPEC §8).

use axum::Extension;
use axum::extract::State;
use rota_proto::wire::{PeerCancel, PeerCancelAck, PeerJobChanged, PeerReady};

use crate::api::AppState;
use crate::api::auth::Signer;
use crate::api::error::ApiResult;
use crate::api::extract::Json;

/// Cancels a task on this node: a running or finished one is the same 409 as for a user.
pub async fn cancel(
    State(state): State<AppState>,
    Extension(signer): Extension<Signer>,
    Json(req): Json<PeerCancel>,
) -> ApiResult<axum::Json<PeerCancelAck>> {
    signer.check_peer()?;
    let (_, cancelled) = state.ports.cancel_here(req.task_id).await?;
    Ok(axum::Json(PeerCancelAck { cancelled }))
}

/// A job changed on another node: drop this node's copy of it.
pub async fn job_changed(
    State(state): State<AppState>,
    Extension(signer): Extension<Signer>,
    Json(req): Json<PeerJobChanged>,
) -> ApiResult<axum::Json<serde_json::Value>> {
    signer.check_peer()?;
    state.ports.forget_job(req.job_id);
    Ok(axum::Json(serde_json::json!({})))
}

/// Tasks of pull jobs became ready on another node: wake the pulls that wait for them here.
pub async fn ready(
    State(state): State<AppState>,
    Extension(signer): Extension<Signer>,
    Json(req): Json<PeerReady>,
) -> ApiResult<axum::Json<serde_json::Value>> {
    signer.check_peer()?;
    state.ports.ready_elsewhere(&req);
    Ok(axum::Json(serde_json::json!({})))
}
