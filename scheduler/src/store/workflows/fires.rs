//! Scheduled workflows (SPEC §10): each due fire starts an instance (its key the fire
//! time, so a fire starts one instance however many nodes see it), or — while an earlier
//! instance runs — is skipped, queued or started anyway as the workflow's `overlap` says;
//! a queued fire starts when an instance of its workflow ends, in that transaction.

use serde_json::{Value, json};

use super::super::*;
use super::{Started, Version};
use crate::schedule::{Misfire, Schedule, plan_fires};
use crate::workflow::{InstanceStatus, MAX_QUEUED_FIRES, Overlap, StepSpec};

/// Fire times planned per workflow per round (the rest wait for the next round).
const FIRES_PER_ROUND: usize = 10;

#[derive(FromRow)]
struct FireRow {
    id: i64,
    version: i32,
    steps: String,
    schedule: Option<String>,
    misfire: String,
    overlap: String,
    next_fire_at: i64,
    queued: Option<String>,
}

/// What a round of scheduled fires did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct FiresDone {
    /// Instances started.
    pub started: usize,
    /// Fires skipped: an instance ran (`overlap: skip`), or too many were queued.
    pub skipped: usize,
    /// Fires left waiting behind a running instance (`overlap: queue`), after the round.
    pub queued: usize,
    /// Fire times missed by more than the misfire threshold.
    pub misfired: u32,
}

/// A fire's key and input: the fire time, as milliseconds and as RFC 3339.
fn fire(at: Millis) -> (String, Value) {
    let when = chrono::DateTime::from_timestamp_millis(at)
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    (format!("fire:{at}"), json!({"scheduled_at": when}))
}

impl Store {
    /// Fires the workflows whose next fire time has come (at most `limit` of them), each
    /// in the transaction that moves its next fire time on; rows another node holds are
    /// left to it.
    pub async fn fire_workflows(
        &self,
        now: Millis,
        misfire_threshold_ms: i64,
        limit: u32,
    ) -> Result<FiresDone> {
        let mut done = FiresDone::default();
        // Most rounds find nothing due: one read on the index, and no transaction.
        if self.next_workflow_fire().await?.is_none_or(|at| at > now) {
            return Ok(done);
        }
        let mut tx = self.begin().await?;
        let due = self.lock_due_workflows(&mut tx, now, limit).await?;
        for row in due {
            let steps: Vec<StepSpec> = parse_json(&row.steps)?;
            let overlap: Overlap = parse(&row.overlap)?;
            let misfire: Misfire = parse(&row.misfire)?;
            let schedule: Option<Schedule> = row.schedule.as_deref().map(parse_json).transpose()?;
            let compiled = schedule
                .as_ref()
                .and_then(|s| s.compile_at(row.next_fire_at).ok());
            let Some(compiled) = compiled else {
                // No schedule (or one that no longer compiles): nothing fires.
                self.set_fires(&mut tx, row.id, None, row.queued.as_deref())
                    .await?;
                continue;
            };
            let plan = plan_fires(
                &compiled,
                row.next_fire_at,
                now,
                now,
                misfire,
                misfire_threshold_ms,
                FIRES_PER_ROUND,
            );
            done.misfired += plan.misfired;
            let mut queued: Vec<Millis> = row
                .queued
                .as_deref()
                .map(parse_json)
                .transpose()?
                .unwrap_or_default();
            let mut running = if overlap == Overlap::Allow {
                0
            } else {
                self.running_instances(&mut tx, row.id).await?
            };
            let of = Version {
                workflow_id: row.id,
                version: row.version,
                steps: &steps,
                read_at_change: None,
            };
            for at in plan.fires {
                let start_now = match overlap {
                    Overlap::Allow => Some(at),
                    Overlap::Skip if running > 0 => {
                        done.skipped += 1;
                        None
                    }
                    Overlap::Skip => Some(at),
                    Overlap::Queue => {
                        if queued.len() < MAX_QUEUED_FIRES {
                            queued.push(at);
                        } else {
                            tracing::warn!(
                                workflow.id = row.id,
                                fire_at = at,
                                "{MAX_QUEUED_FIRES} fires already wait; this one is skipped"
                            );
                            done.skipped += 1;
                        }
                        // The first in line starts if nothing runs (also one left waiting
                        // while the workflow was disabled).
                        if running == 0 && !queued.is_empty() {
                            Some(queued.remove(0))
                        } else {
                            None
                        }
                    }
                };
                if let Some(at) = start_now
                    && self.start_fire(&mut tx, &of, at, now).await?
                {
                    done.started += 1;
                    running += 1;
                }
            }
            if overlap == Overlap::Queue {
                done.queued = queued.len();
            }
            let queued = (!queued.is_empty()).then(|| to_json(&queued));
            self.set_fires(&mut tx, row.id, plan.next_fire_at, queued.as_deref())
                .await?;
        }
        tx.commit().await?;
        Ok(done)
    }

