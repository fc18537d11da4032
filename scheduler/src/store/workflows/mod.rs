//! Workflows (SPEC §10): definitions by version, instances and their steps — started,
//! read, listed, cancelled. What moves an instance on when a step's task ends is in
//! [`advance`], in the transaction of the report (or ack) that ended it.

use serde_json::Value;

use super::*;
use crate::schedule::{Misfire, Schedule};
use crate::workflow::{Graph, InstanceStatus, Overlap, StepSpec, StepStatus};

mod advance;
mod fires;
mod moving;
mod read;
mod retry;

pub use fires::FiresDone;
use moving::{Moving, StepChange};
pub(super) use moving::{Placement, Placements};

/// A workflow at its current version.
#[derive(Debug, Clone, PartialEq)]
pub struct Workflow {
    pub id: i64,
    pub name: String,
    pub app_id: i64,
    /// The app's name.
    pub app: String,
    pub version: i32,
    pub steps: Vec<StepSpec>,
    pub enabled: bool,
    pub timing: Timing,
    /// Its next scheduled fire (`None`: no schedule, or disabled).
    pub next_fire_at: Option<Millis>,
    pub created_at: Millis,
    pub updated_at: Millis,
}

/// When a workflow starts on its own: its schedule (as jobs'), what a misfire does, and
/// what a fire does while an instance runs.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Timing {
    pub schedule: Option<Schedule>,
    pub misfire: Misfire,
    pub overlap: Overlap,
}

/// A workflow's timing as written, with the next fire time the use case computed from it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Scheduled {
    pub timing: Timing,
    pub next_fire_at: Option<Millis>,
}

/// An instance of a workflow, with its steps in the order of its version.
#[derive(Debug, Clone, PartialEq)]
pub struct Instance {
    pub id: i64,
    pub workflow_id: i64,
    pub version: i32,
    pub status: InstanceStatus,
    pub input: Value,
    pub output: Option<Value>,
    pub key: Option<String>,
    pub created_at: Millis,
    pub finished_at: Option<Millis>,
    pub steps: Vec<InstanceStep>,
}

/// A step of an instance.
#[derive(Debug, Clone, PartialEq)]
pub struct InstanceStep {
    pub name: String,
    /// As the instance's version defines the step: its job, predecessors and `map`.
    pub job_id: i64,
    pub after: Vec<String>,
    pub map: bool,
    pub status: StepStatus,
    /// The step's task; for a mapped step, that of its first element.
    pub task_id: Option<i64>,
    /// Every run of the step's tasks, oldest first.
    pub runs: Vec<i64>,
    pub output: Option<Value>,
    /// A mapped step's elements, by outcome.
    pub items: Option<ItemCounts>,
    /// Why it failed, when the reason is the workflow's (a map over a non-array, an
    /// output too large), not its task's.
    pub message: Option<String>,
    pub started_at: Option<Millis>,
    pub finished_at: Option<Millis>,
}

/// A mapped step's elements: how many, and how many ended which way.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ItemCounts {
    pub total: i64,
    pub succeeded: i64,
    pub failed: i64,
    pub running: i64,
}

/// An instance that ended in a batch's transaction: what alarms and metrics are told.
#[derive(Debug, Clone, PartialEq)]
pub struct InstanceEnded {
    pub id: i64,
    pub workflow: String,
    pub app: String,
    pub status: InstanceStatus,
    /// The steps that failed, by name.
    pub failed_steps: Vec<String>,
}

/// A version of a workflow, to start an instance of.
pub(super) struct Version<'a> {
    pub workflow_id: i64,
    pub version: i32,
    pub steps: &'a [StepSpec],
    /// When the workflow's row last changed as the starter read it, if it read it before
    /// its transaction (an API start, perhaps with the workflow as it read it for an
    /// earlier start): the instance is created only if the row, read again in the start's
    /// transaction, is still so — this version, enabled, unchanged — else the start comes
    /// to [`Started::Changed`]. (A change committed after that read and before the start's
    /// commit is ordered after the start, as with any read before a write.)
    pub read_at_change: Option<Millis>,
}

