//! The signed routes: the executor protocol (`/api/executor/v1/*`, signed with an app's
//! key) and the calls between scheduler nodes (`/api/node/v1/*`, signed with the master
//! secret). Apart from the public REST API: no user calls them, and what they may do is
//! decided by who signed (`crate::api::auth::require_signature` checks the signature and
//! puts the signer in the request). `docs/protocol.md` describes them end to end.
//!
//! - [`executors`]: register, heartbeat, deregister, callback, plugin download, and the
//!   `rota` imports a run calls (kv, secret).
//! - [`peers`]: a cancel forwarded to the node holding the task, a job changed elsewhere,
//!   pull tasks ready on another node.

pub mod executors;
pub mod peers;

use axum::http::Method;
use axum::routing::{MethodRouter, get, post};
use rota_proto::wire::{
    PATH_CALLBACK, PATH_DEREGISTER, PATH_HEARTBEAT, PATH_KV, PATH_PLUGIN_PREFIX, PATH_REGISTER,
    PATH_SECRET,
};

use crate::api::AppState;

/// The executor protocol and the calls between scheduler nodes: every request signed.
pub fn signed_routes() -> Vec<(Method, String, MethodRouter<AppState>)> {
    use Method as M;
    vec![
        (M::POST, PATH_REGISTER.into(), post(executors::register)),
        (M::POST, PATH_HEARTBEAT.into(), post(executors::heartbeat)),
        (M::POST, PATH_DEREGISTER.into(), post(executors::deregister)),
        (M::POST, PATH_CALLBACK.into(), post(executors::callback)),
        (M::POST, PATH_KV.into(), post(executors::kv)),
        (M::POST, PATH_SECRET.into(), post(executors::secret)),
        (
            M::POST,
            rota_proto::wire::PATH_PEER_CANCEL.into(),
            post(peers::cancel),
        ),
        (
            M::POST,
            rota_proto::wire::PATH_PEER_JOB_CHANGED.into(),
            post(peers::job_changed),
        ),
        (
            M::POST,
            rota_proto::wire::PATH_PEER_READY.into(),
            post(peers::ready),
        ),
        (
            M::GET,
            format!("{PATH_PLUGIN_PREFIX}{{sha256}}"),
            get(executors::plugin_module),
        ),
    ]
}
