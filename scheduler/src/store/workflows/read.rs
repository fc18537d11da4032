//! Instances as callers read them: each with its steps as its version defines them,
//! their statuses, tasks, runs, outputs and a map's element counts — a page of instances
//! in five statements, not five per instance.

use serde_json::Value;

use super::super::*;
use super::moving::Moving;
use super::retry;
use super::{Instance, InstanceStep, ItemCounts, Version};
use crate::workflow::{InstanceStatus, StepSpec};

#[derive(FromRow)]
struct InstanceRow {
    id: i64,
    workflow_id: i64,
    version: i32,
    status: String,
    input: Option<String>,
    output: Option<String>,
    idem_key: Option<String>,
    created_at: i64,
    finished_at: Option<i64>,
}

const INSTANCE_SELECT: &str = "SELECT id, workflow_id, version, status, input, output, idem_key, \
     created_at, finished_at FROM workflow_instances";

#[derive(FromRow)]
struct StepRow {
    instance_id: i64,
    step: i32,
    status: String,
    task_id: Option<i64>,
    output: Option<String>,
    items: Option<i32>,
    message: Option<String>,
    started_at: Option<i64>,
    finished_at: Option<i64>,
}

/// What one instance's steps are read from.
#[derive(Default)]
struct StepsOf {
    rows: Vec<StepRow>,
    /// (step, run id), oldest run first.
    runs: Vec<(i32, i64)>,
    /// (step, element status, how many).
    items: Vec<(i32, Option<String>, i64)>,
}

impl Store {
    pub async fn get_instance(&self, id: i64) -> Result<Instance> {
        self.get_instances(&[id])
            .await?
            .pop()
            .ok_or_else(|| Error::NotFound(format!("workflow instance {id}")))
    }

    /// The instance each of `task_ids` that is a workflow step belongs to, as far as this
    /// node can tell cheaply — for grouping a report batch, not for deciding anything: the
    /// places it knows (a step's place never changes once written), the others read (no
    /// lock or transaction needed), and none at all while it has met no workflow step.
    pub async fn step_instances(&self, task_ids: &[i64]) -> Result<HashMap<i64, i64>> {
        let Some((mut places, unknown)) = self.known_placements(task_ids) else {
            return Ok(HashMap::new());
        };
        if !unknown.is_empty() {
            places.extend(self.read_placements(None, &unknown).await?);
        }
        Ok(places.into_iter().map(|(t, p)| (t, p.instance)).collect())
    }

    /// The instances among `ids` that exist, in the order of `ids`.
    pub async fn get_instances(&self, ids: &[i64]) -> Result<Vec<Instance>> {
        let mut out = Vec::with_capacity(ids.len());
        for chunk in ids.chunks(CHUNK) {
            out.extend(self.instances_chunk(chunk).await?);
        }
        Ok(out)
    }

    async fn instances_chunk(&self, ids: &[i64]) -> Result<Vec<Instance>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let rows: Vec<InstanceRow> = on_pool!(self, |pool, Db| {
            let mut qb = QueryBuilder::<Db>::new(INSTANCE_SELECT);
            qb.push(" WHERE id IN ");
            push_ids(&mut qb, ids.iter().copied());
            qb.build_query_as().fetch_all(pool).await?
        });
        let mut versions: HashMap<(i64, i32), Arc<Vec<StepSpec>>> = HashMap::new();
        for r in &rows {
            let key = (r.workflow_id, r.version);
            if versions.contains_key(&key) {
                continue;
            }
            let specs = match self.known_version(key) {
                Some(specs) => specs,
                None => {
                    let text: String = on_pool!(self, |pool, Db| {
                        sqlx::query_scalar(
                            "SELECT steps FROM workflow_versions WHERE workflow_id = ? AND version = ?",
                        )
                        .bind(r.workflow_id)
                        .bind(r.version)
                        .fetch_one(pool)
                        .await?
                    });
                    self.remember_version(key, parse_json(&text)?)
                }
            };
            versions.insert(key, specs);
        }
        let maps = versions.values().any(|specs| specs.iter().any(|s| s.map));
        let mut steps = self.steps_of(ids, maps).await?;
        let mut by_id: HashMap<i64, Instance> = HashMap::with_capacity(rows.len());
        for row in rows {
            let of = steps.remove(&row.id).unwrap_or_default();
            let specs = &versions[&(row.workflow_id, row.version)];
            by_id.insert(row.id, instance(row, specs, of)?);
        }
        Ok(ids.iter().filter_map(|id| by_id.remove(id)).collect())
    }

    /// The step rows, runs and element counts of instances `ids`, by instance (the
    /// counts only when one of their versions `maps`: only a map step has elements).
    async fn steps_of(&self, ids: &[i64], maps: bool) -> Result<HashMap<i64, StepsOf>> {
        let rows: Vec<StepRow> = on_pool!(self, |pool, Db| {
            let mut qb = QueryBuilder::<Db>::new(
                "SELECT instance_id, step, status, task_id, output, items, message, started_at, \
                 finished_at FROM workflow_steps WHERE instance_id IN ",
            );
            push_ids(&mut qb, ids.iter().copied());
            qb.push(" ORDER BY instance_id, step");
            qb.build_query_as().fetch_all(pool).await?
        });
        let runs: Vec<(i64, i32, i64)> = on_pool!(self, |pool, Db| {
            let mut qb = QueryBuilder::<Db>::new(
                "SELECT w.instance_id, w.step, r.id FROM workflow_tasks w \
                 JOIN runs r ON r.task_id = w.task_id WHERE w.instance_id IN ",
            );
            push_ids(&mut qb, ids.iter().copied());
            qb.push(" ORDER BY r.id");
            qb.build_query_as().fetch_all(pool).await?
        });
        let items: Vec<(i64, i32, Option<String>, i64)> = if !maps {
            Vec::new()
        } else {
            on_pool!(self, |pool, Db| {
                let mut qb = QueryBuilder::<Db>::new(
                    "SELECT instance_id, step, status, COUNT(*) FROM workflow_tasks \
                 WHERE item IS NOT NULL AND (status IS NULL OR status <> ",
                );
                qb.push_bind(retry::RETRIED).push(") AND instance_id IN ");
                push_ids(&mut qb, ids.iter().copied());
                qb.push(" GROUP BY instance_id, step, status");
                qb.build_query_as().fetch_all(pool).await?
            })
        };
        let mut out: HashMap<i64, StepsOf> = HashMap::new();
        for row in rows {
            out.entry(row.instance_id).or_default().rows.push(row);
        }
        for (i, step, run) in runs {
            out.entry(i).or_default().runs.push((step, run));
        }
        for (i, step, status, n) in items {
            out.entry(i).or_default().items.push((step, status, n));
        }
        Ok(out)
    }
}

