//! The web console: server-rendered pages (askama templates in `web/templates/`) on the
//! API's port, for people with a login.
//!
//! | routes | who may call | decided by |
//! |---|---|---|
//! | `GET /`, `GET|POST /login`, `GET /lang/{tag}`, `/static/*` | anyone | — |
//! | everything in [`console_routes`] | a signed-in user; POSTs with the session's CSRF token | [`auth::require_session`] |
//!
//! Pages work without JavaScript; `web/static/console.js` only shows times in the browser's
//! zone and follows a run's log.
//!
//! # Layout
//!
//! - [`auth`]: passwords, sessions, CSRF, the slowing of failed logins, the admin seed.
//! - [`pages`]: the handlers and their templates.
//! - [`charts`]: the dashboard's SVG charts, drawn on the server.
//! - [`workflows`] and [`graph`]: workflows and their instances, each drawn as its graph.
//! - [`people`]: users (admin only) and API tokens.
//! - [`lang`]: English and Simplified Chinese, chosen by cookie or `Accept-Language`.
//!
//! What a signed-in user may see and do is their role and apps ([`crate::access`]),
//! checked by each handler against the job, task or run it touches; lists show only the
//! user's apps.

pub mod alarms;
pub mod auth;
pub mod charts;
pub mod graph;
pub mod jobs;
pub mod lang;
pub mod pages;
pub mod people;
pub mod plugins;
pub mod runs;
pub mod secrets;
pub mod sign_in;
pub mod tasks;
pub mod workflows;

use std::sync::Arc;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::{Method, StatusCode, header};
use axum::middleware::from_fn_with_state;
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{MethodRouter, get, post};

use crate::model::Millis;
use crate::ports::Ports;
use crate::usecase::Error;

pub use crate::store::{ApiToken, AuditEntry, Counts, User};

/// What the console's handlers read.
#[derive(Clone)]
pub struct Console {
    pub ports: Ports,
    pub throttle: Arc<auth::Throttle>,
    /// Cookies get `Secure` when the node is reached over TLS.
    pub secure: bool,
}

/// Where the console's pages live.
pub const PREFIX: &str = "/console";

