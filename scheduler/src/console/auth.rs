//! Who is at the console: passwords ([`crate::credentials`]), sessions (a random cookie, stored hashed),
//! CSRF tokens (derived from the session) and the slowing of failed logins.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use sha2::{Digest, Sha256};

use super::{Console, User};
pub use crate::credentials::{
    hash_password, random_token, token_hash, verify_nobody, verify_password,
};
use crate::model::Millis;

/// The session cookie's name.
pub const COOKIE: &str = "rota_session";
/// The form field (or `x-csrf-token` header) carrying the CSRF token on every POST.
pub const CSRF_FIELD: &str = "csrf";
/// How long a login lasts.
pub const SESSION_MS: Millis = crate::usecase::users::SESSION_MS;

/// The signed-in user and the CSRF token every form of theirs carries; put in the request's
/// extensions by [`require_session`].
#[derive(Debug, Clone)]
pub struct Session {
    pub user: User,
    /// What the user may do, from their role and apps.
    pub who: crate::access::Principal,
    pub csrf: String,
    pub lang: super::lang::Lang,
}

/// Whether a POST comes from a page of this site: a browser's `Origin`, when it sends
/// one, must name the host the request was sent to.
pub fn same_origin(headers: &axum::http::HeaderMap) -> bool {
    let Some(origin) = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()) else {
        return true;
    };
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    origin
        .split_once("://")
        .is_some_and(|(_, authority)| !host.is_empty() && authority == host)
}

/// The session's CSRF token: derived from the cookie, so it needs no storage and cannot be
/// computed from what the database holds.
pub fn csrf_for(token: &str) -> String {
    hex::encode(Sha256::digest(format!("rota-csrf:{token}").as_bytes()))
}

/// The `Set-Cookie` value opening a session.
pub fn session_cookie(token: &str, secure: bool) -> String {
    let secure = if secure { "; Secure" } else { "" };
    format!(
        "{COOKIE}={token}; HttpOnly; SameSite=Strict; Path=/; Max-Age={}{secure}",
        SESSION_MS / 1000
    )
}

/// The `Set-Cookie` value ending it.
pub fn clear_cookie(secure: bool) -> String {
    let secure = if secure { "; Secure" } else { "" };
    format!("{COOKIE}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0{secure}")
}

/// The session cookie of a request, if it has one.
pub fn cookie_token(headers: &axum::http::HeaderMap) -> Option<String> {
    cookie(headers, COOKIE)
}

/// The value of a request's cookie `name`, if it is set and not empty.
pub fn cookie(headers: &axum::http::HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.to_owned())
        .filter(|v| !v.is_empty())
}

/// The client's address, when the server records it (`into_make_service_with_connect_info`).
pub fn client_ip(req: &Request) -> Option<IpAddr> {
    req.extensions()
        .get::<ConnectInfo<rota_net::ClientAddr>>()
        .map(|c| c.0.0.ip())
}

/// Guards every console page and action. Without a live session a browser asking for a
/// page (`Accept: text/html`) is sent to the login form; any other read is a 401 (a script,
/// the log tail's `fetch`), and an action a 403. A POST must carry the session's CSRF token
/// (form field `csrf` or header `x-csrf-token`), or it is a 403.
pub async fn require_session(State(console): State<Console>, req: Request, next: Next) -> Response {
    let reading = matches!(*req.method(), Method::GET | Method::HEAD);
    let browsing = reading
        && req
            .headers()
            .get(header::ACCEPT)
            .and_then(|a| a.to_str().ok())
            .is_some_and(|a| a.contains("text/html"));
    let refuse = |reading: bool| -> Response {
        if browsing {
            Redirect::to("/login").into_response()
        } else if reading {
            (
                StatusCode::UNAUTHORIZED,
                "sign in first (POST /login), or call /api/v1 with an API token",
            )
                .into_response()
        } else {
            (StatusCode::FORBIDDEN, "sign in first").into_response()
        }
    };
    let Some(token) = cookie_token(req.headers()) else {
        return refuse(reading);
    };
    let user = match crate::usecase::users::session_user(&console.ports, &token_hash(&token)).await
    {
        Ok(Some(user)) => user,
        Ok(None) => return refuse(reading),
        Err(e) => {
            tracing::error!(error = %e, "console: reading a session failed");
            return (StatusCode::INTERNAL_SERVER_ERROR, "internal error").into_response();
        }
    };
    let csrf = csrf_for(&token);
    let lang = super::lang::Lang::of(req.headers());
    let mut req = if reading {
        req
    } else {
        let (parts, body) = req.into_parts();
        // The route's own limit (a plugin upload's is larger) applies when it is read.
        let config = console.ports.config();
        let limit = config.max_body_bytes.max(config.max_plugin_bytes);
        let Ok(bytes) = axum::body::to_bytes(body, limit).await else {
            return (StatusCode::PAYLOAD_TOO_LARGE, "request too large").into_response();
        };
        let sent = parts
            .headers
            .get("x-csrf-token")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
            .or_else(|| form_field(&bytes, CSRF_FIELD));
        if sent.as_deref() != Some(csrf.as_str()) {
            tracing::warn!(user = %user.name, path = %parts.uri.path(), "console: POST without a valid CSRF token");
            return (
                StatusCode::FORBIDDEN,
                "this form has expired or did not come from the console; reload the page and try again",
            )
                .into_response();
        }
        Request::from_parts(parts, Body::from(bytes))
    };
    let who = user.principal();
    req.extensions_mut().insert(Session {
        user,
        who,
        csrf,
        lang,
    });
    next.run(req).await
}