/// What a start came to: a new instance, or the one its key already named.
pub(super) enum Started {
    /// A new instance as written: how many tasks its first steps got, those created
    /// claimed, and where each is (remembered once they commit).
    New {
        instance: Box<Instance>,
        tasks: usize,
        claimed: Vec<DueTask>,
        placed: Vec<(i64, Placement)>,
    },
    Known(i64),
    /// The workflow is no longer as [`Version::read_at_change`] says: nothing was started.
    Changed,
}

/// What [`Store::start_instance`] did.
#[derive(Debug)]
pub struct InstanceStart {
    pub instance: Instance,
    /// Whether it was created (not an instance started before with the same key).
    pub created: bool,
    /// Its first steps' tasks created claimed by the caller's lease, for its wheel.
    pub claimed: Vec<DueTask>,
    /// How many of its first steps' tasks were created unclaimed, for a scan.
    pub unclaimed: usize,
}

/// A task of kind `step` whose attempt ended for good, as the report batch decided it.
#[derive(Debug, Clone)]
pub(super) struct StepTaskEnded {
    pub task_id: i64,
    pub succeeded: bool,
    /// The ending run's output, as the executor (or consumer) gave it.
    pub output: Option<String>,
    /// When that run ended.
    pub finished_at: Option<Millis>,
}

/// What a batch's step endings did: tasks created, instances ended, and the hand-offs
/// (a step's run end → its successors' tasks) they made.
#[derive(Debug, Default)]
pub(super) struct Moved {
    pub created: usize,
    /// The created tasks, placed: remembered once they commit.
    pub placed: Vec<(i64, Placement)>,
    /// Those of the created tasks that were created claimed, for the node's wheel.
    pub claimed: Vec<DueTask>,
    /// Queued instances started (`overlap: queue`) because one ended.
    pub started: usize,
    pub instances: Vec<InstanceEnded>,
    pub handoffs_ms: Vec<Millis>,
}

/// What a cancel left to its caller.
pub struct Cancelled {
    /// Tasks of the instance that were running: their runs are the caller's to kill.
    pub started: Vec<i64>,
    /// A queued instance of the workflow (`overlap: queue`) started in its place.
    pub queued_started: bool,
}

#[derive(FromRow)]
struct WorkflowRow {
    id: i64,
    name: String,
    app_id: i64,
    app: String,
    version: i32,
    steps: String,
    enabled: bool,
    schedule: Option<String>,
    misfire: String,
    overlap: String,
    next_fire_at: Option<i64>,
    created_at: i64,
    updated_at: i64,
}

impl WorkflowRow {
    fn into_workflow(self) -> Result<Workflow> {
        Ok(Workflow {
            id: self.id,
            name: self.name,
            app_id: self.app_id,
            app: self.app,
            version: self.version,
            steps: parse_json(&self.steps)?,
            enabled: self.enabled,
            timing: Timing {
                schedule: self.schedule.as_deref().map(parse_json).transpose()?,
                misfire: parse(&self.misfire)?,
                overlap: parse(&self.overlap)?,
            },
            next_fire_at: self.next_fire_at,
            created_at: self.created_at,
            updated_at: self.updated_at,
        })
    }
}

const WORKFLOW_SELECT: &str = "SELECT w.id, w.name, w.app_id, a.name AS app, w.version, v.steps, \
     w.enabled, w.schedule, w.misfire, w.overlap, w.next_fire_at, w.created_at, w.updated_at \
     FROM workflows w JOIN workflow_versions v ON v.workflow_id = w.id AND v.version = w.version \
     JOIN apps a ON a.id = w.app_id";

