//! The scheduler node's HTTP surface (SPEC §6): the REST API, the executor protocol,
//! `/healthz` and `/metrics`, all on one [`router`].
//!
//! | routes | who may call | decided by |
//! |---|---|---|
//! | `GET /healthz` | anyone | — |
//! | `GET /readyz` | anyone | — |
//! | `/api/v1/*`, `GET /metrics` | holders of the API token | [`auth::require_token`] |
//! | `/api/executor/v1/*` | executors (requests signed with their app's key) | [`auth::require_signature`] |
//! | `/api/node/v1/*` | other scheduler nodes (signed with the master secret) | [`auth::require_signature`] |
//! | `/console/*` | signed-in users | [`crate::console::auth::require_session`] |
//!
//! [`route_table`] lists every route with its guard.
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
//! - [`plugins`], [`jobs`], [`tasks`], [`queue`] (pull, ack, nack, extend, re-drive),
//!   [`runs`], [`executors`] (and nodes), [`secrets`], [`workflows`], [`export`] (export
//!   and apply: jobs as code): the handlers, each with its
//!   `#[utoipa::path]`.
//! - The signed routes' handlers (the executor protocol, calls between nodes) are in
//!   [`crate::protocol`]; this module only guards and mounts them.
//! - [`openapi`]: `GET /api/v1/openapi.json`, the document those annotations make, and the
//!   schemas of the types the API shares with the rest of the crate.
//!
//! Every `/api/v1` route is added in [`api`], which records it: [`api_routes`] is the
//! router's own list, and `tests/integration/api.rs` checks it against the OpenAPI document both ways.

pub mod alarms;
pub mod audit;
pub mod auth;
mod constraints;
pub mod error;
pub mod executors;
pub mod export;
pub mod extract;
pub mod jobs;
pub mod openapi;
pub mod plugins;
pub mod queue;
pub mod runs;
pub mod secrets;
pub mod tasks;
pub use crate::usecase::validate;
pub mod views;
pub mod workflows;

use axum::Router;
use axum::extract::{DefaultBodyLimit, OriginalUri, State};
use axum::handler::Handler;
use axum::http::{Method, StatusCode, header};
use axum::middleware::from_fn_with_state;
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodFilter, get, on};
use serde_json::json;
use tower_http::trace::TraceLayer;

pub use error::{ApiError, ApiResult};

/// What every handler reads: the node (its store, config and pipeline).
#[derive(Clone)]
pub struct AppState {
    pub ports: crate::ports::Ports,
}

/// The whole HTTP surface of a scheduler node.
pub fn router(state: AppState) -> Router {
    let config = state.ports.config();

    let api = api(config.max_plugin_bytes)
        .router
        // Behind the token too, so the API's shape is not probed anonymously.
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed);

    let mut executor_protocol = Router::new();
    for (_, path, handler) in crate::protocol::signed_routes() {
        executor_protocol = executor_protocol.route(&path, handler);
    }
    let executor_protocol = executor_protocol
        .method_not_allowed_fallback(method_not_allowed)
        .layer(from_fn_with_state(state.clone(), auth::require_signature));

    Router::new()
        .nest(API_PREFIX, api)
        .route("/metrics", get(metrics))
        .method_not_allowed_fallback(method_not_allowed)
        .layer(from_fn_with_state(state.clone(), auth::require_token))
        .merge(executor_protocol)
        .merge(crate::xxl::admin::router(&config.xxl_context_path))
        .merge(crate::console::router(state.ports.clone()))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(config.max_body_bytes))
        .layer(TraceLayer::new_for_http().make_span_with(RequestSpan {
            traces: config.traces,
        }))
        .with_state(state)
}

/// The span of a request when the process exports traces (`Config::traces`): it continues
/// the caller's W3C `traceparent`, so a task's trace starts in the service that asked for
/// it. Without traces, no span (what `TraceLayer` logs needs none).
#[derive(Clone, Copy)]
struct RequestSpan {
    traces: bool,
}

/// Paths whose requests are no spans of their own: the executor protocol and the nodes'
/// calls to each other, many a second, each a trace of one span otherwise. What they carry
/// that belongs to a task (a run's report) is a span of the task's trace.
const UNTRACED: [&str; 2] = ["/api/executor/", "/api/node/"];

