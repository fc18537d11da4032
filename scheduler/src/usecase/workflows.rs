//! Workflows (SPEC §10): defining one (its graph checked, each step's job in the
//! workflow's app), reading, changing (a new version) and deleting it; starting an
//! instance (idempotent by key), reading and cancelling instances — checked, stored and
//! audited here for every door.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;

use super::fields::NameOrId;
use super::jobs::job_ref;
use super::validate::{self, invalid};
use super::{Error, Result};
use crate::access::{Need, Principal};
use crate::model::Millis;
use crate::model::Page;
use crate::ports::Ports;
use crate::schedule::{Misfire, Schedule};
use crate::store::{self, Instance, Scheduled, Store, Timing, Workflow};
use crate::workflow::{Graph, InstanceStatus, Overlap, StepSpec};

/// A step's `params` are at most this long.
const MAX_PARAMS_BYTES: usize = 64 * 1024;

/// A step as a user writes it: its job by name or id.
#[derive(Debug, Clone, PartialEq)]
pub struct StepFields {
    pub name: String,
    pub job: NameOrId,
    pub after: Vec<String>,
    pub when: Option<String>,
    pub map: bool,
    pub params: Option<String>,
}

/// A new workflow.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkflowFields {
    pub name: String,
    pub app: String,
    pub steps: Vec<StepFields>,
    pub enabled: bool,
    pub timing: TimingFields,
}

/// A change to a workflow: new steps (a new version), on or off, its timing.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WorkflowChange {
    pub steps: Option<Vec<StepFields>>,
    pub enabled: Option<bool>,
    pub timing: TimingFields,
}

/// A workflow's timing as sent, each part optional: a change keeps what it does not name.
/// A schedule of kind `none` removes the schedule.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TimingFields {
    pub schedule: Option<Schedule>,
    pub misfire: Option<String>,
    pub overlap: Option<String>,
}

impl TimingFields {
    fn is_empty(&self) -> bool {
        self.schedule.is_none() && self.misfire.is_none() && self.overlap.is_none()
    }
}

/// `fields` over `base`, checked (each problem named by its field), with the next fire
/// time after `now` (none without a schedule).
fn scheduled(base: &Timing, fields: &TimingFields, now: Millis) -> Result<Scheduled> {
    let schedule = match &fields.schedule {
        Some(Schedule::None) => None,
        Some(Schedule::FixedDelay { .. }) => {
            return Err(invalid(
                "schedule",
                "a workflow's schedule is cron or fixed_rate; `overlap` keeps its instances \
                 apart (fixed_delay is for jobs)",
            ));
        }
        Some(s) if Some(s) != base.schedule.as_ref() => {
            s.check_new().map_err(|e| invalid("schedule", e))?;
            Some(s.clone())
        }
        Some(s) => Some(s.clone()),
        None => base.schedule.clone(),
    };
    let misfire: Misfire = match &fields.misfire {
        Some(m) => m.parse().map_err(|e: String| invalid("misfire", e))?,
        None => base.misfire,
    };
    let overlap: Overlap = match &fields.overlap {
        Some(o) => o.parse().map_err(|e: String| invalid("overlap", e))?,
        None => base.overlap,
    };
    let next_fire_at = match &schedule {
        Some(s) => s
            .compile_at(now)
            .map_err(|e| invalid("schedule", e))?
            .next_after(now),
        None => None,
    };
    Ok(Scheduled {
        timing: Timing {
            schedule,
            misfire,
            overlap,
        },
        next_fire_at,
    })
}

/// Checks a workflow's timing as [`create`] would.
pub fn check_timing(ports: &Ports, fields: &TimingFields) -> Result<()> {
    scheduled(&Timing::default(), fields, ports.clock().now_ms()).map(|_| ())
}

/// Each step's job resolved (it must exist and be in `app`), and the graph checked: the
/// steps as stored, or the first problem, named.
async fn resolve(store: &Store, app: &str, steps: &[StepFields]) -> Result<Vec<StepSpec>> {
    resolve_with(store, app, steps, &HashMap::new()).await
}