impl Store {
    /// Creates a workflow at version 1. `Error::Conflict` if the name is taken.
    pub async fn create_workflow(
        &self,
        name: &str,
        app_id: i64,
        steps: &[StepSpec],
        enabled: bool,
        scheduled: &Scheduled,
        now: Millis,
    ) -> Result<Workflow> {
        let mut tx = self.begin().await?;
        let t = &scheduled.timing;
        let id = on_tx!(&mut tx, |tx, Db| {
            sqlx::query(
                "INSERT INTO workflows (name, app_id, version, enabled, schedule, misfire, \
                 overlap, next_fire_at, created_at, updated_at) VALUES (?, ?, 1, ?, ?, ?, ?, ?, ?, ?)",
            )
            .bind(name)
            .bind(app_id)
            .bind(enabled)
            .bind(t.schedule.as_ref().map(to_json))
            .bind(t.misfire.as_str())
            .bind(t.overlap.as_str())
            .bind(scheduled.next_fire_at)
            .bind(now)
            .bind(now)
            .execute(&mut **tx)
            .await
            .map_err(|e| match Error::from(e) {
                Error::Conflict(_) => Error::Conflict(format!("workflow `{name}` already exists")),
                other => other,
            })?
            .insert_id()
        });
        self.insert_version(&mut tx, id, 1, steps, now).await?;
        tx.commit().await?;
        self.get_workflow(id).await
    }

    /// Gives a workflow new steps as its next version; running instances keep theirs.
    pub async fn update_workflow(
        &self,
        id: i64,
        steps: Option<&[StepSpec]>,
        enabled: Option<bool>,
        scheduled: Option<&Scheduled>,
        now: Millis,
    ) -> Result<Workflow> {
        let mut tx = self.begin().await?;
        // Read under the row's lock (SQLite: the write lock `begin` took): two changes at
        // once apply one after the other, the second to what the first wrote. Read before
        // the transaction, a change of schedule wrote back the version it had read, over
        // a change of steps made meanwhile.
        let lock = if self.is_mysql() { " FOR UPDATE" } else { "" };
        let row: Option<WorkflowRow> = on_tx!(&mut tx, |tx, Db| {
            sqlx::query_as(sqlx::AssertSqlSafe(format!(
                "{WORKFLOW_SELECT} WHERE w.id = ?{lock}"
            )))
            .bind(id)
            .fetch_optional(&mut **tx)
            .await?
        });
        let current = row
            .ok_or_else(|| Error::NotFound(format!("workflow {id}")))?
            .into_workflow()?;
        if let Some(sch) = scheduled {
            let t = &sch.timing;
            on_tx!(&mut tx, |tx, Db| {
                sqlx::query(
                    "UPDATE workflows SET schedule = ?, misfire = ?, overlap = ?, next_fire_at = ? \
                     WHERE id = ?",
                )
                .bind(t.schedule.as_ref().map(to_json))
                .bind(t.misfire.as_str())
                .bind(t.overlap.as_str())
                .bind(sch.next_fire_at)
                .bind(id)
                .execute(&mut **tx)
                .await?;
            });
        }
        let version = match steps {
            Some(steps) if steps != current.steps.as_slice() => {
                let version = current.version + 1;
                self.insert_version(&mut tx, id, version, steps, now)
                    .await?;
                version
            }
            _ => current.version,
        };
        on_tx!(&mut tx, |tx, Db| {
            sqlx::query(
                "UPDATE workflows SET version = ?, enabled = ?, updated_at = ? WHERE id = ?",
            )
            .bind(version)
            .bind(enabled.unwrap_or(current.enabled))
            .bind(now)
            .bind(id)
            .execute(&mut **tx)
            .await?;
        });
        tx.commit().await?;
        self.get_workflow(id).await
    }

    async fn insert_version(
        &self,
        tx: &mut Tx,
        workflow_id: i64,
        version: i32,
        steps: &[StepSpec],
        now: Millis,
    ) -> Result<()> {
        on_tx!(tx, |tx, Db| {
            sqlx::query(
                "INSERT INTO workflow_versions (workflow_id, version, steps, created_at) \
                 VALUES (?, ?, ?, ?)",
            )
            .bind(workflow_id)
            .bind(version)
            .bind(to_json(&steps))
            .bind(now)
            .execute(&mut **tx)
            .await?;
        });
        Ok(())
    }

