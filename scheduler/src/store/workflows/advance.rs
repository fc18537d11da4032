//! The engine of workflows, in the transaction that ended a step's task: the instances'
//! rows locked, the endings applied (a map's element kept until its last one ends), what
//! they make ready started or skipped with their tasks created, and each instance ended
//! once nothing may run — so a join is decided once, on whichever node, through kills.
//! How an instance is read and written back is [`super::moving`]'s.

use std::collections::BTreeSet;

use serde_json::Value;

use super::super::*;
use super::moving::{Moving, StepChange, StepTask};
use super::{InstanceEnded, Moved, StepTaskEnded};
use crate::workflow::{InstanceStatus, Next, Overlap, Step, StepStatus, map_items, parse_output};

/// A step task's ending, placed: its step, and its element if the step is a map.
struct Ending<'a> {
    ended: &'a StepTaskEnded,
    step: usize,
    item: Option<i32>,
}

/// A new task of `step`'s job carrying `payload`, due `now` (the job's attempts, backoff
/// and priority apply).
pub(super) fn step_task(step: &Step, payload: Value, now: Millis) -> NewTask {
    NewTask {
        job_id: step.job_id,
        kind: TaskKind::Step,
        key: None,
        payload: Some(to_json(&payload)),
        params: step.params.clone(),
        due_at: now,
        max_attempts: None,
        backoff: None,
        priority: 0,
        traceparent: None,
        limit_key: None,
    }
}

fn output_text(v: &Option<Value>) -> Option<String> {
    v.as_ref().map(to_json)
}

impl Store {
    /// Moves on the instances whose step tasks `ended` (in the report's transaction): the
    /// instances' rows are locked first, in id order, so the endings of one join's
    /// predecessors, on this node or another, are applied one after the other and the
    /// join is decided once. The batch's instances are written back together, the tasks
    /// they make ready created claimed by `claim` where they may be. Returns how many tasks
    /// it created, those it claimed, and the instances that ended.
    pub(in crate::store) async fn end_steps(
        &self,
        tx: &mut Tx,
        ended: &[StepTaskEnded],
        now: Millis,
        claim: Option<NodeLease>,
    ) -> Result<Moved> {
        let mut moved = Moved::default();
        if ended.is_empty() {
            return Ok(moved);
        }
        let by_instance = self.endings_by_instance(tx, ended).await?;
        let ids: Vec<i64> = by_instance.keys().copied().collect();
        let mut locked = self.lock_instances(tx, &ids).await?;
        let mut moves: Vec<Moving> = Vec::with_capacity(locked.len());
        // The latest run end among each instance's endings: what a step it starts waited
        // from.
        let mut ended_at: Vec<Option<Millis>> = Vec::with_capacity(locked.len());
        // A map's elements that ended in this batch, and the (instance, step) they are of.
        let mut elements: Vec<&StepTaskEnded> = Vec::new();
        let mut mapped: BTreeSet<(usize, usize)> = BTreeSet::new();
        for (instance_id, endings) in by_instance {
            let Some(mut moving) = locked.remove(&instance_id) else {
                continue;
            };
            ended_at.push(endings.iter().filter_map(|e| e.ended.finished_at).max());
            for Ending { ended, step, item } in endings {
                if moving.statuses[step] != StepStatus::Running {
                    continue; // cancelled meanwhile, or already ended
                }
                match item {
                    None => end_step(&mut moving, step, ended.succeeded, ended.output.as_deref()),
                    Some(_) => {
                        elements.push(ended);
                        mapped.insert((moves.len(), step));
                    }
                }
            }
            moves.push(moving);
        }
        self.record_elements(tx, &elements).await?;
        for (m, step) in mapped {
            self.end_map_if_done(tx, &mut moves[m], step).await?;
        }
        for (moving, ended_at) in moves.iter_mut().zip(ended_at) {
            decide(moving, now);
            let created = moving.tasks.len();
            if created > 0 {
                moved
                    .handoffs_ms
                    .extend(ended_at.iter().map(|&at| (now - at).max(0)));
            }
            moved.created += created;
        }
        moved.claimed = self.write_moves(tx, &mut moves, now, claim).await?;
        moved.placed = moves
            .iter_mut()
            .flat_map(|m| std::mem::take(&mut m.placed))
            .collect();
        let over: Vec<&Moving> = moves
            .iter()
            .filter(|m| m.status != InstanceStatus::Running)
            .collect();
        self.instances_ended(tx, &over, now, &mut moved).await?;
        Ok(moved)
    }

