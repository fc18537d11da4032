//! The engine of workflows, in the transaction that ended a step's task: the instance's
//! row locked, the ending applied (a map's element kept until its last one ends), what it
//! makes ready started or skipped with their tasks created, and the instance ended once
//! nothing may run — so a join is decided once, on whichever node, through kills.

use serde_json::Value;

use super::super::*;
use super::{InstanceEnded, Moved, StepTaskEnded};
use crate::workflow::{
    Graph, InstanceStatus, Next, Step, StepSpec, StepStatus, map_items, parse_output,
};

/// An instance being moved on, inside a transaction: its graph, each step's status and
/// output, and what changed (written at the end).
pub(super) struct Moving {
    pub(super) id: i64,
    pub(super) workflow_id: i64,
    pub(super) graph: Graph,
    pub(super) input: Value,
    pub(super) statuses: Vec<StepStatus>,
    pub(super) outputs: Vec<Option<Value>>,
    pub(super) changed: Vec<StepChange>,
    pub(super) status: InstanceStatus,
}

/// A step task's ending, placed: its step, and its element if the step is a map.
struct Ending<'a> {
    ended: &'a StepTaskEnded,
    step: usize,
    item: Option<i32>,
}

/// A task to create for a step: the task, its step and its element if the step is a map.
pub(super) type StepTask = (NewTask, usize, Option<i32>);

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
    }
}

/// A step row to write.
pub(super) struct StepChange {
    pub(super) step: usize,
    pub(super) status: StepStatus,
    pub(super) task_id: Option<i64>,
    pub(super) output: Option<String>,
    pub(super) items: Option<i32>,
    pub(super) message: Option<String>,
    pub(super) started: bool,
    pub(super) finished: bool,
}

impl StepChange {
    /// Step `step` ended as `status`, with nothing else to write.
    pub(super) fn ended(step: usize, status: StepStatus) -> StepChange {
        StepChange {
            step,
            status,
            task_id: None,
            output: None,
            items: None,
            message: None,
            started: false,
            finished: true,
        }
    }
}

fn output_text(v: &Option<Value>) -> Option<String> {
    v.as_ref().map(to_json)
}

/// An instance as read: its graph, and its steps' rows (step, status, output).
fn moving(
    id: i64,
    workflow_id: i64,
    graph: Graph,
    status: &str,
    input: Option<String>,
    rows: Vec<(i32, String, Option<String>)>,
) -> Result<Moving> {
    let n = graph.steps().len();
    let mut statuses = vec![StepStatus::Pending; n];
    let mut outputs = vec![None; n];
    for (step, status, output) in rows {
        let i = step as usize;
        if i < n {
            statuses[i] = parse(&status)?;
            outputs[i] = output.as_deref().map(parse_json).transpose()?;
        }
    }
    Ok(Moving {
        id,
        workflow_id,
        graph,
        input: input
            .as_deref()
            .map(parse_json)
            .transpose()?
            .unwrap_or(Value::Null),
        statuses,
        outputs,
        changed: Vec::new(),
        status: parse(status)?,
    })
}