/// Checks a workflow's steps as [`create`] would, where the jobs named in `planned` (name →
/// app) count as made: a document applied as a dry run makes its jobs later
/// (`usecase::apply`).
pub async fn check_steps(
    ports: &Ports,
    app: &str,
    steps: &[StepFields],
    planned: &HashMap<String, String>,
) -> Result<()> {
    resolve_with(ports.store(), app, steps, planned)
        .await
        .map(|_| ())
}

async fn resolve_with(
    store: &Store,
    app: &str,
    steps: &[StepFields],
    planned: &HashMap<String, String>,
) -> Result<Vec<StepSpec>> {
    let mut specs = Vec::with_capacity(steps.len());
    for (i, s) in steps.iter().enumerate() {
        validate::name(&format!("steps[{i}].name"), &s.name)?;
        if let Some(params) = &s.params {
            validate::max_bytes(&format!("steps[{i}].params"), params, MAX_PARAMS_BYTES)?;
        }
        let field = format!("steps[{i}].job");
        let (job_id, job_name, job_app) = match &s.job {
            NameOrId::Name(name) if planned.contains_key(name) => {
                (0, name.clone(), planned[name].clone())
            }
            r => {
                let job = job_ref(store, &field, r).await?;
                (job.id, job.spec.name, job.spec.app)
            }
        };
        if job_app != app {
            return Err(invalid(
                &field,
                format!(
                    "job `{job_name}` is in app `{job_app}`, not in the workflow's app `{app}`"
                ),
            ));
        }
        specs.push(StepSpec {
            name: s.name.clone(),
            job_id,
            after: s.after.clone(),
            when: s.when.clone(),
            map: s.map,
            params: s.params.clone(),
        });
    }
    Graph::new(&specs).map_err(Error::Unprocessable)?;
    Ok(specs)
}

/// A workflow named in a path: an integer is tried as an id first, then as a name.
async fn find(store: &Store, id_or_name: &str) -> Result<Workflow> {
    if let Ok(id) = id_or_name.parse::<i64>() {
        match store.get_workflow(id).await {
            Err(store::Error::NotFound(_)) => {}
            other => return Ok(other?),
        }
    }
    match store.get_workflow_by_name(id_or_name).await {
        Err(store::Error::NotFound(_)) => Err(Error::NotFound(format!(
            "workflow `{id_or_name}` not found"
        ))),
        other => Ok(other?),
    }
}

/// Workflow `id` (an id or a name), if `who` may read (or change) it.
pub async fn get_as(ports: &Ports, who: &Principal, id: &str, need: Need) -> Result<Workflow> {
    let wf = find(ports.store(), id).await?;
    who.check(&wf.app, need, &format!("workflow `{id}`"))?;
    Ok(wf)
}

/// Stores a new workflow at version 1, audited.
pub async fn create(ports: &Ports, who: &Principal, fields: WorkflowFields) -> Result<Workflow> {
    validate::name("name", &fields.name)?;
    validate::app("app", &fields.app)?;
    who.check_app(&fields.app)?;
    let steps = resolve(ports.store(), &fields.app, &fields.steps).await?;
    let now = ports.clock().now_ms();
    let timing = scheduled(&Timing::default(), &fields.timing, now)?;
    let app_id = ports.store().ensure_app(&fields.app, now).await?;
    let wf = ports
        .store()
        .create_workflow(&fields.name, app_id, &steps, fields.enabled, &timing, now)
        .await?;
    ports.audit(&who.name, "create workflow", &wf.name).await;
    tracing::info!(workflow.id = wf.id, workflow.name = %wf.name, "workflow created");
    Ok(wf)
}

