//! The workflows' pages (SPEC §10): the list with the latest instances; a workflow drawn as
//! its graph, with its instances and a form to start one; an instance drawn with each
//! step coloured by its status, its runs, outputs and durations; cancelling and retrying.

use std::collections::HashMap;

use askama::Template;
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Redirect};
use axum::{Extension, Form};
use serde::Deserialize;
use serde_json::Value;

use super::auth::Session;
use super::graph::{self, Vertex};
use super::pages::*;
use super::{Console, PREFIX, PageResult, When, render};
use crate::access::Need;
use crate::model::Millis;
use crate::schedule::Schedule;
use crate::store::{Instance, InstanceStep, Workflow};
use crate::usecase;
use crate::usecase::Error;
use crate::workflow::{InstanceStatus, StepStatus};

/// Instances listed on the workflows page and on a workflow's.
const LATEST: u32 = 20;
/// An output shown on the page is cut to this many characters.
const OUTPUT_CHARS: usize = 4_000;

pub struct WorkflowRow {
    id: i64,
    name: String,
    app: String,
    version: i32,
    steps: usize,
    enabled: bool,
    /// Its schedule in words (empty: none), with the overlap policy.
    schedule: String,
    next_fire: Option<When>,
    updated: When,
}

impl From<&Workflow> for WorkflowRow {
    fn from(w: &Workflow) -> Self {
        let t = &w.timing;
        let schedule = match &t.schedule {
            Some(Schedule::Cron { expr, time_zone }) => format!(
                "cron {expr} ({}) · overlap {}",
                time_zone.as_deref().unwrap_or("UTC"),
                t.overlap
            ),
            Some(Schedule::FixedRate { every_ms } | Schedule::FixedDelay { every_ms }) => {
                format!("every {every_ms} ms · overlap {}", t.overlap)
            }
            Some(Schedule::None) | None => String::new(),
        };
        WorkflowRow {
            id: w.id,
            name: w.name.clone(),
            app: w.app.clone(),
            version: w.version,
            steps: w.steps.len(),
            enabled: w.enabled,
            schedule,
            next_fire: When::opt(w.next_fire_at.filter(|_| w.enabled)),
            updated: When::of(w.updated_at),
        }
    }
}

pub struct InstanceRow {
    id: i64,
    workflow_id: i64,
    workflow: String,
    version: i32,
    status: String,
    created: When,
    finished: Option<When>,
    took: String,
}

impl InstanceRow {
    fn of(i: &Instance, names: &HashMap<i64, String>) -> Self {
        InstanceRow {
            id: i.id,
            workflow_id: i.workflow_id,
            workflow: names
                .get(&i.workflow_id)
                .cloned()
                .unwrap_or_else(|| format!("#{}", i.workflow_id)),
            version: i.version,
            status: i.status.to_string(),
            created: When::of(i.created_at),
            finished: When::opt(i.finished_at),
            took: took(Some(i.created_at), i.finished_at),
        }
    }
}

/// `12 ms`, `3.4 s`, `2 min 5 s`; empty until both ends are known.
fn took(from: Option<Millis>, to: Option<Millis>) -> String {
    let (Some(from), Some(to)) = (from, to) else {
        return String::new();
    };
    let ms = (to - from).max(0);
    match ms {
        0..1_000 => format!("{ms} ms"),
        1_000..60_000 => format!("{:.1} s", ms as f64 / 1000.0),
        _ => format!("{} min {} s", ms / 60_000, ms % 60_000 / 1000),
    }
}

/// `value` as indented JSON, cut to [`OUTPUT_CHARS`].
fn pretty(value: &Value) -> String {
    let text = serde_json::to_string_pretty(value).unwrap_or_default();
    if text.chars().count() <= OUTPUT_CHARS {
        return text;
    }
    let head: String = text.chars().take(OUTPUT_CHARS).collect();
    format!("{head}\n… ({} bytes)", text.len())
}

/// The names of the workflows `s` sees, by id.
async fn names(
    console: &Console,
    s: &Session,
) -> Result<(Vec<Workflow>, HashMap<i64, String>), Error> {
    let all = usecase::workflows::list(&console.ports, &s.who).await?;
    let names = all.iter().map(|w| (w.id, w.name.clone())).collect();
    Ok((all, names))
}

#[derive(Template)]
#[template(path = "workflows.html")]
struct WorkflowsPage {
    chrome: Chrome,
    workflows: Vec<WorkflowRow>,
    instances: Vec<InstanceRow>,
}

