//! Alarm channels and rules (SPEC §9), checked once for the REST API and the console, and
//! the history of alarms sent. A channel serves one app (operators of the app manage it)
//! or every app (admins only); its URL is sealed on the way in and shown only as a hint.

use std::collections::HashMap;

use serde::Deserialize;
use utoipa::ToSchema;

use super::fields::NameOrId;
use super::jobs::find_job;
use super::validate::{self, invalid, missing};
use super::{Error, Result};
use crate::access::{Need, Principal};
use crate::alarm::channel::{Kind, Message};
use crate::alarm::{DEFAULT_THROTTLE_MS, On};
use crate::model::{Delivery, Page, rfc3339};
use crate::ports::Ports;
use crate::store::{AlarmChannelRow, AlarmDelivery, AlarmRow, AlarmRuleRow};

pub const MAX_NAME: usize = 100;
pub const MAX_RECIPIENTS: usize = 20;
pub const MAX_CHANNELS: usize = 10;
pub const MAX_THRESHOLD_MS: i64 = 7 * 86_400_000;
pub const MAX_THROTTLE_MS: i64 = 86_400_000;

/// `POST /api/v1/alarm-channels`.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ChannelFields {
    pub name: String,
    /// `webhook`, `email`, `slack`, `dingtalk`, `feishu` or `wecom`.
    pub kind: String,
    /// Where to POST (every kind but `email`); sealed at rest, never shown again.
    pub url: Option<String>,
    /// `email`: the recipients.
    pub to: Option<Vec<String>>,
    /// The name of a secret of `app` that signs the messages (`webhook`, `dingtalk`,
    /// `feishu`).
    pub secret: Option<String>,
    /// The app it serves; none: every app (admins only).
    pub app: Option<String>,
}

/// `POST /api/v1/alarm-rules`.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RuleFields {
    pub name: String,
    pub app: String,
    /// Only this job's runs and tasks (by name or id); none: every job of the app.
    pub job: Option<NameOrId>,
    /// `run_failed`, `task_dead`, `run_timeout`, `lateness`, `no_executor`,
    /// `executor_lost`, `node_taken_over`, `backlog`, `clock_skew` or `workflow_failed`.
    pub on: String,
    /// Milliseconds: `lateness` (run start − due) and `backlog` (the oldest due task's
    /// wait) need it; `no_executor` may have it (how long a fire waits before it counts);
    /// `clock_skew` may have it (a node's offset beyond it counts; by default the
    /// cluster's `max_clock_offset_ms`).
    pub threshold: Option<i64>,
    /// Channel names.
    pub channels: Vec<String>,
    /// One message per this long at most (0 to 86,400,000; 60,000 by default).
    pub throttle_ms: Option<i64>,
    pub enabled: Option<bool>,
}

/// `PATCH /api/v1/alarm-rules/{name}`: what to change.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RulePatch {
    pub threshold: Option<i64>,
    pub channels: Option<Vec<String>>,
    pub throttle_ms: Option<i64>,
    pub enabled: Option<bool>,
}

fn check_name(field: &str, name: &str) -> Result<()> {
    if name.len() > MAX_NAME {
        return Err(invalid(
            field,
            format!("must be at most {MAX_NAME} characters"),
        ));
    }
    validate::plugin(field, name)
}

/// `scheme://host/…`: enough to recognise a URL, not enough to use it (a bot's token sits
/// in its path or query).
fn url_hint(url: &reqwest::Url) -> String {
    let host = url.host_str().unwrap_or("?");
    let port = url.port().map(|p| format!(":{p}")).unwrap_or_default();
    format!("{}://{host}{port}/…", url.scheme())
}

/// Who may see and change a channel or rule of `app` (`None`: every app's, admins).
fn check_scope(who: &Principal, app: Option<&str>, what: &str) -> Result<()> {
    match app {
        Some(app) => Ok(who.check(app, Need::Change, what)?),
        None => Ok(who.check_admin(&format!("{what} for every app"))?),
    }
}

