//! An instance being moved on, inside a transaction: read under its row lock with its
//! graph and steps, changed in memory by [`super::advance`], and written back — a whole
//! report batch's instances in a few statements, not a few per instance: the report's
//! transaction holds its locks (and the steps it starts wait) that much less.

use std::collections::HashSet;

use serde_json::Value;

use super::super::*;
use crate::workflow::{Graph, InstanceStatus, StepSpec, StepStatus};

/// How many workflow versions' steps a node keeps before it starts over.
const VERSIONS_KEPT: usize = 1024;

/// How many step tasks' places a generation of [`Placements`] holds.
const PLACEMENTS_KEPT: usize = 65_536;

/// Where a workflow step's task is: its instance, its step, and its element if the step
/// is a map. Written once with the task and never changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::store) struct Placement {
    pub(in crate::store) instance: i64,
    pub(in crate::store) step: usize,
    pub(in crate::store) item: Option<i32>,
}

/// The places of step tasks this node created (after their commit) or read: a report
/// batch ending them needs no read of `workflow_tasks`, neither to split the batch between
/// instances nor in its transaction. Two generations: when the newer one is full it
/// becomes the older, and the older is forgotten, so what was placed last is kept. Safe to
/// keep because a task id is never reused and its place never changes.
#[derive(Default)]
pub(in crate::store) struct Placements {
    newer: HashMap<i64, Placement>,
    older: HashMap<i64, Placement>,
    /// Whether this node has met a workflow step at all: until it has, a batch of reports
    /// has no instance to split by, and looks for none.
    met_steps: bool,
}

impl Placements {
    fn get(&self, task_id: i64) -> Option<Placement> {
        self.newer
            .get(&task_id)
            .or_else(|| self.older.get(&task_id))
            .copied()
    }

    fn insert(&mut self, task_id: i64, place: Placement) {
        self.met_steps = true;
        if self.newer.len() >= PLACEMENTS_KEPT {
            self.older = std::mem::take(&mut self.newer);
        }
        self.newer.insert(task_id, place);
    }
}

/// An instance being moved on: its graph, each step's status and output, and what
/// changed (written by [`Store::write_moves`]).
pub(super) struct Moving {
    pub(super) id: i64,
    pub(super) workflow_id: i64,
    pub(super) graph: Graph,
    pub(super) input: Value,
    pub(super) statuses: Vec<StepStatus>,
    pub(super) outputs: Vec<Option<Value>>,
    pub(super) changed: Vec<StepChange>,
    /// Tasks to create for the steps it started.
    pub(super) tasks: Vec<StepTask>,
    /// The tasks created for it, placed: for [`Store::remember_placements`] once they
    /// commit.
    pub(super) placed: Vec<(i64, Placement)>,
    pub(super) status: InstanceStatus,
    /// The instance's output, once it has ended in this move (its end is to be written).
    pub(super) ending: Option<Value>,
}

impl Moving {
    /// A running instance whose steps are all pending.
    pub(super) fn fresh(id: i64, workflow_id: i64, graph: Graph, input: Value) -> Moving {
        let n = graph.steps().len();
        Moving {
            id,
            workflow_id,
            graph,
            input,
            statuses: vec![StepStatus::Pending; n],
            outputs: vec![None; n],
            changed: Vec::new(),
            tasks: Vec::new(),
            placed: Vec::new(),
            status: InstanceStatus::Running,
            ending: None,
        }
    }
}

/// A task to create for a step: the task, its step and its element if the step is a map.
pub(super) type StepTask = (NewTask, usize, Option<i32>);

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
    /// Step `step`'s row, pending: how a fresh instance's steps are first written.
    pub(super) fn pending(step: usize) -> StepChange {
        StepChange {
            step,
            status: StepStatus::Pending,
            task_id: None,
            output: None,
            items: None,
            message: None,
            started: false,
            finished: false,
        }
    }

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

    /// This change followed by `later` to the same step, as one: the later status, each
    /// field the later one sets, and both times (a step started and ended in one move).
    fn then(mut self, later: StepChange) -> StepChange {
        self.status = later.status;
        self.task_id = later.task_id.or(self.task_id);
        self.output = later.output.or(self.output);
        self.items = later.items.or(self.items);
        self.message = later.message.or(self.message);
        self.started |= later.started;
        self.finished |= later.finished;
        self
    }
}

