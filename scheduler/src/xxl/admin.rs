//! The XXL-JOB admin API (`{context}/api/registry`, `/api/registryRemove`,
//! `/api/callback`): xxl-job-core's calls, answered as xxl-job-admin answers them — HTTP 200
//! and an [`Envelope`] whose `code` is 200 or 500 with the reason — and handled by
//! `usecase/xxl.rs`. Not behind the REST API's token nor the executor protocol's
//! signature: the app's access token in [`TOKEN_HEADER`] is checked instead.

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Json};
use axum::routing::post;
use serde::de::DeserializeOwned;

use super::wire::*;
use crate::api::AppState;
use crate::usecase::{self, xxl};

/// The admin API's routes under `context` (empty: at the root).
pub fn router(context: &str) -> Router<AppState> {
    Router::new()
        .route(&format!("{context}/api/registry"), post(registry))
        .route(
            &format!("{context}/api/registryRemove"),
            post(registry_remove),
        )
        .route(&format!("{context}/api/callback"), post(callback))
}

async fn registry(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> impl IntoResponse {
    answer(match parse::<RegistryParam>(&body) {
        Ok(p) => xxl::registry(&state.ports, token(&headers), &p).await,
        Err(e) => Err(e),
    })
}

async fn registry_remove(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> impl IntoResponse {
    answer(match parse::<RegistryParam>(&body) {
        Ok(p) => xxl::registry_remove(&state.ports, token(&headers), &p).await,
        Err(e) => Err(e),
    })
}

async fn callback(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> impl IntoResponse {
    answer(match parse::<Vec<CallbackParam>>(&body) {
        Ok(list) => xxl::callback(&state.ports, token(&headers), &list).await,
        Err(e) => Err(e),
    })
}

fn token(headers: &HeaderMap) -> Option<&str> {
    headers.get(TOKEN_HEADER).and_then(|v| v.to_str().ok())
}

fn parse<T: DeserializeOwned>(body: &[u8]) -> usecase::Result<T> {
    serde_json::from_slice(body)
        .map_err(|e| usecase::Error::BadRequest(format!("not an XXL-JOB request body: {e}")))
}

/// Always HTTP 200, as xxl-job-admin answers: the envelope's `code` says how it went.
fn answer(result: usecase::Result<()>) -> Json<Envelope<String>> {
    Json(match result {
        Ok(()) => Envelope::success(),
        Err(e) => {
            tracing::warn!(error = %e, "refused an XXL-JOB executor's call");
            Envelope::fail(e.to_string())
        }
    })
}
