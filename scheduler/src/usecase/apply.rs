//! Applying a document (SPEC §12, `rota apply`, `POST /api/v1/apply`): the node made to
//! hold what the document says of its apps, through the same use cases as every other
//! door (so every check, permission and audit entry is theirs).
//!
//! All or nothing: the whole document is checked first — every job built as a create or
//! change would build it, every workflow's graph, every rule, every plugin binding and
//! secret name, the child jobs' graph, and with `prune` every delete (a job with tasks on
//! their way, a workflow with running instances or a job a kept workflow still runs is
//! refused) — and every problem is named at once; only a document without one changes
//! anything. A dry run stops there and answers the plan. What the document does not
//! mention is left alone, unless `prune`: then the jobs, workflows, alarm rules and
//! channels of the document's apps that it lacks are deleted. A channel's URL is not in an
//! export (it is a credential): an entry without one keeps the URL the node holds, and
//! one the node lacks needs it.
//!
//! The checks and the changes are not one database transaction: a database that fails
//! half-way leaves the changes made so far, and applying the document again finishes it
//! (applying is idempotent: a second apply of the same document changes nothing).

use std::collections::{BTreeSet, HashMap, HashSet};

use serde::Serialize;
use serde_json::{Value, json};

use super::export::{self, ChannelEntry, Document, JobEntry, RuleEntry, WorkflowEntry};
use super::fields::NameOrId;
use super::jobs::{self, JobFields};
use super::workflows::{StepFields, TimingFields, WorkflowChange, WorkflowFields};
use super::{Error, Result, alarms, workflows};
use crate::access::{Need, Principal};
use crate::model::{Job, JobSpec};
use crate::ports::Ports;
use crate::schedule::CompiledSchedule;
use crate::store::{self, AlarmChannelRow, AlarmRuleRow, Workflow};

/// One change the document makes.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
#[schema(as = ApplyChange)]
pub struct Change {
    /// `create`, `update`, `delete`, or `upload` (a plugin the dry run found missing or
    /// different, which `rota apply` uploads from its `path`).
    pub action: &'static str,
    /// `plugin`, `job`, `workflow`, `alarm_channel` or `alarm_rule`.
    pub kind: &'static str,
    pub name: String,
    /// The fields an update changes.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub fields: Vec<String>,
}

/// What applying did, or (a dry run) would do.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[schema(as = ApplyOutcome)]
pub struct Outcome {
    pub dry_run: bool,
    pub changes: Vec<Change>,
    /// Entries the node already holds as the document says.
    pub unchanged: usize,
}

/// A job to create or change, built.
struct JobPlan {
    existing: Option<Job>,
    spec: JobSpec,
    schedule: CompiledSchedule,
}

/// Everything the document asks for, checked.
#[derive(Default)]
struct Plan {
    changes: Vec<Change>,
    unchanged: usize,
    jobs: Vec<JobPlan>,
    /// Jobs whose child jobs change, with the names the document gives them.
    children: Vec<(String, Vec<String>)>,
    workflows: Vec<(WorkflowEntry, Option<Workflow>)>,
    /// Channels to create or change: their fields, whole (the URL the node holds when the
    /// entry gives none), and whether they exist.
    channels: Vec<(alarms::ChannelFields, bool)>,
    rules: Vec<(RuleEntry, Option<AlarmRuleRow>)>,
    delete_jobs: Vec<Job>,
    delete_workflows: Vec<Workflow>,
    delete_rules: Vec<AlarmRuleRow>,
    delete_channels: Vec<AlarmChannelRow>,
    errors: Vec<String>,
    /// Conflicts (a prune that would delete a busy job): 409 rather than 422.
    conflicts: Vec<String>,
}

impl Plan {
    fn change(
        &mut self,
        action: &'static str,
        kind: &'static str,
        name: &str,
        fields: Vec<String>,
    ) {
        self.changes.push(Change {
            action,
            kind,
            name: name.to_owned(),
            fields,
        });
    }
}

/// What the node holds now.
struct Current {
    jobs: HashMap<String, Job>,
    names: HashMap<i64, String>,
    workflows: HashMap<String, Workflow>,
    channels: HashMap<String, AlarmChannelRow>,
    rules: HashMap<String, AlarmRuleRow>,
}