/// One field of an `application/x-www-form-urlencoded` body (the CSRF token is hex, so it
/// needs no decoding).
fn form_field(body: &[u8], name: &str) -> Option<String> {
    std::str::from_utf8(body)
        .ok()?
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.to_owned())
}

/// Failed logins per (user name, client address): after [`FREE_FAILURES`] the next attempt
/// waits, twice as long after each further failure, up to [`MAX_LOCK`]. In memory: a node
/// restart forgives, which is fine for slowing guessing down.
#[derive(Default)]
pub struct Throttle {
    failures: Mutex<HashMap<(String, Option<IpAddr>), Failures>>,
}

#[derive(Clone, Copy)]
struct Failures {
    count: u32,
    locked_until: Instant,
}

pub const FREE_FAILURES: u32 = 3;
pub const MAX_LOCK: Duration = Duration::from_secs(300);
/// Entries kept at most; beyond it the unlocked ones are forgotten.
const MAX_ENTRIES: usize = 10_000;

impl Throttle {
    /// How long this user and address must still wait before trying again.
    pub fn wait(&self, user: &str, ip: Option<IpAddr>, now: Instant) -> Option<Duration> {
        let failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        failures
            .get(&(user.to_owned(), ip))
            .and_then(|f| f.locked_until.checked_duration_since(now))
            .filter(|d| !d.is_zero())
    }

    pub fn failed(&self, user: &str, ip: Option<IpAddr>, now: Instant) {
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        if failures.len() >= MAX_ENTRIES {
            failures.retain(|_, f| f.locked_until > now);
        }
        let f = failures.entry((user.to_owned(), ip)).or_insert(Failures {
            count: 0,
            locked_until: now,
        });
        f.count += 1;
        f.locked_until = now + lock_for(f.count);
    }

    pub fn succeeded(&self, user: &str, ip: Option<IpAddr>) {
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        failures.remove(&(user.to_owned(), ip));
    }
}

/// The wait after the `count`-th failure in a row.
fn lock_for(count: u32) -> Duration {
    if count < FREE_FAILURES {
        return Duration::ZERO;
    }
    let doubling = (count - FREE_FAILURES).min(16);
    (Duration::from_secs(1) * (1u32 << doubling)).min(MAX_LOCK)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failed_logins_wait_longer_and_longer() {
        assert_eq!(lock_for(1), Duration::ZERO);
        assert_eq!(lock_for(2), Duration::ZERO);
        assert_eq!(lock_for(3), Duration::from_secs(1));
        assert_eq!(lock_for(4), Duration::from_secs(2));
        assert_eq!(lock_for(40), MAX_LOCK);

        let t = Throttle::default();
        let now = Instant::now();
        for _ in 0..FREE_FAILURES - 1 {
            t.failed("admin", None, now);
        }
        assert_eq!(t.wait("admin", None, now), None);
        t.failed("admin", None, now);
        assert_eq!(t.wait("admin", None, now), Some(Duration::from_secs(1)));
        assert_eq!(t.wait("other", None, now), None, "per user name");
        assert_eq!(t.wait("admin", None, now + Duration::from_secs(2)), None);
        t.succeeded("admin", None);
        t.failed("admin", None, now);
        assert_eq!(t.wait("admin", None, now), None, "a success forgives");
    }

    #[test]
    fn cookies_and_csrf() {
        let mut headers = axum::http::HeaderMap::new();
        headers.insert(
            header::COOKIE,
            "a=1; rota_session=abc; b=2".parse().unwrap(),
        );
        assert_eq!(cookie_token(&headers).as_deref(), Some("abc"));
        assert_ne!(csrf_for("abc"), token_hash("abc"));
        assert!(session_cookie("abc", true).ends_with("; Secure"));
        assert!(session_cookie("abc", false).contains("HttpOnly; SameSite=Strict; Path=/"));
        let mut h = axum::http::HeaderMap::new();
        assert!(
            same_origin(&h),
            "no Origin: not a cross-site browser request"
        );
        h.insert(header::HOST, "rota.example:8080".parse().unwrap());
        h.insert(header::ORIGIN, "https://rota.example:8080".parse().unwrap());
        assert!(same_origin(&h));
        h.insert(header::ORIGIN, "https://evil.example".parse().unwrap());
        assert!(!same_origin(&h));
        assert_eq!(
            form_field(b"name=x&csrf=00ff&y=", "csrf").as_deref(),
            Some("00ff")
        );
    }
}
