//! The executor's HTTP endpoints (scheduler → executor): `/trigger`, `/kill`, `/log`,
//! `/beat`, `/idle-beat`, `/runs/known`, and `GET /healthz` for probes.
//!
//! Every request but `GET /healthz`, on every path, passes [`authenticate`] first: the body
//! is read (up to [`MAX_BODY_BYTES`]) and the HMAC signature over method, target,
//! timestamp and body is checked with the shared secret (`rota_proto::verify`); anything
//! else is a 401. Nothing but a scheduler holding the secret can start, kill or read a
//! run. `GET /healthz` is open, for a liveness probe or a load balancer that holds no
//! secret (packaging/kubernetes/): it reads nothing from the request, changes nothing and
//! tells nothing but that the server answers. Errors answer the protocol's `{"error": …}`
//! shape.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use rota_proto::wire::{
    PATH_BEAT, PATH_IDLE_BEAT, PATH_KILL, PATH_LOG, PATH_RUNS_KNOWN, PATH_TRIGGER, PATH_WARM,
};
use rota_proto::{
    BeatAck, ErrorBody, IdleBeatAck, IdleBeatRequest, KillAck, KillRequest, LogPage, LogRequest,
    RunsKnownAck, RunsKnownRequest, TriggerBatch, TriggerBatchAck, WarmRequest,
};
use serde::de::DeserializeOwned;

use crate::clock::wall_ms;
use crate::node::Node;
use crate::runtime::RunStatus;

/// Largest request body (a trigger batch with big payloads).
pub const MAX_BODY_BYTES: usize = 64 << 20;
/// How long `/kill` waits for the run to actually stop before answering.
const KILL_WAIT: Duration = Duration::from_secs(2);

/// The executor's one error shape.
#[derive(Debug)]
pub enum ApiError {
    Unauthorized(String),
    BadRequest(String),
    /// Too busy to check the request; the sender may retry, here or elsewhere.
    Unavailable(String),
    TooLarge,
    NotFound,
    MethodNotAllowed,
    Internal(String),
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, error) = match self {
            Self::Unauthorized(e) => (StatusCode::UNAUTHORIZED, e),
            Self::BadRequest(e) => (StatusCode::BAD_REQUEST, e),
            Self::Unavailable(e) => (StatusCode::SERVICE_UNAVAILABLE, e),
            Self::TooLarge => (
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "request body is larger than {} MiB or was cut off",
                    MAX_BODY_BYTES >> 20
                ),
            ),
            Self::NotFound => (
                StatusCode::NOT_FOUND,
                "no such executor endpoint".to_owned(),
            ),
            Self::MethodNotAllowed => (
                StatusCode::METHOD_NOT_ALLOWED,
                "executor endpoints take POST".to_owned(),
            ),
            Self::Internal(cause) => {
                tracing::error!(%cause, "executor request failed");
                (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal error; see the executor's log".to_owned(),
                )
            }
        };
        (status, axum::Json(ErrorBody { error })).into_response()
    }
}

type ApiResult<T> = Result<axum::Json<T>, ApiError>;

/// The open health route: the one path [`authenticate`] does not guard.
const PATH_HEALTHZ: &str = "/healthz";

/// The executor's router.
pub fn router(node: Arc<Node>) -> Router {
    Router::new()
        .route(PATH_TRIGGER, post(trigger))
        .route(PATH_KILL, post(kill))
        .route(PATH_LOG, post(log))
        .route(PATH_BEAT, post(beat))
        .route(PATH_IDLE_BEAT, post(idle_beat))
        .route(PATH_RUNS_KNOWN, post(runs_known))
        .route(PATH_WARM, post(warm))
        .fallback(|| async { ApiError::NotFound })
        .method_not_allowed_fallback(|| async { ApiError::MethodNotAllowed })
        .layer(DefaultBodyLimit::disable())
        .layer(middleware::from_fn_with_state(node.clone(), authenticate))
        // After the layer, so outside it: a route added later is not wrapped.
        .route(PATH_HEALTHZ, get(healthz))
        .with_state(node)
}

/// `GET /healthz`: open; 200 while the HTTP server answers (a liveness probe's question).
async fn healthz() -> axum::Json<serde_json::Value> {
    axum::Json(serde_json::json!({"status": "ok"}))
}