/// Applies `doc` (or, with `dry_run`, only checks it), deleting what its apps hold that it
/// lacks when `prune`.
pub async fn apply(
    ports: &Ports,
    who: &Principal,
    doc: Document,
    dry_run: bool,
    prune: bool,
) -> Result<Outcome> {
    if doc.version != export::VERSION {
        return Err(super::validate::invalid(
            "version",
            format!(
                "this node reads documents of version {}, not {}",
                export::VERSION,
                doc.version
            ),
        ));
    }
    let apps = apps_of(&doc);
    for app in &apps {
        super::validate::app("app", app)?;
        who.check(app, Need::Change, &format!("app `{app}`"))?;
    }
    let current = current(ports, who).await?;
    let mut plan = Plan::default();
    let planned_plugins = plan_plugins(ports, &doc, dry_run, &mut plan).await?;
    check_secrets(ports, &doc, &mut plan).await?;
    plan_jobs(ports, who, &doc, &current, &planned_plugins, &mut plan).await;
    plan_children(who, &doc, &current, &mut plan);
    plan_workflows(ports, &doc, &current, &mut plan).await;
    plan_channels(ports, who, &doc, &current, &mut plan).await;
    plan_rules(ports, who, &doc, &current, &mut plan).await;
    if prune {
        plan_prune(ports, &doc, &apps, &current, &mut plan).await?;
    }
    if !plan.conflicts.is_empty() {
        let mut all = plan.conflicts;
        all.extend(plan.errors);
        return Err(Error::Conflict(all.join("; ")));
    }
    if !plan.errors.is_empty() {
        return Err(Error::Unprocessable(plan.errors.join("; ")));
    }
    let outcome = Outcome {
        dry_run,
        changes: plan.changes.clone(),
        unchanged: plan.unchanged,
    };
    if !dry_run {
        make(ports, who, plan).await?;
        if !outcome.changes.is_empty() {
            let summary = format!("{} change(s)", outcome.changes.len());
            ports.audit(&who.name, "apply document", &summary).await;
        }
    }
    Ok(outcome)
}

/// The apps a document speaks for.
fn apps_of(doc: &Document) -> BTreeSet<String> {
    let mut apps: BTreeSet<String> = doc.jobs.iter().map(|j| j.app.clone()).collect();
    apps.extend(doc.workflows.iter().map(|w| w.app.clone()));
    apps.extend(doc.alarm_rules.iter().map(|r| r.app.clone()));
    apps.extend(doc.alarm_channels.iter().filter_map(|c| c.app.clone()));
    apps.extend(doc.secrets.iter().map(|s| s.app.clone()));
    apps
}

async fn current(ports: &Ports, who: &Principal) -> Result<Current> {
    let store = ports.store();
    let all = export::all_jobs(ports, who, None).await?;
    let names = all.iter().map(|j| (j.id, j.spec.name.clone())).collect();
    Ok(Current {
        jobs: all.into_iter().map(|j| (j.spec.name.clone(), j)).collect(),
        names,
        workflows: store
            .list_workflows()
            .await?
            .into_iter()
            .map(|w| (w.name.clone(), w))
            .collect(),
        channels: store
            .alarm_channels()
            .await?
            .into_iter()
            .map(|c| (c.name.clone(), c))
            .collect(),
        rules: store
            .alarm_rules()
            .await?
            .into_iter()
            .map(|r| (r.name.clone(), r))
            .collect(),
    })
}

/// Each plugin binding against the node's newest version of it. In a dry run one the node
/// lacks (or holds otherwise) is an upload to make; in a real apply it must be there.
async fn plan_plugins(
    ports: &Ports,
    doc: &Document,
    dry_run: bool,
    plan: &mut Plan,
) -> Result<HashSet<String>> {
    let mut planned = HashSet::new();
    for (i, p) in doc.plugins.iter().enumerate() {
        let held = match ports.store().latest_plugin(&p.name).await {
            Ok(found) => Some(found.sha256),
            Err(store::Error::NotFound(_)) => None,
            Err(e) => return Err(e.into()),
        };
        if held.as_deref() == Some(p.sha256.as_str()) {
            plan.unchanged += 1;
        } else if dry_run {
            planned.insert(p.name.clone());
            plan.change("upload", "plugin", &p.name, Vec::new());
        } else {
            let holds = held.map_or("no such plugin".to_owned(), |h| format!("sha256 {h}"));
            plan.errors.push(format!(
                "plugins[{i}] `{}`: the document binds sha256 {}, the node holds {holds}: \
                 upload it first (`rota apply` uploads it from the entry's `path`)",
                p.name, p.sha256
            ));
        }
    }
    Ok(planned)
}