impl<B> tower_http::trace::MakeSpan<B> for RequestSpan {
    fn make_span(&mut self, req: &axum::http::Request<B>) -> tracing::Span {
        let path = req.uri().path();
        if !self.traces || UNTRACED.iter().any(|p| path.starts_with(p)) {
            return tracing::Span::none();
        }
        let span = tracing::info_span!(
            "request",
            otel.name = %format!("{} {}", req.method(), req.uri().path()),
            otel.kind = "server",
            http.request.method = %req.method(),
            url.path = %req.uri().path(),
        );
        let caller = opentelemetry::global::get_text_map_propagator(|p| {
            p.extract(&opentelemetry_http::HeaderExtractor(req.headers()))
        });
        let _ = tracing_opentelemetry::OpenTelemetrySpanExt::set_parent(&span, caller);
        span
    }
}

/// Where the REST API lives.
pub const API_PREFIX: &str = "/api/v1";

/// What a caller must show to reach a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Guard {
    /// Nothing: `/healthz`, `/readyz`, the login page and its assets.
    Open,
    /// An API token ([`auth::require_token`]).
    Token,
    /// A request signed with an app's key or the master secret ([`auth::require_signature`]).
    Signature,
    /// A console session, and its CSRF token on a POST ([`crate::console::auth::require_session`]).
    Session,
}

/// Every route of [`router`], with what guards it: built from the same lists the router
/// is, so a route cannot be added without appearing here (`tests/integration/security.rs` walks it).
pub fn route_table() -> Vec<(Method, String, Guard)> {
    let mut table = vec![
        (Method::GET, "/healthz".to_owned(), Guard::Open),
        (Method::GET, "/readyz".to_owned(), Guard::Open),
        (Method::GET, "/metrics".to_owned(), Guard::Token),
    ];
    table.extend(api_routes().into_iter().map(|(m, p)| (m, p, Guard::Token)));
    table.extend(
        crate::protocol::signed_routes()
            .into_iter()
            .map(|(m, p, _)| (m, p, Guard::Signature)),
    );
    table.extend(
        crate::console::console_routes()
            .into_iter()
            .map(|(m, p)| (m, p, Guard::Session)),
    );
    table.extend(
        crate::console::open_routes()
            .into_iter()
            .map(|(m, p)| (m, p, Guard::Open)),
    );
    table
}

/// The REST API's routes, paths under [`API_PREFIX`]. Add routes here only, through
/// [`ApiRoutes::route`], so that [`api_routes`] stays the list of what is served.
fn api(max_plugin_bytes: usize) -> ApiRoutes {
    use Method as M;
    ApiRoutes::default()
        .route(M::GET, "/openapi.json", openapi::document)
        .route(M::GET, "/plugins", plugins::list)
        .route(
            M::POST,
            "/plugins",
            plugins::upload.layer(DefaultBodyLimit::max(max_plugin_bytes)),
        )
        .route(M::DELETE, "/plugins/{name}", plugins::delete)
        .route(M::GET, "/jobs", jobs::list)
        .route(M::POST, "/jobs", jobs::create)
        .route(M::GET, "/jobs/{id}", jobs::get)
        .route(M::PATCH, "/jobs/{id}", jobs::update)
        .route(M::DELETE, "/jobs/{id}", jobs::delete)
        .route(M::POST, "/jobs/{id}/trigger", jobs::trigger)
        .route(M::POST, "/jobs/{id}/backfill", jobs::backfill)
        .route(M::POST, "/jobs/{id}/pull", queue::pull)
        .route(M::POST, "/jobs/{id}/ack", queue::ack_batch)
        .route(M::GET, "/tasks", tasks::list)
        .route(M::POST, "/tasks", tasks::create)
        .route(M::DELETE, "/tasks", tasks::cancel_by_key)
        .route(M::POST, "/tasks/batch", tasks::create_batch)
        .route(M::GET, "/tasks/{id}", tasks::get)
        .route(M::DELETE, "/tasks/{id}", tasks::cancel)
        .route(M::PATCH, "/tasks/{id}", tasks::reschedule)
        .route(M::POST, "/tasks/retry", queue::retry_dead)
        .route(M::POST, "/tasks/{id}/retry", queue::retry)
        .route(M::POST, "/tasks/{id}/ack", queue::ack)
        .route(M::POST, "/tasks/{id}/nack", queue::nack)
        .route(M::POST, "/tasks/{id}/extend", queue::extend)
        .route(M::GET, "/runs", runs::list)
        .route(M::GET, "/runs/{id}", runs::get)
        .route(M::GET, "/runs/{id}/log", runs::log)
        .route(M::POST, "/runs/{id}/kill", runs::kill)
        .route(M::GET, "/executors", executors::list)
        .route(M::GET, "/nodes", executors::nodes)
        .route(M::GET, "/apps/{app}/secrets", secrets::list)
        .route(M::PUT, "/apps/{app}/secrets/{name}", secrets::set)
        .route(M::DELETE, "/apps/{app}/secrets/{name}", secrets::delete)
        .route(M::GET, "/audit", audit::list)
        .route(M::POST, "/alarm-channels", alarms::create_channel)
        .route(M::GET, "/alarm-channels", alarms::list_channels)
        .route(M::GET, "/alarm-channels/{name}", alarms::get_channel)
        .route(M::DELETE, "/alarm-channels/{name}", alarms::delete_channel)
        .route(M::POST, "/alarm-channels/{name}/test", alarms::test_channel)
        .route(M::POST, "/alarm-rules", alarms::create_rule)
        .route(M::GET, "/alarm-rules", alarms::list_rules)
        .route(M::GET, "/alarm-rules/{name}", alarms::get_rule)
        .route(M::PATCH, "/alarm-rules/{name}", alarms::update_rule)
        .route(M::DELETE, "/alarm-rules/{name}", alarms::delete_rule)
        .route(M::GET, "/alarms", alarms::history)
        .route(M::GET, "/workflows", workflows::list)
        .route(M::POST, "/workflows", workflows::create)
        .route(M::GET, "/workflows/{id}", workflows::get)
        .route(M::PATCH, "/workflows/{id}", workflows::update)
        .route(M::DELETE, "/workflows/{id}", workflows::delete)
        .route(M::POST, "/workflows/{id}/instances", workflows::start)
        .route(M::GET, "/workflow-instances", workflows::list_instances)
        .route(M::GET, "/workflow-instances/{id}", workflows::get_instance)
        .route(
            M::POST,
            "/workflow-instances/{id}/cancel",
            workflows::cancel,
        )
        .route(M::POST, "/workflow-instances/{id}/retry", workflows::retry)
        .route(M::GET, "/export", export::export)
        .route(M::POST, "/apply", export::apply)
}

