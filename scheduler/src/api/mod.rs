//! The scheduler node's HTTP surface (SPEC §6): the REST API, the executor protocol,
//! `/healthz` and `/metrics`, all on one [`router`].
//!
//! | routes | who may call | decided by |
//! |---|---|---|
//! | `GET /healthz` | anyone | — |
//! | `/api/v1/*`, `GET /metrics` | holders of the API token | [`auth::require_token`] |
//! | `/api/executor/v1/*` | executors (HMAC-signed requests) | [`auth::require_signature`] |
//!
//! Every answer that is not a success is `{"error": "…"}` ([`ApiError`]), unknown routes
//! and wrong methods included; the extractors in [`extract`] make malformed input a 4xx
//! with a message naming the problem.
//!
//! # Layout
//!
//! - [`error`]: [`ApiError`], the one error type, and how rejections map onto it.
//! - [`extract`]: `Json`, `Query` and path extractors answering in that shape; list
//!   paging; name-or-id references.
//! - [`auth`]: the token and signature middlewares.
//! - [`validate`]: value checks shared by the handlers.
//! - [`views`]: the JSON answers (RFC 3339 times, the API's task statuses).
//! - [`plugins`], [`jobs`], [`tasks`], [`runs`], [`executors`]: the handlers.

pub mod auth;
pub mod error;
pub mod executors;
pub mod extract;
pub mod jobs;
pub mod plugins;
pub mod runs;
pub mod tasks;
pub mod validate;
pub mod views;

use axum::Router;
use axum::extract::{DefaultBodyLimit, OriginalUri, State};
use axum::http::{Method, StatusCode, header};
use axum::middleware::from_fn_with_state;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use rota_proto::wire::{
    PATH_CALLBACK, PATH_DEREGISTER, PATH_HEARTBEAT, PATH_PLUGIN_PREFIX, PATH_REGISTER,
};
use serde_json::json;
use tower_http::trace::TraceLayer;

pub use error::{ApiError, ApiResult};

/// What every handler reads: the node (its store, config and pipeline).
#[derive(Clone)]
pub struct AppState {
    pub node: crate::node::Node,
}

/// The whole HTTP surface of a scheduler node.
pub fn router(state: AppState) -> Router {
    let config = state.node.config();

    let api = Router::new()
        .route(
            "/plugins",
            get(plugins::list)
                .post(plugins::upload)
                .layer(DefaultBodyLimit::max(config.max_plugin_bytes)),
        )
        .route("/jobs", get(jobs::list).post(jobs::create))
        .route(
            "/jobs/{id}",
            get(jobs::get).patch(jobs::update).delete(jobs::delete),
        )
        .route("/jobs/{id}/trigger", post(jobs::trigger))
        .route(
            "/tasks",
            get(tasks::list)
                .post(tasks::create)
                .delete(tasks::cancel_by_key),
        )
        .route("/tasks/batch", post(tasks::create_batch))
        .route("/tasks/{id}", get(tasks::get).delete(tasks::cancel))
        .route("/runs", get(runs::list))
        .route("/runs/{id}", get(runs::get))
        .route("/runs/{id}/log", get(runs::log))
        .route("/runs/{id}/kill", post(runs::kill))
        .route("/executors", get(executors::list))
        // Behind the token too, so the API's shape is not probed anonymously.
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed);

    let executor_protocol = Router::new()
        .route(PATH_REGISTER, post(executors::register))
        .route(PATH_HEARTBEAT, post(executors::heartbeat))
        .route(PATH_DEREGISTER, post(executors::deregister))
        .route(PATH_CALLBACK, post(executors::callback))
        .route(
            &format!("{PATH_PLUGIN_PREFIX}{{sha256}}"),
            get(executors::plugin_module),
        )
        .method_not_allowed_fallback(method_not_allowed)
        .layer(from_fn_with_state(state.clone(), auth::require_signature));

    Router::new()
        .nest("/api/v1", api)
        .route("/metrics", get(metrics))
        .method_not_allowed_fallback(method_not_allowed)
        .layer(from_fn_with_state(state.clone(), auth::require_token))
        .merge(executor_protocol)
        .route("/healthz", get(healthz))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(config.max_body_bytes))
        .layer(TraceLayer::new_for_http())
        .with_state(state)
}

/// `GET /healthz`: open to all; also asks the database.
async fn healthz(State(state): State<AppState>) -> Response {
    match state.node.store().ping().await {
        Ok(()) => axum::Json(json!({"status": "ok"})).into_response(),
        Err(e) => {
            tracing::warn!(error = %e, "health check: the database does not answer");
            let body = json!({"status": "unavailable", "error": "the database does not answer"});
            (StatusCode::SERVICE_UNAVAILABLE, axum::Json(body)).into_response()
        }
    }
}

/// `GET /metrics`: Prometheus text format.
async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.node.render_metrics(),
    )
}

// `OriginalUri`: inside the nested `/api/v1` router the plain `Uri` lacks its prefix.
async fn not_found(OriginalUri(uri): OriginalUri) -> ApiError {
    ApiError::NotFound(format!("no route for {}", uri.path()))
}

async fn method_not_allowed(method: Method, OriginalUri(uri): OriginalUri) -> ApiError {
    ApiError::MethodNotAllowed(format!("{method} is not allowed on {}", uri.path()))
}