/// Secrets are named, never carried: each must be set where the document is applied.
async fn check_secrets(ports: &Ports, doc: &Document, plan: &mut Plan) -> Result<()> {
    let mut held: HashMap<&str, HashSet<String>> = HashMap::new();
    for (i, s) in doc.secrets.iter().enumerate() {
        if !held.contains_key(s.app.as_str()) {
            let names = ports.store().list_secrets(&s.app).await?;
            held.insert(&s.app, names.into_iter().map(|m| m.name).collect());
        }
        if !held[s.app.as_str()].contains(&s.name) {
            plan.errors.push(format!(
                "secrets[{i}]: app `{}` has no secret `{}` on this node: set it first \
                 (PUT /api/v1/apps/{}/secrets/{}); documents carry names, never values",
                s.app, s.name, s.app, s.name
            ));
        }
    }
    Ok(())
}

/// The create body of a job entry with every field the entry leaves out at its default, so
/// that a change puts back what the document does not say (`child_jobs` apart: they are
/// set once every job exists).
fn job_fields(entry: &JobEntry) -> std::result::Result<JobFields, String> {
    let mut body = serde_json::to_value(entry).map_err(|e| e.to_string())?;
    let defaults = json!({
        "params": null, "route": "first", "block": "serial", "misfire": "do_nothing",
        "timeout_ms": jobs::DEFAULT_TIMEOUT_MS, "max_attempts": 1,
        "backoff": crate::backoff::Backoff::default(), "memory_mb": jobs::DEFAULT_MEMORY_MB,
        "concurrency": null, "rate_limit": null, "debounce_ms": null,
        "http_allow": [], "enabled": true, "no_executor_timeout_ms": null,
        "delivery": {"kind": "wasm"},
    });
    let object = body.as_object_mut().expect("an entry is an object");
    object.remove("child_jobs");
    for (key, value) in defaults.as_object().expect("an object") {
        object.entry(key.clone()).or_insert_with(|| value.clone());
    }
    serde_json::from_value(body).map_err(|e| e.to_string())
}

/// The fields in which two entries differ, by name.
fn differing<T: Serialize>(now: &T, then: &T) -> Vec<String> {
    let (a, b) = (
        serde_json::to_value(now).unwrap_or_default(),
        serde_json::to_value(then).unwrap_or_default(),
    );
    let keys: BTreeSet<&String> = a
        .as_object()
        .into_iter()
        .chain(b.as_object())
        .flat_map(|o| o.keys())
        .collect();
    keys.into_iter()
        .filter(|k| a.get(k.as_str()) != b.get(k.as_str()))
        .cloned()
        .collect()
}

/// The entries of a section with where each stands (`jobs[2] `report``), each name once: a
/// second entry of a name is an error of the plan.
fn distinct<'a, T>(
    plan: &mut Plan,
    section: &str,
    what: &str,
    entries: &'a [T],
    name: impl Fn(&T) -> &String,
) -> Vec<(String, &'a T)> {
    let mut seen = HashSet::new();
    let mut out = Vec::with_capacity(entries.len());
    for (i, entry) in entries.iter().enumerate() {
        let at = format!("{section}[{i}] `{}`", name(entry));
        if seen.insert(name(entry).clone()) {
            out.push((at, entry));
        } else {
            plan.errors
                .push(format!("{at}: a second {what} of that name"));
        }
    }
    out
}