impl Store {
    /// Moves on the instances whose step tasks `ended` (in the report's transaction): each
    /// instance's row is locked first, in id order, so the endings of one join's
    /// predecessors, on this node or another, are applied one after the other and the
    /// join is decided once. Returns how many tasks it created, and the instances that
    /// ended.
    pub(in crate::store) async fn end_steps(
        &self,
        tx: &mut Tx,
        ended: &[StepTaskEnded],
        now: Millis,
    ) -> Result<Moved> {
        let mut moved = Moved::default();
        if ended.is_empty() {
            return Ok(moved);
        }
        let by_task: HashMap<i64, &StepTaskEnded> = ended.iter().map(|e| (e.task_id, e)).collect();
        let mut links: Vec<(i64, i64, i32, Option<i32>)> = Vec::with_capacity(ended.len());
        for chunk in ended.chunks(CHUNK) {
            let rows: Vec<(i64, i64, i32, Option<i32>)> = on_tx!(tx, |tx, Db| {
                let mut qb = QueryBuilder::<Db>::new(
                    "SELECT task_id, instance_id, step, item FROM workflow_tasks WHERE task_id IN ",
                );
                push_ids(&mut qb, chunk.iter().map(|e| e.task_id));
                qb.build_query_as().fetch_all(&mut **tx).await?
            });
            links.extend(rows);
        }
        let mut by_instance: BTreeMap<i64, Vec<Ending<'_>>> = BTreeMap::new();
        for (task_id, instance_id, step, item) in links {
            if let Some(&e) = by_task.get(&task_id) {
                by_instance.entry(instance_id).or_default().push(Ending {
                    ended: e,
                    step: step as usize,
                    item,
                });
            }
        }
        let ids: Vec<i64> = by_instance.keys().copied().collect();
        let mut locked = self.lock_instances(tx, &ids).await?;
        for (instance_id, endings) in by_instance {
            let Some(mut moving) = locked.remove(&instance_id) else {
                continue;
            };
            // A map's elements that ended in this batch, by step: written, then their step
            // read once.
            let mut elements: BTreeMap<usize, Vec<&StepTaskEnded>> = BTreeMap::new();
            // The latest run end among this instance's endings: what a step it starts
            // waited from.
            let ended_at: Option<Millis> = endings.iter().filter_map(|e| e.ended.finished_at).max();
            for Ending { ended, step, item } in endings {
                if moving.statuses[step] != StepStatus::Running {
                    continue; // cancelled meanwhile, or already ended
                }
                match item {
                    None => end_step(&mut moving, step, ended.succeeded, ended.output.as_deref()),
                    Some(_) => elements.entry(step).or_default().push(ended),
                }
            }
            for (step, ended) in elements {
                self.end_items(tx, &mut moving, step, &ended).await?;
            }
            let created = self.move_on(tx, &mut moving, now).await?;
            if created > 0 {
                moved
                    .handoffs_ms
                    .extend(ended_at.iter().map(|&at| (now - at).max(0)));
            }
            moved.created += created;
            if moving.status != InstanceStatus::Running {
                moved
                    .instances
                    .push(self.instance_ended(tx, &moving).await?);
                if self.start_queued(tx, moving.workflow_id, now).await? {
                    moved.created += 1;
                    moved.started += 1;
                }
            }
        }
        Ok(moved)
    }

    /// What alarms and metrics are told of `moving`, which has just ended.
    async fn instance_ended(&self, tx: &mut Tx, moving: &Moving) -> Result<InstanceEnded> {
        let (workflow, app): (String, String) = on_tx!(tx, |tx, Db| {
            sqlx::query_as(
                "SELECT w.name, a.name FROM workflows w JOIN apps a ON a.id = w.app_id \
                 WHERE w.id = ?",
            )
            .bind(moving.workflow_id)
            .fetch_optional(&mut **tx)
            .await?
            .unwrap_or_default()
        });
        Ok(InstanceEnded {
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
        })
    }

    /// The instances among `ids` still running, read under their row locks (taken in id
    /// order, as one instance at a time takes them), with their graphs and steps: three
    /// statements per chunk of a batch, not three per instance — at 1,000 step transitions
    /// a second the report's transaction held its locks that much longer.
    async fn lock_instances(&self, tx: &mut Tx, ids: &[i64]) -> Result<BTreeMap<i64, Moving>> {
        let lock = if self.is_mysql() { " FOR UPDATE" } else { "" };
        let mut out = BTreeMap::new();
        let mut graphs: HashMap<(i64, i32), Graph> = HashMap::new();
        let mut sorted = ids.to_vec();
        sorted.sort_unstable();
        for chunk in sorted.chunks(CHUNK) {
            type Row = (i64, i32, i64, String, Option<String>);
            let rows: Vec<Row> = on_tx!(tx, |tx, Db| {
                let mut qb = QueryBuilder::<Db>::new(
                    "SELECT id, version, workflow_id, status, input FROM workflow_instances \
                     WHERE id IN ",
                );
                push_ids(&mut qb, chunk.iter().copied());
                qb.push(" ORDER BY id").push(lock);
                qb.build_query_as().fetch_all(&mut **tx).await?
            });
            let running: Vec<Row> = rows
                .into_iter()
                .filter(|r| r.3 == InstanceStatus::Running.as_str())
                .collect();
            if running.is_empty() {
                continue;
            }
            for &(_, version, workflow_id, _, _) in &running {
                if let std::collections::hash_map::Entry::Vacant(slot) =
                    graphs.entry((workflow_id, version))
                {
                    slot.insert(self.graph_of(tx, workflow_id, version).await?);
                }
            }
            let steps: Vec<(i64, i32, String, Option<String>)> = on_tx!(tx, |tx, Db| {
                let mut qb = QueryBuilder::<Db>::new(
                    "SELECT instance_id, step, status, output FROM workflow_steps \
                     WHERE instance_id IN ",
                );
                push_ids(&mut qb, running.iter().map(|r| r.0));
                qb.build_query_as().fetch_all(&mut **tx).await?
            });
            let mut by_instance: HashMap<i64, Vec<(i32, String, Option<String>)>> = HashMap::new();
            for (instance, step, status, output) in steps {
                by_instance
                    .entry(instance)
                    .or_default()
                    .push((step, status, output));
            }
            for (id, version, workflow_id, status, input) in running {
                let graph = graphs[&(workflow_id, version)].clone();
                let rows = by_instance.remove(&id).unwrap_or_default();
                let moving = moving(id, workflow_id, graph, &status, input, rows)?;
                out.insert(id, moving);
            }
        }
        Ok(out)
    }