    pub async fn get_workflow(&self, id: i64) -> Result<Workflow> {
        let row: Option<WorkflowRow> = on_pool!(self, |pool, Db| {
            sqlx::query_as(sqlx::AssertSqlSafe(format!(
                "{WORKFLOW_SELECT} WHERE w.id = ?"
            )))
            .bind(id)
            .fetch_optional(pool)
            .await?
        });
        row.ok_or_else(|| Error::NotFound(format!("workflow {id}")))?
            .into_workflow()
    }

    pub async fn get_workflow_by_name(&self, name: &str) -> Result<Workflow> {
        let row: Option<WorkflowRow> = on_pool!(self, |pool, Db| {
            sqlx::query_as(sqlx::AssertSqlSafe(format!(
                "{WORKFLOW_SELECT} WHERE w.name = ?"
            )))
            .bind(name)
            .fetch_optional(pool)
            .await?
        });
        row.ok_or_else(|| Error::NotFound(format!("workflow `{name}`")))?
            .into_workflow()
    }

    /// Every workflow, by name.
    pub async fn list_workflows(&self) -> Result<Vec<Workflow>> {
        let rows: Vec<WorkflowRow> = on_pool!(self, |pool, Db| {
            sqlx::query_as(sqlx::AssertSqlSafe(format!(
                "{WORKFLOW_SELECT} ORDER BY w.name"
            )))
            .fetch_all(pool)
            .await?
        });
        rows.into_iter().map(WorkflowRow::into_workflow).collect()
    }

    /// Starts an instance of `workflow` at its current version: its steps recorded, the
    /// tasks of those with no predecessor created, all in one transaction. `workflow` is
    /// as the caller read it: if it changed since (a new version, disabled, deleted),
    /// nothing is started and the answer is [`Error::Changed`] — read it again. With a
    /// `key` already used for this workflow, that instance comes back uncreated and
    /// nothing is created. With `claim` (while still that node's lease), the first steps' tasks are
    /// created claimed by it, for its wheel, where their jobs are not bounded. With
    /// `audited_as`, a start that creates an instance is noted in the audit log as that
    /// user's ("start workflow", `<workflow> (instance <id>)`) in the same transaction: the
    /// instance and its note commit together.
    pub async fn start_instance(
        &self,
        workflow: &Workflow,
        input: &Value,
        key: Option<&str>,
        now: Millis,
        claim: Option<NodeLease>,
        audited_as: Option<&str>,
    ) -> Result<InstanceStart> {
        let mut tx = self.begin().await?;
        let of = Version {
            workflow_id: workflow.id,
            version: workflow.version,
            steps: &workflow.steps,
            read_at_change: Some(workflow.updated_at),
        };
        match self
            .start_instance_in(&mut tx, &of, input, key, now, claim)
            .await?
        {
            Started::New {
                instance,
                tasks,
                claimed,
                placed,
            } => {
                if let Some(user) = audited_as {
                    let target = format!("{} (instance {})", workflow.name, instance.id);
                    self.record_audit(Some(&mut tx), user, "start workflow", &target, now)
                        .await?;
                }
                tx.commit().await?;
                self.remember_placements(placed);
                Ok(InstanceStart {
                    instance: *instance,
                    created: true,
                    unclaimed: tasks - claimed.len(),
                    claimed,
                })
            }
            Started::Changed => {
                tx.rollback().await?;
                Err(Error::Changed(format!("workflow `{}`", workflow.name)))
            }
            Started::Known(id) => {
                tx.rollback().await?;
                Ok(InstanceStart {
                    instance: self.get_instance(id).await?,
                    created: false,
                    claimed: Vec::new(),
                    unclaimed: 0,
                })
            }
        }
    }