/// Every job entry built as the API would build it; the ones that differ from the node's.
async fn plan_jobs(
    ports: &Ports,
    who: &Principal,
    doc: &Document,
    current: &Current,
    planned_plugins: &HashSet<String>,
    plan: &mut Plan,
) {
    for (at, entry) in distinct(plan, "jobs", "job", &doc.jobs, |e| &e.name) {
        let fields = match job_fields(entry) {
            Ok(f) => f,
            Err(e) => {
                plan.errors.push(format!("{at}: {e}"));
                continue;
            }
        };
        let existing = current.jobs.get(&entry.name).cloned();
        let built =
            jobs::build_spec_with(ports, who, fields, existing.as_ref(), planned_plugins).await;
        let (spec, schedule) = match built {
            Ok(b) => b,
            Err(errors) => {
                plan.errors.push(format!("{at}: {}", Error::from(errors)));
                continue;
            }
        };
        let mut wanted = export::spec_entry(&spec, &current.names);
        wanted.child_jobs = entry.child_jobs.clone();
        match &existing {
            None => plan.change("create", "job", &entry.name, Vec::new()),
            Some(job) => {
                let fields = differing(&wanted, &export::spec_entry(&job.spec, &current.names));
                if fields.is_empty() {
                    plan.unchanged += 1;
                    continue;
                }
                plan.change("update", "job", &entry.name, fields);
            }
        }
        plan.jobs.push(JobPlan {
            existing,
            spec,
            schedule,
        });
    }
}

/// Child jobs by name: each a job of the document or the node that the caller may change,
/// and no cycle in the graph the document leaves.
fn plan_children(who: &Principal, doc: &Document, current: &Current, plan: &mut Plan) {
    let mut graph: HashMap<String, Vec<String>> = current
        .jobs
        .values()
        .map(|j| {
            let names = j
                .spec
                .child_jobs
                .iter()
                .filter_map(|id| current.names.get(id));
            (j.spec.name.clone(), names.cloned().collect())
        })
        .collect();
    let app_of: HashMap<&str, &str> = current
        .jobs
        .values()
        .map(|j| (j.spec.name.as_str(), j.spec.app.as_str()))
        .chain(doc.jobs.iter().map(|j| (j.name.as_str(), j.app.as_str())))
        .collect();
    for (i, entry) in doc.jobs.iter().enumerate() {
        for (c, child) in entry.child_jobs.iter().enumerate() {
            let at = format!("jobs[{i}].child_jobs[{c}]");
            match app_of.get(child.as_str()) {
                None => plan
                    .errors
                    .push(format!("{at}: no job `{child}` here or in the document")),
                Some(app) if !who.may_change(app) => plan.errors.push(format!(
                    "{at}: job `{child}` is in app `{app}`, which you may not change"
                )),
                Some(_) if *child == entry.name => plan
                    .errors
                    .push(format!("{at}: a job cannot be its own child")),
                Some(_) => {}
            }
        }
        let was = graph
            .insert(entry.name.clone(), entry.child_jobs.clone())
            .unwrap_or_default();
        if was != entry.child_jobs {
            plan.children
                .push((entry.name.clone(), entry.child_jobs.clone()));
        }
    }
    if let Some(cycle) = find_cycle(&graph) {
        plan.errors.push(format!(
            "child_jobs: {} would run each other forever: child jobs must not form a cycle",
            cycle.join(" → ")
        ));
    }
}

/// A cycle in the child-job graph, as the names along it.
fn find_cycle(graph: &HashMap<String, Vec<String>>) -> Option<Vec<String>> {
    fn visit<'a>(
        node: &'a str,
        graph: &'a HashMap<String, Vec<String>>,
        path: &mut Vec<&'a str>,
        done: &mut HashSet<&'a str>,
    ) -> Option<Vec<String>> {
        if let Some(start) = path.iter().position(|n| *n == node) {
            let mut cycle: Vec<String> = path[start..].iter().map(|s| s.to_string()).collect();
            cycle.push(node.to_owned());
            return Some(cycle);
        }
        if !done.insert(node) {
            return None;
        }
        path.push(node);
        for child in graph.get(node).into_iter().flatten() {
            if let Some(c) = visit(child, graph, path, done) {
                return Some(c);
            }
        }
        path.pop();
        None
    }
    let mut done = HashSet::new();
    let mut roots: Vec<&String> = graph.keys().collect();
    roots.sort();
    roots
        .into_iter()
        .find_map(|n| visit(n, graph, &mut Vec::new(), &mut done))
}