pub async fn workflows(
    State(console): State<Console>,
    Extension(s): Extension<Session>,
) -> PageResult {
    let (all, names) = names(&console, &s).await?;
    let latest =
        usecase::workflows::list_instances(&console.ports, &s.who, None, None, None, LATEST)
            .await?;
    render(&WorkflowsPage {
        chrome: Chrome::of(&s, "workflows"),
        workflows: all.iter().map(WorkflowRow::from).collect(),
        instances: latest
            .items
            .iter()
            .map(|i| InstanceRow::of(i, &names))
            .collect(),
    })
}

/// A step of a definition, as the workflow's page lists it.
pub struct StepDef {
    name: String,
    job_id: i64,
    job: String,
    after: String,
    when: String,
    map: bool,
}

#[derive(Template)]
#[template(path = "workflow.html")]
struct WorkflowPage {
    chrome: Chrome,
    wf: WorkflowRow,
    graph: String,
    steps: Vec<StepDef>,
    instances: Vec<InstanceRow>,
}

/// Steps by name, to turn `after` into the graph's indexes.
struct Index<'a>(HashMap<&'a str, usize>);

impl<'a> Index<'a> {
    fn of(names: impl Iterator<Item = &'a str>) -> Self {
        Index(names.enumerate().map(|(i, n)| (n, i)).collect())
    }

    fn all(&self, names: &[String]) -> Vec<usize> {
        names
            .iter()
            .filter_map(|n| self.0.get(n.as_str()).copied())
            .collect()
    }
}

/// The name of job `id`, or `#id` when it is gone (or not `s`'s to read).
async fn job_name(console: &Console, s: &Session, id: i64) -> String {
    match usecase::jobs::get(&console.ports, &s.who, &id.to_string()).await {
        Ok(job) => job.spec.name,
        Err(_) => format!("#{id}"),
    }
}

pub async fn workflow(
    State(console): State<Console>,
    Extension(s): Extension<Session>,
    Path(id): Path<i64>,
) -> PageResult {
    let wf =
        usecase::workflows::get_as(&console.ports, &s.who, &id.to_string(), Need::Read).await?;
    let index = Index::of(wf.steps.iter().map(|st| st.name.as_str()));
    let mut steps = Vec::with_capacity(wf.steps.len());
    let mut nodes = Vec::with_capacity(wf.steps.len());
    // Steps often share a job: each read once.
    let mut jobs: HashMap<i64, String> = HashMap::new();
    for st in &wf.steps {
        let job = match jobs.get(&st.job_id) {
            Some(name) => name.clone(),
            None => {
                let name = job_name(&console, &s, st.job_id).await;
                jobs.insert(st.job_id, name.clone());
                name
            }
        };
        nodes.push(Vertex {
            name: st.name.clone(),
            after: index.all(&st.after),
            map: st.map,
            status: None,
            detail: job.clone(),
            href: Some(format!("{PREFIX}/jobs/{}", st.job_id)),
        });
        steps.push(StepDef {
            name: st.name.clone(),
            job_id: st.job_id,
            job,
            after: st.after.join(", "),
            when: st.when.clone().unwrap_or_else(|| "all_succeeded".into()),
            map: st.map,
        });
    }
    let names = HashMap::from([(wf.id, wf.name.clone())]);
    let wf_id = wf.id.to_string();
    let latest = usecase::workflows::list_instances(
        &console.ports,
        &s.who,
        Some(&wf_id),
        None,
        None,
        LATEST,
    )
    .await?;
    render(&WorkflowPage {
        chrome: Chrome::of(&s, "workflows"),
        graph: graph::draw(&nodes, &wf.name),
        wf: WorkflowRow::from(&wf),
        steps,
        instances: latest
            .items
            .iter()
            .map(|i| InstanceRow::of(i, &names))
            .collect(),
    })
}

/// The start form: the instance's input (JSON; blank is `null`) and an optional key.
#[derive(Debug, Default, Deserialize)]
pub struct StartForm {
    #[serde(default)]
    input: String,
    #[serde(default)]
    key: String,
}

pub async fn start(
    State(console): State<Console>,
    Extension(s): Extension<Session>,
    Path(id): Path<i64>,
    Form(form): Form<StartForm>,
) -> PageResult {
    let input = match form.input.trim() {
        "" => Value::Null,
        text => serde_json::from_str(text)
            .map_err(|e| Error::BadRequest(format!("input: not JSON ({e})")))?,
    };
    let key = Some(form.key.trim().to_owned()).filter(|k| !k.is_empty());
    let (instance, _) =
        usecase::workflows::start(&console.ports, &s.who, &id.to_string(), input, key).await?;
    Ok(Redirect::to(&format!("{PREFIX}/workflow-instances/{}", instance.id)).into_response())
}

