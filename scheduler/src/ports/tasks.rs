//! Tasks into the wheel and out of it: storing new tasks (claimed here when due inside the
//! window) and cancelling one wherever it is claimed.

use std::collections::HashMap;

use crate::client::ClientError;
use crate::model::*;
use crate::pipeline::ring::CancelState;
use crate::store::{self, NodeRef};

use super::*;

impl Ports {
    /// Stores new tasks (all or nothing; an existing key yields its task, `false`). Those
    /// due inside the window, of jobs without a concurrency bound or rate limit (whose
    /// tasks the scan claims under the job's lock), are created already
    /// claimed by this node and go straight into its wheel: no scan, no claim statement of
    /// their own. The rest wait for a scan: woken at once when one is due soon, or for a
    /// limited job's task half a bounded window before it is due (gathered with
    /// other such requests, `pipeline::scan_wake`). A limited job's tasks are stored with
    /// the bucket they are counted in, so the scan that claims them writes no more than
    /// their status.
    pub async fn store_tasks(
        &self,
        tasks: &[NewTask],
        now: Millis,
    ) -> Result<Vec<(i64, bool)>, store::Error> {
        let store = &self.cluster.store;
        let until = now + self.cluster.config.window_ms;
        let mut limits: HashMap<i64, Limits> = HashMap::new();
        for t in tasks {
            if let std::collections::hash_map::Entry::Vacant(e) = limits.entry(t.job_id) {
                let job = self.jobs.get(store, t.job_id).await?;
                e.insert(Limits::of(job.as_ref().map(|j| &j.job.spec)));
            }
        }
        let claimable: Vec<bool> = tasks
            .iter()
            .map(|t| t.due_at <= until && matches!(limits[&t.job_id], Limits::None))
            .collect();
        let keyed: Vec<NewTask>;
        let tasks = if limits.values().any(|l| matches!(l, Limits::Keyed(_))) {
            keyed = tasks
                .iter()
                .map(|t| NewTask {
                    limit_key: match &limits[&t.job_id] {
                        Limits::Keyed(pointer) => {
                            crate::limits::bucket(Some(pointer), t.payload.as_deref())
                        }
                        _ => None,
                    },
                    ..t.clone()
                })
                .collect();
            &keyed[..]
        } else {
            tasks
        };
        let lease = self.cluster.lease.get();
        let (ids, claimed) = match store
            .insert_tasks_claiming(tasks, Some((lease, &claimable)), now)
            .await
        {
            Ok(ids) => (ids, true),
            // Fenced (rejoining): the tasks are stored unclaimed, for any node's scan.
            Err(store::Error::Fenced) => (store.insert_tasks(tasks, now).await?, false),
            Err(e) => return Err(e),
        };
        let mut due = Vec::new();
        let mut soon = false;
        let mut limited_by: Option<Millis> = None;
        for (((id, created), t), claim) in ids.iter().zip(tasks).zip(&claimable) {
            if !created {
                continue;
            }
            if !matches!(limits[&t.job_id], Limits::None) {
                // The scan claims it under its job's limits (a rate-limited job's in any
                // scan of the window, this one too).
                let at = self.cluster.config.limited_scan_by(t.due_at);
                limited_by = Some(limited_by.map_or(at, |b| b.min(at)));
            } else if claimed && *claim {
                due.push(DueTask {
                    task_id: *id,
                    job_id: t.job_id,
                    kind: t.kind,
                    due_at: t.due_at,
                    attempt: 1,
                    priority: t.priority,
                    payload: t.payload.clone(),
                    params: t.params.clone(),
                    epoch: lease.epoch,
                    generation: 0,
                    waiting_since: None,
                    traceparent: t.traceparent.clone(),
                    key: t.key.clone(),
                });
            } else if t.due_at <= until {
                soon = true;
            }
        }
        self.ring.insert(due);
        if soon {
            self.scan_wake.now();
        }
        if let Some(at) = limited_by.filter(|_| !soon) {
            self.scan_wake.by(at);
        }
        Ok(ids)
    }

    /// Starts an instance of `workflow` (see [`store::Store::start_instance`]): its first
    /// steps' tasks are created claimed by this node and go straight into its wheel, as
    /// [`Ports::store_tasks`]' due ones do — no scan between the start and the first step.
    /// Those it could not claim (a bounded job, this node being fenced) wake the scan.
    pub async fn start_instance(
        &self,
        workflow: &store::Workflow,
        input: &serde_json::Value,
        key: Option<&str>,
        now: Millis,
        audited_as: Option<&str>,
    ) -> Result<store::InstanceStart, store::Error> {
        let lease = Some(self.cluster.lease.get());
        let started = self
            .cluster
            .store
            .start_instance(workflow, input, key, now, lease, audited_as)
            .await?;
        self.ring.insert(started.claimed.iter().cloned());
        if started.unclaimed > 0 {
            self.scan_wake.now();
        }
        Ok(started)
    }