/// Changes workflow `id`: new steps make a new version (running instances keep theirs).
pub async fn update(
    ports: &Ports,
    who: &Principal,
    id: &str,
    change: WorkflowChange,
) -> Result<Workflow> {
    let wf = get_as(ports, who, id, Need::Change).await?;
    let steps = match &change.steps {
        Some(steps) => Some(resolve(ports.store(), &wf.app, steps).await?),
        None => None,
    };
    let now = ports.clock().now_ms();
    // The next fire time moves with the timing, and from now when it is switched on.
    let enabling = change.enabled == Some(true) && !wf.enabled;
    let timing = if !change.timing.is_empty() || enabling {
        Some(scheduled(&wf.timing, &change.timing, now)?)
    } else {
        None
    };
    let updated = ports
        .store()
        .update_workflow(
            wf.id,
            steps.as_deref(),
            change.enabled,
            timing.as_ref(),
            now,
        )
        .await?;
    ports.audit(&who.name, "update workflow", &wf.name).await;
    Ok(updated)
}

/// Deletes workflow `id`; one with running instances only with `force` (they run on).
pub async fn delete(ports: &Ports, who: &Principal, id: &str, force: bool) -> Result<()> {
    let wf = get_as(ports, who, id, Need::Change).await?;
    ports.store().delete_workflow(wf.id, force).await?;
    ports.audit(&who.name, "delete workflow", &wf.name).await;
    Ok(())
}

/// The workflows `who` sees, by name.
pub async fn list(ports: &Ports, who: &Principal) -> Result<Vec<Workflow>> {
    let all = ports.store().list_workflows().await?;
    Ok(match who.app_filter() {
        None => all,
        Some(apps) => all.into_iter().filter(|w| apps.contains(&w.app)).collect(),
    })
}

/// Starts an instance of workflow `id` with `input`; with a `key` already used for it,
/// that instance (and `false`). Audited when one is created.
pub async fn start(
    ports: &Ports,
    who: &Principal,
    id: &str,
    input: Value,
    key: Option<String>,
) -> Result<(Instance, bool)> {
    // The workflow as this node last started it, if it did: the start's transaction
    // checks that its row is still so (this version, enabled, unchanged), so a start
    // reads neither it nor its steps first. When it is not, it is read again and the
    // start decided again, once.
    let mut remembered = ports.started_workflow(id);
    let mut again = true;
    loop {
        // A remembered copy `who` may not change is a miss, not a refusal: the name may
        // now be another workflow's, in an app `who` has.
        let wf = match remembered.take() {
            Some(wf) if who.check(&wf.app, Need::Change, "").is_ok() => wf,
            _ => Arc::new(get_as(ports, who, id, Need::Change).await?),
        };
        if !wf.enabled {
            return Err(Error::Conflict(format!(
                "workflow `{}` is disabled; enable it to start instances",
                wf.name
            )));
        }
        if let Some(key) = &key {
            validate::name("key", key)?;
        }
        validate::max_bytes(
            "input",
            &input.to_string(),
            ports.config().max_payload_bytes,
        )?;
        // Audited in the start's own transaction: no instance without its note.
        let started = ports
            .start_instance(
                &wf,
                &input,
                key.as_deref(),
                ports.clock().now_ms(),
                Some(&who.name),
            )
            .await;
        let store::InstanceStart {
            instance, created, ..
        } = match started {
            Err(store::Error::Changed(_)) if again => {
                ports.remember_started_workflow(id, None);
                again = false;
                continue;
            }
            other => other?,
        };
        // Kept only under what names it alone: a number that named no id was looked up as
        // a name, and may name an id later.
        if id == wf.id.to_string() || (id.parse::<i64>().is_err() && id == wf.name) {
            ports.remember_started_workflow(id, Some(wf));
        }
        if created {
            crate::metrics::workflow_instances(InstanceStatus::Running, 1);
        }
        return Ok((instance, created));
    }
}