/// Every route behind a login, relative to [`PREFIX`]: the one list both the router and the
/// test that walks them without a session read.
fn protected(max_plugin_bytes: usize) -> Vec<(Method, &'static str, MethodRouter<Console>)> {
    use Method as M;
    use jobs::*;
    use pages::*;
    use plugins::*;
    use runs::*;
    use tasks::*;
    vec![
        (M::GET, "", get(dashboard)),
        (M::GET, "/jobs", get(jobs)),
        (M::POST, "/jobs", post(create_job)),
        (M::GET, "/jobs/new", get(new_job)),
        (M::GET, "/jobs/{id}", get(job)),
        (M::POST, "/jobs/{id}", post(update_job)),
        (M::POST, "/jobs/{id}/enabled", post(set_enabled)),
        (M::POST, "/jobs/{id}/trigger", post(trigger_job)),
        (M::POST, "/jobs/{id}/retry-dead", post(retry_dead)),
        (M::POST, "/jobs/{id}/tasks", post(schedule_task)),
        (M::GET, "/jobs/{id}/delete", get(confirm_delete)),
        (M::POST, "/jobs/{id}/delete", post(delete_job)),
        (M::GET, "/tasks", get(tasks)),
        (M::GET, "/tasks/{id}", get(task)),
        (M::POST, "/tasks/{id}/cancel", post(cancel_task)),
        (M::POST, "/tasks/{id}/retry", post(retry_task)),
        (M::POST, "/tasks/{id}/reschedule", post(reschedule_task)),
        (M::GET, "/runs", get(runs)),
        (M::GET, "/runs/{id}", get(run)),
        (M::GET, "/runs/{id}/log", get(run_log)),
        (M::POST, "/runs/{id}/kill", post(kill_run)),
        (M::GET, "/workflows", get(workflows::workflows)),
        (M::GET, "/workflows/{id}", get(workflows::workflow)),
        (M::POST, "/workflows/{id}/start", post(workflows::start)),
        (M::GET, "/workflow-instances/{id}", get(workflows::instance)),
        (
            M::POST,
            "/workflow-instances/{id}/cancel",
            post(workflows::cancel),
        ),
        (
            M::POST,
            "/workflow-instances/{id}/retry",
            post(workflows::retry),
        ),
        (M::GET, "/plugins", get(plugins)),
        (
            M::POST,
            "/plugins",
            post(upload_plugin).layer(DefaultBodyLimit::max(max_plugin_bytes)),
        ),
        (M::POST, "/plugins/{name}/delete", post(delete_plugin)),
        (M::GET, "/executors", get(executors)),
        (M::GET, "/secrets", get(secrets::list)),
        (M::POST, "/secrets", post(secrets::set)),
        (
            M::POST,
            "/secrets/{app}/{name}/delete",
            post(secrets::delete),
        ),
        (M::GET, "/alarms", get(alarms::list)),
        (M::POST, "/alarms/channels", post(alarms::create_channel)),
        (
            M::POST,
            "/alarms/channels/{name}/test",
            post(alarms::test_channel),
        ),
        (
            M::POST,
            "/alarms/channels/{name}/delete",
            post(alarms::delete_channel),
        ),
        (M::POST, "/alarms/rules", post(alarms::create_rule)),
        (
            M::POST,
            "/alarms/rules/{name}/delete",
            post(alarms::delete_rule),
        ),
        (M::GET, "/audit", get(audit_log)),
        (M::GET, "/users", get(people::users)),
        (M::POST, "/users", post(people::create_user)),
        (M::POST, "/users/{id}", post(people::set_access)),
        (M::POST, "/users/{id}/delete", post(people::delete_user)),
        (M::GET, "/tokens", get(people::tokens)),
        (M::POST, "/tokens", post(people::create_token)),
        (M::POST, "/tokens/{id}/revoke", post(people::revoke_token)),
        (M::GET, "/account", get(account)),
        (M::POST, "/account", post(change_password)),
        (M::POST, "/logout", post(logout)),
    ]
}

/// The method and full path of every console route that needs a login.
pub fn console_routes() -> Vec<(Method, String)> {
    // The upload limit does not change which routes there are.
    protected(0)
        .into_iter()
        .map(|(m, p, _)| (m, format!("{PREFIX}{p}")))
        .collect()
}

/// The console's routes open to anyone: the way in, and the assets the login page needs.
fn open() -> Vec<(Method, &'static str, MethodRouter<Console>)> {
    use Method as M;
    vec![
        (M::GET, "/", get(|| async { Redirect::to(PREFIX) })),
        (M::GET, "/login", get(sign_in::login_form)),
        (M::POST, "/login", post(sign_in::login)),
        (M::GET, "/login/oidc", get(sign_in::oidc_begin)),
        (M::GET, "/login/oidc/callback", get(sign_in::oidc_callback)),
        (M::GET, "/lang/{tag}", get(switch_lang)),
        (M::GET, "/static/console.css", get(css)),
        (M::GET, "/static/console.js", get(js)),
        (M::GET, "/static/favicon.svg", get(favicon)),
        (
            M::GET,
            "/favicon.ico",
            get(|| async { Redirect::permanent("/static/favicon.svg") }),
        ),
    ]
}

/// The method and path of every console route open without a login.
pub fn open_routes() -> Vec<(Method, String)> {
    open()
        .into_iter()
        .map(|(m, p, _)| (m, p.to_owned()))
        .collect()
}