    /// Debounces `task` — a create whose key task `holder` of its job holds, on a job with
    /// `debounce_ms` — onto that key (SPEC §11). A pending holder takes the new payload and
    /// due time (at most `debounce_ms` after its first create). One already in a wheel,
    /// about to fire, is taken out (cancelled wherever it is) and replaced by a new task,
    /// which keeps the first create's time; one that started or ended gives the key up to
    /// a new task, whose debounce starts now. The id of the task pending under the key.
    pub async fn debounce_task(
        &self,
        mut holder: i64,
        task: &NewTask,
        debounce_ms: Millis,
        now: Millis,
    ) -> Result<i64, NodeError> {
        let store = &self.cluster.store;
        // Each turn loses only to another create of the same key, which took it meanwhile.
        for _ in 0..5 {
            if store
                .debounce_task(
                    holder,
                    task.payload.as_deref(),
                    task.due_at,
                    debounce_ms,
                    now,
                )
                .await?
            {
                if task.due_at <= now + self.cluster.config.window_ms {
                    self.scan_wake.now();
                }
                return Ok(holder);
            }
            let old = store.get_task(holder).await?;
            let first = match old.status {
                TaskStatus::Claimed => match self.cancel_task(holder).await {
                    Ok(_) => old.created_at,
                    // It started meanwhile: a run of its own; the next debounces anew.
                    Err(NodeError::Store(store::Error::Conflict(_))) => now,
                    Err(e) => return Err(e),
                },
                _ => now,
            };
            store.hand_key_over(holder).await?;
            let fresh = NewTask {
                due_at: task.due_at.min(first.saturating_add(debounce_ms)),
                ..task.clone()
            };
            let (id, created) = self.store_tasks(std::slice::from_ref(&fresh), now).await?[0];
            if created {
                if first != now {
                    store.set_created_at(id, first).await?;
                }
                return Ok(id);
            }
            holder = id;
        }
        Err(store::Error::Conflict(format!(
            "the key of task {holder} is being created by many requests at once; try again"
        ))
        .into())
    }

    /// Cancels a task that has not started, even if it sits in a wheel: this node's, or
    /// (forwarded) that of the node that claimed it.
    pub async fn cancel_task(&self, id: i64) -> Result<(Task, bool), NodeError> {
        let owner = self.cluster.store.task_owner(id).await?;
        let Some(NodeRef { address, .. }) =
            owner.filter(|node| node.id != self.cluster.lease.get().node_id)
        else {
            return Ok(self.cancel_here(id).await?);
        };
        match self
            .client
            .node_cancel(&address, &rota_proto::wire::PeerCancel { task_id: id })
            .await
        {
            Ok(ack) => Ok((self.cluster.store.get_task(id).await?, ack.cancelled)),
            // The owner's own answer (a 409 for a task being dispatched, a 404) stands.
            Err(ClientError::Refused { status, body, .. }) if (400..500).contains(&status) => {
                let message = serde_json::from_str::<rota_proto::ErrorBody>(&body)
                    .map(|b| b.error)
                    .unwrap_or(body);
                Err(if status == 404 {
                    store::Error::NotFound(format!("task {id}"))
                } else {
                    store::Error::Conflict(message)
                }
                .into())
            }
            Err(e) => Err(NodeError::OwnerUnreachable {
                task_id: id,
                address,
                reason: e.to_string(),
            }),
        }
    }

    /// Cancels a task here, taking it out of this node's wheel if it is there.
    pub async fn cancel_here(&self, id: i64) -> Result<(Task, bool), store::Error> {
        match self.ring.begin_cancel(id) {
            CancelState::Firing => {
                return Err(store::Error::Conflict(format!(
                    "task {id} is being dispatched; only a pending task can be cancelled"
                )));
            }
            CancelState::Held | CancelState::Absent => {}
        }
        let result = self
            .cluster
            .store
            .cancel_task(id, self.cluster.clock.now_ms())
            .await;
        self.ring.finish_cancel(id, result.is_ok());
        result
    }
}

/// What a job's limits (SPEC §11) mean for its new tasks as they are stored.
enum Limits {
    /// None: a task due inside the window is claimed as it is stored.
    None,
    /// A bound or a rate limit (or a job this node does not know): the scan claims the
    /// tasks, under the job's lock; their bucket is the job's, or the scan reads it.
    Unkeyed,
    /// Limits per value of this JSON Pointer: each task is stored with its bucket.
    Keyed(String),
}

impl Limits {
    fn of(spec: Option<&JobSpec>) -> Limits {
        let Some(spec) = spec else {
            return Limits::Unkeyed;
        };
        if spec.max_concurrency.is_none() && spec.rate_limit.is_none() {
            return Limits::None;
        }
        match crate::limits::counted_key(
            spec.max_concurrency,
            spec.concurrency_key.as_deref(),
            spec.rate_limit.as_ref(),
        ) {
            Some(pointer) => Limits::Keyed(pointer.to_owned()),
            None => Limits::Unkeyed,
        }
    }
}