    /// `ended`'s tasks by the instance they are steps of (in id order), each placed.
    async fn endings_by_instance<'a>(
        &self,
        tx: &mut Tx,
        ended: &'a [StepTaskEnded],
    ) -> Result<BTreeMap<i64, Vec<Ending<'a>>>> {
        let ids: Vec<i64> = ended.iter().map(|e| e.task_id).collect();
        // Known to this node (it created them, or read them splitting the batch) or read.
        let (mut places, unknown) = self
            .known_placements(&ids)
            .unwrap_or_else(|| (HashMap::new(), ids.clone()));
        if !unknown.is_empty() {
            places.extend(self.read_placements(Some(tx), &unknown).await?);
        }
        let mut by_instance: BTreeMap<i64, Vec<Ending<'_>>> = BTreeMap::new();
        for e in ended {
            if let Some(place) = places.get(&e.task_id) {
                by_instance.entry(place.instance).or_default().push(Ending {
                    ended: e,
                    step: place.step,
                    item: place.item,
                });
            }
        }
        Ok(by_instance)
    }

    /// What alarms and metrics are told of `over`, which have just ended (their names read
    /// in one statement); a workflow that queues its fires starts its next waiting one.
    async fn instances_ended(
        &self,
        tx: &mut Tx,
        over: &[&Moving],
        now: Millis,
        moved: &mut Moved,
    ) -> Result<()> {
        if over.is_empty() {
            return Ok(());
        }
        let rows: Vec<(i64, String, String, String)> = on_tx!(tx, |tx, Db| {
            let mut qb = QueryBuilder::<Db>::new(
                "SELECT w.id, w.name, a.name, w.overlap FROM workflows w                  JOIN apps a ON a.id = w.app_id WHERE w.id IN ",
            );
            push_ids(&mut qb, over.iter().map(|m| m.workflow_id));
            qb.build_query_as().fetch_all(&mut **tx).await?
        });
        let named: HashMap<i64, (String, String, String)> = rows
            .into_iter()
            .map(|(id, name, app, overlap)| (id, (name, app, overlap)))
            .collect();
        for moving in over {
            let (workflow, app, overlap) =
                named.get(&moving.workflow_id).cloned().unwrap_or_default();
            moved.instances.push(InstanceEnded {
                id: moving.id,
                workflow,
                app,
                status: moving.status,
                failed_steps: moving
                    .statuses
                    .iter()
                    .zip(moving.graph.steps())
                    .filter(|(s, _)| **s == StepStatus::Failed)
                    .map(|(_, step)| step.name.clone())
                    .collect(),
            });
            if overlap == Overlap::Queue.as_str()
                && self.start_waiting(tx, moving.workflow_id, now).await?
            {
                moved.created += 1;
                moved.started += 1;
            }
        }
        Ok(())
    }

    /// Keeps the outcome and output of map elements that ended: one statement per chunk.
    async fn record_elements(&self, tx: &mut Tx, ended: &[&StepTaskEnded]) -> Result<()> {
        let rows: Vec<(i64, &'static str, Option<String>)> = ended
            .iter()
            .map(|e| {
                let status = if e.succeeded {
                    StepStatus::Succeeded
                } else {
                    StepStatus::Failed
                };
                let output = match e.output.as_deref().map(parse_output) {
                    Some(Ok(v)) => Some(to_json(&v)),
                    _ => None,
                };
                (e.task_id, status.as_str(), output)
            })
            .collect();
        on_tx!(tx, |tx, Db| {
            for chunk in rows.chunks(CHUNK) {
                let mut qb = QueryBuilder::<Db>::new("UPDATE workflow_tasks SET status = ");
                push_case(&mut qb, "task_id", chunk.iter().map(|(t, s, _)| (*t, *s)));
                qb.push(", output = ");
                push_case(
                    &mut qb,
                    "task_id",
                    chunk.iter().map(|(t, _, o)| (*t, o.clone())),
                );
                qb.push(" WHERE status IS NULL AND task_id IN ");
                push_ids(&mut qb, chunk.iter().map(|(t, _, _)| *t));
                qb.build().execute(&mut **tx).await?;
            }
        });
        Ok(())
    }

    /// Map step `step` had elements end: when its last one has, the step ends with the
    /// elements' outputs in order (failed if any element failed).
    async fn end_map_if_done(&self, tx: &mut Tx, moving: &mut Moving, step: usize) -> Result<()> {
        let rows: Vec<(Option<i32>, Option<String>, Option<String>)> = on_tx!(tx, |tx, Db| {
            sqlx::query_as(
                "SELECT item, status, output FROM workflow_tasks WHERE instance_id = ? AND step = ? \
                 AND (status IS NULL OR status <> ?) ORDER BY item",
            )
            .bind(moving.id)
            .bind(step as i32)
            .bind(super::retry::RETRIED)
            .fetch_all(&mut **tx)
            .await?
        });
        if rows.iter().any(|(_, s, _)| s.is_none()) {
            return Ok(()); // elements still run
        }
        let failed = rows
            .iter()
            .filter(|(_, s, _)| s.as_deref() != Some(StepStatus::Succeeded.as_str()))
            .count();
        let outputs: Vec<Value> = rows
            .iter()
            .map(|(_, _, o)| match o.as_deref() {
                Some(text) => parse_json(text),
                None => Ok(Value::Null),
            })
            .collect::<Result<_>>()?;
        let value = Value::Array(outputs);
        let (status, message) = if failed == 0 {
            (StepStatus::Succeeded, None)
        } else {
            (
                StepStatus::Failed,
                Some(format!("{failed} of {} elements failed", rows.len())),
            )
        };
        moving.statuses[step] = status;
        moving.changed.push(StepChange {
            step,
            status,
            task_id: None,
            output: Some(to_json(&value)),
            items: None,
            message,
            started: false,
            finished: true,
        });
        moving.outputs[step] = Some(value);
        Ok(())
    }

    /// Starts and skips what the instance's statuses now allow, creates the started steps'
    /// tasks, writes the changed steps and, once nothing may run, the instance's end.
    /// Returns how many tasks it created.
    pub(super) async fn move_on(
        &self,
        tx: &mut Tx,
        moving: &mut Moving,
        now: Millis,
    ) -> Result<usize> {
        self.move_on_with(tx, moving, now, Vec::new()).await
    }

    /// [`Store::move_on`], with `tasks` already decided (a retried map's elements) created
    /// and linked with the rest.
    pub(super) async fn move_on_with(
        &self,
        tx: &mut Tx,
        moving: &mut Moving,
        now: Millis,
        tasks: Vec<StepTask>,
    ) -> Result<usize> {
        moving.tasks = tasks;
        let created = self.move_on_claiming(tx, moving, now, None).await?;
        Ok(created.0)
    }

    /// [`Store::move_on`], the tasks it creates created claimed by `claim` where they may
    /// be (see [`Store::write_moves`]): how many it created, and those claimed.
    pub(super) async fn move_on_claiming(
        &self,
        tx: &mut Tx,
        moving: &mut Moving,
        now: Millis,
        claim: Option<NodeLease>,
    ) -> Result<(usize, Vec<DueTask>)> {
        decide(moving, now);
        let created = moving.tasks.len();
        let claimed = self
            .write_moves(tx, std::slice::from_mut(moving), now, claim)
            .await?;
        Ok((created, claimed))
    }
}