/// The method and full path (`/api/v1/jobs/{id}`) of every REST API route, as the router
/// serves them: what the OpenAPI document must describe.
pub fn api_routes() -> Vec<(Method, String)> {
    // The upload limit does not change which routes there are.
    api(0)
        .served
        .into_iter()
        .map(|(method, path)| (method, format!("{API_PREFIX}{path}")))
        .collect()
}

/// A router that remembers the method and path of each route it was given.
#[derive(Default)]
struct ApiRoutes {
    router: Router<AppState>,
    served: Vec<(Method, &'static str)>,
}

impl ApiRoutes {
    fn route<H, T>(mut self, method: Method, path: &'static str, handler: H) -> Self
    where
        H: Handler<T, AppState>,
        T: 'static,
    {
        let filter = MethodFilter::try_from(method.clone())
            .unwrap_or_else(|_| panic!("{method} {path}: not a method axum routes"));
        // Routes on one path merge into one method router.
        self.router = self.router.route(path, on(filter, handler));
        self.served.push((method, path));
        self
    }
}

/// `GET /healthz`: open to all; also asks the database.
async fn healthz(State(state): State<AppState>) -> Response {
    match crate::usecase::cluster::database_answers(&state.ports).await {
        Ok(()) => axum::Json(json!({"status": "ok"})).into_response(),
        Err(e) => {
            tracing::warn!(error = %e, "health check: the database does not answer");
            let body = json!({"status": "unavailable", "error": "the database does not answer"});
            (StatusCode::SERVICE_UNAVAILABLE, axum::Json(body)).into_response()
        }
    }
}

/// `GET /readyz`: open to all, for load balancers and Kubernetes probes. 200 when this node
/// can write to its database (its heartbeat was written within half the dead-after time;
/// it serves only once its migrations are done), with a `warning` when its clock is beyond
/// `max_clock_offset_ms` of the database's; else 503 with the reason — the database's disk
/// is full, it is read-only, it does not answer, or the node was taken over.
async fn readyz(State(state): State<AppState>) -> Response {
    match state.ports.readiness() {
        Ok(None) => axum::Json(json!({"status": "ready"})).into_response(),
        Ok(Some(warning)) => {
            axum::Json(json!({"status": "ready", "warning": warning})).into_response()
        }
        Err(reason) => {
            let body = json!({"status": "unready", "reason": reason});
            (StatusCode::SERVICE_UNAVAILABLE, axum::Json(body)).into_response()
        }
    }
}

/// `GET /metrics`: Prometheus text format.
async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.ports.render_metrics(),
    )
}

// `OriginalUri`: inside the nested `/api/v1` router the plain `Uri` lacks its prefix.
async fn not_found(OriginalUri(uri): OriginalUri) -> ApiError {
    ApiError::NotFound(format!("no route for {}", uri.path()))
}

async fn method_not_allowed(method: Method, OriginalUri(uri): OriginalUri) -> ApiError {
    ApiError::MethodNotAllowed(format!("{method} is not allowed on {}", uri.path()))
}
