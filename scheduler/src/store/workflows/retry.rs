//! Retrying a failed instance (SPEC §10): its failed steps run again with a fresh attempt
//! budget — of a map, only the elements that failed — and the steps their failure skipped
//! are judged again, in one transaction under the instance's row lock.

use serde_json::Value;

use super::super::*;
use super::advance::step_task;
use super::moving::{Moving, StepTask};
use crate::workflow::{InstanceStatus, StepStatus, map_items};

/// The mark of a map element's link whose task a retry replaced: no longer counted.
pub(super) const RETRIED: &str = "retried";

impl Store {
    /// Retries failed instance `id`. Returns how many tasks it created; an instance in
    /// any other status is a conflict.
    pub async fn retry_instance(&self, id: i64, now: Millis) -> Result<usize> {
        let mut tx = self.begin().await?;
        let locked = self.lock_any_instance(&mut tx, id).await?;
        let Some(mut moving) = locked.filter(|m| m.status == InstanceStatus::Failed) else {
            tx.rollback().await?;
            let inst = self.get_instance(id).await?;
            return Err(Error::Conflict(format!(
                "workflow instance {id} is {}; only a failed instance can be retried",
                inst.status
            )));
        };
        // The failed steps, and every step their failure skipped (through skipped steps).
        let n = moving.statuses.len();
        let mut again: Vec<bool> = moving
            .statuses
            .iter()
            .map(|s| *s == StepStatus::Failed)
            .collect();
        loop {
            let grown: Vec<usize> = (0..n)
                .filter(|&i| {
                    !again[i]
                        && moving.statuses[i] == StepStatus::Skipped
                        && moving.graph.steps()[i].after.iter().any(|&p| again[p])
                })
                .collect();
            if grown.is_empty() {
                break;
            }
            for i in grown {
                again[i] = true;
            }
        }
        let mut tasks: Vec<StepTask> = Vec::new();
        let mut reset: Vec<i32> = Vec::new();
        for i in (0..n).filter(|&i| again[i]) {
            let partial_map =
                moving.statuses[i] == StepStatus::Failed && moving.graph.steps()[i].map;
            if partial_map
                && self
                    .retry_elements(&mut tx, &mut moving, i, now, &mut tasks)
                    .await?
            {
                continue;
            }
            moving.statuses[i] = StepStatus::Pending;
            moving.outputs[i] = None;
            reset.push(i as i32);
        }
        on_tx!(&mut tx, |tx, Db| {
            if !reset.is_empty() {
                let mut qb = QueryBuilder::<Db>::new("UPDATE workflow_steps SET status = ");
                qb.push_bind(StepStatus::Pending.as_str())
                    .push(
                        ", task_id = NULL, output = NULL, items = NULL, message = NULL, \
                         started_at = NULL, finished_at = NULL WHERE instance_id = ",
                    )
                    .push_bind(id)
                    .push(" AND step IN ");
                push_ids(&mut qb, reset.iter().map(|&s| i64::from(s)));
                qb.build().execute(&mut **tx).await?;
            }
            sqlx::query(
                "UPDATE workflow_instances SET status = ?, output = NULL, finished_at = NULL \
                 WHERE id = ?",
            )
            .bind(InstanceStatus::Running.as_str())
            .bind(id)
            .execute(&mut **tx)
            .await?;
        });
        moving.status = InstanceStatus::Running;
        let created = self.move_on_with(&mut tx, &mut moving, now, tasks).await?;
        tx.commit().await?;
        Ok(created)
    }

    /// Map step `i` failed with elements: the failed ones get new tasks (into `tasks`),
    /// their old links are marked [`RETRIED`], and the step runs again keeping the
    /// elements that succeeded. `false` if it has no element to retry (it failed before
    /// mapping: it is started again from the start).
    async fn retry_elements(
        &self,
        tx: &mut Tx,
        moving: &mut Moving,
        i: usize,
        now: Millis,
        tasks: &mut Vec<StepTask>,
    ) -> Result<bool> {
        let rows: Vec<(i64, i32)> = on_tx!(tx, |tx, Db| {
            sqlx::query_as(
                "SELECT task_id, item FROM workflow_tasks WHERE instance_id = ? AND step = ? \
                 AND item IS NOT NULL AND status IS NOT NULL AND status NOT IN (?, ?)",
            )
            .bind(moving.id)
            .bind(i as i32)
            .bind(StepStatus::Succeeded.as_str())
            .bind(RETRIED)
            .fetch_all(&mut **tx)
            .await?
        });
        let step = moving.graph.steps()[i].clone();
        let items: Vec<Value> = match map_items(moving.outputs[step.after[0]].as_ref()) {
            Ok(items) => items.to_vec(),
            Err(_) => return Ok(false),
        };
        if rows.is_empty() || rows.iter().any(|&(_, k)| k as usize >= items.len()) {
            return Ok(false);
        }
        for &(_, k) in &rows {
            let k = k as usize;
            let payload =
                moving
                    .graph
                    .payload(i, &moving.input, &moving.outputs, Some((k, &items[k])));
            tasks.push((step_task(&step, payload, now), i, Some(k as i32)));
        }
        on_tx!(tx, |tx, Db| {
            for chunk in rows.chunks(CHUNK) {
                let mut qb = QueryBuilder::<Db>::new("UPDATE workflow_tasks SET status = ");
                qb.push_bind(RETRIED).push(" WHERE task_id IN ");
                push_ids(&mut qb, chunk.iter().map(|&(task, _)| task));
                qb.build().execute(&mut **tx).await?;
            }
            sqlx::query(
                "UPDATE workflow_steps SET status = ?, output = NULL, message = NULL, \
                 finished_at = NULL WHERE instance_id = ? AND step = ?",
            )
            .bind(StepStatus::Running.as_str())
            .bind(moving.id)
            .bind(i as i32)
            .execute(&mut **tx)
            .await?;
        });
        moving.statuses[i] = StepStatus::Running;
        moving.outputs[i] = None;
        Ok(true)
    }
}