/// An instance as read: its graph, and its steps' rows (step, status, output).
fn read(
    id: i64,
    workflow_id: i64,
    graph: Graph,
    status: &str,
    input: Option<String>,
    rows: Vec<(i32, String, Option<String>)>,
) -> Result<Moving> {
    let input = input
        .as_deref()
        .map(parse_json)
        .transpose()?
        .unwrap_or(Value::Null);
    let mut moving = Moving::fresh(id, workflow_id, graph, input);
    moving.status = parse(status)?;
    let n = moving.statuses.len();
    for (step, status, output) in rows {
        let i = step as usize;
        if i < n {
            moving.statuses[i] = parse(&status)?;
            moving.outputs[i] = output.as_deref().map(parse_json).transpose()?;
        }
    }
    Ok(moving)
}

impl Store {
    /// The instances among `ids` still running, read under their row locks (taken in id
    /// order, as one instance at a time takes them), with their graphs and steps: three
    /// statements per chunk of a batch, not three per instance.
    pub(super) async fn lock_instances(
        &self,
        tx: &mut Tx,
        ids: &[i64],
    ) -> Result<BTreeMap<i64, Moving>> {
        self.lock_instances_in(tx, ids, true).await
    }

    /// An instance still running, read under its row lock, with its graph and steps.
    pub(super) async fn lock_instance(&self, tx: &mut Tx, id: i64) -> Result<Option<Moving>> {
        Ok(self.lock_instances_in(tx, &[id], true).await?.remove(&id))
    }

    /// Instance `id` in whatever status, read under its row lock, with its graph and steps.
    pub(super) async fn lock_any_instance(&self, tx: &mut Tx, id: i64) -> Result<Option<Moving>> {
        Ok(self.lock_instances_in(tx, &[id], false).await?.remove(&id))
    }