    /// The graph of `workflow_id`'s `version` (versions never change).
    async fn graph_of(&self, tx: &mut Tx, workflow_id: i64, version: i32) -> Result<Graph> {
        let steps_text: String = on_tx!(tx, |tx, Db| {
            sqlx::query_scalar(
                "SELECT steps FROM workflow_versions WHERE workflow_id = ? AND version = ?",
            )
            .bind(workflow_id)
            .bind(version)
            .fetch_one(&mut **tx)
            .await?
        });
        let specs: Vec<StepSpec> = parse_json(&steps_text)?;
        Graph::new(&specs).map_err(Error::Corrupt)
    }

    /// An instance still running, read under its row lock, with its graph and steps.
    pub(super) async fn lock_instance(&self, tx: &mut Tx, id: i64) -> Result<Option<Moving>> {
        Ok(self
            .lock_any_instance(tx, id)
            .await?
            .filter(|m| m.status == InstanceStatus::Running))
    }

    /// Instance `id` in whatever status, read under its row lock, with its graph and steps.
    pub(super) async fn lock_any_instance(&self, tx: &mut Tx, id: i64) -> Result<Option<Moving>> {
        let lock = if self.is_mysql() { " FOR UPDATE" } else { "" };
        let row: Option<(i32, i64, String, Option<String>)> = on_tx!(tx, |tx, Db| {
            sqlx::query_as(sqlx::AssertSqlSafe(format!(
                "SELECT i.version, i.workflow_id, i.status, i.input FROM workflow_instances i \
                 WHERE i.id = ?{lock}"
            )))
            .bind(id)
            .fetch_optional(&mut **tx)
            .await?
        });
        let Some((version, workflow_id, status, input)) = row else {
            return Ok(None);
        };
        let graph = self.graph_of(tx, workflow_id, version).await?;
        let rows: Vec<(i32, String, Option<String>)> = on_tx!(tx, |tx, Db| {
            sqlx::query_as("SELECT step, status, output FROM workflow_steps WHERE instance_id = ?")
                .bind(id)
                .fetch_all(&mut **tx)
                .await?
        });
        Ok(Some(moving(id, workflow_id, graph, &status, input, rows)?))
    }