fn step_fields(entry: &WorkflowEntry) -> Vec<StepFields> {
    entry
        .steps
        .iter()
        .map(|s| StepFields {
            name: s.name.clone(),
            job: NameOrId::Name(s.job.clone()),
            after: s.after.clone(),
            when: s.when.clone(),
            map: s.map,
            params: s.params.clone(),
        })
        .collect()
}

/// A workflow entry with what it spells at its default left out, as export writes it.
fn normalized(entry: &WorkflowEntry) -> WorkflowEntry {
    let mut e = entry.clone();
    e.enabled = e.enabled.filter(|on| !on);
    e.misfire = e.misfire.filter(|m| m != "do_nothing");
    e.overlap = e.overlap.filter(|o| o != "skip");
    for s in &mut e.steps {
        s.when = s.when.take().filter(|w| w != "all_succeeded");
    }
    e
}

async fn plan_workflows(ports: &Ports, doc: &Document, current: &Current, plan: &mut Plan) {
    let planned: HashMap<String, String> = doc
        .jobs
        .iter()
        .map(|j| (j.name.clone(), j.app.clone()))
        .collect();
    for (at, entry) in distinct(plan, "workflows", "workflow", &doc.workflows, |e| &e.name) {
        let timing = TimingFields {
            schedule: entry.schedule.clone(),
            misfire: entry.misfire.clone(),
            overlap: entry.overlap.clone(),
        };
        let checked = super::validate::name("name", &entry.name)
            .and_then(|()| workflows::check_timing(ports, &timing));
        let steps = step_fields(entry);
        let checked = match checked {
            Ok(()) => workflows::check_steps(ports, &entry.app, &steps, &planned).await,
            e => e,
        };
        if let Err(e) = checked {
            plan.errors.push(format!("{at}: {e}"));
            continue;
        }
        let existing = current.workflows.get(&entry.name).cloned();
        match &existing {
            None => plan.change("create", "workflow", &entry.name, Vec::new()),
            Some(wf) if wf.app != entry.app => {
                plan.errors.push(format!(
                    "{at}: the workflow is in app `{}`, the document says `{}`; a workflow's \
                     app does not change (delete it and apply again)",
                    wf.app, entry.app
                ));
                continue;
            }
            Some(wf) => {
                let fields = differing(
                    &normalized(entry),
                    &export::workflow_entry(wf, &current.names),
                );
                if fields.is_empty() {
                    plan.unchanged += 1;
                    continue;
                }
                plan.change("update", "workflow", &entry.name, fields);
            }
        }
        plan.workflows.push((entry.clone(), existing));
    }
}

fn rule_fields(entry: &RuleEntry, job: bool) -> alarms::RuleFields {
    alarms::RuleFields {
        name: entry.name.clone(),
        app: entry.app.clone(),
        job: entry.job.clone().filter(|_| job).map(NameOrId::Name),
        on: entry.on.clone(),
        threshold: entry.threshold,
        channels: entry.channels.clone(),
        throttle_ms: entry.throttle_ms,
        enabled: entry.enabled,
    }
}

async fn plan_rules(
    ports: &Ports,
    who: &Principal,
    doc: &Document,
    current: &Current,
    plan: &mut Plan,
) {
    for (at, entry) in distinct(plan, "alarm_rules", "rule", &doc.alarm_rules, |e| &e.name) {
        // A job the document makes is not there yet while it is checked: its rule is
        // checked without it, its app against the document's.
        let planned_job = entry.job.as_ref().and_then(|name| {
            let planned = doc.jobs.iter().find(|j| &j.name == name)?;
            (!current.jobs.contains_key(name)).then_some(planned)
        });
        if let Some(job) = planned_job.filter(|j| j.app != entry.app) {
            plan.errors.push(format!(
                "{at}: job `{}` is in app `{}`, not `{}`",
                job.name, job.app, entry.app
            ));
            continue;
        }
        let fields = rule_fields(entry, planned_job.is_none());
        let planned: HashMap<String, Option<String>> = doc
            .alarm_channels
            .iter()
            .map(|c| (c.name.clone(), c.app.clone()))
            .collect();
        if let Err(e) = alarms::checked_rule(ports, who, &fields, &planned).await {
            plan.errors.push(format!("{at}: {e}"));
            continue;
        }
        let existing = current.rules.get(&entry.name).cloned();
        match &existing {
            None => plan.change("create", "alarm_rule", &entry.name, Vec::new()),
            Some(r) => {
                let mut wanted = entry.clone();
                wanted.throttle_ms = wanted
                    .throttle_ms
                    .filter(|t| *t != crate::alarm::DEFAULT_THROTTLE_MS);
                wanted.enabled = wanted.enabled.filter(|on| !on);
                let fields = differing(&wanted, &export::rule_entry(r, &current.names));
                if fields.is_empty() {
                    plan.unchanged += 1;
                    continue;
                }
                plan.change("update", "alarm_rule", &entry.name, fields);
            }
        }
        plan.rules.push((entry.clone(), existing));
    }
}