pub async fn create_channel(
    ports: &Ports,
    who: &Principal,
    f: ChannelFields,
) -> Result<AlarmChannelRow> {
    let row = checked_channel(ports, who, &f).await?;
    ports.store().create_alarm_channel(&row).await?;
    ports
        .audit(&who.name, "create alarm channel", &f.name)
        .await;
    Ok(row)
}

/// Changes where channel `f.name` sends and how it signs (`rota apply`); its app and kind
/// stay. The fields are checked as a create checks them.
pub async fn update_channel(
    ports: &Ports,
    who: &Principal,
    f: ChannelFields,
) -> Result<AlarmChannelRow> {
    let old = channel(ports, who, &f.name).await?;
    if old.app != f.app || old.kind != f.kind {
        return Err(Error::Conflict(format!(
            "alarm channel `{}`: its app and kind do not change; delete it and create it anew",
            f.name
        )));
    }
    let mut row = checked_channel(ports, who, &f).await?;
    row.created_at = old.created_at;
    if !ports.store().update_alarm_channel(&row).await? {
        return Err(Error::NotFound(format!(
            "alarm channel `{}` not found",
            f.name
        )));
    }
    ports
        .audit(&who.name, "change alarm channel", &f.name)
        .await;
    Ok(row)
}

/// A channel's settings, checked (its URL under the egress policy, its recipients, its
/// signing secret) and its URL sealed: the row to store.
pub(super) async fn checked_channel(
    ports: &Ports,
    who: &Principal,
    f: &ChannelFields,
) -> Result<AlarmChannelRow> {
    check_name("name", &f.name)?;
    let kind: Kind = f.kind.parse().map_err(|e| invalid("kind", e))?;
    if let Some(app) = &f.app {
        validate::app("app", app)?;
    }
    check_scope(
        who,
        f.app.as_deref(),
        &format!("alarm channel `{}`", f.name),
    )?;
    let (url, hint) = match (&f.url, kind) {
        (Some(_), Kind::Email) => {
            return Err(invalid("url", "an email channel has no url: give `to`"));
        }
        (None, Kind::Email) => (None, None),
        (None, _) => {
            return Err(invalid(
                "url",
                format!("a {kind} channel needs the url to POST to"),
            ));
        }
        (Some(url), _) => {
            let parsed = reqwest::Url::parse(url).map_err(|e| {
                invalid(
                    "url",
                    format!("`{}` is not a URL: {e}", validate::excerpt(url)),
                )
            })?;
            if !matches!(parsed.scheme(), "http" | "https") {
                return Err(invalid("url", "must be an http:// or https:// URL"));
            }
            // Alarm channels go where the admin's egress policy lets jobs' HTTP go.
            if let Err(denied) = ports.config().egress.check_url_now(&parsed).await {
                return Err(invalid(
                    "url",
                    format!("{denied}; only an admin can open it (--egress-allow)"),
                ));
            }
            (Some(url.clone()), Some(url_hint(&parsed)))
        }
    };
    let recipients = match (kind, &f.to) {
        (Kind::Email, Some(to)) if !to.is_empty() && to.len() <= MAX_RECIPIENTS => {
            for (i, address) in to.iter().enumerate() {
                address.parse::<lettre::Address>().map_err(|e| {
                    invalid(
                        &format!("to[{i}]"),
                        format!(
                            "`{}` is not an email address: {e}",
                            validate::excerpt(address)
                        ),
                    )
                })?;
            }
            Some(serde_json::to_string(to).unwrap_or_default())
        }
        (Kind::Email, _) => {
            return Err(invalid(
                "to",
                format!("an email channel needs 1 to {MAX_RECIPIENTS} recipients"),
            ));
        }
        (_, Some(_)) => {
            return Err(invalid(
                "to",
                format!("only an email channel has recipients, not a {kind} one"),
            ));
        }
        (_, None) => None,
    };
    if let Some(secret) = &f.secret {
        if !matches!(kind, Kind::Webhook | Kind::Dingtalk | Kind::Feishu) {
            return Err(invalid(
                "secret",
                format!("{kind} messages are not signed: remove `secret`"),
            ));
        }
        let Some(app) = &f.app else {
            return Err(invalid(
                "secret",
                "names a secret of the channel's app: give `app` too",
            ));
        };
        if ports.store().secret(app, secret).await?.is_none() {
            return Err(invalid(
                "secret",
                format!(
                    "app `{app}` has no secret `{secret}`: set it first (`rota secret set {app} {secret}`)"
                ),
            ));
        }
    }
    Ok(AlarmChannelRow {
        name: f.name.clone(),
        app: f.app.clone(),
        kind: kind.as_str().into(),
        url_sealed: url
            .as_deref()
            .map(|u| ports.alarms().seal_url(f.app.as_deref(), &f.name, u)),
        url_hint: hint,
        recipients,
        secret: f.secret.clone(),
        created_at: ports.clock().now_ms(),
    })
}

