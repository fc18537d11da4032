//! What every console page shares (the chrome, paging, the form-error map, finding a job
//! with the user's permission) and the pages of no one area: sign-out, the dashboard, the
//! audit log and the account. The areas have their own files: `sign_in`, `jobs`, `tasks`,
//! `runs`, `plugins` (with executors), `people`, `secrets`.

use std::collections::BTreeMap;

use askama::Template;
use axum::extract::{FromRequest, Query, Request, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Redirect};
use axum::{Extension, Form};
use serde::Deserialize;

use super::auth::{self, Session};
use super::lang::Lang;
use super::{Console, PREFIX, PageResult, When, render, render_status};
use crate::access::Need;
use crate::model::{Job, Millis, Page, RunStatus};
use crate::usecase::Error;
use crate::usecase::users::MIN_PASSWORD_CHARS;

/// Rows per table page.
pub(super) const PAGE: u32 = 50;
/// Lines per request of the live log tail.
pub(super) const LOG_LINES: u32 = 500;

/// What the layout needs on every page: who is signed in, the token for its forms, and
/// which section is open.
pub struct Chrome {
    pub user: String,
    pub csrf: String,
    pub section: &'static str,
    pub lang: Lang,
    /// Shows the admin's sections (users, audit).
    pub admin: bool,
}

impl Chrome {
    pub(super) fn of(s: &Session, section: &'static str) -> Chrome {
        Chrome {
            user: s.user.name.clone(),
            csrf: s.csrf.clone(),
            section,
            lang: s.lang,
            admin: s.who.is_admin(),
        }
    }

