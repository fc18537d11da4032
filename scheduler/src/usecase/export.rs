//! Jobs as code (SPEC §12): the document `rota export` writes and `rota apply` reads —
//! the jobs and workflows of some apps, the plugins they run by name and sha256, the
//! names of the secrets they use, and the apps' alarm channels (without their URLs) and
//! rules.
//!
//! A document is written in one canonical form: entries sorted by app and name, a field
//! left out when it holds its default, references by name (never by id, which differs
//! between two nodes' databases). So export → apply to an empty node → export gives the
//! same bytes, and a reviewer's diff shows only what changed.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use super::Result;
use crate::access::{Need, Principal};
use crate::backoff::Backoff;
use crate::limits::RateLimit;
use crate::model::{Delivery, Job, JobSpec};
use crate::ports::Ports;
use crate::schedule::Schedule;
use crate::store::Workflow;
use crate::workflow::When;

/// The document's format version: a reader refuses any other.
pub const VERSION: u32 = 1;

/// What `rota export` writes and `rota apply` reads.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = ExportDocument)]
pub struct Document {
    /// [`VERSION`].
    pub version: u32,
    /// The plugins the jobs run, each as the node must hold it (its newest version).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub plugins: Vec<PluginEntry>,
    /// The secrets the apps hold, by name: values never leave a node, so applying a
    /// document checks that each is set where it is applied.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secrets: Vec<SecretEntry>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub jobs: Vec<JobEntry>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub workflows: Vec<WorkflowEntry>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub alarm_channels: Vec<ChannelEntry>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub alarm_rules: Vec<RuleEntry>,
}

/// A plugin binding: the module a job's `plugin` names must be this one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PluginEntry {
    pub name: String,
    /// Hex SHA-256 of the module's bytes.
    pub sha256: String,
    /// Where `rota apply` reads the module from to upload it (relative to the document);
    /// not written by export.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
}

/// A secret's name in an app.
#[derive(
    Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, utoipa::ToSchema,
)]
#[serde(deny_unknown_fields)]
pub struct SecretEntry {
    pub app: String,
    pub name: String,
}

/// A job as the API's create takes it, without the fields that hold their defaults.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct JobEntry {
    pub name: String,
    pub app: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plugin: Option<String>,
    pub schedule: Schedule,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub misfire: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_attempts: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff: Option<Backoff>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_mb: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<ConcurrencyEntry>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<RateLimit>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub debounce_ms: Option<i64>,
    /// By name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub child_jobs: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub http_allow: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no_executor_timeout_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivery: Option<Delivery>,
}

/// A job's concurrency bound.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ConcurrencyEntry {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    pub limit: i64,
}

/// A workflow as the API's create takes it, steps naming their jobs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WorkflowEntry {
    pub name: String,
    pub app: String,
    pub steps: Vec<StepEntry>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<Schedule>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub misfire: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overlap: Option<String>,
}

/// A workflow's step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct StepEntry {
    pub name: String,
    /// The job, by name.
    pub job: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub after: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub map: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<String>,
}

/// An alarm channel. Its URL is a credential (a bot's token sits in it), kept sealed by the
/// node like a secret: export leaves it out and apply keeps the one the node holds; an
/// entry gives `url` to create the channel where it is applied, or to change it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ChannelEntry {
    pub name: String,
    /// `webhook`, `email`, `slack`, `dingtalk`, `feishu` or `wecom`.
    pub kind: String,
    /// The app it serves; left out: every app (an admin's channel).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app: Option<String>,
    /// Where it POSTs (not `email`); never written by export.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// `email`: the recipients.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<Vec<String>>,
    /// The name of the app's secret that signs its messages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
}

/// An alarm rule, its job by name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RuleEntry {
    pub name: String,
    pub app: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
    pub on: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threshold: Option<i64>,
    pub channels: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throttle_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
}