/// The channels `who` sees.
pub async fn channels(ports: &Ports, who: &Principal) -> Result<Vec<AlarmChannelRow>> {
    Ok(ports
        .store()
        .alarm_channels()
        .await?
        .into_iter()
        .filter(|c| c.app.as_deref().is_none_or(|a| who.sees(a)))
        .collect())
}

pub async fn channel(ports: &Ports, who: &Principal, name: &str) -> Result<AlarmChannelRow> {
    let c = ports
        .store()
        .alarm_channel(name)
        .await?
        .ok_or_else(|| Error::NotFound(format!("alarm channel `{name}` not found")))?;
    if let Some(app) = &c.app {
        who.check(app, Need::Read, &format!("alarm channel `{name}`"))?;
    }
    Ok(c)
}

pub async fn delete_channel(ports: &Ports, who: &Principal, name: &str) -> Result<()> {
    let c = channel(ports, who, name).await?;
    check_scope(who, c.app.as_deref(), &format!("alarm channel `{name}`"))?;
    let users: Vec<String> = ports
        .store()
        .alarm_rules()
        .await?
        .into_iter()
        .filter(|r| {
            serde_json::from_str::<Vec<String>>(&r.channels)
                .is_ok_and(|c| c.iter().any(|c| c == name))
        })
        .map(|r| r.name)
        .collect();
    if !users.is_empty() {
        return Err(Error::Conflict(format!(
            "alarm channel `{name}` is used by rule(s) {}: change them first",
            users.join(", ")
        )));
    }
    ports.store().delete_alarm_channel(name).await?;
    ports.audit(&who.name, "delete alarm channel", name).await;
    Ok(())
}

/// Sends a test message through channel `name` now; a 502 with the reason if it was not
/// delivered.
pub async fn test_channel(ports: &Ports, who: &Principal, name: &str) -> Result<()> {
    let c = channel(ports, who, name).await?;
    check_scope(who, c.app.as_deref(), &format!("alarm channel `{name}`"))?;
    let target = ports
        .alarms()
        .target(&c)
        .await
        .map_err(|e| Error::Unprocessable(format!("alarm channel `{name}`: {e}")))?;
    let now = ports.clock().now_ms();
    let m = Message {
        rule: "test".into(),
        on: "test".into(),
        app: c.app.clone().unwrap_or_else(|| "*".into()),
        job: None,
        task: None,
        run: None,
        attempt: None,
        message: format!(
            "A test message from Rota: if you read this, alarm channel `{name}` works."
        ),
        at: rfc3339(now),
        count: 1,
        resolved: false,
    };
    ports
        .alarms()
        .sender
        .send(&target, &m, crate::model::wall_ms())
        .await
        .map_err(|e| {
            Error::BadGateway(format!(
                "alarm channel `{name}` did not deliver the test message: {e}"
            ))
        })
}