/// The app of instance `instance`'s workflow; `None` once the workflow is deleted.
async fn app_of(store: &Store, instance: &Instance) -> Result<Option<String>> {
    match store.get_workflow(instance.workflow_id).await {
        Ok(wf) => Ok(Some(wf.app)),
        Err(store::Error::NotFound(_)) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Instance `id`, if `who` may read (or change) it: an instance of a deleted workflow is
/// in no app a scoped user has.
pub async fn instance_as(ports: &Ports, who: &Principal, id: i64, need: Need) -> Result<Instance> {
    let instance = ports.store().get_instance(id).await?;
    let what = format!("workflow instance {id}");
    match app_of(ports.store(), &instance).await? {
        Some(app) => who.check(&app, need, &what)?,
        None if who.app_filter().is_none() => who.check("", need, &what)?,
        None => return Err(Error::NotFound(format!("{what} not found"))),
    }
    Ok(instance)
}

/// A page of instances `who` sees, newest first: of `workflow` and in `status` if given.
pub async fn list_instances(
    ports: &Ports,
    who: &Principal,
    workflow: Option<&str>,
    status: Option<InstanceStatus>,
    before_id: Option<i64>,
    limit: u32,
) -> Result<Page<Instance>> {
    let workflow_id = match workflow.filter(|w| !w.is_empty()) {
        Some(w) => Some(get_as(ports, who, w, Need::Read).await?.id),
        None => None,
    };
    let mut items = Vec::new();
    let mut before = before_id;
    // A scoped principal's view: each workflow's app read once per call.
    let mut apps: HashMap<i64, Option<String>> = HashMap::new();
    // Scoped principals skip what they may not see; a page is filled from further back.
    loop {
        let batch = ports
            .store()
            .list_instances(workflow_id, status, before, limit)
            .await?;
        let more = batch.len() > limit as usize;
        for inst in batch.into_iter().take(limit as usize) {
            before = Some(inst.id);
            let visible = match who.app_filter() {
                None => true,
                Some(allowed) => {
                    let app = match apps.get(&inst.workflow_id) {
                        Some(app) => app.clone(),
                        None => {
                            let app = app_of(ports.store(), &inst).await?;
                            apps.insert(inst.workflow_id, app.clone());
                            app
                        }
                    };
                    app.is_some_and(|app| allowed.contains(&app))
                }
            };
            if visible {
                items.push(inst);
            }
            if items.len() > limit as usize {
                break;
            }
        }
        if !more || items.len() > limit as usize {
            break;
        }
    }
    let next = (items.len() > limit as usize)
        .then(|| {
            items.truncate(limit as usize);
            items.last().map(|i| i.id)
        })
        .flatten();
    Ok(Page { items, next })
}

/// Cancels instance `id`: pending steps and unstarted tasks are cancelled, the runs of
/// started ones killed (best effort: one that ends anyway changes nothing now). Audited.
pub async fn cancel(ports: &Ports, who: &Principal, id: i64) -> Result<Instance> {
    instance_as(ports, who, id, Need::Change).await?;
    let cancelled = ports
        .store()
        .cancel_instance(id, ports.clock().now_ms())
        .await?;
    if cancelled.queued_started {
        crate::metrics::workflow_instances(InstanceStatus::Running, 1);
    }
    for task_id in cancelled.started {
        let Ok(task) = ports.store().get_task(task_id).await else {
            continue;
        };
        let Some(run_id) = task.last_run_id else {
            continue;
        };
        if let Ok(run) = ports.store().get_run(run_id).await
            && !run.status.is_final()
            && let Err(e) = ports.kill_run(&run).await
        {
            tracing::warn!(run.id = run_id, error = %e, "cancelling a workflow: kill failed");
        }
    }
    crate::metrics::workflow_instances(InstanceStatus::Cancelled, 1);
    ports
        .audit(&who.name, "cancel workflow instance", &id.to_string())
        .await;
    Ok(ports.store().get_instance(id).await?)
}

/// Retries failed instance `id`: its failed steps run again with a fresh attempt budget (a
/// map's failed elements only) and the steps their failure skipped are judged again.
/// Audited.
pub async fn retry(ports: &Ports, who: &Principal, id: i64) -> Result<Instance> {
    instance_as(ports, who, id, Need::Change).await?;
    let created = ports
        .store()
        .retry_instance(id, ports.clock().now_ms())
        .await?;
    if created > 0 {
        ports.wake_scan();
    }
    ports
        .audit(&who.name, "retry workflow instance", &id.to_string())
        .await;
    Ok(ports.store().get_instance(id).await?)
}