    /// The instances among `ids` (only those still running with `running_only`), locked.
    async fn lock_instances_in(
        &self,
        tx: &mut Tx,
        ids: &[i64],
        running_only: bool,
    ) -> Result<BTreeMap<i64, Moving>> {
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
            let wanted: Vec<Row> = rows
                .into_iter()
                .filter(|r| !running_only || r.3 == InstanceStatus::Running.as_str())
                .collect();
            if wanted.is_empty() {
                continue;
            }
            for &(_, version, workflow_id, _, _) in &wanted {
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
                push_ids(&mut qb, wanted.iter().map(|r| r.0));
                qb.build_query_as().fetch_all(&mut **tx).await?
            });
            let mut by_instance: HashMap<i64, Vec<(i32, String, Option<String>)>> = HashMap::new();
            for (instance, step, status, output) in steps {
                by_instance
                    .entry(instance)
                    .or_default()
                    .push((step, status, output));
            }
            for (id, version, workflow_id, status, input) in wanted {
                let graph = graphs[&(workflow_id, version)].clone();
                let rows = by_instance.remove(&id).unwrap_or_default();
                out.insert(id, read(id, workflow_id, graph, &status, input, rows)?);
            }
        }
        Ok(out)
    }

    /// The graph of `workflow_id`'s `version` (versions never change: read once per
    /// node, see `Store::versions`).
    pub(super) async fn graph_of(
        &self,
        tx: &mut Tx,
        workflow_id: i64,
        version: i32,
    ) -> Result<Graph> {
        let key = (workflow_id, version);
        let specs = match self.known_version(key) {
            Some(specs) => specs,
            None => {
                let steps_text: String = on_tx!(tx, |tx, Db| {
                    sqlx::query_scalar(
                        "SELECT steps FROM workflow_versions WHERE workflow_id = ? AND version = ?",
                    )
                    .bind(workflow_id)
                    .bind(version)
                    .fetch_one(&mut **tx)
                    .await?
                });
                self.remember_version(key, parse_json(&steps_text)?)
            }
        };
        Graph::new(&specs).map_err(Error::Corrupt)
    }

    /// The steps of a version read before on this node.
    pub(super) fn known_version(&self, key: (i64, i32)) -> Option<Arc<Vec<StepSpec>>> {
        let versions = self.versions.lock().unwrap_or_else(|e| e.into_inner());
        versions.get(&key).cloned()
    }

    /// Keeps the steps of a version just read (forgetting all once [`VERSIONS_KEPT`]).
    pub(super) fn remember_version(
        &self,
        key: (i64, i32),
        specs: Vec<StepSpec>,
    ) -> Arc<Vec<StepSpec>> {
        let specs = Arc::new(specs);
        let mut versions = self.versions.lock().unwrap_or_else(|e| e.into_inner());
        if versions.len() >= VERSIONS_KEPT {
            versions.clear();
        }
        versions.insert(key, specs.clone());
        specs
    }

    /// The places this node knows of `task_ids`' tasks, and the ids it does not know;
    /// `None` if it has met no workflow step yet (so none of them is likely to be one).
    pub(in crate::store) fn known_placements(
        &self,
        task_ids: &[i64],
    ) -> Option<(HashMap<i64, Placement>, Vec<i64>)> {
        let placements = self.placements.lock().unwrap_or_else(|e| e.into_inner());
        if !placements.met_steps {
            return None;
        }
        let mut known = HashMap::with_capacity(task_ids.len());
        let mut unknown = Vec::new();
        for &id in task_ids {
            match placements.get(id) {
                Some(place) => {
                    known.insert(id, place);
                }
                None => unknown.push(id),
            }
        }
        Some((known, unknown))
    }

    /// Keeps the places of step tasks that exist: read from the database, or created by a
    /// transaction that has committed (one rolled back may leave its ids to be used again,
    /// on SQLite).
    pub(in crate::store) fn remember_placements(
        &self,
        placed: impl IntoIterator<Item = (i64, Placement)>,
    ) {
        let mut placements = self.placements.lock().unwrap_or_else(|e| e.into_inner());
        for (task_id, place) in placed {
            placements.insert(task_id, place);
        }
    }

    /// Reads the places of `task_ids`' tasks that are workflow steps (in `tx` when given),
    /// and keeps them.
    pub(in crate::store) async fn read_placements(
        &self,
        mut tx: Option<&mut Tx>,
        task_ids: &[i64],
    ) -> Result<HashMap<i64, Placement>> {
        type Row = (i64, i64, i32, Option<i32>);
        let mut out = HashMap::with_capacity(task_ids.len());
        const SELECT: &str =
            "SELECT task_id, instance_id, step, item FROM workflow_tasks WHERE task_id IN ";
        for chunk in task_ids.chunks(CHUNK) {
            let rows: Vec<Row> = match tx.as_deref_mut() {
                Some(tx) => on_tx!(tx, |tx, Db| {
                    let mut qb = QueryBuilder::<Db>::new(SELECT);
                    push_ids(&mut qb, chunk.iter().copied());
                    qb.build_query_as().fetch_all(&mut **tx).await?
                }),
                None => on_pool!(self, |pool, Db| {
                    let mut qb = QueryBuilder::<Db>::new(SELECT);
                    push_ids(&mut qb, chunk.iter().copied());
                    qb.build_query_as().fetch_all(pool).await?
                }),
            };
            out.extend(rows.into_iter().map(|(task, instance, step, item)| {
                let step = step as usize;
                (
                    task,
                    Placement {
                        instance,
                        step,
                        item,
                    },
                )
            }));
        }
        self.remember_placements(out.iter().map(|(&t, &p)| (t, p)));
        Ok(out)
    }

    /// Writes what moving `moves` changed: their tasks created and linked to their steps
    /// (one insert each per chunk, for all of them), their changed steps (one upsert per
    /// chunk; the last change of a step wins, a started-and-ended step keeps both times)
    /// and the ends of those that ended (one update per chunk). With `claim`, the tasks
    /// are created claimed by that lease where they may be, and returned for its wheel.
    pub(super) async fn write_moves(
        &self,
        tx: &mut Tx,
        moves: &mut [Moving],
        now: Millis,
        claim: Option<NodeLease>,
    ) -> Result<Vec<DueTask>> {
        let claimed = self.create_step_tasks(tx, moves, now, claim).await?;
        self.write_steps(tx, moves, now).await?;
        let ends: Vec<(i64, &'static str, String)> = moves
            .iter_mut()
            .filter_map(|m| {
                let output = m.ending.as_ref()?;
                Some((m.id, m.status.as_str(), to_json(output)))
            })
            .collect();
        on_tx!(tx, |tx, Db| {
            for chunk in ends.chunks(CHUNK) {
                let mut qb = QueryBuilder::<Db>::new("UPDATE workflow_instances SET status = ");
                push_case(
                    &mut qb,
                    "id",
                    chunk.iter().map(|(id, status, _)| (*id, *status)),
                );
                qb.push(", output = ");
                push_case(
                    &mut qb,
                    "id",
                    chunk.iter().map(|(id, _, output)| (*id, output.clone())),
                );
                qb.push(", finished_at = ")
                    .push_bind(now)
                    .push(" WHERE id IN ");
                push_ids(&mut qb, chunk.iter().map(|(id, _, _)| *id));
                qb.build().execute(&mut **tx).await?;
            }
        });
        Ok(claimed)
    }

    /// Creates `moves`' tasks and links each to its instance, step and element; each
    /// started step's change gets its first task, for the instance's view. With `claim`
    /// (while still this node's lease), tasks of jobs without a concurrency bound are
    /// created claimed by it, as an API create due inside the window is: they go straight
    /// into the node's wheel after the commit, with no scan between a step's end and the
    /// next one's start. They are returned.
    async fn create_step_tasks(
        &self,
        tx: &mut Tx,
        moves: &mut [Moving],
        now: Millis,
        claim: Option<NodeLease>,
    ) -> Result<Vec<DueTask>> {
        let mut new: Vec<NewTask> = Vec::new();
        let mut links: Vec<(i64, usize, Option<i32>)> = Vec::new();
        for m in moves.iter_mut() {
            for (task, step, item) in m.tasks.drain(..) {
                new.push(task);
                links.push((m.id, step, item));
            }
        }
        if new.is_empty() {
            return Ok(Vec::new());
        }
        let owner = match claim {
            Some(lease) if self.holds_lease(tx, lease).await? => Some(lease),
            _ => None,
        };
        let claimable: Vec<bool> = match owner {
            Some(_) => {
                let limited: HashSet<i64> = self
                    .limited_jobs(tx)
                    .await?
                    .into_iter()
                    .map(|job| job.id)
                    .collect();
                new.iter().map(|t| !limited.contains(&t.job_id)).collect()
            }
            None => Vec::new(),
        };
        let first = self
            .insert_new_tasks(tx, &new, now, owner.map(|l| (l, &claimable[..])))
            .await?;
        on_tx!(tx, |tx, Db| {
            for (chunk_no, chunk) in links.chunks(CHUNK).enumerate() {
                let base = first + (chunk_no * CHUNK) as i64;
                let mut qb = QueryBuilder::<Db>::new(
                    "INSERT INTO workflow_tasks (task_id, instance_id, step, item) ",
                );
                qb.push_values(
                    chunk.iter().enumerate(),
                    |mut b, (k, (instance, step, item))| {
                        b.push_bind(base + k as i64)
                            .push_bind(*instance)
                            .push_bind(*step as i32)
                            .push_bind(*item);
                    },
                );
                qb.build().execute(&mut **tx).await?;
            }
        });
        let mut first_of: HashMap<(i64, usize), i64> = HashMap::new();
        let mut placed: HashMap<i64, Vec<(i64, Placement)>> = HashMap::new();
        for (k, &(instance, step, item)) in links.iter().enumerate() {
            let task_id = first + k as i64;
            first_of.entry((instance, step)).or_insert(task_id);
            let place = Placement {
                instance,
                step,
                item,
            };
            placed.entry(instance).or_default().push((task_id, place));
        }
        for m in moves.iter_mut() {
            for change in m.changed.iter_mut().filter(|c| c.started) {
                change.task_id = first_of.get(&(m.id, change.step)).copied();
            }
            m.placed.extend(placed.remove(&m.id).unwrap_or_default());
        }
        let Some(lease) = owner else {
            return Ok(Vec::new());
        };
        Ok(new
            .into_iter()
            .enumerate()
            .filter(|(k, _)| claimable[*k])
            .map(|(k, t)| DueTask {
                task_id: first + k as i64,
                job_id: t.job_id,
                kind: t.kind,
                due_at: t.due_at,
                attempt: 1,
                priority: t.priority,
                payload: t.payload,
                params: t.params,
                epoch: lease.epoch,
                generation: 0,
                waiting_since: None,
                traceparent: t.traceparent,
                key: t.key,
            })
            .collect())
    }

    /// Writes `moves`' changed steps: each step's changes folded into one row, upserted
    /// onto the row written when the instance started (or written first, at its start).
    /// Each move's `changed` is left holding its rows as written.
    async fn write_steps(&self, tx: &mut Tx, moves: &mut [Moving], now: Millis) -> Result<()> {
        let mut rows: BTreeMap<(i64, usize), StepChange> = BTreeMap::new();
        for m in moves.iter_mut() {
            for c in m.changed.drain(..) {
                let key = (m.id, c.step);
                let row = match rows.remove(&key) {
                    Some(earlier) => earlier.then(c),
                    None => c,
                };
                rows.insert(key, row);
            }
        }
        let rows: Vec<((i64, usize), StepChange)> = rows.into_iter().collect();
        let tail = if self.is_mysql() {
            " ON DUPLICATE KEY UPDATE status = VALUES(status), \
             task_id = COALESCE(VALUES(task_id), task_id), \
             output = COALESCE(VALUES(output), output), items = COALESCE(VALUES(items), items), \
             message = COALESCE(VALUES(message), message), \
             started_at = COALESCE(VALUES(started_at), started_at), \
             finished_at = COALESCE(VALUES(finished_at), finished_at)"
        } else {
            " ON CONFLICT(instance_id, step) DO UPDATE SET status = excluded.status, \
             task_id = COALESCE(excluded.task_id, task_id), \
             output = COALESCE(excluded.output, output), items = COALESCE(excluded.items, items), \
             message = COALESCE(excluded.message, message), \
             started_at = COALESCE(excluded.started_at, started_at), \
             finished_at = COALESCE(excluded.finished_at, finished_at)"
        };
        on_tx!(tx, |tx, Db| {
            for chunk in rows.chunks(CHUNK) {
                let mut qb = QueryBuilder::<Db>::new(
                    "INSERT INTO workflow_steps (instance_id, step, status, task_id, output, items, \
                     message, started_at, finished_at) ",
                );
                qb.push_values(chunk, |mut b, ((instance, step), c)| {
                    b.push_bind(*instance)
                        .push_bind(*step as i32)
                        .push_bind(c.status.as_str())
                        .push_bind(c.task_id)
                        .push_bind(c.output.as_deref())
                        .push_bind(c.items)
                        .push_bind(c.message.as_deref())
                        .push_bind(c.started.then_some(now))
                        .push_bind(c.finished.then_some(now));
                });
                qb.push(tail);
                qb.build().execute(&mut **tx).await?;
            }
        });
        // What was written stays with each instance, one change per step: a start answers
        // with it (`Store::start_instance`).
        let at: HashMap<i64, usize> = moves.iter().enumerate().map(|(k, m)| (m.id, k)).collect();
        for ((instance, _), change) in rows {
            if let Some(&k) = at.get(&instance) {
                moves[k].changed.push(change);
            }
        }
        Ok(())
    }
}
