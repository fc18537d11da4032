//! Fires that end at the scheduler: those that will not go out (an orphan, a voided
//! recurring fire, no executor yet) and the triggers that failed, recorded as failed runs.

use std::collections::BTreeMap;

use super::*;

/// Fires a dispatch takes no run for.
#[derive(Default)]
pub(super) struct Unsendable {
    /// Of jobs that no longer exist.
    pub(super) orphans: Vec<DueTask>,
    /// Recurring fires planned under a job generation that has since changed (their rows
    /// were deleted by the change).
    pub(super) void: Vec<DueTask>,
    /// Of apps without a live executor: they wait in the database.
    pub(super) no_executor: Vec<DueTask>,
    /// Whose app's every executor is registered but unreachable: they wait in the wheel.
    pub(super) unreachable: Vec<DueTask>,
    /// Of enabled `pull` jobs: handed to the pulls waiting on this node, the rest `ready`.
    pub(super) to_pull: Vec<DueTask>,
    /// Of disabled `pull` and `http` jobs: they wait in the database, `ready`.
    pub(super) ready: Vec<DueTask>,
}

/// How long a fire that reached none of its app's executors waits before it is tried
/// again (an executor that died stays registered until its heartbeat is 90 s old).
pub(super) const UNREACHABLE_HOLD_MS: i64 = 1_000;

/// What becomes of a fire that reached none of its app's executors.
pub(super) enum Wait {
    /// It waits in the wheel and is tried again.
    Again(DueTask),
    /// It waited long enough: a failed attempt.
    Over(Failed),
}

/// A fire that reached none of its app's executors waits (not an attempt) until it has
/// waited `limit_ms`; then it fails as an attempt.
pub(super) fn unreachable_wait(p: Pending, now: Millis, limit_ms: i64) -> Wait {
    let since = p.task.waiting_since.unwrap_or(now);
    if now - since >= limit_ms {
        let reason = format!(
            "no executor of app `{}` could be reached for {} s (last: {})",
            p.job.job.spec.app,
            (now - since) / 1000,
            p.last_error.as_deref().unwrap_or("no answer")
        );
        return Wait::Over(Failed::of(p, None, now, reason));
    }
    Wait::Again(DueTask {
        waiting_since: Some(since),
        ..p.task
    })
}

/// Settles the fires that go out without a run: waiting ones to the database (or back to
/// the wheel when it cannot be written), void and orphaned ones out of the ring.
pub(super) async fn settle_unsent(dispatcher: &Dispatcher, u: Unsendable) {
    let now = dispatcher.cluster.clock.now_ms();
    if !u.orphans.is_empty() {
        let ids: Vec<i64> = u.orphans.iter().map(|t| t.task_id).collect();
        match dispatcher.cluster.store.cancel_orphans(&ids, now).await {
            Ok(()) => dispatcher
                .ring
                .fired(u.orphans.iter().map(|t| (t.task_id, t.attempt))),
            Err(e) => {
                tracing::warn!(error = %e, "cancelling tasks of deleted jobs failed; retrying shortly");
                dispatcher.ring.defer(u.orphans, now + JOB_RETRY_MS);
            }
        }
    }
    if !u.void.is_empty() {
        metrics::counter!("rota_fires_void_total").increment(u.void.len() as u64);
        dispatcher
            .ring
            .fired(u.void.iter().map(|t| (t.task_id, t.attempt)));
    }
    if !u.no_executor.is_empty() {
        metrics::counter!("rota_fires_waiting_total").increment(u.no_executor.len() as u64);
        let parked: Vec<(i64, Millis)> = u
            .no_executor
            .iter()
            .map(|t| (t.task_id, t.waiting_since.unwrap_or(now)))
            .collect();
        match dispatcher
            .cluster
            .store
            .park_waiting(dispatcher.cluster.lease.get(), &parked)
            .await
        {
            Ok(()) => {
                // Which ones (the first few): a fire that waits long is then traceable.
                let first: Vec<i64> = parked.iter().take(10).map(|&(id, _)| id).collect();
                tracing::info!(
                    tasks = parked.len(),
                    task.ids = ?first,
                    "fires found no live executor of their app; they wait for one"
                );
                dispatcher
                    .ring
                    .fired(u.no_executor.iter().map(|t| (t.task_id, t.attempt)));
            }
            Err(e) => {
                tracing::warn!(error = %e, "parking fires without an executor failed; holding them");
                dispatcher
                    .ring
                    .defer(u.no_executor, now + UNREACHABLE_HOLD_MS);
            }
        }
    }
    let mut ready = u.ready;
    if !u.to_pull.is_empty() {
        ready.extend(handoff::hand_over(dispatcher, u.to_pull, now).await);
    }
    if !ready.is_empty() {
        make_ready(dispatcher, ready, now).await;
    }
    if !u.unreachable.is_empty() {
        metrics::counter!("rota_fires_waiting_total").increment(u.unreachable.len() as u64);
        dispatcher
            .ring
            .defer(u.unreachable, now + UNREACHABLE_HOLD_MS);
    }
}

