//! Jobs as the node holds them: the job-change protocol (every node forgets its cached
//! copy before a change returns, then scans) and the job cache task creation reads.

use std::sync::Arc;
use std::time::Duration;

use crate::model::*;
use crate::pipeline::ring::CancelState;
use crate::store::{self, NodeRef};

use super::*;

/// How long a node waits for another to acknowledge a job change.
const PEER_NOTICE_TIMEOUT: Duration = Duration::from_secs(1);

impl Ports {
    /// A job was created, changed or deleted here (and committed). Every node forgets its
    /// cached copy before this returns — this one at once, the others through a signed
    /// call — so a fire planned under the old schedule, wherever it was claimed, is
    /// dropped when it comes due instead of sent (SPEC §4, "Disable, delete,
    /// reschedule"); and every node scans now, so the new schedule is planned at once. A
    /// node that does not answer within [`PEER_NOTICE_TIMEOUT`] is logged; it re-reads
    /// the job within the job cache's lifetime (5 s).
    pub async fn job_changed(&self, job_id: i64) {
        self.forget_job(job_id);
        let me = self.cluster.lease.get().node_id;
        let alive_after = self.cluster.clock.now_ms() - self.cluster.config.node_dead_after_ms;
        let peers = match self.cluster.store.live_nodes(alive_after).await {
            Ok(nodes) => nodes,
            Err(e) => {
                tracing::warn!(error = %e, job.id = job_id, "listing the other nodes to tell them of a job change failed");
                return;
            }
        };
        let notice = &rota_proto::wire::PeerJobChanged { job_id };
        let client = &self.client;
        let calls = peers
            .iter()
            .filter(|peer| peer.id != me)
            .map(|NodeRef { address, .. }| async move {
                let call = client.node_job_changed(address, notice);
                match tokio::time::timeout(PEER_NOTICE_TIMEOUT, call).await {
                    Ok(Ok(_)) => {}
                    Ok(Err(e)) => {
                        tracing::warn!(node = %address, job.id = job_id, error = %e, "a node was not told of a job change; it re-reads the job within 5 s")
                    }
                    Err(_) => {
                        tracing::warn!(node = %address, job.id = job_id, "a node did not answer the notice of a job change in time; it re-reads the job within 5 s")
                    }
                }
            });
        futures_util::future::join_all(calls).await;
    }

    /// Creates a job (validated) and tells every node.
    pub async fn create_job(
        &self,
        spec: &JobSpec,
        schedule: &crate::schedule::CompiledSchedule,
    ) -> Result<Job, store::Error> {
        let now = self.cluster.clock.now_ms();
        let next = first_fire(spec, schedule, now);
        let job = self.cluster.store.insert_job(spec, next, now).await?;
        self.job_changed(job.id).await;
        self.warm_app(&job.spec);
        Ok(job)
    }

    /// Replaces a job's settings (validated) and tells every node. A change of schedule or
    /// `enabled` re-plans it from now: the fires planned under the old one are void on
    /// every node before this returns ([`Ports::job_changed`]).
    ///
    /// A change of delivery with tasks on their way to the old receivers (in a wheel,
    /// ready for a consumer, or running) is a conflict unless `force`d; a job that stops
    /// being pulled, or an http job enabled again, hands its ready tasks back to the scan.
    pub async fn update_job(
        &self,
        job: &Job,
        spec: &JobSpec,
        schedule: &crate::schedule::CompiledSchedule,
        force: bool,
    ) -> Result<Job, store::Error> {
        let now = self.cluster.clock.now_ms();
        let (from, to) = (&job.spec.delivery, &spec.delivery);
        if from.kind() != to.kind() && !force {
            let busy = self.cluster.store.tasks_in_flight(job.id).await?;
            if busy > 0 {
                return Err(store::Error::Conflict(format!(
                    "job `{}` has {busy} task(s) on their way to its `{}` receivers (in a wheel, \
                     ready or running); changing its delivery to `{}` now could strand them: \
                     wait for them, or change it with ?force=true",
                    job.spec.name,
                    from.kind(),
                    to.kind()
                )));
            }
        }
        let replan = job.spec.replans(spec);
        let next = if replan {
            first_fire(spec, schedule, now)
        } else {
            job.next_fire_at
        };
        let job = self
            .cluster
            .store
            .update_job(job.id, spec, next, replan, now)
            .await?;
        // Tasks held `ready` go back to the scan once nothing holds them: a job no longer
        // pulled, or an http job enabled again.
        if *to != Delivery::Pull && spec.enabled {
            self.cluster.store.unready(job.id, now).await?;
        }
        self.job_changed(job.id).await;
        self.warm_app(spec);
        Ok(job)
    }

    /// Drops this node's cached copy of a job and scans now.
    pub fn forget_job(&self, job_id: i64) {
        self.jobs.invalidate(job_id);
        self.scan_wake.now();
        // A pull job enabled again: its waiting pulls look now.
        self.ready.wake_all([job_id]);
    }

    /// A plugin got a new version: jobs bound to it must see it, and their executors
    /// compile it now.
    pub fn plugin_changed(&self, name: &str) {
        self.jobs.clear();
        self.warm_binders(name);
    }

    /// A job by id, as the job cache has it (re-read at most every few seconds): what task
    /// creation needs of it, without a read per request. `None` if there is none.
    pub async fn cached_job(&self, id: i64) -> Result<Option<Arc<JobEntry>>, store::Error> {
        self.jobs.get(&self.cluster.store, id).await
    }

    /// [`Ports::cached_job`] by the job's name.
    pub async fn cached_job_named(
        &self,
        name: &str,
    ) -> Result<Option<Arc<JobEntry>>, store::Error> {
        match self.jobs.id_named(&self.cluster.store, name).await? {
            Some(id) => self.cached_job(id).await,
            None => Ok(None),
        }
    }

    /// Deletes a job (see [`Store::delete_job`]); the pending tasks it cancels leave the wheel.
    pub async fn delete_job(&self, job_id: i64, force: bool) -> Result<Vec<i64>, store::Error> {
        let cancelled = self
            .cluster
            .store
            .delete_job(job_id, force, self.cluster.clock.now_ms())
            .await?;
        for &id in &cancelled {
            if self.ring.begin_cancel(id) != CancelState::Firing {
                self.ring.finish_cancel(id, true);
            }
        }
        self.jobs.invalidate(job_id);
        self.router.forget_job(job_id);
        Ok(cancelled)
    }
}

/// A job's first fire time from `now`: none for schedule `none` or a disabled job.
pub(crate) fn first_fire(
    spec: &JobSpec,
    schedule: &crate::schedule::CompiledSchedule,
    now: Millis,
) -> Option<Millis> {
    if spec.enabled {
        schedule.next_after(now)
    } else {
        None
    }
}
