//! The console's handlers and the askama templates they fill. Jobs are validated by the
//! use case's [`build_spec`], as in the API, so both accept exactly the same jobs; its
//! `field: message` errors are shown next to the field they name.

use std::collections::BTreeMap;

use askama::Template;
use axum::extract::rejection::BytesRejection;
use axum::extract::{FromRequest, Path, Query, Request, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::{Extension, Form, Json};
use bytes::Bytes;
use serde::Deserialize;
use serde_json::{Value, json};

use super::auth::{self, Session};
use super::lang::Lang;
use super::{Console, PREFIX, PageResult, When, render, render_status};
use crate::access::Need;
use crate::model::{
    Job, Millis, NewTask, Page, RunFilter, RunStatus, TaskFilter, TaskKind, TaskState, TaskStatus,
    now_ms,
};
use crate::route::Route;
use crate::schedule::{Misfire, Schedule};
use crate::usecase::jobs::{JobFields, SpecErrors, build_spec, run_as, task_as};
use crate::usecase::{self, Error};

/// Rows per table page.
const PAGE: u32 = 50;
/// Lines per request of the live log tail.
const LOG_LINES: u32 = 500;

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

fn options<T: ToString>(all: impl IntoIterator<Item = T>, current: &str) -> Vec<Opt> {
    all.into_iter()
        .map(|v| {
            let value = v.to_string();
            let selected = value == current;
            Opt { value, selected }
        })
        .collect()
}

fn empty_none(s: &Option<String>) -> Option<&str> {
    s.as_deref().map(str::trim).filter(|s| !s.is_empty())
}

// ----- errors ------------------------------------------------------------------------------

#[derive(Template)]
#[template(path = "error.html")]
pub struct ErrorPage {
    pub status: u16,
    pub message: String,
}

// ----- login -------------------------------------------------------------------------------

#[derive(Template)]
#[template(path = "login.html")]
struct LoginPage {
    lang: Lang,
    user: String,
    error: Option<String>,
}

pub async fn login_form(State(console): State<Console>, req: Request) -> PageResult {
    if let Some(token) = auth::cookie_token(req.headers()) {
        let store = console.node.store();
        if store
            .session_user(&auth::token_hash(&token), now_ms())
            .await?
            .is_some()
        {
            return Ok(Redirect::to(PREFIX).into_response());
        }
    }
    render(&LoginPage {
        lang: Lang::of(req.headers()),
        user: String::new(),
        error: None,
    })
}

#[derive(Debug, Deserialize)]
pub struct LoginForm {
    #[serde(default)]
    user: String,
    #[serde(default)]
    password: String,
}

pub async fn login(State(console): State<Console>, req: Request) -> PageResult {
    let ip = auth::client_ip(&req);
    let lang = Lang::of(req.headers());
    let same_origin = auth::same_origin(req.headers());
    let Form(form) = Form::<LoginForm>::from_request(req, &())
        .await
        .map_err(|e| Error::BadRequest(e.body_text()))?;
    let now = std::time::Instant::now();
    let refuse = |status, error: &str| {
        render_status(
            status,
            &LoginPage {
                lang,
                user: form.user.clone(),
                error: Some(error.to_owned()),
            },
        )
    };
    // The login form has no session to tie a CSRF token to; a cross-site form is refused by
    // its Origin instead (it would sign the victim into the attacker's account).
    if !same_origin {
        return refuse(
            StatusCode::FORBIDDEN,
            lang.t("This sign-in form did not come from this site."),
        );
    }
    if let Some(wait) = console.throttle.wait(&form.user, ip, now) {
        let secs = wait.as_secs().max(1);
        let message = match lang {
            Lang::En => format!("Too many failed sign-ins: try again in {secs} s."),
            Lang::ZhCn => format!("登录失败次数过多：请在 {secs} 秒后重试。"),
        };
        return refuse(StatusCode::TOO_MANY_REQUESTS, &message);
    }
    let store = console.node.store();
    let user = store.user_by_name(&form.user).await?;
    let ok = match &user {
        Some(u) => auth::verify_password(form.password.clone(), u.password_hash.clone())
            .await
            .map_err(Error::Internal)?,
        None => {
            auth::verify_nobody(form.password.clone())
                .await
                .map_err(Error::Internal)?;
            false
        }
    };
    let Some(user) = user.filter(|_| ok) else {
        console.throttle.failed(&form.user, ip, now);
        tracing::warn!(user = %form.user, ip = ?ip, "console: failed sign-in");
        return refuse(
            StatusCode::UNAUTHORIZED,
            lang.t("Wrong user name or password."),
        );
    };
    console.throttle.succeeded(&form.user, ip);
    let token = auth::random_token(32);
    let at = now_ms();
    store
        .insert_session(
            &auth::token_hash(&token),
            user.id,
            at,
            at + auth::SESSION_MS,
        )
        .await?;
    audit(&console, &user.name, "login", "").await;
    Ok((
        [(
            header::SET_COOKIE,
            auth::session_cookie(&token, console.secure),
        )],
        Redirect::to(PREFIX),
    )
        .into_response())
}

pub async fn logout(
    State(console): State<Console>,
    Extension(session): Extension<Session>,
    req: Request,
) -> PageResult {
    if let Some(token) = auth::cookie_token(req.headers()) {
        console
            .node
            .store()
            .delete_session(&auth::token_hash(&token))
            .await?;
    }
    audit(&console, &session.user.name, "logout", "").await;
    Ok((
        [(header::SET_COOKIE, auth::clear_cookie(console.secure))],
        Redirect::to("/login"),
    )
        .into_response())
}

/// Notes who changed what; a failure to note it is logged, not shown.
pub(super) async fn audit(console: &Console, user: &str, action: &str, target: &str) {
    console.node.audit(user, action, target).await;
}

// ----- dashboard ---------------------------------------------------------------------------

#[derive(Template)]
#[template(path = "dashboard.html")]
struct DashboardPage {
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
}

/// Finished runs per bucket from `since`, one bar per bucket up to `now` (empty ones too).
fn bars(
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
    let now = now_ms();
    let midnight = now - now.rem_euclid(86_400_000);
    let store = console.node.store();
    // A scoped user counts only their apps; the charts count every app, so they see none.
    let scope = s.who.app_filter();
    let counts = store.console_counts(midnight, scope).await?;
    let alive_after = now - console.node.config().executor_dead_after_ms;
    let executors = store.list_executors(None, alive_after).await?;
    let executors = executors.iter().filter(|e| s.who.sees(&e.app)).count();
    let fmt = |pattern: &'static str| {
        move |ms: Millis| {
            chrono::DateTime::from_timestamp_millis(ms)
                .unwrap_or_default()
                .format(pattern)
                .to_string()
        }
    };
    const MINUTE: Millis = 60_000;
    const DAY: Millis = 86_400_000;
    let hour_ago = now - 59 * MINUTE;
    let minutes = store
        .run_stats(hour_ago - hour_ago.rem_euclid(MINUTE), MINUTE)
        .await?;
    let per_minute = scope.is_none().then(|| {
        super::charts::stacked_bars(
            &bars(&minutes, hour_ago, now, MINUTE, fmt("%H:%M UTC")),
            s.lang.t("Runs per minute, last hour"),
        )
    });
    let week_ago = midnight - 6 * DAY;
    let days = store.run_stats(week_ago, DAY).await?;
    let per_day = scope.is_none().then(|| {
        super::charts::stacked_bars(
            &bars(&days, week_ago, now, DAY, fmt("%Y-%m-%d")),
            s.lang.t("Runs per day, last 7 days"),
        )
    });
    let p99 = console.node.lateness().quantile(now, 5 * MINUTE, 0.99);
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
    render(&DashboardPage {
        chrome: Chrome::of(&s, "dashboard"),
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

// ----- jobs --------------------------------------------------------------------------------

pub struct JobRow {
    id: i64,
    name: String,
    app: String,
    plugin: String,
    schedule: String,
    enabled: bool,
    next_fire: Option<When>,
}

fn schedule_text(s: &Schedule) -> String {
    match s {
        Schedule::Cron { expr, time_zone } => match time_zone {
            Some(tz) => format!("cron {expr} ({tz})"),
            None => format!("cron {expr}"),
        },
        Schedule::FixedRate { every_ms } => format!("every {every_ms} ms"),
        Schedule::None => "none".to_owned(),
    }
}

impl From<&Job> for JobRow {
    fn from(j: &Job) -> Self {
        JobRow {
            id: j.id,
            name: j.spec.name.clone(),
            app: j.spec.app.clone(),
            plugin: j.spec.plugin.clone(),
            schedule: schedule_text(&j.spec.schedule),
            enabled: j.spec.enabled,
            next_fire: When::opt(j.next_fire_at),
        }
    }
}

#[derive(Template)]
#[template(path = "jobs.html")]
struct JobsPage {
    chrome: Chrome,
    q: String,
    jobs: Vec<JobRow>,
    next: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
pub struct JobsQuery {
    q: Option<String>,
    before: Option<i64>,
}

pub async fn jobs(
    State(console): State<Console>,
    Extension(s): Extension<Session>,
    Query(query): Query<JobsQuery>,
) -> PageResult {
    let q = empty_none(&query.q);
    let page = console
        .node
        .store()
        .list_jobs(None, s.who.app_filter(), q, query.before, PAGE)
        .await?;
    let q = q.unwrap_or_default().to_owned();
    let next = page.next.map(|n| {
        let mut url = format!("{PREFIX}/jobs?before={n}");
        if !q.is_empty() {
            url.push_str(&format!("&q={}", encode(&q)));
        }
        url
    });
    render(&JobsPage {
        chrome: Chrome::of(&s, "jobs"),
        q,
        jobs: page.items.iter().map(JobRow::from).collect(),
        next,
    })
}

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

/// The job form as the browser sends it: every field text, checked by [`build_spec`].
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct JobForm {
    name: String,
    app: String,
    plugin: String,
    schedule_kind: String,
    cron_expr: String,
    time_zone: String,
    every_ms: String,
    params: String,
    route: String,
    block: String,
    misfire: String,
    timeout_ms: String,
    max_attempts: String,
    memory_mb: String,
    max_concurrency: String,
    /// One origin or URL prefix per line.
    http_allow: String,
    enabled: Option<String>,
    /// Set by the "Preview" button: show the next fire times, save nothing.
    preview: Option<String>,
}

impl JobForm {
    fn of(job: &Job) -> JobForm {
        let spec = &job.spec;
        let (kind, expr, tz, every) = match &spec.schedule {
            Schedule::Cron { expr, time_zone } => (
                "cron",
                expr.clone(),
                time_zone.clone().unwrap_or_default(),
                String::new(),
            ),
            Schedule::FixedRate { every_ms } => (
                "fixed_rate",
                String::new(),
                String::new(),
                every_ms.to_string(),
            ),
            Schedule::None => ("none", String::new(), String::new(), String::new()),
        };
        JobForm {
            name: spec.name.clone(),
            app: spec.app.clone(),
            plugin: spec.plugin.clone(),
            schedule_kind: kind.to_owned(),
            cron_expr: expr,
            time_zone: tz,
            every_ms: every,
            params: spec.params.clone().unwrap_or_default(),
            route: spec.route.to_string(),
            block: block_name(spec.block).to_owned(),
            misfire: spec.misfire.as_str().to_owned(),
            timeout_ms: spec.timeout_ms.to_string(),
            max_attempts: spec.max_attempts.to_string(),
            memory_mb: spec.memory_mb.to_string(),
            max_concurrency: spec
                .max_concurrency
                .map(|m| m.to_string())
                .unwrap_or_default(),
            http_allow: spec.http_allow.join("\n"),
            enabled: spec.enabled.then(|| "on".to_owned()),
            preview: None,
        }
    }

    fn blank() -> JobForm {
        JobForm {
            schedule_kind: "cron".into(),
            cron_expr: "0 */5 * * * ?".into(),
            route: Route::default().to_string(),
            block: "serial".into(),
            misfire: Misfire::default().as_str().into(),
            timeout_ms: "300000".into(),
            max_attempts: "1".into(),
            memory_mb: "64".into(),
            enabled: Some("on".into()),
            ..JobForm::default()
        }
    }

    /// The schedule the form describes, or the error to show under it.
    fn schedule(&self, errors: &mut Errors) -> Option<Value> {
        match self.schedule_kind.as_str() {
            "cron" => {
                let mut v = json!({"kind": "cron", "expr": self.cron_expr.trim()});
                if !self.time_zone.trim().is_empty() {
                    v["time_zone"] = json!(self.time_zone.trim());
                }
                Some(v)
            }
            "fixed_rate" => int("every_ms", &self.every_ms, errors)
                .map(|n| json!({"kind": "fixed_rate", "every_ms": n}))
                .or_else(|| {
                    errors
                        .entry("every_ms".into())
                        .or_insert_with(|| "required for a fixed rate".into());
                    None
                }),
            "none" => Some(json!({"kind": "none"})),
            other => {
                errors.insert("schedule".into(), format!("unknown kind `{other}`"));
                None
            }
        }
    }

    /// The form as the API's [`JobFields`]; text that is not a number is an error here.
    fn fields(&self, errors: &mut Errors) -> Option<JobFields> {
        let mut m = serde_json::Map::new();
        m.insert("name".into(), json!(self.name));
        m.insert("app".into(), json!(self.app.trim()));
        m.insert("plugin".into(), json!(self.plugin.trim()));
        // A schedule with errors (filed already) stands in as `none`, so the other fields
        // are still checked.
        let schedule = self
            .schedule(errors)
            .unwrap_or_else(|| json!({"kind": "none"}));
        m.insert("schedule".into(), schedule);
        let params = (!self.params.is_empty()).then_some(self.params.as_str());
        m.insert("params".into(), json!(params));
        m.insert("route".into(), json!(self.route));
        m.insert("block".into(), json!(self.block));
        m.insert("misfire".into(), json!(self.misfire));
        for (field, text) in [
            ("timeout_ms", &self.timeout_ms),
            ("max_attempts", &self.max_attempts),
            ("memory_mb", &self.memory_mb),
        ] {
            if let Some(n) = int(field, text, errors) {
                m.insert(field.into(), json!(n));
            }
        }
        m.insert(
            "max_concurrency".into(),
            json!(int("max_concurrency", &self.max_concurrency, errors)),
        );
        let allow: Vec<&str> = self
            .http_allow
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect();
        m.insert("http_allow".into(), json!(allow));
        m.insert("enabled".into(), json!(self.enabled.is_some()));
        // Fields with errors are left out; the rest are still checked by `build_spec`.
        match serde_json::from_value(Value::Object(m)) {
            Ok(f) => Some(f),
            Err(e) => {
                errors.insert(String::new(), e.to_string());
                None
            }
        }
    }
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

/// An optional whole number from a text field (blank: none).
fn int(field: &str, text: &str, errors: &mut Errors) -> Option<i64> {
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    match text.parse() {
        Ok(n) => Some(n),
        Err(_) => {
            errors.insert(field.into(), format!("`{text}` is not a whole number"));
            None
        }
    }
}

/// Files an API error under the form field its message names (`field: …`), or under the
/// form as a whole.
fn file_error(errors: &mut Errors, e: Error) -> Result<(), Error> {
    let message = match e {
        Error::Conflict(_) => {
            errors.insert("name".into(), "a job with this name already exists".into());
            return Ok(());
        }
        Error::Internal(_) | Error::Unavailable(_) => return Err(e),
        other => other.to_string(),
    };
    match message.split_once(": ") {
        // The first problem of a field is the one shown next to it.
        Some((field, rest)) if JOB_FIELDS.contains(&field) => {
            errors
                .entry(field.to_owned())
                .or_insert_with(|| rest.to_owned());
        }
        _ => {
            errors.entry(String::new()).or_insert(message);
        }
    }
    Ok(())
}

const JOB_FIELDS: &[&str] = &[
    "name",
    "app",
    "plugin",
    "schedule",
    "every_ms",
    "params",
    "route",
    "block",
    "misfire",
    "timeout_ms",
    "max_attempts",
    "memory_mb",
    "max_concurrency",
    "http_allow",
];

fn block_name(b: rota_proto::BlockStrategy) -> &'static str {
    use rota_proto::BlockStrategy as B;
    match b {
        B::Serial => "serial",
        B::DiscardLater => "discard_later",
        B::CoverEarly => "cover_early",
    }
}

#[derive(Template)]
#[template(path = "job_form.html")]
struct JobFormPage {
    chrome: Chrome,
    /// `None` for a new job.
    job: Option<JobRow>,
    form: JobForm,
    errors: Errors,
    schedule_kinds: Vec<Opt>,
    routes: Vec<Opt>,
    blocks: Vec<Opt>,
    misfires: Vec<Opt>,
    plugins: Vec<String>,
    preview: Vec<When>,
}

impl JobFormPage {
    async fn new(
        console: &Console,
        s: &Session,
        job: Option<&Job>,
        form: JobForm,
        errors: Errors,
    ) -> PageResult<JobFormPage> {
        let plugins = console.node.store().list_plugins().await?;
        let mut names: Vec<String> = plugins.into_iter().map(|p| p.name).collect();
        names.dedup();
        let preview = if errors.contains_key("schedule") {
            Vec::new()
        } else {
            preview_of(&form)
        };
        Ok(JobFormPage {
            chrome: Chrome::of(s, "jobs"),
            job: job.map(JobRow::from),
            schedule_kinds: options(["cron", "fixed_rate", "none"], &form.schedule_kind),
            routes: options(Route::ALL, &form.route),
            blocks: options(["serial", "discard_later", "cover_early"], &form.block),
            misfires: options(Misfire::ALL.map(Misfire::as_str), &form.misfire),
            form,
            errors,
            plugins: names,
            preview,
        })
    }
}

/// The next five fire times of the form's schedule (none when it does not compile).
fn preview_of(form: &JobForm) -> Vec<When> {
    let mut ignored = Errors::new();
    form.schedule(&mut ignored)
        .and_then(|v| serde_json::from_value::<Schedule>(v).ok())
        .and_then(|s| s.compile().ok())
        .map(|c| c.preview(now_ms(), 5).into_iter().map(When::of).collect())
        .unwrap_or_default()
}

pub async fn new_job(
    State(console): State<Console>,
    Extension(s): Extension<Session>,
) -> PageResult {
    let page = JobFormPage::new(&console, &s, None, JobForm::blank(), Errors::new()).await?;
    render(&page)
}

pub async fn job(
    State(console): State<Console>,
    Extension(s): Extension<Session>,
    Path(id): Path<i64>,
) -> PageResult {
    let job = job_for(&console, &s, id, Need::Read).await?;
    let page = JobFormPage::new(&console, &s, Some(&job), JobForm::of(&job), Errors::new()).await?;
    render(&page)
}

pub async fn create_job(
    State(console): State<Console>,
    Extension(s): Extension<Session>,
    Form(form): Form<JobForm>,
) -> PageResult {
    save_job(console, s, None, form).await
}

pub async fn update_job(
    State(console): State<Console>,
    Extension(s): Extension<Session>,
    Path(id): Path<i64>,
    Form(form): Form<JobForm>,
) -> PageResult {
    let job = job_for(&console, &s, id, Need::Change).await?;
    save_job(console, s, Some(job), form).await
}

/// Validates and saves the form, or shows it again with its errors (a 422).
async fn save_job(console: Console, s: Session, base: Option<Job>, form: JobForm) -> PageResult {
    let mut errors = Errors::new();
    let fields = form.fields(&mut errors);
    let built = match fields {
        Some(f) => match build_spec(&console.node, &s.who, f, base.as_ref()).await {
            Ok(b) => Some(b),
            Err(SpecErrors(all)) => {
                for e in all {
                    file_error(&mut errors, e)?;
                }
                None
            }
        },
        None => None,
    };
    let preview = form.preview.is_some();
    // Saved only when no field has a problem (a field that did not parse was left out of
    // the check above and would otherwise fall back to its default).
    if let (Some((spec, compiled)), false, true) = (built, preview, errors.is_empty()) {
        s.who.check_app(&spec.app)?;
        let saved = match &base {
            None => console.node.create_job(&spec, &compiled).await,
            Some(job) => console.node.update_job(job, &spec, &compiled).await,
        };
        match saved {
            Ok(job) => {
                let action = if base.is_some() {
                    "update job"
                } else {
                    "create job"
                };
                audit(&console, &s.user.name, action, &job.spec.name).await;
                return Ok(Redirect::to(&format!("{PREFIX}/jobs/{}", job.id)).into_response());
            }
            Err(e) => file_error(&mut errors, Error::from(e))?,
        }
    }
    let status = form_status(&errors);
    let page = JobFormPage::new(&console, &s, base.as_ref(), form, errors).await?;
    render_status(status, &page)
}

#[derive(Debug, Deserialize)]
pub struct EnabledForm {
    enabled: String,
}

pub async fn set_enabled(
    State(console): State<Console>,
    Extension(s): Extension<Session>,
    Path(id): Path<i64>,
    Form(f): Form<EnabledForm>,
) -> PageResult {
    let job = job_for(&console, &s, id, Need::Change).await?;
    let mut spec = job.spec.clone();
    spec.enabled = f.enabled == "true";
    let compiled = spec
        .schedule
        .compile()
        .map_err(|e| Error::Unprocessable(format!("schedule: {e}")))?;
    console.node.update_job(&job, &spec, &compiled).await?;
    let action = if spec.enabled {
        "enable job"
    } else {
        "disable job"
    };
    audit(&console, &s.user.name, action, &spec.name).await;
    Ok(Redirect::to(&format!("{PREFIX}/jobs/{id}")).into_response())
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct TriggerForm {
    params: String,
}

pub async fn trigger_job(
    State(console): State<Console>,
    Extension(s): Extension<Session>,
    Path(id): Path<i64>,
    Form(f): Form<TriggerForm>,
) -> PageResult {
    let job = job_for(&console, &s, id, Need::Change).await?;
    let params = if f.params.is_empty() {
        job.spec.params.clone()
    } else {
        usecase::validate::max_bytes("params", &f.params, console.node.config().max_payload_bytes)?;
        Some(f.params)
    };
    let now = now_ms();
    let task = NewTask {
        job_id: job.id,
        kind: TaskKind::Manual,
        key: None,
        payload: None,
        params,
        due_at: now,
        max_attempts: None,
        backoff: None,
        priority: 0,
    };
    let task_id = store_task(&console, task, now).await?;
    audit(&console, &s.user.name, "trigger job", &job.spec.name).await;
    Ok(Redirect::to(&format!("{PREFIX}/tasks/{task_id}")).into_response())
}

#[derive(Template)]
#[template(path = "job_delete.html")]
struct DeletePage {
    chrome: Chrome,
    job: JobRow,
}

/// Stores one task made in the console through the node, as the API does (so its wheel
/// sees one due soon); its id.
async fn store_task(console: &Console, task: NewTask, now: Millis) -> Result<i64, Error> {
    let ids = console
        .node
        .store_tasks(std::slice::from_ref(&task), now)
        .await?;
    ids.first()
        .map(|(id, _)| *id)
        .ok_or_else(|| Error::Internal(anyhow::anyhow!("inserting a task returned no id")))
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct ScheduleForm {
    delay_s: String,
    key: String,
    payload: String,
}

/// A delayed task of the job, from the job page: due in `delay_s` seconds, with an
/// optional idempotency key and payload (a key already used shows its task).
pub async fn schedule_task(
    State(console): State<Console>,
    Extension(s): Extension<Session>,
    Path(id): Path<i64>,
    Form(f): Form<ScheduleForm>,
) -> PageResult {
    let job = job_for(&console, &s, id, Need::Change).await?;
    let config = console.node.config();
    let delay_s: i64 = f.delay_s.trim().parse().map_err(|_| {
        Error::Unprocessable(format!(
            "delay: `{}` is not a whole number of seconds",
            usecase::validate::excerpt(&f.delay_s)
        ))
    })?;
    let horizon_s = crate::schedule::FIRE_HORIZON_MS / 1000;
    usecase::validate::within("delay", delay_s, 0..=horizon_s)?;
    let key = match f.key.trim() {
        "" => None,
        k => {
            usecase::validate::name("key", k)?;
            Some(k.to_owned())
        }
    };
    let payload = (!f.payload.is_empty()).then_some(f.payload);
    if let Some(p) = &payload {
        usecase::validate::max_bytes("payload", p, config.max_payload_bytes)?;
    }
    let now = now_ms();
    let task = NewTask {
        job_id: job.id,
        kind: TaskKind::Delayed,
        key,
        payload,
        params: None,
        due_at: now + delay_s * 1000,
        max_attempts: None,
        backoff: None,
        priority: 0,
    };
    let task_id = store_task(&console, task, now).await?;
    audit(
        &console,
        &s.user.name,
        "schedule task",
        &format!("{} in {delay_s} s", job.spec.name),
    )
    .await;
    Ok(Redirect::to(&format!("{PREFIX}/tasks/{task_id}")).into_response())
}

pub async fn confirm_delete(
    State(console): State<Console>,
    Extension(s): Extension<Session>,
    Path(id): Path<i64>,
) -> PageResult {
    let job = job_for(&console, &s, id, Need::Change).await?;
    render(&DeletePage {
        chrome: Chrome::of(&s, "jobs"),
        job: JobRow::from(&job),
    })
}

pub async fn delete_job(
    State(console): State<Console>,
    Extension(s): Extension<Session>,
    Path(id): Path<i64>,
) -> PageResult {
    let job = job_for(&console, &s, id, Need::Change).await?;
    // Confirmed by the user: pending tasks go with the job.
    console.node.delete_job(id, true).await?;
    console.node.job_changed(id).await;
    audit(&console, &s.user.name, "delete job", &job.spec.name).await;
    Ok(Redirect::to(&format!("{PREFIX}/jobs")).into_response())
}

// ----- tasks -------------------------------------------------------------------------------

pub struct TaskRow {
    id: i64,
    job_id: i64,
    kind: String,
    key: String,
    status: String,
    due: When,
    attempt: i32,
    cancellable: bool,
    last_run_id: Option<i64>,
    payload: String,
    params: String,
    created: When,
    updated: When,
}

impl From<&crate::model::Task> for TaskRow {
    fn from(t: &crate::model::Task) -> Self {
        TaskRow {
            id: t.id,
            job_id: t.job_id,
            kind: t.kind.to_string(),
            key: t.key.clone().unwrap_or_default(),
            status: t.status.to_string(),
            due: When::of(t.due_at),
            attempt: t.attempt,
            cancellable: matches!(
                t.status,
                TaskStatus::Pending | TaskStatus::Claimed | TaskStatus::Waiting
            ),
            last_run_id: t.last_run_id,
            payload: t.payload.clone().unwrap_or_default(),
            params: t.params.clone().unwrap_or_default(),
            created: When::of(t.created_at),
            updated: When::of(t.updated_at),
        }
    }
}

#[derive(Template)]
#[template(path = "tasks.html")]
struct TasksPage {
    chrome: Chrome,
    job: String,
    key: String,
    due_from: String,
    due_to: String,
    statuses: Vec<Opt>,
    tasks: Vec<TaskRow>,
    next: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
pub struct TasksQuery {
    job: Option<String>,
    status: Option<String>,
    key: Option<String>,
    /// Due from / before, as a `datetime-local` field sends it, in UTC.
    due_from: Option<String>,
    due_to: Option<String>,
    before: Option<i64>,
}

/// A `datetime-local` value (`2026-11-30T09:15`, seconds optional), read as UTC.
fn utc_field(field: &str, text: Option<&str>) -> Result<Option<Millis>, Error> {
    let Some(text) = text else { return Ok(None) };
    ["%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S"]
        .iter()
        .find_map(|f| chrono::NaiveDateTime::parse_from_str(text, f).ok())
        .map(|t| Some(t.and_utc().timestamp_millis()))
        .ok_or_else(|| {
            Error::BadRequest(format!(
                "{field}: `{}` is not a date and time like 2026-11-30T09:15",
                usecase::validate::excerpt(text)
            ))
        })
}

pub async fn tasks(
    State(console): State<Console>,
    Extension(s): Extension<Session>,
    Query(q): Query<TasksQuery>,
) -> PageResult {
    let job_id = match empty_none(&q.job) {
        None => None,
        Some(j) => Some(
            j.parse::<i64>()
                .map_err(|_| Error::BadRequest(format!("job: `{j}` is not a job id")))?,
        ),
    };
    let status = empty_none(&q.status);
    let state = match status {
        None => None,
        Some(st) => Some(TaskState::Is(
            st.parse::<TaskStatus>().map_err(Error::BadRequest)?,
        )),
    };
    let key = empty_none(&q.key).map(str::to_owned);
    let (due_from, due_to) = (empty_none(&q.due_from), empty_none(&q.due_to));
    let filter = TaskFilter {
        due_from: utc_field("due from", due_from)?,
        due_to: utc_field("due before", due_to)?,
        job_id,
        apps: s.who.app_filter().map(<[String]>::to_vec),
        state,
        key: key.clone(),
        before_id: q.before,
        limit: PAGE,
    };
    let page = console.node.store().list_tasks(&filter).await?;
    let next = next_url(
        "tasks",
        &page,
        &[
            ("job", empty_none(&q.job)),
            ("status", status),
            ("key", key.as_deref()),
            ("due_from", due_from),
            ("due_to", due_to),
        ],
    );
    render(&TasksPage {
        chrome: Chrome::of(&s, "tasks"),
        job: empty_none(&q.job).unwrap_or_default().to_owned(),
        key: key.unwrap_or_default(),
        due_from: due_from.unwrap_or_default().to_owned(),
        due_to: due_to.unwrap_or_default().to_owned(),
        statuses: options(
            std::iter::once("").chain(TaskStatus::ALL.iter().map(|s| s.as_str())),
            status.unwrap_or_default(),
        ),
        tasks: page.items.iter().map(TaskRow::from).collect(),
        next,
    })
}

/// The link to a list's next page, keeping its filters.
fn next_url<T>(list: &str, page: &Page<T>, filters: &[(&str, Option<&str>)]) -> Option<String> {
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

#[derive(Template)]
#[template(path = "task.html")]
struct TaskPage {
    chrome: Chrome,
    task: TaskRow,
    runs: Vec<RunRow>,
}

pub async fn task(
    State(console): State<Console>,
    Extension(s): Extension<Session>,
    Path(id): Path<i64>,
) -> PageResult {
    let store = console.node.store();
    let task = task_as(store, &s.who, id, Need::Read).await?;
    let runs = store
        .list_runs(&RunFilter {
            task_id: Some(id),
            limit: PAGE,
            ..RunFilter::default()
        })
        .await?;
    render(&TaskPage {
        chrome: Chrome::of(&s, "tasks"),
        task: TaskRow::from(&task),
        runs: runs.items.iter().map(RunRow::from).collect(),
    })
}

pub async fn cancel_task(
    State(console): State<Console>,
    Extension(s): Extension<Session>,
    Path(id): Path<i64>,
) -> PageResult {
    task_as(console.node.store(), &s.who, id, Need::Change).await?;
    console.node.cancel_task(id).await?;
    audit(&console, &s.user.name, "cancel task", &id.to_string()).await;
    Ok(Redirect::to(&format!("{PREFIX}/tasks/{id}")).into_response())
}

// ----- runs --------------------------------------------------------------------------------

pub struct RunRow {
    id: i64,
    job_id: i64,
    task_id: i64,
    attempt: i32,
    shard: String,
    executor: String,
    status: String,
    finished: bool,
    scheduled: When,
    started: Option<When>,
    ended: Option<When>,
    exit_code: String,
    message: String,
}

impl From<&crate::model::Run> for RunRow {
    fn from(r: &crate::model::Run) -> Self {
        RunRow {
            id: r.id,
            job_id: r.job_id,
            task_id: r.task_id,
            attempt: r.attempt,
            shard: format!("{}/{}", r.shard_index + 1, r.shard_total),
            executor: r.executor.clone().unwrap_or_default(),
            status: r.status.to_string(),
            finished: r.status.is_final(),
            scheduled: When::of(r.scheduled_at),
            started: When::opt(r.started_at),
            ended: When::opt(r.finished_at),
            exit_code: r.exit_code.map(|c| c.to_string()).unwrap_or_default(),
            message: r.message.clone().unwrap_or_default(),
        }
    }
}

#[derive(Template)]
#[template(path = "runs.html")]
struct RunsPage {
    chrome: Chrome,
    job: String,
    statuses: Vec<Opt>,
    runs: Vec<RunRow>,
    next: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
pub struct RunsQuery {
    job: Option<String>,
    status: Option<String>,
    before: Option<i64>,
}

pub async fn runs(
    State(console): State<Console>,
    Extension(s): Extension<Session>,
    Query(q): Query<RunsQuery>,
) -> PageResult {
    let job_id = match empty_none(&q.job) {
        None => None,
        Some(j) => Some(
            j.parse::<i64>()
                .map_err(|_| Error::BadRequest(format!("job: `{j}` is not a job id")))?,
        ),
    };
    let status = empty_none(&q.status);
    let parsed = match status {
        None => None,
        Some(st) => Some(st.parse::<RunStatus>().map_err(Error::BadRequest)?),
    };
    let page = console
        .node
        .store()
        .list_runs(&RunFilter {
            job_id,
            apps: s.who.app_filter().map(<[String]>::to_vec),
            status: parsed,
            before_id: q.before,
            limit: PAGE,
            ..RunFilter::default()
        })
        .await?;
    let next = next_url(
        "runs",
        &page,
        &[("job", empty_none(&q.job)), ("status", status)],
    );
    render(&RunsPage {
        chrome: Chrome::of(&s, "runs"),
        job: empty_none(&q.job).unwrap_or_default().to_owned(),
        statuses: options(
            std::iter::once("").chain(RunStatus::ALL.iter().map(|s| s.as_str())),
            status.unwrap_or_default(),
        ),
        runs: page.items.iter().map(RunRow::from).collect(),
        next,
    })
}

#[derive(Template)]
#[template(path = "run.html")]
struct RunPage {
    chrome: Chrome,
    run: RunRow,
    message: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
pub struct RunQuery {
    message: Option<String>,
}

pub async fn run(
    State(console): State<Console>,
    Extension(s): Extension<Session>,
    Path(id): Path<i64>,
    Query(q): Query<RunQuery>,
) -> PageResult {
    let run = run_as(console.node.store(), &s.who, id, Need::Read).await?;
    render(&RunPage {
        chrome: Chrome::of(&s, "runs"),
        run: RunRow::from(&run),
        message: q.message,
    })
}

#[derive(Debug, Default, Deserialize)]
pub struct LogQuery {
    from_line: Option<u64>,
}

/// `GET /console/runs/{id}/log?from_line=`: the next lines of the run's log as JSON, for
/// the live tail (`complete` tells the script to stop).
pub async fn run_log(
    State(console): State<Console>,
    Extension(s): Extension<Session>,
    Path(id): Path<i64>,
    Query(q): Query<LogQuery>,
) -> Response {
    let from_line = q.from_line.unwrap_or(1).max(1);
    let run = match run_as(console.node.store(), &s.who, id, Need::Read).await {
        Ok(run) => run,
        Err(e) => return e.into_response(),
    };
    if run.executor.is_none() {
        return Json(
            json!({"lines": [], "next_line": from_line, "complete": run.status.is_final()}),
        )
        .into_response();
    }
    match console.node.read_log(&run, from_line, LOG_LINES).await {
        Ok(page) => Json(page).into_response(),
        Err(e) => Error::from(e).into_response(),
    }
}

pub async fn kill_run(
    State(console): State<Console>,
    Extension(s): Extension<Session>,
    Path(id): Path<i64>,
) -> PageResult {
    let run = run_as(console.node.store(), &s.who, id, Need::Change).await?;
    if run.status.is_final() {
        return Err(
            Error::Conflict(format!("run {id} is {}; it cannot be killed", run.status)).into(),
        );
    }
    let ack = console.node.kill_run(&run).await?;
    audit(&console, &s.user.name, "kill run", &id.to_string()).await;
    let to = format!("{PREFIX}/runs/{id}?message={}", encode(&ack.message));
    Ok(Redirect::to(&to).into_response())
}

/// Job `id`, if the signed-in user may read (or change) it.
async fn job_for(console: &Console, s: &Session, id: i64, need: Need) -> Result<Job, Error> {
    let job = console.node.store().get_job(id).await?;
    s.who.check(&job.spec.app, need, &format!("job {id}"))?;
    Ok(job)
}

// ----- plugins and executors ---------------------------------------------------------------

pub struct PluginRow {
    id: i64,
    name: String,
    /// The name, percent-encoded for a path.
    name_url: String,
    version: i32,
    sha256: String,
    size: i64,
    created: When,
    /// The newest version's row (the one runs use) carries the name's jobs.
    newest: bool,
    jobs: Vec<(i64, String)>,
}

#[derive(Template)]
#[template(path = "plugins.html")]
struct PluginsPage {
    chrome: Chrome,
    plugins: Vec<PluginRow>,
    max_mib: usize,
}

pub async fn plugins(
    State(console): State<Console>,
    Extension(s): Extension<Session>,
) -> PageResult {
    let store = console.node.store();
    let plugins = store.list_plugins().await?;
    let mut users: BTreeMap<String, Vec<(i64, String)>> = BTreeMap::new();
    for user in store.plugin_users().await? {
        users
            .entry(user.plugin)
            .or_default()
            .push((user.job_id, user.job_name));
    }
    let mut seen = std::collections::HashSet::new();
    render(&PluginsPage {
        chrome: Chrome::of(&s, "plugins"),
        max_mib: console.node.config().max_plugin_bytes / (1024 * 1024),
        plugins: plugins
            .into_iter()
            .map(|p| {
                // Listed newest version first within a name.
                let newest = seen.insert(p.name.clone());
                PluginRow {
                    id: p.id,
                    name_url: encode(&p.name),
                    jobs: if newest {
                        users.get(&p.name).cloned().unwrap_or_default()
                    } else {
                        Vec::new()
                    },
                    name: p.name,
                    version: p.version,
                    sha256: p.sha256,
                    size: p.size,
                    created: When::of(p.created_at),
                    newest,
                }
            })
            .collect(),
    })
}

/// Deletes every version of a plugin no job uses (admins only).
pub async fn delete_plugin(
    State(console): State<Console>,
    Extension(s): Extension<Session>,
    Path(name): Path<String>,
) -> PageResult {
    s.who.check_admin("deleting a plugin")?;
    console.node.store().delete_plugin(&name).await?;
    console.node.plugin_changed(&name);
    audit(&console, &s.user.name, "delete plugin", &name).await;
    Ok(Redirect::to(&format!("{PREFIX}/plugins")).into_response())
}

/// `POST /console/plugins?name=N` with the module as the body (sent by the page's script
/// with the CSRF header): the upload use case, as in the API; errors are answered as the
/// API's JSON (`{"error": …}`), which the script shows.
pub async fn upload_plugin(
    State(console): State<Console>,
    Extension(s): Extension<Session>,
    Query(q): Query<UploadName>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let uploaded = match body {
        Ok(wasm) => usecase::plugins::upload(&console.node, &s.who, q.name, wasm).await,
        Err(e) => Err(e.into()),
    };
    match uploaded {
        Ok((plugin, created)) => {
            let status = if created {
                StatusCode::CREATED
            } else {
                StatusCode::OK
            };
            let body = json!({"name": plugin.name, "version": plugin.version});
            (status, Json(body)).into_response()
        }
        Err(e) => e.into_response(),
    }
}

#[derive(Deserialize)]
pub struct UploadName {
    name: Option<String>,
}

pub struct ExecutorRow {
    app: String,
    address: String,
    capacity: i32,
    running: i32,
    registered: When,
    heartbeat: When,
}

#[derive(Template)]
#[template(path = "executors.html")]
struct ExecutorsPage {
    chrome: Chrome,
    executors: Vec<ExecutorRow>,
}

pub async fn executors(
    State(console): State<Console>,
    Extension(s): Extension<Session>,
) -> PageResult {
    let alive_after = now_ms() - console.node.config().executor_dead_after_ms;
    let executors = console
        .node
        .store()
        .list_executors(None, alive_after)
        .await
        .map_err(Error::from)?;
    render(&ExecutorsPage {
        chrome: Chrome::of(&s, "executors"),
        executors: executors
            .into_iter()
            .filter(|e| s.who.sees(&e.app))
            .map(|e| ExecutorRow {
                app: e.app,
                address: e.address,
                capacity: e.capacity,
                running: e.running,
                registered: When::of(e.registered_at),
                heartbeat: When::of(e.last_heartbeat_at),
            })
            .collect(),
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
struct AuditPage {
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
    s.who.check_admin("reading the audit log")?;
    let mut entries = console.node.store().list_audit(q.before, PAGE).await?;
    let more = entries.len() > PAGE as usize;
    entries.truncate(PAGE as usize);
    let next = more
        .then(|| {
            entries
                .last()
                .map(|e| format!("{PREFIX}/audit?before={}", e.id))
        })
        .flatten();
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

/// Shortest password the console accepts.
pub(super) const MIN_PASSWORD_CHARS: usize = 10;

#[derive(Template)]
#[template(path = "account.html")]
struct AccountPage {
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
    let hash = auth::hash_password(f.new).await.map_err(Error::Internal)?;
    console
        .node
        .store()
        .set_password(s.user.id, &hash, &auth::token_hash(&token))
        .await?;
    audit(&console, &s.user.name, "change password", &s.user.name).await;
    Ok(Redirect::to(&format!("{PREFIX}/account?changed=1")).into_response())
}