/// A pull job's fires leave the wheel for the database as `ready`, and their jobs are
/// announced to the pulls that wait for them (on this node and the others).
async fn make_ready(dispatcher: &Dispatcher, ready: Vec<DueTask>, now: Millis) {
    let ids: Vec<i64> = ready.iter().map(|t| t.task_id).collect();
    match dispatcher
        .cluster
        .store
        .mark_ready(dispatcher.cluster.lease.get(), &ids, now)
        .await
    {
        Ok(_) => {
            metrics::counter!("rota_fires_ready_total").increment(ready.len() as u64);
            dispatcher
                .ring
                .fired(ready.iter().map(|t| (t.task_id, t.attempt)));
            let mut jobs: BTreeMap<i64, u64> = BTreeMap::new();
            for t in &ready {
                *jobs.entry(t.job_id).or_default() += 1;
            }
            let jobs: Vec<(i64, u64)> = jobs.into_iter().collect();
            dispatcher.ready.announce(&jobs);
        }
        Err(e) => {
            tracing::warn!(error = %e, "making a pull job's fires ready failed; holding them");
            dispatcher.ring.defer(ready, now + UNREACHABLE_HOLD_MS);
        }
    }
}

/// Records the runs that ended at the scheduler, numbering those never sent. Waits for
/// the database (retrying) rather than forget a failure; at shutdown the claims stay in
/// the database and the next start recovers them.
pub(super) async fn complete_failures(dispatcher: &Dispatcher, failed: Vec<Failed>) {
    if failed.is_empty() {
        return;
    }
    metrics::counter!("rota_dispatch_failures_total").increment(failed.len() as u64);
    let attempts: Vec<(i64, i32)> = failed
        .iter()
        .map(|f| (f.task.task_id, f.task.attempt))
        .collect();
    let unnumbered = failed.iter().filter(|f| f.run_id.is_none()).count();
    let mut retrying = Retrying::new(dispatcher.cluster.shutdown.clone());
    let mut ids = loop {
        match dispatcher
            .run_ids
            .take(&dispatcher.cluster.store, unnumbered)
            .await
        {
            Ok(ids) => break ids.into_iter(),
            Err(e) => {
                tracing::warn!(error = %e, "reserving run ids for failed dispatches failed; retrying");
                if !retrying.pause().await {
                    dispatcher.ring.fired(attempts);
                    return;
                }
            }
        }
    };
    let updates: Vec<RunUpdate> = failed
        .into_iter()
        .filter_map(|f| {
            let run_id = f.run_id.or_else(|| ids.next())?;
            Some(failure(&f, run_id))
        })
        .collect();
    apply_then_fired(dispatcher, &updates, &HashMap::new(), attempts).await;
}

/// Ends the attempts of runs that ended at the scheduler (failed dispatches, webhook
/// deliveries) like executors' reports, retrying while the database fails (until
/// shutdown: the claims stay, and the next start recovers them); then the ring forgets
/// the tasks. `retry_after` overrides the backoff of a retry, per task.
pub(super) async fn apply_then_fired(
    dispatcher: &Dispatcher,
    updates: &[RunUpdate],
    retry_after: &HashMap<i64, Millis>,
    attempts: Vec<(i64, i32)>,
) {
    let mut retrying = Retrying::new(dispatcher.cluster.shutdown.clone());
    loop {
        match crate::pipeline::complete::apply_with(&dispatcher.completion, updates, retry_after)
            .await
        {
            Ok(_) => break,
            Err(e) => {
                tracing::warn!(error = %format!("{e:#}"), "recording runs that ended at the scheduler failed; retrying");
                if !retrying.pause().await {
                    break;
                }
            }
        }
    }
    dispatcher.ring.fired(attempts);
}

/// A run that ended at the scheduler: it never reached a plugin.
pub(super) fn failure(f: &Failed, run_id: i64) -> RunUpdate {
    RunUpdate {
        run_id,
        job_id: f.task.job_id,
        task_id: f.task.task_id,
        attempt: f.task.attempt,
        shard_index: f.shard_index,
        shard_total: f.shard_total,
        executor: f.executor.clone(),
        scheduled_at: f.task.due_at,
        dispatched_at: None,
        started_at: None,
        finished_at: Some(f.at),
        status: RunStatus::Failed,
        exit_code: None,
        message: Some(f.reason.clone()),
        output: None,
    }
}
