//! Alarms in the console (SPEC §9): the channels (with a button that sends a test message),
//! the rules with whether each is open, and the history of alarms with each send's status.
//! Forms go through `usecase::alarms`, as the REST API does; an error is shown above the
//! form it came from.

use askama::Template;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect};
use axum::{Extension, Form};
use serde::Deserialize;

use super::auth::Session;
use super::pages::{Chrome, Errors, Opt, empty_none, options};
use super::{Console, PREFIX, PageResult, When, render_status};
use crate::alarm::On;
use crate::alarm::channel::Kind;
use crate::usecase::Error;
use crate::usecase::alarms::{self, ChannelFields, RuleFields};
use crate::usecase::fields::NameOrId;

/// Alarms in the history table.
const HISTORY: u32 = 50;

pub struct ChannelRow {
    name: String,
    kind: String,
    app: String,
    target: String,
    secret: String,
    may_change: bool,
}

pub struct RuleRow {
    name: String,
    app: String,
    job: String,
    on: String,
    threshold: String,
    channels: String,
    throttle_s: i64,
    enabled: bool,
    open: Option<When>,
    may_change: bool,
}

pub struct AlarmLine {
    at: When,
    rule: String,
    on: String,
    app: String,
    message: String,
    count: i32,
    resolved: bool,
    /// `channel: status` of each send, with its last error.
    sends: Vec<(String, String, String)>,
}