/// Each channel entry against the node's: created (with its `url`, unless email), changed
/// where its recipients, signing secret or a given `url` differ, checked as the API checks
/// them; a channel's app and kind do not change.
async fn plan_channels(
    ports: &Ports,
    who: &Principal,
    doc: &Document,
    current: &Current,
    plan: &mut Plan,
) {
    for (at, entry) in distinct(
        plan,
        "alarm_channels",
        "channel",
        &doc.alarm_channels,
        |e| &e.name,
    ) {
        let existing = current.channels.get(&entry.name);
        let held_url = match existing.map(|c| ports.alarms().open_url(c)) {
            Some(Err(e)) => {
                plan.errors
                    .push(format!("{at}: the node cannot open its URL: {e}"));
                continue;
            }
            Some(Ok(url)) => url,
            None => None,
        };
        let fields = channel_fields(entry, held_url.clone());
        let action = match existing {
            None if entry.url.is_none() && entry.kind != "email" => {
                plan.errors.push(format!(
                    "{at}: url: a new {} channel needs the URL to POST to; an export leaves \
                     it out (a credential), so write it into the entry",
                    entry.kind
                ));
                continue;
            }
            None => ("create", Vec::new()),
            Some(c) if c.app != entry.app || c.kind != entry.kind => {
                plan.errors.push(format!(
                    "{at}: the channel is a {} channel of {}; its kind and app do not \
                     change (delete it and apply again)",
                    c.kind,
                    c.app
                        .as_deref()
                        .map_or("every app".to_owned(), |a| format!("app `{a}`"))
                ));
                continue;
            }
            Some(c) => {
                let stated = ChannelEntry {
                    url: None,
                    ..entry.clone()
                };
                let mut changed = differing(&stated, &export::channel_entry(c));
                if entry.url.is_some() && entry.url != held_url {
                    changed.push("url".into());
                }
                if changed.is_empty() {
                    plan.unchanged += 1;
                    continue;
                }
                ("update", changed)
            }
        };
        if let Err(e) = alarms::checked_channel(ports, who, &fields).await {
            plan.errors.push(format!("{at}: {e}"));
            continue;
        }
        plan.change(action.0, "alarm_channel", &entry.name, action.1);
        plan.channels.push((fields, existing.is_some()));
    }
}

/// A channel entry as the use case's fields; `held_url` when the entry gives none.
fn channel_fields(entry: &ChannelEntry, held_url: Option<String>) -> alarms::ChannelFields {
    alarms::ChannelFields {
        name: entry.name.clone(),
        kind: entry.kind.clone(),
        url: entry.url.clone().or(held_url),
        to: entry.to.clone(),
        secret: entry.secret.clone(),
        app: entry.app.clone(),
    }
}