/// Starts and skips what `moving`'s statuses now allow (the started steps' tasks into
/// its `tasks`) and, once nothing may run, ends it — in memory, for
/// [`Store::write_moves`] to write.
fn decide(moving: &mut Moving, now: Millis) {
    loop {
        let decided = moving.graph.advance(&mut moving.statuses);
        if decided.is_empty() {
            break;
        }
        for next in decided {
            match next {
                Next::Skip(i) => moving
                    .changed
                    .push(StepChange::ended(i, StepStatus::Skipped)),
                Next::Start(i) => start_step(moving, i, now),
            }
        }
    }
    if let Some(end) = moving.graph.outcome(&moving.statuses) {
        moving.status = end;
        moving.ending = Some(moving.graph.instance_output(&moving.outputs));
    }
}

/// Step `i` starts: its task (or one per element of its predecessor's array) goes into
/// `moving.tasks`; a map over anything but an array of at most 10,000 fails the step
/// instead.
fn start_step(moving: &mut Moving, i: usize, now: Millis) {
    let step = moving.graph.steps()[i].clone();
    let new_task = |payload: Value| step_task(&step, payload, now);
    if !step.map {
        let payload = moving
            .graph
            .payload(i, &moving.input, &moving.outputs, None);
        moving.tasks.push((new_task(payload), i, None));
        moving.changed.push(StepChange {
            step: i,
            status: StepStatus::Running,
            task_id: None,
            output: None,
            items: None,
            message: None,
            started: true,
            finished: false,
        });
        return;
    }
    let source = moving.outputs[step.after[0]].clone();
    let (status, output, items, message) = match map_items(source.as_ref()) {
        Ok(items) if !items.is_empty() => {
            for (k, item) in items.iter().enumerate() {
                let payload =
                    moving
                        .graph
                        .payload(i, &moving.input, &moving.outputs, Some((k, item)));
                moving.tasks.push((new_task(payload), i, Some(k as i32)));
            }
            (StepStatus::Running, None, Some(items.len() as i32), None)
        }
        // Nothing to map: done at once, with no outputs.
        Ok(_) => {
            moving.outputs[i] = Some(Value::Array(Vec::new()));
            (StepStatus::Succeeded, Some("[]".into()), Some(0), None)
        }
        Err(reason) => (StepStatus::Failed, None, None, Some(reason)),
    };
    moving.statuses[i] = status;
    moving.changed.push(StepChange {
        step: i,
        status,
        task_id: None,
        output,
        items,
        message,
        started: true,
        finished: status != StepStatus::Running,
    });
}

/// A plain step's task ended: the step succeeded with the run's output (failed if the
/// output is over the limit), or failed.
fn end_step(moving: &mut Moving, step: usize, succeeded: bool, output: Option<&str>) {
    let (status, value, message) = match (succeeded, output.map(parse_output)) {
        (true, Some(Err(reason))) => (StepStatus::Failed, None, Some(reason)),
        (true, Some(Ok(v))) => (StepStatus::Succeeded, Some(v), None),
        (true, None) => (StepStatus::Succeeded, None, None),
        (false, _) => (StepStatus::Failed, None, None),
    };
    moving.statuses[step] = status;
    moving.changed.push(StepChange {
        step,
        status,
        task_id: None,
        output: output_text(&value),
        items: None,
        message,
        started: false,
        finished: true,
    });
    moving.outputs[step] = value;
}