/// Reads the body and checks the request's signature; refuses with 401.
async fn authenticate(State(node): State<Arc<Node>>, request: Request, next: Next) -> Response {
    let (parts, body) = request.into_parts();
    let Ok(body) = axum::body::to_bytes(body, MAX_BODY_BYTES).await else {
        return ApiError::TooLarge.into_response();
    };
    let target = parts
        .uri
        .path_and_query()
        .map_or_else(|| parts.uri.path(), |p| p.as_str());
    let header = |name: &str| parts.headers.get(name).and_then(|v| v.to_str().ok());
    // Schedulers sign this executor's own address with the path: a request meant for
    // another executor of the app does not verify here.
    let signed_target = format!(
        "{}{target}",
        node.config.advertise_url.trim_end_matches('/')
    );
    if let Err(e) = rota_proto::verify_once(
        &node.replay,
        node.config.secret.as_bytes(),
        parts.method.as_str(),
        &signed_target,
        &rota_proto::Received::from_headers(header),
        &body,
        wall_ms(),
    ) {
        tracing::debug!(error = %e, path = target, "refused an unsigned or badly signed request");
        if e.is_overload() {
            return ApiError::Unavailable(e.to_string()).into_response();
        }
        return ApiError::Unauthorized(e.to_string()).into_response();
    }
    next.run(Request::from_parts(parts, Body::from(body))).await
}

/// The request body as `T`; a 400 naming the field at fault (`triggers[0].attempt: …`).
fn parse<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    let de = &mut serde_json::Deserializer::from_slice(body);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let at = e.path().to_string();
        let why = e.into_inner();
        ApiError::BadRequest(if at == "." {
            format!("invalid JSON body: {why}")
        } else {
            format!("invalid JSON body at `{at}`: {why}")
        })
    })
}

/// `POST /trigger`: one ack per trigger, in order.
async fn trigger(State(node): State<Arc<Node>>, body: Bytes) -> ApiResult<TriggerBatchAck> {
    let batch: TriggerBatch = parse(&body)?;
    let acks = node.accept_all(batch.triggers, batch.not_after).await;
    let room = u32::try_from(node.room()).unwrap_or(u32::MAX);
    Ok(axum::Json(TriggerBatchAck {
        acks,
        room: Some(room),
    }))
}

/// `POST /kill`: stops a queued or running run and waits (briefly) until it has.
async fn kill(State(node): State<Arc<Node>>, body: Bytes) -> ApiResult<KillAck> {
    let KillRequest { run_id } = parse(&body)?;
    let Some(mut done) = node.kill(run_id) else {
        return Ok(axum::Json(KillAck {
            killed: false,
            message: format!("run {run_id} is not running or queued on this executor"),
        }));
    };
    let ack = match tokio::time::timeout(KILL_WAIT, done.wait_for(Option::is_some)).await {
        Ok(Ok(status)) => match *status {
            Some(RunStatus::Killed) => KillAck {
                killed: true,
                message: format!("run {run_id} killed"),
            },
            Some(other) => KillAck {
                killed: false,
                message: format!("run {run_id} had already ended: {other}"),
            },
            None => unreachable_ack(run_id),
        },
        // Released at shutdown before it started.
        Ok(Err(_)) => unreachable_ack(run_id),
        Err(_) => KillAck {
            killed: true,
            message: format!("run {run_id} is being stopped"),
        },
    };
    Ok(axum::Json(ack))
}

fn unreachable_ack(run_id: i64) -> KillAck {
    KillAck {
        killed: false,
        message: format!("run {run_id} was handed back unstarted (executor shutting down)"),
    }
}

/// `POST /log`: a page of a run's log.
async fn log(State(node): State<Arc<Node>>, body: Bytes) -> ApiResult<LogPage> {
    let request: LogRequest = parse(&body)?;
    let live = node.is_active(request.run_id);
    let logs = node.logs.clone();
    let page = tokio::task::spawn_blocking(move || {
        logs.read(request.run_id, request.from_line, request.max_lines, live)
    })
    .await
    .map_err(|e| ApiError::Internal(e.to_string()))?
    .map_err(|e| ApiError::Internal(format!("reading run {}'s log: {e}", request.run_id)))?;
    Ok(axum::Json(page))
}

/// `POST /beat`: alive, and how busy.
async fn beat(State(node): State<Arc<Node>>) -> ApiResult<BeatAck> {
    Ok(axum::Json(BeatAck {
        running: node.running(),
        capacity: node.capacity(),
    }))
}

/// `POST /plugins/warm`: compile these plugins ahead of their first trigger (in the
/// background; answered at once).
async fn warm(State(node): State<Arc<Node>>, body: Bytes) -> ApiResult<serde_json::Value> {
    let WarmRequest { plugins } = parse(&body)?;
    node.warm(plugins);
    Ok(axum::Json(serde_json::json!({})))
}

/// `POST /idle-beat`: no run of this job is running or queued here.
async fn idle_beat(State(node): State<Arc<Node>>, body: Bytes) -> ApiResult<IdleBeatAck> {
    let IdleBeatRequest { job_id } = parse(&body)?;
    Ok(axum::Json(IdleBeatAck {
        idle: node.job_idle(job_id),
    }))
}

/// `POST /runs/known`: which of these attempts this executor has.
async fn runs_known(State(node): State<Arc<Node>>, body: Bytes) -> ApiResult<RunsKnownAck> {
    let RunsKnownRequest { runs } = parse(&body)?;
    Ok(axum::Json(RunsKnownAck {
        known: node.known(&runs),
    }))
}