    /// Up to `limit` enabled workflows due at `now`, locked for this transaction (on MySQL,
    /// skipping those another node holds), with their current version's steps.
    ///
    /// Only the `workflows` rows are locked: a `FOR UPDATE SKIP LOCKED` over the join with
    /// `workflow_versions` locked rows of both tables, so two nodes could each hold one half
    /// of a workflow's pair and both skip it (a fire lost for a round; CI saw it).
    async fn lock_due_workflows(
        &self,
        tx: &mut Tx,
        now: Millis,
        limit: u32,
    ) -> Result<Vec<FireRow>> {
        let lock = if self.is_mysql() {
            " FOR UPDATE SKIP LOCKED"
        } else {
            ""
        };
        let ids: Vec<i64> = on_tx!(tx, |tx, Db| {
            sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
                "SELECT id FROM workflows WHERE enabled = ? AND next_fire_at <= ? \
                 ORDER BY next_fire_at LIMIT ?{lock}"
            )))
            .bind(true)
            .bind(now)
            .bind(i64::from(limit))
            .fetch_all(&mut **tx)
            .await?
        });
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        // The rows are ours now: a plain read of them (and of their immutable versions).
        Ok(on_tx!(tx, |tx, Db| {
            let mut qb = QueryBuilder::<Db>::new(
                "SELECT w.id, w.version, v.steps, w.schedule, w.misfire, w.overlap, \
                 w.next_fire_at, w.queued FROM workflows w JOIN workflow_versions v \
                 ON v.workflow_id = w.id AND v.version = w.version WHERE w.id IN ",
            );
            push_ids(&mut qb, ids.iter().copied());
            qb.push(" ORDER BY w.next_fire_at");
            qb.build_query_as::<FireRow>().fetch_all(&mut **tx).await?
        }))
    }

    /// The earliest next fire time of an enabled workflow.
    async fn next_workflow_fire(&self) -> Result<Option<Millis>> {
        Ok(on_pool!(self, |pool, Db| {
            sqlx::query_scalar("SELECT MIN(next_fire_at) FROM workflows WHERE enabled = ?")
                .bind(true)
                .fetch_one(pool)
                .await?
        }))
    }

    /// Starts the instance of the fire at `at` (once: its key is the fire time).
    async fn start_fire(
        &self,
        tx: &mut Tx,
        of: &Version<'_>,
        at: Millis,
        now: Millis,
    ) -> Result<bool> {
        let (key, input) = fire(at);
        let started = self
            .start_instance_in(tx, of, &input, Some(&key), now, None)
            .await?;
        Ok(matches!(started, Started::New { .. }))
    }

    async fn running_instances(&self, tx: &mut Tx, workflow_id: i64) -> Result<i64> {
        Ok(on_tx!(tx, |tx, Db| {
            sqlx::query_scalar(
                "SELECT COUNT(*) FROM workflow_instances WHERE workflow_id = ? AND status = ?",
            )
            .bind(workflow_id)
            .bind(InstanceStatus::Running.as_str())
            .fetch_one(&mut **tx)
            .await?
        }))
    }

    async fn set_fires(
        &self,
        tx: &mut Tx,
        workflow_id: i64,
        next_fire_at: Option<Millis>,
        queued: Option<&str>,
    ) -> Result<()> {
        on_tx!(tx, |tx, Db| {
            sqlx::query("UPDATE workflows SET next_fire_at = ?, queued = ? WHERE id = ?")
                .bind(next_fire_at)
                .bind(queued)
                .bind(workflow_id)
                .execute(&mut **tx)
                .await?;
        });
        Ok(())
    }

    /// An instance of workflow `workflow_id` has just ended (in `tx`): if the workflow
    /// queues its fires and one waits, its instance starts now, at the current version.
    /// Returns whether one started.
    pub(super) async fn start_queued(
        &self,
        tx: &mut Tx,
        workflow_id: i64,
        now: Millis,
    ) -> Result<bool> {
        // Most workflows do not queue: one plain read, and the row lock only for those.
        let overlap: Option<String> = on_tx!(tx, |tx, Db| {
            sqlx::query_scalar("SELECT overlap FROM workflows WHERE id = ?")
                .bind(workflow_id)
                .fetch_optional(&mut **tx)
                .await?
        });
        if overlap.as_deref() != Some(Overlap::Queue.as_str()) {
            return Ok(false);
        }
        self.start_waiting(tx, workflow_id, now).await
    }

    /// Workflow `workflow_id`, which queues its fires, has had an instance end (in `tx`):
    /// its first waiting fire, if any, starts now at the current version. Returns whether
    /// one started.
    pub(super) async fn start_waiting(
        &self,
        tx: &mut Tx,
        workflow_id: i64,
        now: Millis,
    ) -> Result<bool> {
        let lock = if self.is_mysql() { " FOR UPDATE" } else { "" };
        let row: Option<(i32, String, Option<String>, bool)> = on_tx!(tx, |tx, Db| {
            sqlx::query_as(sqlx::AssertSqlSafe(format!(
                "SELECT w.version, v.steps, w.queued, w.enabled FROM workflows w \
                 JOIN workflow_versions v ON v.workflow_id = w.id AND v.version = w.version \
                 WHERE w.id = ?{lock}"
            )))
            .bind(workflow_id)
            .fetch_optional(&mut **tx)
            .await?
        });
        let Some((version, steps, Some(queued), true)) = row else {
            return Ok(false);
        };
        let mut queued: Vec<Millis> = parse_json(&queued)?;
        if queued.is_empty() {
            return Ok(false);
        }
        let at = queued.remove(0);
        let steps: Vec<StepSpec> = parse_json(&steps)?;
        let of = Version {
            workflow_id,
            version,
            steps: &steps,
            read_at_change: None,
        };
        let started = self.start_fire(tx, &of, at, now).await?;
        let rest = (!queued.is_empty()).then(|| to_json(&queued));
        on_tx!(tx, |tx, Db| {
            sqlx::query("UPDATE workflows SET queued = ? WHERE id = ?")
                .bind(rest.as_deref())
                .bind(workflow_id)
                .execute(&mut **tx)
                .await?;
        });
        Ok(started)
    }
}