/// A step of an instance, as its page shows it.
pub struct StepRow {
    name: String,
    status: String,
    task: Option<i64>,
    runs: Vec<i64>,
    items: String,
    took: String,
    output: String,
    message: String,
}

impl From<&InstanceStep> for StepRow {
    fn from(st: &InstanceStep) -> Self {
        StepRow {
            name: st.name.clone(),
            status: st.status.to_string(),
            task: st.task_id,
            runs: st.runs.clone(),
            items: st
                .items
                .as_ref()
                .map(|i| {
                    format!(
                        "{}/{} ✓ · {} ✗ · {} …",
                        i.succeeded, i.total, i.failed, i.running
                    )
                })
                .unwrap_or_default(),
            took: took(st.started_at, st.finished_at),
            output: st.output.as_ref().map(pretty).unwrap_or_default(),
            message: st.message.clone().unwrap_or_default(),
        }
    }
}

#[derive(Template)]
#[template(path = "workflow_instance.html")]
struct InstancePage {
    chrome: Chrome,
    inst: InstanceRow,
    graph: String,
    steps: Vec<StepRow>,
    input: String,
    output: String,
    running: bool,
    failed: bool,
    message: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
pub struct InstanceQuery {
    message: Option<String>,
}

pub async fn instance(
    State(console): State<Console>,
    Extension(s): Extension<Session>,
    Path(id): Path<i64>,
    Query(q): Query<InstanceQuery>,
) -> PageResult {
    let inst = usecase::workflows::instance_as(&console.ports, &s.who, id, Need::Read).await?;
    let (_, names) = names(&console, &s).await?;
    let index = Index::of(inst.steps.iter().map(|st| st.name.as_str()));
    let nodes: Vec<Vertex> = inst
        .steps
        .iter()
        .map(|st| Vertex {
            name: st.name.clone(),
            after: index.all(&st.after),
            map: st.map,
            status: Some(st.status.to_string()),
            detail: step_detail(st),
            href: st.runs.last().map(|r| format!("{PREFIX}/runs/{r}")),
        })
        .collect();
    let row = InstanceRow::of(&inst, &names);
    render(&InstancePage {
        chrome: Chrome::of(&s, "workflows"),
        graph: graph::draw(&nodes, &format!("{} #{}", row.workflow, inst.id)),
        steps: inst.steps.iter().map(StepRow::from).collect(),
        input: pretty(&inst.input),
        output: inst.output.as_ref().map(pretty).unwrap_or_default(),
        running: inst.status == InstanceStatus::Running,
        failed: inst.status == InstanceStatus::Failed,
        inst: row,
        message: q.message,
    })
}

/// A step's second line in the graph: its elements for a map, else its duration.
fn step_detail(st: &InstanceStep) -> String {
    let mut detail = st.status.to_string();
    if let Some(i) = &st.items {
        detail.push_str(&format!(" · {}/{}", i.succeeded, i.total));
    }
    let t = took(st.started_at, st.finished_at);
    if !t.is_empty() && st.status != StepStatus::Skipped {
        detail.push_str(&format!(" · {t}"));
    }
    detail
}

pub async fn cancel(
    State(console): State<Console>,
    Extension(s): Extension<Session>,
    Path(id): Path<i64>,
) -> PageResult {
    usecase::workflows::cancel(&console.ports, &s.who, id).await?;
    Ok(Redirect::to(&format!("{PREFIX}/workflow-instances/{id}")).into_response())
}

pub async fn retry(
    State(console): State<Console>,
    Extension(s): Extension<Session>,
    Path(id): Path<i64>,
) -> PageResult {
    usecase::workflows::retry(&console.ports, &s.who, id).await?;
    Ok(Redirect::to(&format!("{PREFIX}/workflow-instances/{id}")).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_people_say_them() {
        assert_eq!(took(Some(1_000), Some(1_012)), "12 ms");
        assert_eq!(took(Some(0), Some(3_400)), "3.4 s");
        assert_eq!(took(Some(0), Some(125_000)), "2 min 5 s");
        assert_eq!(took(Some(0), None), "");
    }

    #[test]
    fn a_long_output_is_cut_saying_how_long_it_was() {
        let long = Value::String("x".repeat(10_000));
        let shown = pretty(&long);
        assert!(
            shown.ends_with("… (10002 bytes)"),
            "{}",
            &shown[shown.len() - 30..]
        );
        assert_eq!(pretty(&serde_json::json!({"a": 1})), "{\n  \"a\": 1\n}");
    }
}