/// `value`, unless it is `default`.
fn unless<T: PartialEq>(value: T, default: T) -> Option<T> {
    (value != default).then_some(value)
}

/// A job's spec as an entry; `names` gives its child jobs' names by id.
pub fn spec_entry(spec: &JobSpec, names: &HashMap<i64, String>) -> JobEntry {
    JobEntry {
        name: spec.name.clone(),
        app: spec.app.clone(),
        plugin: Some(spec.plugin.clone()).filter(|p| !p.is_empty()),
        schedule: spec.schedule.clone(),
        params: spec.params.clone(),
        route: unless(spec.route.as_str(), "first").map(str::to_owned),
        block: unless(spec.block.as_str(), "serial").map(str::to_owned),
        misfire: unless(spec.misfire.as_str(), "do_nothing").map(str::to_owned),
        timeout_ms: unless(spec.timeout_ms, super::jobs::DEFAULT_TIMEOUT_MS),
        max_attempts: unless(i64::from(spec.max_attempts), 1),
        backoff: unless(spec.backoff.clone(), Backoff::default()),
        memory_mb: unless(i64::from(spec.memory_mb), super::jobs::DEFAULT_MEMORY_MB),
        concurrency: spec.max_concurrency.map(|limit| ConcurrencyEntry {
            key: spec.concurrency_key.clone(),
            limit: i64::from(limit),
        }),
        rate_limit: spec.rate_limit.clone(),
        debounce_ms: spec.debounce_ms,
        child_jobs: spec
            .child_jobs
            .iter()
            .map(|id| names.get(id).cloned().unwrap_or_else(|| id.to_string()))
            .collect(),
        http_allow: spec.http_allow.clone(),
        enabled: unless(spec.enabled, true),
        no_executor_timeout_ms: spec.no_executor_timeout_ms,
        delivery: unless(spec.delivery.clone(), Delivery::Wasm),
    }
}

/// A workflow as an entry; `names` gives its steps' jobs' names by id.
pub fn workflow_entry(wf: &Workflow, names: &HashMap<i64, String>) -> WorkflowEntry {
    WorkflowEntry {
        name: wf.name.clone(),
        app: wf.app.clone(),
        steps: wf
            .steps
            .iter()
            .map(|s| StepEntry {
                name: s.name.clone(),
                job: names
                    .get(&s.job_id)
                    .cloned()
                    .unwrap_or_else(|| s.job_id.to_string()),
                after: s.after.clone(),
                when: s.when.clone().filter(|w| w != When::AllSucceeded.as_str()),
                map: s.map,
                params: s.params.clone(),
            })
            .collect(),
        enabled: unless(wf.enabled, true),
        schedule: wf.timing.schedule.clone(),
        misfire: unless(wf.timing.misfire.as_str(), "do_nothing").map(str::to_owned),
        overlap: unless(wf.timing.overlap.as_str(), "skip").map(str::to_owned),
    }
}

/// A stored channel as an entry (no URL).
pub fn channel_entry(c: &crate::store::AlarmChannelRow) -> ChannelEntry {
    ChannelEntry {
        name: c.name.clone(),
        kind: c.kind.clone(),
        app: c.app.clone(),
        url: None,
        to: c
            .recipients
            .as_deref()
            .and_then(|r| serde_json::from_str(r).ok()),
        secret: c.secret.clone(),
    }
}

/// A stored rule as an entry.
pub fn rule_entry(r: &crate::store::AlarmRuleRow, names: &HashMap<i64, String>) -> RuleEntry {
    RuleEntry {
        name: r.name.clone(),
        app: r.app.clone(),
        job: r
            .job_id
            .map(|id| names.get(&id).cloned().unwrap_or_else(|| id.to_string())),
        on: r.on_event.clone(),
        threshold: r.threshold,
        channels: serde_json::from_str(&r.channels).unwrap_or_default(),
        throttle_ms: unless(r.throttle_ms, crate::alarm::DEFAULT_THROTTLE_MS),
        enabled: unless(r.enabled, true),
    }
}

