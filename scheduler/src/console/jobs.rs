//! The jobs' pages: the list, the form (create, change, with a preview of the next fire
//! times), enabling, triggering, scheduling one task and deleting. Jobs are validated by
//! the use case's [`build_spec`], as in the API, so both accept exactly the same jobs; its
//! `field: message` errors are shown next to the field they name.

use askama::Template;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect};
use axum::{Extension, Form};
use serde::Deserialize;
use serde_json::{Value, json};

use super::auth::Session;
use super::pages::*;
use super::{Console, PREFIX, PageResult, When, render, render_status};
use crate::access::Need;
use crate::model::{Delivery, Job, Millis};
use crate::route::Route;
use crate::schedule::{Misfire, Schedule};
use crate::usecase::fields::NameOrId;
use crate::usecase::jobs::{JobFields, SpecErrors, build_spec};
use crate::usecase::tasks::TaskFields;
use crate::usecase::{self, Error};

pub struct JobRow {
    id: i64,
    name: String,
    app: String,
    plugin: String,
    schedule: String,
    enabled: bool,
    next_fire: Option<When>,
}

pub(super) fn schedule_text(s: &Schedule) -> String {
    match s {
        Schedule::Cron { expr, time_zone } => match time_zone {
            Some(tz) => format!("cron {expr} ({tz})"),
            None => format!("cron {expr}"),
        },
        Schedule::FixedRate { every_ms } => format!("every {every_ms} ms"),
        Schedule::FixedDelay { every_ms } => format!("{every_ms} ms after each run"),
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
    let page = usecase::jobs::list(&console.ports, &s.who, None, q, query.before, PAGE).await?;
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
    /// The concurrency bound's limit (blank: no bound) and key (blank: the whole job).
    max_concurrency: String,
    concurrency_key: String,
    /// The rate limit's starts per window and window (both blank: no limit), and its key.
    rate_limit: String,
    rate_per_ms: String,
    rate_key: String,
    /// Blank: task keys deduplicate.
    debounce_ms: String,
    /// One origin or URL prefix per line.
    http_allow: String,
    /// `wasm` (the plugin), `pull`, `http` or `xxl`.
    delivery: String,
    /// For `http`: where each fire is POSTed, and the app secret that signs it.
    webhook_url: String,
    signing_secret: String,
    /// For `xxl`: the XXL-JOB executors' handler (`@XxlJob` name).
    xxl_handler: String,
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
            Schedule::FixedDelay { every_ms } => (
                "fixed_delay",
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
            concurrency_key: spec.concurrency_key.clone().unwrap_or_default(),
            rate_limit: spec
                .rate_limit
                .as_ref()
                .map(|r| r.limit.to_string())
                .unwrap_or_default(),
            rate_per_ms: spec
                .rate_limit
                .as_ref()
                .map(|r| r.per_ms.to_string())
                .unwrap_or_default(),
            rate_key: spec
                .rate_limit
                .as_ref()
                .and_then(|r| r.key.clone())
                .unwrap_or_default(),
            debounce_ms: spec.debounce_ms.map(|d| d.to_string()).unwrap_or_default(),
            http_allow: spec.http_allow.join("\n"),
            delivery: spec.delivery.kind().to_owned(),
            webhook_url: match &spec.delivery {
                Delivery::Http { url, .. } => url.clone(),
                _ => String::new(),
            },
            signing_secret: match &spec.delivery {
                Delivery::Http { signing_secret, .. } => signing_secret.clone().unwrap_or_default(),
                _ => String::new(),
            },
            xxl_handler: match &spec.delivery {
                Delivery::Xxl { handler } => handler.clone(),
                _ => String::new(),
            },
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
            delivery: "wasm".into(),
            ..JobForm::default()
        }
    }

    /// The delivery the form describes, as the API's JSON.
    fn delivery(&self) -> Value {
        match self.delivery.as_str() {
            "http" => {
                let mut v = json!({"kind": "http", "url": self.webhook_url.trim()});
                if !self.signing_secret.trim().is_empty() {
                    v["signing_secret"] = json!(self.signing_secret.trim());
                }
                v
            }
            "xxl" => json!({"kind": "xxl", "handler": self.xxl_handler.trim()}),
            "" => json!({"kind": "wasm"}),
            kind => json!({"kind": kind}),
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
            kind @ ("fixed_rate" | "fixed_delay") => int("every_ms", &self.every_ms, errors)
                .map(|n| json!({"kind": kind, "every_ms": n}))
                .or_else(|| {
                    errors
                        .entry("every_ms".into())
                        .or_insert_with(|| format!("required for a {}", kind.replace('_', " ")));
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
        // Only a job that runs a plugin has one: the field is ignored for the others.
        if matches!(self.delivery.as_str(), "" | "wasm") {
            m.insert("plugin".into(), json!(self.plugin.trim()));
        }
        m.insert("delivery".into(), self.delivery());
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
        let key = Some(self.concurrency_key.trim()).filter(|k| !k.is_empty());
        let bound = int("max_concurrency", &self.max_concurrency, errors)
            .map(|limit| json!({"limit": limit, "key": key}));
        m.insert("concurrency".into(), json!(bound));
        let key = Some(self.rate_key.trim()).filter(|k| !k.is_empty());
        let rate = match (
            int("rate_limit.limit", &self.rate_limit, errors),
            int("rate_limit.per_ms", &self.rate_per_ms, errors),
        ) {
            (Some(limit), Some(per_ms)) => {
                Some(json!({"limit": limit, "per_ms": per_ms, "key": key}))
            }
            (Some(_), None) if self.rate_per_ms.trim().is_empty() => {
                errors.insert(
                    "rate_limit.per_ms".into(),
                    "required with a rate limit".into(),
                );
                None
            }
            (None, Some(_)) if self.rate_limit.trim().is_empty() => {
                errors.insert("rate_limit.limit".into(), "required with a window".into());
                None
            }
            _ => None,
        };
        m.insert("rate_limit".into(), json!(rate));
        let debounce = int("debounce_ms", &self.debounce_ms, errors);
        m.insert("debounce_ms".into(), json!(debounce));
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

/// An optional whole number from a text field (blank: none).
pub(super) fn int(field: &str, text: &str, errors: &mut Errors) -> Option<i64> {
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

/// Files a use case's error under the form field its message names (`field: …`), or under
/// the form as a whole (a job whose name is taken, a delivery that cannot change now), in
/// the use case's words; its status, which the page answers with as the API does.
pub(super) fn file_error(errors: &mut Errors, e: Error) -> Result<StatusCode, Error> {
    let status = crate::status::http_status(&e);
    let message = match e {
        // Not about a field: the page answers it with its own status, as the API does.
        Error::Internal(_)
        | Error::Unavailable(_)
        | Error::InsufficientStorage(_)
        | Error::Forbidden(_) => {
            return Err(e);
        }
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
    Ok(status)
}

pub(super) const JOB_FIELDS: &[&str] = &[
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
    "concurrency.limit",
    "concurrency.key",
    "rate_limit.limit",
    "rate_limit.per_ms",
    "rate_limit.key",
    "debounce_ms",
    "http_allow",
    "delivery",
    "delivery.url",
    "delivery.signing_secret",
    "delivery.handler",
];

pub(super) fn block_name(b: rota_proto::BlockStrategy) -> &'static str {
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
    deliveries: Vec<Opt>,
    preview: Vec<When>,
    /// A pull job's queue: ready, leased, dead, consumers seen in the last minute.
    queue: Option<crate::store::QueueFacts>,
    /// Tasks of the job that died (for the re-drive button).
    dead: i64,
    /// A bounded job's busiest buckets: throttled tasks and slots held, per key.
    buckets: Vec<crate::store::Bucket>,
    /// The bound per bucket, for the page.
    limit: Option<i32>,
    /// A recurring job's last fires, behind its schedule or not.
    drift: Option<crate::store::ScheduleDrift>,
}

impl JobFormPage {
    async fn new(
        console: &Console,
        s: &Session,
        job: Option<&Job>,
        form: JobForm,
        errors: Errors,
    ) -> PageResult<JobFormPage> {
        let plugins = usecase::plugins::list(&console.ports).await?;
        let mut names: Vec<String> = plugins.into_iter().map(|p| p.name).collect();
        names.dedup();
        let preview = if errors.contains_key("schedule") {
            Vec::new()
        } else {
            preview_of(&form, console.ports.clock().now_ms())
        };
        let (queue, dead) = match job {
            Some(j) => {
                let facts = usecase::queue::facts(&console.ports, &s.who, j).await?;
                let dead = facts.dead;
                ((j.spec.delivery == Delivery::Pull).then_some(facts), dead)
            }
            None => (None, 0),
        };
        let buckets = match job {
            Some(j) => usecase::jobs::busiest_buckets(&console.ports, &s.who, j).await?,
            None => Vec::new(),
        };
        let drift = match job {
            Some(j) => usecase::jobs::schedule_drift(&console.ports, &s.who, j)
                .await?
                .filter(|d| d.fires > 0),
            None => None,
        };
        Ok(JobFormPage {
            chrome: Chrome::of(s, "jobs"),
            job: job.map(JobRow::from),
            schedule_kinds: options(
                ["cron", "fixed_rate", "fixed_delay", "none"],
                &form.schedule_kind,
            ),
            routes: options(Route::ALL, &form.route),
            blocks: options(["serial", "discard_later", "cover_early"], &form.block),
            misfires: options(Misfire::ALL.map(Misfire::as_str), &form.misfire),
            deliveries: options(Delivery::KINDS, &form.delivery),
            form,
            errors,
            plugins: names,
            preview,
            queue,
            dead,
            buckets,
            limit: job.and_then(|j| j.spec.max_concurrency),
            drift,
        })
    }
}

/// The next five fire times of the form's schedule (none when it does not compile).
pub(super) fn preview_of(form: &JobForm, now: Millis) -> Vec<When> {
    let mut ignored = Errors::new();
    form.schedule(&mut ignored)
        .and_then(|v| serde_json::from_value::<Schedule>(v).ok())
        .and_then(|s| s.compile().ok())
        .map(|c| c.preview(now, 5).into_iter().map(When::of).collect())
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
pub(super) async fn save_job(
    console: Console,
    s: Session,
    base: Option<Job>,
    form: JobForm,
) -> PageResult {
    let mut errors = Errors::new();
    // The status of the use case's first error, as the API answers the same fields (a
    // field that is not even a number is the form's own 422).
    let mut status = None;
    let fields = form.fields(&mut errors);
    let built = match fields {
        Some(f) => match build_spec(&console.ports, &s.who, f, base.as_ref()).await {
            Ok(b) => Some(b),
            Err(SpecErrors(all)) => {
                for e in all {
                    let filed = file_error(&mut errors, e)?;
                    status.get_or_insert(filed);
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
        let saved = match &base {
            None => usecase::jobs::create(&console.ports, &s.who, &spec, &compiled).await,
            Some(job) => {
                usecase::jobs::update(&console.ports, &s.who, job, &spec, &compiled, false).await
            }
        };
        match saved {
            Ok(job) => {
                return Ok(Redirect::to(&format!("{PREFIX}/jobs/{}", job.id)).into_response());
            }
            Err(e) => {
                let filed = file_error(&mut errors, e)?;
                status.get_or_insert(filed);
            }
        }
    }
    let status = match status {
        Some(status) if !errors.is_empty() => status,
        _ => form_status(&errors),
    };
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
    usecase::jobs::set_enabled(&console.ports, &s.who, &id.to_string(), f.enabled == "true")
        .await?;
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
    let params = (!f.params.is_empty()).then_some(f.params);
    let task_id = usecase::jobs::trigger(&console.ports, &s.who, &id.to_string(), params).await?;
    Ok(Redirect::to(&format!("{PREFIX}/tasks/{task_id}")).into_response())
}

#[derive(Template)]
#[template(path = "job_delete.html")]
struct DeletePage {
    chrome: Chrome,
    job: JobRow,
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
    let delay_s: i64 = f.delay_s.trim().parse().map_err(|_| {
        Error::Unprocessable(format!(
            "delay: `{}` is not a whole number of seconds",
            usecase::validate::excerpt(&f.delay_s)
        ))
    })?;
    let fields = TaskFields {
        payload: (!f.payload.is_empty()).then_some(f.payload),
        key: Some(f.key.trim().to_owned()).filter(|k| !k.is_empty()),
        ..TaskFields::for_job(NameOrId::Id(id))
    };
    let task = usecase::tasks::schedule(&console.ports, &s.who, fields, delay_s).await?;
    Ok(Redirect::to(&format!("{PREFIX}/tasks/{}", task.id)).into_response())
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
    // Confirmed by the user: pending tasks go with the job.
    usecase::jobs::delete(&console.ports, &s.who, &id.to_string(), true).await?;
    Ok(Redirect::to(&format!("{PREFIX}/jobs")).into_response())
}

/// Re-drives the job's dead tasks (up to 10,000, oldest due first).
pub async fn retry_dead(
    State(console): State<Console>,
    Extension(s): Extension<Session>,
    Path(id): Path<i64>,
) -> PageResult {
    let retried = usecase::queue::retry_dead(
        &console.ports,
        &s.who,
        usecase::queue::BulkRetry {
            job: NameOrId::Id(id),
            status: "dead".into(),
            limit: Some(10_000),
        },
    )
    .await?;
    tracing::debug!(
        job.id = id,
        retried,
        "dead tasks re-driven from the console"
    );
    Ok(Redirect::to(&format!("{PREFIX}/jobs/{id}")).into_response())
}