    /// `en` in the page's language.
    pub fn t(&self, en: &'static str) -> &'static str {
        self.lang.t(en)
    }
}

/// A `<select>` option.
pub struct Opt {
    pub value: String,
    pub selected: bool,
}

pub(super) fn options<T: ToString>(all: impl IntoIterator<Item = T>, current: &str) -> Vec<Opt> {
    all.into_iter()
        .map(|v| {
            let value = v.to_string();
            let selected = value == current;
            Opt { value, selected }
        })
        .collect()
}

pub(super) fn empty_none(s: &Option<String>) -> Option<&str> {
    s.as_deref().map(str::trim).filter(|s| !s.is_empty())
}

// ----- shared by the pages --------------------------------------------------------------

/// Percent-encodes a query value.
pub(super) fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

pub(super) type Errors = BTreeMap<String, String>;

/// A form page's status: 422 when it shows errors.
pub(super) fn form_status(errors: &Errors) -> StatusCode {
    if errors.is_empty() {
        StatusCode::OK
    } else {
        StatusCode::UNPROCESSABLE_ENTITY
    }
}

/// Job `id`, if the signed-in user may read (or change) it.
pub(super) async fn job_for(
    console: &Console,
    s: &Session,
    id: i64,
    need: Need,
) -> Result<Job, Error> {
    let id = id.to_string();
    match need {
        Need::Read => crate::usecase::jobs::get(&console.ports, &s.who, &id).await,
        Need::Change => crate::usecase::jobs::to_change(&console.ports, &s.who, &id).await,
    }
}

/// The link to a list's next page, keeping its filters.
pub(super) fn next_url<T>(
    list: &str,
    page: &Page<T>,
    filters: &[(&str, Option<&str>)],
) -> Option<String> {
    page.next.map(|n| {
        let mut url = format!("{PREFIX}/{list}?before={n}");
        for (k, v) in filters {
            if let Some(v) = v {
                url.push_str(&format!("&{k}={}", encode(v)));
            }
        }
        url
    })
}

// ----- errors ------------------------------------------------------------------------------

#[derive(Template)]
#[template(path = "error.html")]
pub struct ErrorPage {
    pub status: u16,
    pub message: String,
}

pub async fn logout(
    State(console): State<Console>,
    Extension(session): Extension<Session>,
    req: Request,
) -> PageResult {
    let hash = auth::cookie_token(req.headers()).map(|t| auth::token_hash(&t));
    crate::usecase::users::sign_out(&console.ports, &session.user.name, hash.as_deref()).await?;
    Ok((
        [(header::SET_COOKIE, auth::clear_cookie(console.secure))],
        Redirect::to("/login"),
    )
        .into_response())
}

// ----- dashboard ---------------------------------------------------------------------------

#[derive(Template)]
#[template(path = "dashboard.html")]
pub(super) struct DashboardPage {
    chrome: Chrome,
    jobs: i64,
    tasks_pending: i64,
    runs_today: Vec<(String, i64)>,
    executors_online: usize,
    since: When,
    /// Inline SVG: runs per minute over the last hour, per day over the last week, of every
    /// app (`None` for a user scoped to some apps).
    per_minute: Option<String>,
    per_day: Option<String>,
    /// Fire lateness p99 on this node over the last 5 minutes, and how many fires.
    lateness_p99: Option<String>,
    lateness_fires: u64,
    /// Alarm rules whose condition is open: name, event, since.
    open_alarms: Vec<(String, String, When)>,
}

/// Finished runs per bucket from `since`, one bar per bucket up to `now` (empty ones too).
pub(super) fn bars(
    stats: &[crate::store::RunStat],
    since: Millis,
    now: Millis,
    bucket: Millis,
    label: impl Fn(Millis) -> String,
) -> Vec<super::charts::Bar> {
    let mut out = Vec::new();
    let mut at = since - since.rem_euclid(bucket);
    while at <= now {
        let (mut ok, mut bad) = (0, 0);
        for stat in stats.iter().filter(|s| s.bucket == at) {
            if stat.status == RunStatus::Succeeded.as_str() {
                ok += stat.runs;
            } else {
                bad += stat.runs;
            }
        }
        out.push(super::charts::Bar {
            label: label(at),
            ok,
            bad,
        });
        at += bucket;
    }
    out
}

pub async fn dashboard(
    State(console): State<Console>,
    Extension(s): Extension<Session>,
) -> PageResult {
    let now = console.ports.clock().now_ms();
    let midnight = now - now.rem_euclid(86_400_000);
    const MINUTE: Millis = 60_000;
    const DAY: Millis = 86_400_000;
    let hour_ago = now - 59 * MINUTE;
    let week_ago = midnight - 6 * DAY;
    // A scoped user counts only their apps; the charts count every app, so they see none.
    let board = crate::usecase::cluster::dashboard(
        &console.ports,
        &s.who,
        midnight,
        hour_ago - hour_ago.rem_euclid(MINUTE),
        week_ago,
    )
    .await?;
    let (counts, executors) = (board.counts, board.executors);
    let fmt = |pattern: &'static str| {
        move |ms: Millis| {
            chrono::DateTime::from_timestamp_millis(ms)
                .unwrap_or_default()
                .format(pattern)
                .to_string()
        }
    };
    let per_minute = board.per_minute.map(|minutes| {
        super::charts::stacked_bars(
            &bars(&minutes, hour_ago, now, MINUTE, fmt("%H:%M UTC")),
            s.lang.t("Runs per minute, last hour"),
        )
    });
    let per_day = board.per_day.map(|days| {
        super::charts::stacked_bars(
            &bars(&days, week_ago, now, DAY, fmt("%Y-%m-%d")),
            s.lang.t("Runs per day, last 7 days"),
        )
    });
    let p99 = console.ports.lateness().quantile(now, 5 * MINUTE, 0.99);
    let runs_today = RunStatus::ALL
        .iter()
        .map(|st| {
            let n = counts
                .runs_by_status
                .iter()
                .find(|(s, _)| s == st.as_str())
                .map_or(0, |(_, n)| *n);
            (st.as_str().to_owned(), n)
        })
        .collect();
    let open_alarms = crate::usecase::alarms::rules(&console.ports, &s.who)
        .await?
        .into_iter()
        .filter_map(|r| Some((r.name, r.on_event, When::of(r.open_since?))))
        .collect();
    render(&DashboardPage {
        chrome: Chrome::of(&s, "dashboard"),
        open_alarms,
        jobs: counts.jobs,
        tasks_pending: counts.tasks_pending,
        runs_today,
        executors_online: executors,
        since: When::of(midnight),
        per_minute,
        per_day,
        lateness_p99: p99.map(|p| match p.le_ms {
            Some(ms) => format!("≤ {ms} ms"),
            None => "> 60 s".to_owned(),
        }),
        lateness_fires: p99.map_or(0, |p| p.fires),
    })
}