#[derive(Template)]
#[template(path = "alarms.html")]
struct AlarmsPage {
    chrome: Chrome,
    channels: Vec<ChannelRow>,
    rules: Vec<RuleRow>,
    history: Vec<AlarmLine>,
    kinds: Vec<Opt>,
    events: Vec<Opt>,
    channel_form: ChannelForm,
    rule_form: RuleForm,
    /// `channel`, `rule` or `test`: which form (or button) the message is about.
    errors: Errors,
    /// A test message went out through this channel.
    tested: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct ChannelForm {
    name: String,
    kind: String,
    app: Option<String>,
    url: Option<String>,
    /// Email recipients, separated by commas or spaces.
    to: Option<String>,
    secret: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct RuleForm {
    name: String,
    app: String,
    job: Option<String>,
    on: String,
    threshold: Option<String>,
    /// Channel names, separated by commas or spaces.
    channels: String,
    throttle_s: Option<String>,
}

fn words(s: &str) -> Vec<String> {
    s.split(|c: char| c == ',' || c.is_whitespace())
        .filter(|w| !w.is_empty())
        .map(str::to_owned)
        .collect()
}

struct Shown {
    channel_form: ChannelForm,
    rule_form: RuleForm,
    errors: Errors,
    /// The page's status: that of the use case's error it shows, as the API answers it.
    status: StatusCode,
    tested: Option<String>,
}

async fn page(console: &Console, s: &Session, shown: Shown) -> PageResult {
    let ports = &console.ports;
    let channels = alarms::channels(ports, &s.who)
        .await?
        .into_iter()
        .map(|c| ChannelRow {
            may_change: match &c.app {
                Some(app) => s.who.may_change(app),
                None => s.who.is_admin(),
            },
            target: match (&c.url_hint, &c.recipients) {
                (Some(url), _) => url.clone(),
                (None, Some(to)) => serde_json::from_str::<Vec<String>>(to)
                    .map(|t| t.join(", "))
                    .unwrap_or_default(),
                _ => String::new(),
            },
            name: c.name,
            kind: c.kind,
            app: c.app.unwrap_or_else(|| "*".into()),
            secret: c.secret.unwrap_or_default(),
        })
        .collect();
    let rules = alarms::rules(ports, &s.who).await?;
    // A rule names its job by id; the page shows the name (or the id of a deleted job).
    let mut job_names = std::collections::HashMap::new();
    for id in rules.iter().filter_map(|r| r.job_id) {
        if let std::collections::hash_map::Entry::Vacant(slot) = job_names.entry(id) {
            let name = ports.cached_job(id).await?.map(|j| j.job.spec.name.clone());
            slot.insert(name.unwrap_or_else(|| format!("#{id}")));
        }
    }
    let rules = rules
        .into_iter()
        .map(|r| RuleRow {
            may_change: s.who.may_change(&r.app),
            job: r
                .job_id
                .and_then(|j| job_names.get(&j).cloned())
                .unwrap_or_else(|| "*".into()),
            threshold: r.threshold.map(|t| format!("{t} ms")).unwrap_or_default(),
            channels: serde_json::from_str::<Vec<String>>(&r.channels)
                .map(|c| c.join(", "))
                .unwrap_or_default(),
            throttle_s: r.throttle_ms / 1000,
            open: r.open_since.map(When::of),
            name: r.name,
            app: r.app,
            on: r.on_event,
            enabled: r.enabled,
        })
        .collect();
    let history = alarms::history(ports, &s.who, None, None, HISTORY)
        .await?
        .items
        .into_iter()
        .map(|(a, sends)| AlarmLine {
            at: When::of(a.created_at),
            rule: a.rule,
            on: a.on_event,
            app: a.app,
            message: a.message,
            count: a.count,
            resolved: a.resolved,
            sends: sends
                .into_iter()
                .map(|d| (d.channel, d.status, d.last_error.unwrap_or_default()))
                .collect(),
        })
        .collect();
    let kinds = options(Kind::ALL, &shown.channel_form.kind);
    let events = options(On::ALL, &shown.rule_form.on);
    render_status(
        shown.status,
        &AlarmsPage {
            chrome: Chrome::of(s, "alarms"),
            channels,
            rules,
            history,
            kinds,
            events,
            channel_form: shown.channel_form,
            rule_form: shown.rule_form,
            errors: shown.errors,
            tested: shown.tested,
        },
    )
}

fn empty() -> Shown {
    Shown {
        channel_form: ChannelForm::default(),
        rule_form: RuleForm::default(),
        errors: Errors::new(),
        status: StatusCode::OK,
        tested: None,
    }
}

/// Shows a user's mistake above the form (`key`), with its status (the API's for the same
/// mistake); anything else is the error page's.
fn shown_error(key: &str, e: Error) -> Result<(StatusCode, Errors), Error> {
    match e {
        Error::Internal(_) | Error::Unavailable(_) | Error::InsufficientStorage(_) => Err(e),
        other => Ok((
            crate::status::http_status(&other),
            Errors::from([(key.to_owned(), other.to_string())]),
        )),
    }
}

/// After a form: back to the page, or the page again (`shown`, with what was typed) with
/// the mistake above the form `key`.
async fn after(
    console: &Console,
    s: &Session,
    key: &str,
    done: crate::usecase::Result<()>,
    shown: Shown,
) -> PageResult {
    match done {
        Ok(()) => Ok(Redirect::to(&format!("{PREFIX}/alarms")).into_response()),
        Err(e) => {
            let (status, errors) = shown_error(key, e)?;
            let shown = Shown {
                errors,
                status,
                ..shown
            };
            page(console, s, shown).await
        }
    }
}

pub async fn list(State(console): State<Console>, Extension(s): Extension<Session>) -> PageResult {
    page(&console, &s, empty()).await
}

pub async fn create_channel(
    State(console): State<Console>,
    Extension(s): Extension<Session>,
    Form(form): Form<ChannelForm>,
) -> PageResult {
    let fields = ChannelFields {
        name: form.name.trim().to_owned(),
        kind: form.kind.clone(),
        url: empty_none(&form.url).map(str::to_owned),
        to: empty_none(&form.to).map(words),
        secret: empty_none(&form.secret).map(str::to_owned),
        app: empty_none(&form.app).map(str::to_owned),
    };
    let done = alarms::create_channel(&console.ports, &s.who, fields)
        .await
        .map(drop);
    let shown = Shown {
        channel_form: form,
        ..empty()
    };
    after(&console, &s, "channel", done, shown).await
}

pub async fn test_channel(
    State(console): State<Console>,
    Extension(s): Extension<Session>,
    Path(name): Path<String>,
) -> PageResult {
    let (tested, (status, errors)) = match alarms::test_channel(&console.ports, &s.who, &name).await
    {
        Ok(()) => (Some(name), (StatusCode::OK, Errors::new())),
        Err(e) => (None, shown_error("test", e)?),
    };
    let shown = Shown {
        tested,
        errors,
        status,
        ..empty()
    };
    page(&console, &s, shown).await
}

pub async fn delete_channel(
    State(console): State<Console>,
    Extension(s): Extension<Session>,
    Path(name): Path<String>,
) -> PageResult {
    let done = alarms::delete_channel(&console.ports, &s.who, &name).await;
    after(&console, &s, "channel", done, empty()).await
}

pub async fn create_rule(
    State(console): State<Console>,
    Extension(s): Extension<Session>,
    Form(form): Form<RuleForm>,
) -> PageResult {
    let mut errors = Errors::new();
    let number = |text: &Option<String>, errors: &mut Errors| match empty_none(text) {
        None => None,
        Some(t) => match t.parse::<i64>() {
            Ok(n) => Some(n),
            Err(_) => {
                errors.insert("rule".into(), format!("`{t}` is not a whole number"));
                None
            }
        },
    };
    let threshold = number(&form.threshold, &mut errors);
    let throttle_ms = number(&form.throttle_s, &mut errors).map(|s| s.saturating_mul(1000));
    let done = if errors.is_empty() {
        let fields = RuleFields {
            name: form.name.trim().to_owned(),
            app: form.app.trim().to_owned(),
            job: empty_none(&form.job).map(|j| NameOrId::Name(j.to_owned())),
            on: form.on.clone(),
            threshold,
            channels: words(&form.channels),
            throttle_ms,
            enabled: Some(true),
        };
        alarms::create_rule(&console.ports, &s.who, fields)
            .await
            .map(drop)
    } else {
        Err(Error::Unprocessable(
            errors.into_values().collect::<Vec<_>>().join("; "),
        ))
    };
    let shown = Shown {
        rule_form: form,
        ..empty()
    };
    after(&console, &s, "rule", done, shown).await
}

pub async fn delete_rule(
    State(console): State<Console>,
    Extension(s): Extension<Session>,
    Path(name): Path<String>,
) -> PageResult {
    let done = alarms::delete_rule(&console.ports, &s.who, &name).await;
    after(&console, &s, "rule", done, empty()).await
}
