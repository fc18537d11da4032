//! Who may call what. Two middlewares, each deciding for a whole group of routes:
//!
//! - [`require_token`]: the REST API and `/metrics` want `Authorization: Bearer <token>`:
//!   `ROTA_API_TOKEN` (acting as the admin `root`), or a token issued to a user in the
//!   console (acting as that user). The [`Principal`] goes into the request's extensions;
//!   each handler checks it against what it touches ([`crate::access`]).
//! - [`require_signature`]: the executor protocol wants the HMAC signature of
//!   [`rota_proto::sign`](mod@rota_proto::sign) over the method, target, timestamp, nonce
//!   and body, so the body is buffered (bounded) here and handed on. An executor signs with
//!   its app's key and names the app in `x-rota-app`; another scheduler node signs with the
//!   master secret and names none. The [`Signer`] goes into the request's extensions, and
//!   each handler checks that what the request touches belongs to it.

use axum::body::Body;
use axum::extract::{FromRequest, OriginalUri, Request, State};
use axum::http::{Method, header};
use axum::middleware::Next;
use axum::response::Response;
use bytes::Bytes;
use sha2::{Digest, Sha256};

use super::AppState;
use super::error::ApiError;
use super::validate;
use crate::access::Principal;
use crate::model::wall_ms;

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
    // A viewer changes nothing, whatever the route: refused here, before any body is read.
    if principal.role == crate::access::Role::Viewer
        && !matches!(*req.method(), Method::GET | Method::HEAD)
    {
        return Err(ApiError::Forbidden(format!(
            "`{}` is a viewer: {} needs the operator or admin role",
            principal.name,
            req.method()
        )));
    }
    req.extensions_mut().insert(principal);
    Ok(next.run(req).await)
}

/// The node's own token is `root`; any other is looked up, by its hash, among the tokens
/// issued to users.
async fn principal_of(state: &AppState, token: &[u8]) -> Result<Principal, ApiError> {
    if let Some(root) = state.ports.config().api_token.as_deref()
        && same_secret(token, root.as_bytes())
    {
        return Ok(Principal::root());
    }
    let hash = hex::encode(Sha256::digest(token));
    match crate::usecase::users::token_user(&state.ports, &hash).await? {
        Some(user) => Ok(Principal::of_user(&user.name, &user.role, &user.apps)),
        None if state.ports.config().api_token.is_none() => Err(ApiError::Unauthorized(
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

/// The sender's clock in a signed request (epoch ms), as verified.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SignedAt(pub i64);

/// Who signed a request of the executor protocol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Signer {
    /// An executor of this app, with the app's key.
    App(String),
    /// Another scheduler node, with the master secret.
    Peer,
}

impl Signer {
    /// The app of an executor's request; a peer's request to an executor endpoint is a 403.
    pub fn app(&self) -> Result<&str, ApiError> {
        match self {
            Signer::App(app) => Ok(app),
            Signer::Peer => Err(ApiError::Forbidden(format!(
                "this endpoint is for executors: sign with the app's key and name the app in `{}`",
                rota_proto::HEADER_APP
            ))),
        }
    }

    /// An executor may speak only for its own app.
    pub fn check_app(&self, app: &str) -> Result<(), ApiError> {
        let signed_for = self.app()?;
        if signed_for == app {
            return Ok(());
        }
        Err(ApiError::Forbidden(format!(
            "signed with the key of app `{signed_for}`, but the request is for app `{}`",
            validate::excerpt(app)
        )))
    }

    /// Calls between scheduler nodes.
    pub fn check_peer(&self) -> Result<(), ApiError> {
        match self {
            Signer::Peer => Ok(()),
            Signer::App(app) => Err(ApiError::Forbidden(format!(
                "this endpoint is for scheduler nodes, not for executors of app `{app}`"
            ))),
        }
    }
}

pub async fn require_signature(
    State(state): State<AppState>,
    req: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let (mut parts, body) = req.into_parts();
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
    let master = &state.ports.config().executor_secret;
    let (signer, key) = match parts.headers.get(rota_proto::HEADER_APP) {
        None => (Signer::Peer, master.clone()),
        Some(app) => {
            let app = app
                .to_str()
                .ok()
                .filter(|a| validate::app("app", a).is_ok());
            let Some(app) = app else {
                return Err(ApiError::Unauthorized(format!(
                    "`{}` header is not an app name",
                    rota_proto::HEADER_APP
                )));
            };
            (
                Signer::App(app.to_owned()),
                rota_proto::app_secret(master, app),
            )
        }
    };
    let received = rota_proto::Received::from_headers(header);
    rota_proto::verify_once(
        state.ports.replay_guard(),
        key.as_bytes(),
        parts.method.as_str(),
        target,
        &received,
        &bytes,
        // The signer's timestamp is its wall clock; so is ours (not the database's).
        wall_ms(),
    )
    .map_err(|e| {
        tracing::debug!(error = %e, path = target, signer = ?signer, "refused a signed request");
        if e.is_overload() {
            ApiError::Unavailable(e.to_string())
        } else {
            ApiError::Unauthorized(e.to_string())
        }
    })?;
    parts.extensions.insert(signer);
    // Verified, so it parses.
    let signed_at = received
        .timestamp
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or_default();
    parts.extensions.insert(SignedAt(signed_at));

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