// ----- audit -------------------------------------------------------------------------------

pub struct AuditRow {
    user: String,
    action: String,
    target: String,
    at: When,
}

#[derive(Template)]
#[template(path = "audit.html")]
pub(super) struct AuditPage {
    chrome: Chrome,
    entries: Vec<AuditRow>,
    next: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
pub struct AuditQuery {
    before: Option<i64>,
}

pub async fn audit_log(
    State(console): State<Console>,
    Extension(s): Extension<Session>,
    Query(q): Query<AuditQuery>,
) -> PageResult {
    let page = crate::usecase::audit::list(&console.ports, &s.who, q.before, PAGE).await?;
    let next = page.next.map(|id| format!("{PREFIX}/audit?before={id}"));
    let entries = page.items;
    render(&AuditPage {
        chrome: Chrome::of(&s, "audit"),
        entries: entries
            .into_iter()
            .map(|e| AuditRow {
                user: e.user_name,
                action: e.action,
                target: e.target,
                at: When::of(e.at),
            })
            .collect(),
        next,
    })
}

// ----- account -----------------------------------------------------------------------------

#[derive(Template)]
#[template(path = "account.html")]
pub(super) struct AccountPage {
    chrome: Chrome,
    errors: Errors,
    changed: bool,
}

#[derive(Debug, Default, Deserialize)]
pub struct AccountQuery {
    changed: Option<String>,
}

pub async fn account(
    Extension(s): Extension<Session>,
    Query(q): Query<AccountQuery>,
) -> PageResult {
    render(&AccountPage {
        chrome: Chrome::of(&s, "account"),
        errors: Errors::new(),
        changed: q.changed.is_some(),
    })
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct PasswordForm {
    current: String,
    new: String,
    confirm: String,
}

/// Changes the signed-in user's password; their other sessions end.
pub async fn change_password(
    State(console): State<Console>,
    Extension(s): Extension<Session>,
    req: Request,
) -> PageResult {
    let token = auth::cookie_token(req.headers()).unwrap_or_default();
    let Form(f) = Form::<PasswordForm>::from_request(req, &())
        .await
        .map_err(|e| Error::BadRequest(e.body_text()))?;
    let mut errors = Errors::new();
    if s.user.source != "local" {
        // Kept by the directory: there is nothing here to change.
        errors.insert(
            "current".into(),
            s.lang
                .t("Your password is your directory account's: change it there.")
                .into(),
        );
        let page = AccountPage {
            chrome: Chrome::of(&s, "account"),
            errors,
            changed: false,
        };
        return render_status(StatusCode::UNPROCESSABLE_ENTITY, &page);
    }
    let current_ok = auth::verify_password(f.current, s.user.password_hash.clone())
        .await
        .map_err(Error::Internal)?;
    if !current_ok {
        errors.insert(
            "current".into(),
            s.lang.t("This is not your password.").into(),
        );
    }
    if f.new.chars().count() < MIN_PASSWORD_CHARS {
        let message = match s.lang {
            Lang::En => format!("Use at least {MIN_PASSWORD_CHARS} characters."),
            Lang::ZhCn => format!("至少 {MIN_PASSWORD_CHARS} 个字符。"),
        };
        errors.insert("new".into(), message);
    }
    if f.new != f.confirm {
        errors.insert(
            "confirm".into(),
            s.lang.t("The two passwords differ.").into(),
        );
    }
    if !errors.is_empty() {
        let page = AccountPage {
            chrome: Chrome::of(&s, "account"),
            errors,
            changed: false,
        };
        return render_status(StatusCode::UNPROCESSABLE_ENTITY, &page);
    }
    crate::usecase::users::change_password(
        &console.ports,
        &s.who,
        s.user.id,
        &f.new,
        &auth::token_hash(&token),
    )
    .await?;
    Ok(Redirect::to(&format!("{PREFIX}/account?changed=1")).into_response())
}