/// The channels of the document's apps it lacks, to delete; one a rule that stays sends
/// to cannot go.
fn prune_channels(doc: &Document, apps: &BTreeSet<String>, current: &Current, plan: &mut Plan) {
    let listed: HashSet<&String> = doc.alarm_channels.iter().map(|c| &c.name).collect();
    let mut sorted: Vec<&AlarmChannelRow> = current.channels.values().collect();
    sorted.sort_by(|a, b| a.name.cmp(&b.name));
    for c in sorted {
        let Some(app) = c.app.as_ref().filter(|a| apps.contains(*a)) else {
            continue;
        };
        if listed.contains(&c.name) {
            continue;
        }
        let users: Vec<&str> = current
            .rules
            .values()
            .filter(|r| !plan.delete_rules.iter().any(|d| d.id == r.id))
            .filter(|r| !doc.alarm_rules.iter().any(|e| e.name == r.name))
            .filter(|r| {
                serde_json::from_str::<Vec<String>>(&r.channels).is_ok_and(|v| v.contains(&c.name))
            })
            .map(|r| r.name.as_str())
            .chain(
                doc.alarm_rules
                    .iter()
                    .filter(|r| r.channels.contains(&c.name))
                    .map(|r| r.name.as_str()),
            )
            .collect();
        if let Some(user) = users.first() {
            plan.errors.push(format!(
                "prune: alarm channel `{}` of app `{app}` is used by rule `{user}`, which stays",
                c.name
            ));
        }
        plan.change("delete", "alarm_channel", &c.name, Vec::new());
        plan.delete_channels.push(c.clone());
    }
}

/// What the document's apps hold that it lacks, to delete — each delete checked as the
/// use case would refuse it, so that none is refused half-way.
async fn plan_prune(
    ports: &Ports,
    doc: &Document,
    apps: &BTreeSet<String>,
    current: &Current,
    plan: &mut Plan,
) -> Result<()> {
    let jobs: HashSet<&String> = doc.jobs.iter().map(|j| &j.name).collect();
    let wfs: HashSet<&String> = doc.workflows.iter().map(|w| &w.name).collect();
    let rules: HashSet<&String> = doc.alarm_rules.iter().map(|r| &r.name).collect();
    let mut sorted_rules: Vec<&AlarmRuleRow> = current.rules.values().collect();
    sorted_rules.sort_by(|a, b| a.name.cmp(&b.name));
    for r in sorted_rules {
        if apps.contains(&r.app) && !rules.contains(&r.name) {
            plan.change("delete", "alarm_rule", &r.name, Vec::new());
            plan.delete_rules.push(r.clone());
        }
    }
    prune_channels(doc, apps, current, plan);
    let mut sorted_wfs: Vec<&Workflow> = current.workflows.values().collect();
    sorted_wfs.sort_by(|a, b| a.name.cmp(&b.name));
    for w in sorted_wfs {
        if apps.contains(&w.app) && !wfs.contains(&w.name) {
            let running = ports.store().running_instances_of(w.id).await?;
            if running > 0 {
                plan.conflicts.push(format!(
                    "prune: workflow `{}` has {running} running instance(s): cancel them or \
                     keep it in the document",
                    w.name
                ));
            }
            plan.change("delete", "workflow", &w.name, Vec::new());
            plan.delete_workflows.push(w.clone());
        }
    }
    let mut sorted_jobs: Vec<&Job> = current.jobs.values().collect();
    sorted_jobs.sort_by(|a, b| a.spec.name.cmp(&b.spec.name));
    for j in sorted_jobs {
        if !apps.contains(&j.spec.app) || jobs.contains(&j.spec.name) {
            continue;
        }
        let busy = ports.store().unfinished_tasks(j.id).await?;
        if busy > 0 {
            plan.conflicts.push(format!(
                "prune: job `{}` has {busy} pending or running task(s): cancel them or keep \
                 it in the document",
                j.spec.name
            ));
        }
        let kept_users: Vec<&str> = current
            .workflows
            .values()
            .filter(|w| !plan.delete_workflows.iter().any(|d| d.id == w.id))
            .filter(|w| w.steps.iter().any(|s| s.job_id == j.id))
            .map(|w| w.name.as_str())
            .chain(
                doc.workflows
                    .iter()
                    .filter(|w| w.steps.iter().any(|s| s.job == j.spec.name))
                    .map(|w| w.name.as_str()),
            )
            .collect();
        if let Some(user) = kept_users.first() {
            plan.errors.push(format!(
                "prune: job `{}` is a step of workflow `{user}`, which stays",
                j.spec.name
            ));
        }
        plan.change("delete", "job", &j.spec.name, Vec::new());
        plan.delete_jobs.push(j.clone());
    }
    Ok(())
}

