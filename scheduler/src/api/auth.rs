//! Who may call what. Two middlewares, each deciding for a whole group of routes:
//!
//! - [`require_token`]: the REST API and `/metrics` want `Authorization: Bearer <token>`:
//!   `ROTA_API_TOKEN` (acting as the admin `root`), or a token issued to a user in the
//!   console (acting as that user). The [`Principal`] goes into the request's extensions;
//!   each handler checks it against what it touches ([`crate::access`]).
//! - [`require_signature`]: the executor protocol wants the HMAC signature of
//!   [`rota_proto::sign`](mod@rota_proto::sign) over the method, target, timestamp and
//!   body, so the body is buffered (bounded) here and handed on.

use axum::body::Body;
use axum::extract::{FromRequest, OriginalUri, Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::Response;
use bytes::Bytes;
use sha2::{Digest, Sha256};

use super::AppState;
use super::error::ApiError;
use crate::access::Principal;
use crate::model::now_ms;

pub async fn require_token(
    State(state): State<AppState>,
    mut req: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let given = req
        .headers()
        .get(header::AUTHORIZATION)
        .map(|v| v.as_bytes());
    let Some(given) = given else {
        return Err(ApiError::Unauthorized(
            "missing `Authorization: Bearer <token>` header".into(),
        ));
    };
    let Some(token) = given
        .strip_prefix(b"Bearer ")
        .or_else(|| given.strip_prefix(b"bearer "))
        .map(<[u8]>::trim_ascii)
    else {
        return Err(ApiError::Unauthorized(
            "the `Authorization` header must be `Bearer <token>`".into(),
        ));
    };
    let principal = principal_of(&state, token).await?;
    req.extensions_mut().insert(principal);
    Ok(next.run(req).await)
}

/// The node's own token is `root`; any other is looked up, by its hash, among the tokens
/// issued to users.
async fn principal_of(state: &AppState, token: &[u8]) -> Result<Principal, ApiError> {
    if let Some(root) = state.node.config().api_token.as_deref()
        && same_secret(token, root.as_bytes())
    {
        return Ok(Principal::root());
    }
    let hash = hex::encode(Sha256::digest(token));
    match state.node.store().token_user(&hash).await? {
        Some((name, role, apps)) => Ok(Principal::of_user(&name, &role, &apps)),
        None if state.node.config().api_token.is_none() => Err(ApiError::Unauthorized(
            "invalid API token: not one issued in the console (and ROTA_API_TOKEN is not set on this scheduler)".into(),
        )),
        None => Err(ApiError::Unauthorized(
            "invalid API token (unknown or revoked)".into(),
        )),
    }
}

/// Compares two secrets in time independent of where they differ (and, hashing first, of
/// their lengths).
fn same_secret(a: &[u8], b: &[u8]) -> bool {
    let (a, b) = (Sha256::digest(a), Sha256::digest(b));
    a.iter()
        .zip(b.iter())
        .fold(0u8, |acc, (x, y)| acc | (x ^ y))
        == 0
}

pub async fn require_signature(
    State(state): State<AppState>,
    req: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let (parts, body) = req.into_parts();
    // Buffer under the router's body limit (a `DefaultBodyLimit` extension): an oversized
    // body is a 413 from the same rejection the JSON extractor uses.
    let mut limited = Request::new(body);
    *limited.extensions_mut() = parts.extensions.clone();
    let bytes = Bytes::from_request(limited, &()).await?;

    let target = parts
        .extensions
        .get::<OriginalUri>()
        .map(|u| &u.0)
        .unwrap_or(&parts.uri)
        .path_and_query()
        .map(|pq| pq.as_str())
        .unwrap_or("/");
    let header = |name: &str| parts.headers.get(name).and_then(|v| v.to_str().ok());
    rota_proto::verify(
        state.node.config().executor_secret.as_bytes(),
        parts.method.as_str(),
        target,
        header(rota_proto::HEADER_TIMESTAMP),
        header(rota_proto::HEADER_SIGNATURE),
        &bytes,
        now_ms(),
        rota_proto::MAX_SKEW_MS,
    )
    .map_err(|e| ApiError::Unauthorized(e.to_string()))?;

    Ok(next
        .run(Request::from_parts(parts, Body::from(bytes)))
        .await)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_secret_compares_content() {
        assert!(same_secret(b"token", b"token"));
        assert!(!same_secret(b"token", b"tokem"));
        assert!(!same_secret(b"token", b"token2"));
        assert!(!same_secret(b"", b"token"));
    }
}