/// A rule's settings, checked: its job (by id), threshold, channels and throttle. A
/// channel of `planned` (name → its app; one a document makes before the rule) counts as
/// there.
pub(super) async fn checked_rule(
    ports: &Ports,
    who: &Principal,
    f: &RuleFields,
    planned: &HashMap<String, Option<String>>,
) -> Result<AlarmRuleRow> {
    check_name("name", &f.name)?;
    validate::app("app", &f.app)?;
    who.check(&f.app, Need::Change, &format!("alarm rule `{}`", f.name))?;
    let on: On = f.on.parse().map_err(|e| invalid("on", e))?;
    let job_id = match &f.job {
        None if on == On::Backlog => {
            return Err(invalid(
                "job",
                "a backlog rule watches one pull job: name it",
            ));
        }
        None => None,
        Some(_) if !on.takes_job() => {
            return Err(invalid(
                "job",
                format!(
                    "`{on}` is about the {}, not one job: remove `job`",
                    if matches!(on, On::ClockSkew | On::NodeTakenOver) {
                        "cluster"
                    } else {
                        "app"
                    }
                ),
            ));
        }
        Some(job) => {
            let found = match job {
                NameOrId::Id(id) => find_job(ports.store(), &id.to_string()).await,
                NameOrId::Name(name) => find_job(ports.store(), name).await,
            };
            let j = found.map_err(|e| match e {
                Error::NotFound(m) => missing("job", m),
                other => other,
            })?;
            if j.spec.app != f.app {
                return Err(invalid(
                    "job",
                    format!("job {job} is in app `{}`, not `{}`", j.spec.app, f.app),
                ));
            }
            if on == On::Backlog && j.spec.delivery != Delivery::Pull {
                return Err(invalid(
                    "job",
                    format!("job {job} is not pulled: only a pull job has a backlog"),
                ));
            }
            Some(j.id)
        }
    };
    match (f.threshold, on) {
        (None, _) if on.needs_threshold() => {
            return Err(invalid(
                "threshold",
                format!("a `{on}` rule needs a threshold in ms"),
            ));
        }
        (Some(t), on) if on.takes_threshold() => {
            validate::within("threshold", t, 1..=MAX_THRESHOLD_MS)?;
        }
        (Some(_), _) => {
            return Err(invalid(
                "threshold",
                format!("a `{on}` rule takes no threshold"),
            ));
        }
        (None, _) => {}
    }
    check_channels(ports, f, planned).await?;
    let throttle_ms = validate::within(
        "throttle_ms",
        f.throttle_ms.unwrap_or(DEFAULT_THROTTLE_MS),
        0..=MAX_THROTTLE_MS,
    )?;
    let now = ports.clock().now_ms();
    Ok(AlarmRuleRow {
        id: 0,
        name: f.name.clone(),
        app: f.app.clone(),
        job_id,
        on_event: on.as_str().into(),
        threshold: f.threshold,
        channels: serde_json::to_string(&f.channels).unwrap_or_default(),
        throttle_ms,
        enabled: f.enabled.unwrap_or(true),
        open_since: None,
        last_sent_at: None,
        created_at: now,
        updated_at: now,
    })
}

/// A rule's channels: 1 to [`MAX_CHANNELS`], each there (or in `planned`) and serving the
/// rule's app or every app.
async fn check_channels(
    ports: &Ports,
    f: &RuleFields,
    planned: &HashMap<String, Option<String>>,
) -> Result<()> {
    if f.channels.is_empty() || f.channels.len() > MAX_CHANNELS {
        return Err(invalid(
            "channels",
            format!("name 1 to {MAX_CHANNELS} channels"),
        ));
    }
    for (i, name) in f.channels.iter().enumerate() {
        let app = match planned.get(name) {
            Some(app) => app.clone(),
            None => {
                let c = ports.store().alarm_channel(name).await?.ok_or_else(|| {
                    missing(
                        &format!("channels[{i}]"),
                        format!("alarm channel `{name}` not found"),
                    )
                })?;
                c.app
            }
        };
        if let Some(app) = app.as_deref().filter(|a| *a != f.app) {
            return Err(invalid(
                &format!("channels[{i}]"),
                format!("alarm channel `{name}` serves app `{app}`, not `{}`", f.app),
            ));
        }
    }
    Ok(())
}