/// The changes, in an order in which each finds what it needs: jobs, then their child
/// jobs, workflows, channels, rules; deletes last, rules before the channels, workflows
/// and jobs they name.
async fn make(ports: &Ports, who: &Principal, plan: Plan) -> Result<()> {
    for p in &plan.jobs {
        match &p.existing {
            None => {
                jobs::create(ports, who, &p.spec, &p.schedule).await?;
            }
            Some(job) => {
                jobs::update(ports, who, job, &p.spec, &p.schedule, false).await?;
            }
        }
    }
    for (name, children) in &plan.children {
        let refs: Vec<Value> = children.iter().map(|c| json!(c)).collect();
        let job = jobs::to_change(ports, who, name).await?;
        let fields: JobFields = serde_json::from_value(json!({"child_jobs": refs}))
            .map_err(|e| Error::Internal(e.into()))?;
        let (spec, schedule) = jobs::build_spec(ports, who, fields, Some(&job)).await?;
        jobs::update(ports, who, &job, &spec, &schedule, false).await?;
    }
    for (entry, existing) in &plan.workflows {
        let timing = TimingFields {
            schedule: Some(
                entry
                    .schedule
                    .clone()
                    .unwrap_or(crate::schedule::Schedule::None),
            ),
            misfire: Some(entry.misfire.clone().unwrap_or_else(|| "do_nothing".into())),
            overlap: Some(entry.overlap.clone().unwrap_or_else(|| "skip".into())),
        };
        match existing {
            None => {
                let mut timing = timing;
                timing.schedule = entry.schedule.clone();
                let fields = WorkflowFields {
                    name: entry.name.clone(),
                    app: entry.app.clone(),
                    steps: step_fields(entry),
                    enabled: entry.enabled.unwrap_or(true),
                    timing,
                };
                workflows::create(ports, who, fields).await?;
            }
            Some(wf) => {
                let change = WorkflowChange {
                    steps: Some(step_fields(entry)),
                    enabled: Some(entry.enabled.unwrap_or(true)),
                    timing,
                };
                workflows::update(ports, who, &wf.id.to_string(), change).await?;
            }
        }
    }
    for (fields, exists) in &plan.channels {
        match exists {
            true => alarms::update_channel(ports, who, fields.clone()).await?,
            false => alarms::create_channel(ports, who, fields.clone()).await?,
        };
    }
    for (entry, existing) in &plan.rules {
        // A rule keeps its state (an open alarm) through a change of what PATCH changes;
        // one watching another job or event, or no longer given a threshold (PATCH keeps
        // a threshold it is not given), is another rule.
        let same = match existing {
            Some(old) => {
                old.on_event == entry.on
                    && (old.threshold.is_none() || entry.threshold.is_some())
                    && same_job(ports, old.job_id, entry.job.as_deref()).await?
            }
            None => false,
        };
        match existing {
            Some(old) if same => {
                let patch = alarms::RulePatch {
                    threshold: entry.threshold,
                    channels: Some(entry.channels.clone()),
                    throttle_ms: Some(
                        entry
                            .throttle_ms
                            .unwrap_or(crate::alarm::DEFAULT_THROTTLE_MS),
                    ),
                    enabled: Some(entry.enabled.unwrap_or(true)),
                };
                alarms::update_rule(ports, who, &old.name, patch).await?;
            }
            Some(old) => {
                alarms::delete_rule(ports, who, &old.name).await?;
                alarms::create_rule(ports, who, rule_fields(entry, true)).await?;
            }
            None => {
                alarms::create_rule(ports, who, rule_fields(entry, true)).await?;
            }
        }
    }
    for r in &plan.delete_rules {
        alarms::delete_rule(ports, who, &r.name).await?;
    }
    for c in &plan.delete_channels {
        alarms::delete_channel(ports, who, &c.name).await?;
    }
    for w in &plan.delete_workflows {
        workflows::delete(ports, who, &w.id.to_string(), false).await?;
    }
    for j in &plan.delete_jobs {
        jobs::delete(ports, who, &j.id.to_string(), false).await?;
    }
    Ok(())
}

/// Whether a stored rule's job is the one an entry names (after the document's jobs were
/// made).
async fn same_job(ports: &Ports, stored: Option<i64>, named: Option<&str>) -> Result<bool> {
    Ok(match (stored, named) {
        (None, None) => true,
        (Some(id), Some(name)) => jobs::find_job(ports.store(), name).await?.id == id,
        _ => false,
    })
}