    /// Elements of a mapped step ended: kept, and when the last one has, the step ends with
    /// the elements' outputs in order (failed if any element failed).
    async fn end_items(
        &self,
        tx: &mut Tx,
        moving: &mut Moving,
        step: usize,
        ended: &[&StepTaskEnded],
    ) -> Result<()> {
        for e in ended {
            let status = if e.succeeded {
                StepStatus::Succeeded
            } else {
                StepStatus::Failed
            };
            let output = match e.output.as_deref().map(parse_output) {
                Some(Ok(v)) => Some(to_json(&v)),
                _ => None,
            };
            on_tx!(tx, |tx, Db| {
                sqlx::query(
                    "UPDATE workflow_tasks SET status = ?, output = ? WHERE task_id = ? AND status IS NULL",
                )
                .bind(status.as_str())
                .bind(output.as_deref())
                .bind(e.task_id)
                .execute(&mut **tx)
                .await?;
            });
        }
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
        mut tasks: Vec<StepTask>,
    ) -> Result<usize> {
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
                    Next::Start(i) => self.start_step(moving, i, now, &mut tasks),
                }
            }
        }
        let created = tasks.len();
        if !tasks.is_empty() {
            let new: Vec<NewTask> = tasks.iter().map(|(t, _, _)| t.clone()).collect();
            let first = self.insert_new_tasks(tx, &new, now).await?;
            let links: Vec<(i64, usize, Option<i32>)> = tasks
                .iter()
                .enumerate()
                .map(|(k, (_, step, item))| (first + k as i64, *step, *item))
                .collect();
            on_tx!(tx, |tx, Db| {
                for chunk in links.chunks(CHUNK) {
                    let mut qb = QueryBuilder::<Db>::new(
                        "INSERT INTO workflow_tasks (task_id, instance_id, step, item) ",
                    );
                    qb.push_values(chunk, |mut b, (task, step, item)| {
                        b.push_bind(*task)
                            .push_bind(moving.id)
                            .push_bind(*step as i32)
                            .push_bind(*item);
                    });
                    qb.build().execute(&mut **tx).await?;
                }
            });
            // Each started step's first task, for the instance's view.
            for change in moving.changed.iter_mut() {
                if change.started {
                    change.task_id = links
                        .iter()
                        .find(|(_, step, _)| *step == change.step)
                        .map(|(task, _, _)| *task);
                }
            }
        }
        self.write_steps(tx, moving, now).await?;
        if let Some(end) = moving.graph.outcome(&moving.statuses) {
            moving.status = end;
            let output = moving.graph.instance_output(&moving.outputs);
            on_tx!(tx, |tx, Db| {
                sqlx::query(
                    "UPDATE workflow_instances SET status = ?, output = ?, finished_at = ? WHERE id = ?",
                )
                .bind(end.as_str())
                .bind(to_json(&output))
                .bind(now)
                .bind(moving.id)
                .execute(&mut **tx)
                .await?;
            });
        }
        Ok(created)
    }

    /// Step `i` starts: its task (or one per element of its predecessor's array) goes into
    /// `tasks`; a map over anything but an array of at most 10,000 fails the step instead.
    fn start_step(&self, moving: &mut Moving, i: usize, now: Millis, tasks: &mut Vec<StepTask>) {
        let step = moving.graph.steps()[i].clone();
        let new_task = |payload: Value| step_task(&step, payload, now);
        if !step.map {
            let payload = moving
                .graph
                .payload(i, &moving.input, &moving.outputs, None);
            tasks.push((new_task(payload), i, None));
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
        match map_items(source.as_ref()) {
            Ok(items) if !items.is_empty() => {
                for (k, item) in items.iter().enumerate() {
                    let payload =
                        moving
                            .graph
                            .payload(i, &moving.input, &moving.outputs, Some((k, item)));
                    tasks.push((new_task(payload), i, Some(k as i32)));
                }
                moving.changed.push(StepChange {
                    step: i,
                    status: StepStatus::Running,
                    task_id: None,
                    output: None,
                    items: Some(items.len() as i32),
                    message: None,
                    started: true,
                    finished: false,
                });
            }
            // Nothing to map: done at once, with no outputs.
            Ok(_) => {
                moving.statuses[i] = StepStatus::Succeeded;
                moving.outputs[i] = Some(Value::Array(Vec::new()));
                moving.changed.push(StepChange {
                    step: i,
                    status: StepStatus::Succeeded,
                    task_id: None,
                    output: Some("[]".into()),
                    items: Some(0),
                    message: None,
                    started: true,
                    finished: true,
                });
            }
            Err(reason) => {
                moving.statuses[i] = StepStatus::Failed;
                moving.changed.push(StepChange {
                    step: i,
                    status: StepStatus::Failed,
                    task_id: None,
                    output: None,
                    items: None,
                    message: Some(reason),
                    started: true,
                    finished: true,
                });
            }
        }
    }

    /// Writes each changed step (the last change of a step wins; a started-and-ended step
    /// keeps both times).
    async fn write_steps(&self, tx: &mut Tx, moving: &mut Moving, now: Millis) -> Result<()> {
        for c in moving.changed.drain(..) {
            on_tx!(tx, |tx, Db| {
                let mut qb = QueryBuilder::<Db>::new("UPDATE workflow_steps SET status = ");
                qb.push_bind(c.status.as_str());
                if let Some(task) = c.task_id {
                    qb.push(", task_id = ").push_bind(task);
                }
                if let Some(output) = &c.output {
                    qb.push(", output = ").push_bind(output.clone());
                }
                if let Some(items) = c.items {
                    qb.push(", items = ").push_bind(items);
                }
                if let Some(message) = &c.message {
                    qb.push(", message = ").push_bind(message.clone());
                }
                if c.started {
                    qb.push(", started_at = ").push_bind(now);
                }
                if c.finished {
                    qb.push(", finished_at = ").push_bind(now);
                }
                qb.push(" WHERE instance_id = ")
                    .push_bind(moving.id)
                    .push(" AND step = ")
                    .push_bind(c.step as i32);
                qb.build().execute(&mut **tx).await?;
            });
        }
        Ok(())
    }
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