/// The console's routes, merged into the node's router by [`crate::api::router`].
pub fn router<S>(ports: Ports) -> Router<S> {
    let config = ports.config();
    let secure = config.advertise_url.starts_with("https://");
    let max_plugin_bytes = config.max_plugin_bytes;
    let console = Console {
        ports,
        throttle: Arc::default(),
        secure,
    };
    let mut inner = Router::new();
    for (_, path, handler) in protected(max_plugin_bytes) {
        inner = inner.route(&format!("{PREFIX}{path}"), handler);
    }
    inner = inner.layer(from_fn_with_state(console.clone(), auth::require_session));
    for (_, path, handler) in open() {
        inner = inner.route(path, handler);
    }
    inner.with_state(console)
}

/// `GET /lang/{tag}`: remembers the language in a cookie and goes back to the console.
async fn switch_lang(axum::extract::Path(tag): axum::extract::Path<String>) -> Response {
    let lang = lang::Lang::from_tag(&tag).unwrap_or_default();
    let cookie = format!(
        "{}={}; Path=/; SameSite=Lax; Max-Age=31536000",
        lang::COOKIE,
        lang.tag()
    );
    ([(header::SET_COOKIE, cookie)], Redirect::to(PREFIX)).into_response()
}

async fn css() -> Response {
    static_asset(
        "text/css; charset=utf-8",
        include_str!("../../../web/static/console.css"),
    )
}

async fn favicon() -> Response {
    static_asset(
        "image/svg+xml",
        include_str!("../../../web/static/favicon.svg"),
    )
}

async fn js() -> Response {
    static_asset(
        "text/javascript; charset=utf-8",
        include_str!("../../../web/static/console.js"),
    )
}

fn static_asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "public, max-age=300"),
        ],
        body,
    )
        .into_response()
}

/// A page that could not be shown: the use case's error, rendered as a page.
#[derive(Debug)]
pub struct PageError(pub Error);

impl<E: Into<Error>> From<E> for PageError {
    fn from(e: E) -> Self {
        PageError(e.into())
    }
}

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        let status = crate::status::http_status(&self.0);
        let message = match self.0 {
            Error::Internal(e) => {
                tracing::error!(error = %format!("{e:#}"), "console: request failed");
                "internal error; the cause is in the scheduler's log".to_owned()
            }
            other => other.to_string(),
        };
        let page = pages::ErrorPage {
            status: status.as_u16(),
            message,
        };
        match askama::Template::render(&page) {
            Ok(html) => (status, Html(html)).into_response(),
            Err(_) => (status, "error").into_response(),
        }
    }
}

pub type PageResult<T = Response> = Result<T, PageError>;

/// Every page: no script or style from elsewhere, never inside a frame, not cached (they
/// show what only a signed-in user may see).
const PAGE_HEADERS: [(header::HeaderName, &str); 4] = [
    (
        header::CONTENT_SECURITY_POLICY,
        "default-src 'self'; frame-ancestors 'none'; form-action 'self'",
    ),
    (header::X_FRAME_OPTIONS, "DENY"),
    (header::REFERRER_POLICY, "same-origin"),
    (header::CACHE_CONTROL, "no-store"),
];

/// Renders a template as a page.
pub fn render(t: &impl askama::Template) -> PageResult {
    render_status(StatusCode::OK, t)
}

pub fn render_status(status: StatusCode, t: &impl askama::Template) -> PageResult {
    let html = t
        .render()
        .map_err(|e| Error::Internal(anyhow::anyhow!("rendering a page: {e}")))?;
    Ok((status, PAGE_HEADERS, Html(html)).into_response())
}

/// A time for a page: UTC text, and the RFC 3339 value the script turns into local time.
#[derive(Debug, Clone)]
pub struct When {
    pub iso: String,
    pub text: String,
}

impl When {
    pub fn of(ms: Millis) -> When {
        let t = chrono::DateTime::from_timestamp_millis(ms).unwrap_or_default();
        When {
            iso: t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            text: t.format("%Y-%m-%d %H:%M:%S UTC").to_string(),
        }
    }

    pub fn opt(ms: Option<Millis>) -> Option<When> {
        ms.map(When::of)
    }
}