    /// [`Store::start_instance`] inside `tx`.
    pub(super) async fn start_instance_in(
        &self,
        tx: &mut Tx,
        of: &Version<'_>,
        input: &Value,
        key: Option<&str>,
        now: Millis,
        claim: Option<NodeLease>,
    ) -> Result<Started> {
        let graph = Graph::new(of.steps).map_err(Error::Corrupt)?;
        // With the workflow as the starter read it before its transaction: its row alone
        // (not its steps) is read to check it is still so. Not one `INSERT … SELECT`: on
        // InnoDB's default `innodb_autoinc_lock_mode` (1) that holds the table's AUTO-INC
        // lock for the statement, and a start waiting on a same-key start's row would
        // hold every other start of any workflow.
        if let Some(at) = of.read_at_change {
            let same: Option<i64> = on_tx!(tx, |tx, Db| {
                sqlx::query_scalar(
                    "SELECT id FROM workflows \
                     WHERE id = ? AND version = ? AND enabled = 1 AND updated_at = ?",
                )
                .bind(of.workflow_id)
                .bind(of.version)
                .bind(at)
                .fetch_optional(&mut **tx)
                .await?
            });
            if same.is_none() {
                return Ok(Started::Changed);
            }
        }
        // Inserted first: a key already started is found by its unique index (and a start
        // of the same key under way is waited for), not by a read before every start.
        let inserted: Result<i64> = on_tx!(tx, |tx, Db| {
            sqlx::query(
                "INSERT INTO workflow_instances (workflow_id, version, status, input, idem_key, created_at) \
                 VALUES (?, ?, ?, ?, ?, ?)",
            )
            .bind(of.workflow_id)
            .bind(of.version)
            .bind(InstanceStatus::Running.as_str())
            .bind(to_json(input))
            .bind(key)
            .bind(now)
            .execute(&mut **tx)
            .await
            .map(|done| done.insert_id())
            .map_err(Error::from)
        });
        let id = match (inserted, key) {
            (Ok(id), _) => id,
            (Err(Error::Conflict(_)), Some(key)) => {
                let existing: Option<i64> = on_tx!(tx, |tx, Db| {
                    sqlx::query_scalar(
                        "SELECT id FROM workflow_instances WHERE workflow_id = ? AND idem_key = ?",
                    )
                    .bind(of.workflow_id)
                    .bind(key)
                    .fetch_optional(&mut **tx)
                    .await?
                });
                return match existing {
                    Some(id) => Ok(Started::Known(id)),
                    None => Err(Error::Conflict(
                        "an instance with this key was started concurrently; retry".into(),
                    )),
                };
            }
            (Err(e), _) => return Err(e),
        };
        // Every step's row is written with the first steps' starts, in one statement.
        let mut moving = Moving::fresh(id, of.workflow_id, graph, input.clone());
        moving.changed = (0..moving.statuses.len())
            .map(StepChange::pending)
            .collect();
        let (tasks, claimed) = self.move_on_claiming(tx, &mut moving, now, claim).await?;
        let instance = read::written(&moving, of, key, now)?;
        Ok(Started::New {
            instance: Box::new(instance),
            tasks,
            claimed,
            placed: std::mem::take(&mut moving.placed),
        })
    }

    /// How many instances of workflow `id` run: what a delete without `force` refuses.
    pub async fn running_instances_of(&self, id: i64) -> Result<i64> {
        Ok(on_pool!(self, |pool, Db| {
            sqlx::query_scalar(
                "SELECT COUNT(*) FROM workflow_instances WHERE workflow_id = ? AND status = 'running'",
            )
            .bind(id)
            .fetch_one(pool)
            .await?
        }))
    }

    /// Deletes workflow `id`. Its instances keep running on their versions (kept); a
    /// workflow with running instances is a conflict unless `force`.
    pub async fn delete_workflow(&self, id: i64, force: bool) -> Result<()> {
        let running = self.running_instances_of(id).await?;
        if running > 0 && !force {
            return Err(Error::Conflict(format!(
                "workflow {id} has {running} running instances: cancel them, or delete with force"
            )));
        }
        let gone = on_pool!(self, |pool, Db| {
            sqlx::query("DELETE FROM workflows WHERE id = ?")
                .bind(id)
                .execute(pool)
                .await?
                .affected()
        });
        if gone == 0 {
            return Err(Error::NotFound(format!("workflow {id}")));
        }
        Ok(())
    }