pub async fn create_rule(ports: &Ports, who: &Principal, f: RuleFields) -> Result<AlarmRuleRow> {
    let mut row = checked_rule(ports, who, &f, &HashMap::new()).await?;
    row.id = ports.store().create_alarm_rule(&row).await?;
    ports.alarms().rules.refresh(ports.store()).await?;
    ports.audit(&who.name, "create alarm rule", &f.name).await;
    Ok(row)
}

/// The rules `who` sees.
pub async fn rules(ports: &Ports, who: &Principal) -> Result<Vec<AlarmRuleRow>> {
    Ok(ports
        .store()
        .alarm_rules()
        .await?
        .into_iter()
        .filter(|r| who.sees(&r.app))
        .collect())
}

pub async fn rule(ports: &Ports, who: &Principal, name: &str) -> Result<AlarmRuleRow> {
    let r = ports
        .store()
        .alarm_rule(name)
        .await?
        .ok_or_else(|| Error::NotFound(format!("alarm rule `{name}` not found")))?;
    who.check(&r.app, Need::Read, &format!("alarm rule `{name}`"))?;
    Ok(r)
}

pub async fn update_rule(
    ports: &Ports,
    who: &Principal,
    name: &str,
    p: RulePatch,
) -> Result<AlarmRuleRow> {
    let old = rule(ports, who, name).await?;
    let fields = RuleFields {
        name: old.name.clone(),
        app: old.app.clone(),
        job: old.job_id.map(NameOrId::Id),
        on: old.on_event.clone(),
        threshold: p.threshold.or(old.threshold),
        channels: match p.channels {
            Some(c) => c,
            None => serde_json::from_str(&old.channels).unwrap_or_default(),
        },
        throttle_ms: Some(p.throttle_ms.unwrap_or(old.throttle_ms)),
        enabled: Some(p.enabled.unwrap_or(old.enabled)),
    };
    let mut row = checked_rule(ports, who, &fields, &HashMap::new()).await?;
    row.id = old.id;
    row.created_at = old.created_at;
    row.open_since = old.open_since;
    row.last_sent_at = old.last_sent_at;
    if !ports.store().update_alarm_rule(&row).await? {
        return Err(Error::NotFound(format!("alarm rule `{name}` not found")));
    }
    ports.alarms().rules.refresh(ports.store()).await?;
    ports.audit(&who.name, "change alarm rule", name).await;
    Ok(row)
}

pub async fn delete_rule(ports: &Ports, who: &Principal, name: &str) -> Result<()> {
    let r = rule(ports, who, name).await?;
    who.check(&r.app, Need::Change, &format!("alarm rule `{name}`"))?;
    ports.store().delete_alarm_rule(name).await?;
    ports.alarms().rules.refresh(ports.store()).await?;
    ports.audit(&who.name, "delete alarm rule", name).await;
    Ok(())
}

/// The history, newest first: alarms of `rule` (any, if `None`) below id `before_id`,
/// each with its sends.
pub async fn history(
    ports: &Ports,
    who: &Principal,
    rule: Option<&str>,
    before_id: Option<i64>,
    limit: u32,
) -> Result<Page<(AlarmRow, Vec<AlarmDelivery>)>> {
    let mut items = ports
        .store()
        .alarm_history(rule, who.app_filter(), before_id, limit + 1)
        .await?;
    let next = (items.len() > limit as usize)
        .then(|| {
            items.truncate(limit as usize);
            items.last().map(|(a, _)| a.id)
        })
        .flatten();
    Ok(Page { items, next })
}