/// The view of an instance that `moving` has just started and written (at `now`, under
/// `key`): what a read would find, with no runs yet. Read back instead, each start paid
/// three statements more.
pub(super) fn written(
    moving: &Moving,
    of: &Version<'_>,
    key: Option<&str>,
    now: Millis,
) -> Result<Instance> {
    let row = InstanceRow {
        id: moving.id,
        workflow_id: moving.workflow_id,
        version: of.version,
        status: moving.status.as_str().to_owned(),
        input: Some(to_json(&moving.input)),
        output: moving.ending.as_ref().map(to_json),
        idem_key: key.map(str::to_owned),
        created_at: now,
        finished_at: (moving.status != InstanceStatus::Running).then_some(now),
    };
    let rows = moving
        .changed
        .iter()
        .map(|c| StepRow {
            instance_id: moving.id,
            step: c.step as i32,
            status: c.status.as_str().to_owned(),
            task_id: c.task_id,
            output: c.output.clone(),
            items: c.items,
            message: c.message.clone(),
            started_at: c.started.then_some(now),
            finished_at: c.finished.then_some(now),
        })
        .collect();
    let of_steps = StepsOf {
        rows,
        ..StepsOf::default()
    };
    instance(row, of.steps, of_steps)
}

/// An instance from its row, its version's steps and what was read of its steps.
fn instance(row: InstanceRow, steps: &[StepSpec], of: StepsOf) -> Result<Instance> {
    let id = row.id;
    let mut out = Vec::with_capacity(of.rows.len());
    for r in of.rows {
        let counts = r.items.map(|total| {
            let mut c = ItemCounts {
                total: i64::from(total),
                ..ItemCounts::default()
            };
            for (_, status, n) in of.items.iter().filter(|(s, _, _)| *s == r.step) {
                match status.as_deref() {
                    Some("succeeded") => c.succeeded += n,
                    Some(_) => c.failed += n,
                    None => c.running += n,
                }
            }
            c
        });
        let spec = steps
            .get(r.step as usize)
            .ok_or_else(|| Error::Corrupt(format!("instance {id}: no step {}", r.step)))?;
        out.push(InstanceStep {
            name: spec.name.clone(),
            job_id: spec.job_id,
            after: spec.after.clone(),
            map: spec.map,
            status: parse(&r.status)?,
            task_id: r.task_id,
            runs: of
                .runs
                .iter()
                .filter(|(s, _)| *s == r.step)
                .map(|(_, run)| *run)
                .collect(),
            output: r.output.as_deref().map(parse_json).transpose()?,
            items: counts,
            message: r.message,
            started_at: r.started_at,
            finished_at: r.finished_at,
        });
    }
    Ok(Instance {
        id: row.id,
        workflow_id: row.workflow_id,
        version: row.version,
        status: parse(&row.status)?,
        input: row
            .input
            .as_deref()
            .map(parse_json)
            .transpose()?
            .unwrap_or(Value::Null),
        output: row.output.as_deref().map(parse_json).transpose()?,
        key: row.idem_key,
        created_at: row.created_at,
        finished_at: row.finished_at,
        steps: out,
    })
}