    /// Instances, newest first: of `workflow_id` and in `status` when given, before
    /// `before_id`, at most `limit` (and one more, to tell a next page).
    pub async fn list_instances(
        &self,
        workflow_id: Option<i64>,
        status: Option<InstanceStatus>,
        before_id: Option<i64>,
        limit: u32,
    ) -> Result<Vec<Instance>> {
        let ids: Vec<i64> = on_pool!(self, |pool, Db| {
            let mut qb = QueryBuilder::<Db>::new("SELECT id FROM workflow_instances WHERE 1 = 1");
            if let Some(w) = workflow_id {
                qb.push(" AND workflow_id = ").push_bind(w);
            }
            if let Some(s) = status {
                qb.push(" AND status = ").push_bind(s.as_str());
            }
            if let Some(b) = before_id {
                qb.push(" AND id < ").push_bind(b);
            }
            qb.push(" ORDER BY id DESC LIMIT ")
                .push_bind(i64::from(limit) + 1);
            qb.build_query_scalar().fetch_all(pool).await?
        });
        self.get_instances(&ids).await
    }

    /// Cancels a running instance: its pending steps and the unstarted tasks of its
    /// running ones are cancelled, in one transaction. Returns the tasks that had started
    /// (their runs are the caller's to kill; their endings change nothing now). A
    /// finished instance is a conflict.
    pub async fn cancel_instance(&self, id: i64, now: Millis) -> Result<Cancelled> {
        let mut tx = self.begin().await?;
        let Some(mut moving) = self.lock_instance(&mut tx, id).await? else {
            tx.rollback().await?;
            let inst = self.get_instance(id).await?;
            return Err(Error::Conflict(format!(
                "workflow instance {id} is {}; only a running instance can be cancelled",
                inst.status
            )));
        };
        let tasks: Vec<(i64, String)> = on_tx!(&mut tx, |tx, Db| {
            sqlx::query_as(
                "SELECT t.id, t.status FROM workflow_tasks w JOIN tasks t ON t.id = w.task_id \
                 WHERE w.instance_id = ? AND w.status IS NULL",
            )
            .bind(id)
            .fetch_all(&mut **tx)
            .await?
        });
        let of = |wanted: fn(TaskStatus) -> bool| -> Vec<i64> {
            tasks
                .iter()
                .filter(|(_, s)| s.parse().is_ok_and(wanted))
                .map(|(t, _)| *t)
                .collect()
        };
        let unstarted = of(TaskStatus::is_unstarted);
        let started = of(|s| s == TaskStatus::Running);
        on_tx!(&mut tx, |tx, Db| {
            for chunk in unstarted.chunks(CHUNK) {
                let mut qb = QueryBuilder::<Db>::new(
                    "UPDATE tasks SET status = 'cancelled', owner_node = NULL, owner_epoch = NULL, \
                     updated_at = ",
                );
                qb.push_bind(now)
                    .push(" WHERE status IN ")
                    .push(unstarted!())
                    .push(" AND id IN ");
                push_ids(&mut qb, chunk.iter().copied());
                qb.build().execute(&mut **tx).await?;
            }
        });
        for i in 0..moving.statuses.len() {
            if matches!(
                moving.statuses[i],
                StepStatus::Pending | StepStatus::Running
            ) {
                moving.statuses[i] = StepStatus::Cancelled;
                moving
                    .changed
                    .push(StepChange::ended(i, StepStatus::Cancelled));
            }
        }
        self.move_on(&mut tx, &mut moving, now).await?;
        let queued_started = self.start_queued(&mut tx, moving.workflow_id, now).await?;
        tx.commit().await?;
        Ok(Cancelled {
            started,
            queued_started,
        })
    }
}