/// The document as YAML: the form a reviewer reads and `rota apply -f` takes.
pub fn to_yaml(doc: &Document) -> String {
    yaml_serde::to_string(doc).expect("a document serializes")
}

/// Every job, however many pages.
pub async fn all_jobs(ports: &Ports, who: &Principal, app: Option<&str>) -> Result<Vec<Job>> {
    let mut jobs = Vec::new();
    let mut before = None;
    loop {
        let page = ports
            .store()
            .list_jobs(app, who.app_filter(), None, before, 1000)
            .await?;
        jobs.extend(page.items);
        match page.next {
            Some(next) => before = Some(next),
            None => return Ok(jobs),
        }
    }
}

/// The document of the apps `who` may read (of `app` alone when given).
pub async fn export(ports: &Ports, who: &Principal, app: Option<&str>) -> Result<Document> {
    if let Some(app) = app {
        super::validate::app("app", app)?;
        who.check(app, Need::Read, &format!("app `{app}`"))?;
    }
    let store = ports.store();
    let in_scope = |a: &str| app.is_none_or(|x| x == a) && who.sees(a);
    let every_job = all_jobs(ports, who, None).await?;
    let names: HashMap<i64, String> = every_job
        .iter()
        .map(|j| (j.id, j.spec.name.clone()))
        .collect();
    let mut jobs: Vec<JobEntry> = every_job
        .iter()
        .filter(|j| in_scope(&j.spec.app))
        .map(|j| spec_entry(&j.spec, &names))
        .collect();
    jobs.sort_by(|a, b| (&a.app, &a.name).cmp(&(&b.app, &b.name)));
    let mut workflows: Vec<WorkflowEntry> = store
        .list_workflows()
        .await?
        .iter()
        .filter(|w| in_scope(&w.app))
        .map(|w| workflow_entry(w, &names))
        .collect();
    workflows.sort_by(|a, b| (&a.app, &a.name).cmp(&(&b.app, &b.name)));
    let mut alarm_rules: Vec<RuleEntry> = store
        .alarm_rules()
        .await?
        .iter()
        .filter(|r| in_scope(&r.app))
        .map(|r| rule_entry(r, &names))
        .collect();
    alarm_rules.sort_by(|a, b| (&a.app, &a.name).cmp(&(&b.app, &b.name)));
    // The apps' channels, and the shared ones their rules send to.
    let named: std::collections::HashSet<&String> =
        alarm_rules.iter().flat_map(|r| &r.channels).collect();
    let mut alarm_channels: Vec<ChannelEntry> = super::alarms::channels(ports, who)
        .await?
        .iter()
        .filter(|c| c.app.as_deref().map_or(named.contains(&c.name), in_scope))
        .map(channel_entry)
        .collect();
    alarm_channels.sort_by(|a, b| a.name.cmp(&b.name));

    let mut plugins = Vec::new();
    let mut bound: Vec<&str> = jobs.iter().filter_map(|j| j.plugin.as_deref()).collect();
    bound.sort();
    bound.dedup();
    for name in bound {
        let p = store.latest_plugin(name).await?;
        plugins.push(PluginEntry {
            name: p.name,
            sha256: p.sha256,
            path: None,
        });
    }
    let mut apps: Vec<&str> = jobs.iter().map(|j| j.app.as_str()).collect();
    apps.extend(workflows.iter().map(|w| w.app.as_str()));
    if let Some(app) = app {
        apps.push(app);
    }
    apps.sort();
    apps.dedup();
    let mut secrets = Vec::new();
    for a in apps {
        for s in store.list_secrets(a).await? {
            secrets.push(SecretEntry {
                app: a.to_owned(),
                name: s.name,
            });
        }
    }
    secrets.sort();
    Ok(Document {
        version: VERSION,
        plugins,
        secrets,
        jobs,
        workflows,
        alarm_channels,
        alarm_rules,
    })
}
