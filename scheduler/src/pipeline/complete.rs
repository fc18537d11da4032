//! Completion: what happens when a run ends — reported by an executor, failed at dispatch,
//! or lost with a dead executor — and the retry policy that decides a task's next step.
//!
//! Reports are applied in batches and idempotently (see [`Store::apply_run_updates`]): a
//! repeated report changes nothing. A failed attempt is retried after the task's (or job's)
//! backoff until `max_attempts` failures, then the task is `dead`; a lost attempt (its
//! executor died) is retried at once and does not count as a failure of the plugin, up to
//! [`MAX_LOST`] losses; a killed run cancels its task; success fires the job's children.
//!
//! [`Store::apply_run_updates`]: crate::store::Store::apply_run_updates

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use rand::SeedableRng;
use rand::rngs::StdRng;

use super::ring::Ring;
use super::{Cluster, ExecutorCache, JobCache, RunIds, ScanWake};
use crate::alarm::{self, On};
use crate::model::*;
use crate::store::{
    AlarmEvent, Applied, Completing, InstanceEnded, JobRules, LeaseEnding, LeasesEnded,
};

/// What completion reads and may call: it writes through the cluster's store, numbers the
/// runs that fail at the scheduler, refreshes the executor registry, and wakes the scan when
/// something it decided falls due soon.
pub(crate) struct Completion {
    pub cluster: Arc<Cluster>,
    /// Live executors by app, refreshed by the liveness loop.
    pub executors: Arc<ExecutorCache>,
    /// Jobs' apps, for the alarm rules an ended attempt meets.
    pub jobs: Arc<JobCache>,
    /// Run ids for fires that waited too long for an executor.
    pub run_ids: Arc<RunIds>,
    /// Wakes the scan: a retry or child due inside the window, a freed concurrency slot.
    pub scan_wake: Arc<ScanWake>,
    /// This node's wheel: the workflow steps a batch created claimed go straight in.
    pub ring: Ring,
}

/// Losses (executor died mid-run) a task survives before it is declared dead: a plugin that
/// crashes its executor every time must not loop forever.
pub const MAX_LOST: i32 = 5;

/// The retry policy: what happens to a task whose attempt ended with `a.status`.
pub fn decide(a: &AttemptEnded, now: Millis, rng: &mut impl rand::Rng) -> TaskNext {
    match a.status {
        RunStatus::Succeeded => TaskNext::Succeeded,
        RunStatus::Killed => TaskNext::Cancelled,
        RunStatus::Lost => {
            if a.lost_count + 1 < MAX_LOST {
                TaskNext::Retry {
                    due_at: now,
                    lost: true,
                }
            } else {
                TaskNext::Dead
            }
        }
        RunStatus::Failed | RunStatus::Timeout | RunStatus::Dispatched | RunStatus::Running => {
            // Attempts that failed in the plugin (losses don't count against it).
            let failures = (a.attempt - a.lost_count).max(1);
            if failures < a.max_attempts {
                let delay = a.backoff.delay_ms(failures as u32, rng);
                TaskNext::Retry {
                    due_at: now.saturating_add(delay),
                    lost: false,
                }
            } else {
                TaskNext::Dead
            }
        }
    }
}

/// Applies run updates and reacts: metrics, and a scan wake-up when a retry or a child is
/// due inside the window (so it fires on time rather than at the next scan).
pub(crate) async fn apply(
    completion: &Completion,
    updates: &[RunUpdate],
) -> anyhow::Result<Applied> {
    apply_with(completion, updates, &HashMap::new()).await
}

/// [`apply`], where a retry of a task in `retry_after` is due that long after now instead
/// of after the backoff.
pub(crate) async fn apply_with(
    completion: &Completion,
    updates: &[RunUpdate],
    retry_after: &HashMap<i64, Millis>,
) -> anyhow::Result<Applied> {
    let now = completion.cluster.clock.now_ms();
    let started = std::time::Instant::now();
    let mut rng = StdRng::from_os_rng();
    let alarms = Alarms::read(completion, updates.iter().map(|u| u.job_id)).await;
    let applied = completion
        .cluster
        .store
        .apply_run_updates_raising(
            updates,
            now,
            Completing {
                decide: &mut policy(now, &mut rng, retry_after),
                raise: &|changes, ended, instances| alarms.raised(changes, ended, instances, now),
                claim: Some(completion.cluster.lease.get()),
                rules: &known_rules(completion, updates.iter().map(|u| u.job_id)),
            },
        )
        .await?;
    metrics::histogram!("rota_report_apply_seconds").record(started.elapsed().as_secs_f64());
    react(completion, updates, &applied, now);
    record_drift(completion, &applied.drifts).await;
    Ok(applied)
}

/// `rota_schedule_drift_seconds{job}`: how far behind its schedule each recurring job's
/// last fire ran (SPEC §11); `rota_schedule_skipped_total{job}`: its fires that never ran.
async fn record_drift(completion: &Completion, drifts: &[(i64, Drift)]) {
    for (job_id, drift) in drifts {
        let job = match completion
            .jobs
            .get(&completion.cluster.store, *job_id)
            .await
        {
            Ok(Some(entry)) => entry.job.spec.name.clone(),
            _ => job_id.to_string(),
        };
        match drift {
            Drift::Late(ms) => {
                metrics::gauge!("rota_schedule_drift_seconds", "job" => job)
                    .set(*ms as f64 / 1000.0);
            }
            Drift::Skipped => {
                metrics::counter!("rota_schedule_skipped_total", "job" => job).increment(1);
            }
        }
    }
}

/// Ends the attempts that acks and nacks hold (of `job_id`'s tasks, when given), as
/// [`apply_with`] ends reported ones: each only while its lease is the task's live one
/// ([`Store::end_leases`](crate::store::Store::end_leases)). `job_ids`: the jobs the
/// leases' tasks belong to, for the alarm rules.
pub(crate) async fn end_leases(
    completion: &Completion,
    job_id: Option<i64>,
    job_ids: &[i64],
    endings: &[LeaseEnding],
    retry_after: &HashMap<i64, Millis>,
) -> anyhow::Result<LeasesEnded> {
    let now = completion.cluster.clock.now_ms();
    let mut rng = StdRng::from_os_rng();
    let alarms = Alarms::read(completion, job_ids.iter().copied()).await;
    let ended = completion
        .cluster
        .store
        .end_leases(
            job_id,
            endings,
            now,
            Completing {
                decide: &mut policy(now, &mut rng, retry_after),
                raise: &|changes, ended, instances| alarms.raised(changes, ended, instances, now),
                claim: Some(completion.cluster.lease.get()),
                rules: &known_rules(completion, job_ids.iter().copied()),
            },
        )
        .await?;
    react(completion, &ended.updates, &ended.applied, now);
    record_drift(completion, &ended.applied.drifts).await;
    Ok(ended)
}

/// The retry policy ([`decide`]), where a retry of a task in `retry_after` is due that
/// long after `now` (a consumer's nack with `delay_ms`).
fn policy<'a>(
    now: Millis,
    rng: &'a mut StdRng,
    retry_after: &'a HashMap<i64, Millis>,
) -> impl FnMut(&AttemptEnded) -> TaskNext + Send + 'a {
    move |a| match (decide(a, now, rng), retry_after.get(&a.task_id)) {
        (TaskNext::Retry { lost, .. }, Some(delay)) => TaskNext::Retry {
            due_at: now.saturating_add(*delay),
            lost,
        },
        (next, _) => next,
    }
}

/// What the jobs of `ids` say of their ended attempts, for those this node read less than
/// its job cache's time to live ago ([`JobCache::fresh`]): the batch's transaction reads
/// only the others' (a job idle for longer, or one the cache could not re-read, is read
/// there as before).
fn known_rules(completion: &Completion, ids: impl Iterator<Item = i64>) -> HashMap<i64, JobRules> {
    ids.collect::<HashSet<i64>>()
        .into_iter()
        .filter_map(|id| Some((id, JobRules::of(&completion.jobs.fresh(id)?.job.spec))))
        .collect()
}

/// The alarm rules an ending batch may meet, with the apps of its jobs (read only when a
/// rule looks at runs' and tasks' endings).
struct Alarms {
    rules: Arc<Vec<alarm::Rule>>,
    apps: HashMap<i64, String>,
}

impl Alarms {
    async fn read(completion: &Completion, job_ids: impl Iterator<Item = i64>) -> Self {
        let rules = completion.cluster.alarm_rules.snapshot();
        let apps = if rules.iter().any(|r| r.enabled && r.on.at_completion()) {
            job_apps(completion, job_ids.collect()).await
        } else {
            HashMap::new()
        };
        Alarms { rules, apps }
    }

    fn raised(
        &self,
        changes: &[&RunUpdate],
        ended: &[EndedAttempt],
        instances: &[InstanceEnded],
        now: Millis,
    ) -> Vec<AlarmEvent> {
        let mut events = if self.apps.is_empty() {
            Vec::new()
        } else {
            alarm::raised(&self.rules, &self.apps, changes, ended, now)
        };
        events.extend(alarm::workflows_failed(&self.rules, instances, now));
        events
    }
}

/// After a batch: the workflow steps it created claimed into the wheel, metrics, and a
/// scan wake-up when a retry or a child is due inside the window, a workflow's next steps
/// were created unclaimed (due now: without the wake-up they waited for the next scan,
/// p50 200 ms at 1,000 transitions/s) or a concurrency slot was freed.
fn react(completion: &Completion, updates: &[RunUpdate], applied: &Applied, now: Millis) {
    completion.ring.insert(applied.claimed.iter().cloned());
    for i in &applied.instances {
        crate::metrics::workflow_instances(i.status, 1);
    }
    if applied.instances_started > 0 {
        crate::metrics::workflow_instances(
            crate::workflow::InstanceStatus::Running,
            applied.instances_started as u64,
        );
    }
    for &ms in &applied.handoffs_ms {
        metrics::histogram!("rota_workflow_handoff_seconds").record(ms as f64 / 1000.0);
    }
    for u in updates {
        if let (
            Some(started),
            RunStatus::Running | RunStatus::Succeeded | RunStatus::Failed | RunStatus::Timeout,
        ) = (u.started_at, u.status)
        {
            metrics::histogram!("rota_run_start_lateness_seconds")
                .record((started - u.scheduled_at).max(0) as f64 / 1000.0);
        }
        if u.status.is_final() {
            metrics::counter!("rota_runs_finished_total", "status" => u.status.as_str())
                .increment(1);
        }
    }
    let soon = now + completion.cluster.config.window_ms;
    if applied.freed_limited {
        // A throttled task may now fit: a scan soon, shared with the other ends meanwhile.
        completion.scan_wake.by(now);
    }
    let wake = applied.children > 0
        || applied.step_tasks > applied.claimed.len()
        || applied.fires_resumed.is_some_and(|at| at <= soon)
        || applied
            .tasks
            .iter()
            .any(|(_, n)| matches!(n, TaskNext::Retry { due_at, .. } if *due_at <= soon));
    if wake {
        completion.scan_wake.now();
    }
}

async fn job_apps(completion: &Completion, ids: HashSet<i64>) -> HashMap<i64, String> {
    let mut apps = HashMap::with_capacity(ids.len());
    for id in ids {
        if let Ok(Some(entry)) = completion.jobs.get(&completion.cluster.store, id).await {
            apps.insert(id, entry.job.spec.app.clone());
        }
    }
    apps
}

/// Runs an executor was given and no longer has (it restarted, or lost them) are lost at
/// once, not after the heartbeat timeout. On a registration every unfinished run missing
/// from `active` counts; on a heartbeat only those dispatched before `dispatched_before`
/// (a trigger acknowledged after the heartbeat was built is not in its list yet).
pub(crate) async fn reconcile_executor(
    completion: &Completion,
    app: &str,
    address: &str,
    active: &[i64],
    dispatched_before: Option<Millis>,
    now: Millis,
) -> anyhow::Result<()> {
    let active: HashSet<i64> = active.iter().copied().collect();
    let runs = completion
        .cluster
        .store
        .unfinished_runs_on(&[(app.to_owned(), address.to_owned())])
        .await?;
    let lost: Vec<RunUpdate> = runs
        .into_iter()
        .filter(|r| !active.contains(&r.id))
        .filter(|r| match (dispatched_before, r.dispatched_at) {
            (None, _) => true,
            (Some(before), Some(at)) => at < before,
            (Some(_), None) => false,
        })
        .map(|r| {
            lost_update(
                &r,
                now,
                format!("executor {address} no longer has this run"),
            )
        })
        .collect();
    if !lost.is_empty() {
        tracing::warn!(
            executor = address,
            runs = lost.len(),
            "runs lost by a restarted executor"
        );
        apply(completion, &lost).await?;
    }
    Ok(())
}

fn lost_update(r: &Run, now: Millis, message: String) -> RunUpdate {
    RunUpdate {
        run_id: r.id,
        job_id: r.job_id,
        task_id: r.task_id,
        attempt: r.attempt,
        shard_index: r.shard_index,
        shard_total: r.shard_total,
        executor: r.executor.clone(),
        scheduled_at: r.scheduled_at,
        dispatched_at: r.dispatched_at,
        started_at: r.started_at,
        finished_at: Some(now),
        status: RunStatus::Lost,
        exit_code: None,
        message: Some(message),
        output: None,
    }
}

/// Every second: refresh the executor registry, and executors silent for
/// longer than the dead timeout lose their unfinished runs (marked `lost`, retried) and leave
/// the registry. Runs are marked before the executor row is removed, so a crash in between
/// repeats the marking instead of forgetting it.
pub(crate) async fn liveness_loop(completion: Arc<Completion>) {
    let cluster = &completion.cluster;
    let mut every = crate::periodic::Every::new(Duration::from_secs(1), cluster.shutdown.clone());
    while every.tick().await {
        let now = completion.cluster.clock.now_ms();
        let alive_after = now - cluster.config.executor_dead_after_ms;
        if let Err(e) = completion
            .executors
            .refresh(&cluster.store, alive_after)
            .await
        {
            tracing::warn!(error = %e, "refreshing the executor registry failed");
        }
        match reap_dead_executors(&completion, alive_after, now).await {
            Ok(dead) => raise_executors_lost(&completion, &dead, now).await,
            Err(e) => tracing::warn!(error = %format!("{e:#}"), "reaping dead executors failed"),
        }
        if let Err(e) = settle_waiting(&completion, now).await {
            tracing::warn!(error = %format!("{e:#}"), "settling fires that wait for an executor failed");
        }
        if let Err(e) = expire_leases(&completion, now).await {
            tracing::warn!(error = %format!("{e:#}"), "ending expired pull leases failed");
        }
        if now % XXL_OVERDUE_EVERY_MS < 1_000
            && let Err(e) = lose_overdue_xxl_runs(&completion, now).await
        {
            tracing::warn!(error = %format!("{e:#}"), "ending overdue XXL-JOB runs failed");
        }
    }
}

/// How often the runs of XXL-JOB executors are checked for a callback that never came.
const XXL_OVERDUE_EVERY_MS: Millis = 10_000;
/// How long past its job's timeout an XXL-JOB run may still call back: its executor
/// calls back a timed-out run at once, and retries a refused callback every 30 s.
const XXL_CALLBACK_GRACE_MS: Millis = 120_000;

/// Runs on XXL-JOB executors that never called back (their executor restarted and forgot
/// them, or the node that recorded them died before sending): `lost`, and retried per
/// policy, as runs of a dead executor are.
async fn lose_overdue_xxl_runs(completion: &Completion, now: Millis) -> anyhow::Result<()> {
    let overdue = completion
        .cluster
        .store
        .overdue_xxl_runs(now, XXL_CALLBACK_GRACE_MS)
        .await?;
    if overdue.is_empty() {
        return Ok(());
    }
    let lost: Vec<RunUpdate> = overdue
        .iter()
        .map(|r| {
            let who = r.executor.as_deref().unwrap_or("?");
            lost_update(
                r,
                now,
                format!("the XXL-JOB executor {who} never called back, past the job's timeout"),
            )
        })
        .collect();
    tracing::warn!(
        runs = lost.len(),
        "XXL-JOB runs that never called back are lost"
    );
    apply(completion, &lost).await?;
    Ok(())
}

/// Pull leases that expired unacked (SPEC §8): each attempt is lost, and the task is
/// retried per policy (at once, like a run lost with its executor) or `dead`. Any node
/// may do it; the attempt ends once whichever does, and an ack racing it loses (409).
pub(crate) async fn expire_leases(completion: &Completion, now: Millis) -> anyhow::Result<()> {
    // Up to a thousand a second: a backlog of expired leases drains over a few ticks.
    let expired = completion.cluster.store.expire_leases(now, 1_000).await?;
    if expired.is_empty() {
        return Ok(());
    }
    let lost: Vec<RunUpdate> = expired
        .iter()
        .map(|h| {
            let holder = h.executor.as_deref().unwrap_or("pull:?");
            h.ending(
                RunStatus::Lost,
                now,
                Some(format!("the lease of `{holder}` expired before an ack")),
            )
        })
        .collect();
    metrics::counter!("rota_leases_expired_total").increment(lost.len() as u64);
    apply(completion, &lost).await?;
    Ok(())
}

/// Fires waiting for an executor (SPEC §4, "No executor yet"): those of apps that have one
/// now go out (the registration that woke them may have been handled by another node, or
/// raced the fire that parked them), and those that waited past their job's
/// `no_executor_timeout_ms` fail as an attempt.
pub(crate) async fn settle_waiting(completion: &Completion, now: Millis) -> anyhow::Result<()> {
    let cluster = &completion.cluster;
    if cluster
        .store
        .wake_waiting(&completion.executors.apps())
        .await?
        > 0
    {
        completion.scan_wake.now();
    }
    let expired = cluster
        .store
        .claim_expired_waiting(cluster.lease.get(), now, 1_000)
        .await?;
    if expired.is_empty() {
        return Ok(());
    }
    let ids = completion
        .run_ids
        .take(&cluster.store, expired.len())
        .await?;
    let failures: Vec<RunUpdate> = expired
        .iter()
        .zip(ids)
        .map(|((t, app, since), run_id)| RunUpdate {
            run_id,
            job_id: t.job_id,
            task_id: t.task_id,
            attempt: t.attempt,
            shard_index: 0,
            shard_total: 1,
            executor: None,
            scheduled_at: t.due_at,
            dispatched_at: None,
            started_at: None,
            finished_at: Some(now),
            status: RunStatus::Failed,
            exit_code: None,
            message: Some(format!(
                "no live executor in app `{app}` for {} s",
                (now - since) / 1000
            )),
            output: None,
        })
        .collect();
    tracing::warn!(
        tasks = failures.len(),
        "fires waited longer than their job's no_executor_timeout_ms for an executor; failing the attempt"
    );
    apply(completion, &failures).await?;
    Ok(())
}

pub(crate) async fn reap_dead_executors(
    completion: &Completion,
    alive_after: Millis,
    now: Millis,
) -> anyhow::Result<Vec<(String, String)>> {
    let store = &completion.cluster.store;
    let dead = store.dead_executors(alive_after).await?;
    if dead.is_empty() {
        return Ok(Vec::new());
    }
    let executors: Vec<(String, String)> = dead
        .iter()
        .map(|e| (e.app.clone(), e.address.clone()))
        .collect();
    let runs = store.unfinished_runs_on(&executors).await?;
    if !runs.is_empty() {
        let lost: Vec<RunUpdate> = runs
            .iter()
            .map(|r| {
                let who = r.executor.as_deref().unwrap_or("?");
                lost_update(r, now, format!("executor {who} stopped heartbeating"))
            })
            .collect();
        tracing::warn!(
            runs = lost.len(),
            executors = dead.len(),
            "marking runs of dead executors lost"
        );
        apply(completion, &lost).await?;
    }
    for e in &dead {
        tracing::warn!(app = %e.app, executor = %e.address, "executor is dead; removing it");
        store.remove_executor(&e.app, &e.address, None).await?;
    }
    Ok(executors)
}

/// `executor_lost` events for the executors just removed (app, address).
async fn raise_executors_lost(completion: &Completion, dead: &[(String, String)], now: Millis) {
    let rules = completion.cluster.alarm_rules.snapshot();
    let events: Vec<_> = dead
        .iter()
        .flat_map(|(app, address)| {
            let message = format!("executor {address} of app `{app}` stopped heartbeating");
            alarm::app_events(&rules, On::ExecutorLost, Some(app), false, &message, now)
        })
        .collect();
    if let Err(e) = completion.cluster.store.raise_alarm_events(&events).await {
        tracing::warn!(error = %e, "recording executor_lost alarms failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backoff::Backoff;

    fn ended(status: RunStatus, attempt: i32, lost_count: i32, max_attempts: i32) -> AttemptEnded {
        AttemptEnded {
            task_id: 1,
            job_id: 1,
            attempt,
            lost_count,
            status,
            max_attempts,
            backoff: Backoff::Exponential {
                base_ms: 60_000,
                factor: 2.0,
                max_ms: 3_600_000,
                jitter: false,
            },
            child_jobs: vec![],
        }
    }

    #[test]
    fn retries_follow_the_backoff_then_the_task_is_dead() {
        let mut rng = StdRng::seed_from_u64(1);
        let now = 1_000_000;
        // "retry in 1 min, then 2, then 4, up to 4 attempts"
        let mut dues = Vec::new();
        for attempt in 1..=3 {
            match decide(&ended(RunStatus::Failed, attempt, 0, 4), now, &mut rng) {
                TaskNext::Retry {
                    due_at,
                    lost: false,
                } => dues.push(due_at - now),
                other => panic!("attempt {attempt}: {other:?}"),
            }
        }
        assert_eq!(dues, vec![60_000, 120_000, 240_000]);
        assert_eq!(
            decide(&ended(RunStatus::Failed, 4, 0, 4), now, &mut rng),
            TaskNext::Dead
        );
        assert_eq!(
            decide(&ended(RunStatus::Timeout, 1, 0, 1), now, &mut rng),
            TaskNext::Dead
        );
    }

    /// A failed attempt on a paused clock: its retry is due one backoff after the failure,
    /// the first scan whose window reaches that time claims it, and the ring fires it then,
    /// not a millisecond before.
    #[tokio::test(start_paused = true)]
    async fn a_retry_is_claimed_one_window_ahead_and_fires_one_backoff_after_the_failure() {
        use crate::clock::Clock;
        use crate::pipeline::ring::Ring;
        use crate::pipeline::scan::window;

        let clock = Clock::tokio_from(10_000_000);
        let config = crate::config::Config::for_tests("sqlite::memory:");
        let mut rng = StdRng::seed_from_u64(1);
        let failed_at = clock.now_ms();
        let TaskNext::Retry {
            due_at,
            lost: false,
        } = decide(&ended(RunStatus::Failed, 1, 0, 4), failed_at, &mut rng)
        else {
            panic!("a first failure of four attempts is retried");
        };
        assert_eq!(due_at, failed_at + 60_000, "the backoff's first delay");

        let ring = Ring::new(clock.clone());
        let retry = DueTask {
            attempt: 2,
            ..DueTask::for_test(1, 1, due_at)
        };
        // A scan a second: the first whose window reaches the due time claims it.
        let claimed_at = loop {
            tokio::time::advance(Duration::from_secs(1)).await;
            let reach = window(clock.now_ms(), &config, ring.len()).unwrap().until;
            if due_at <= reach {
                ring.insert([retry.clone()]);
                break clock.now_ms();
            }
        };
        assert_eq!(claimed_at, due_at - config.window_ms, "one window ahead");
        tokio::time::advance(Duration::from_millis((due_at - claimed_at - 1) as u64)).await;
        assert!(ring.due_now().is_empty(), "fired before its backoff");
        tokio::time::advance(Duration::from_millis(1)).await;
        let fired = ring.due_now();
        assert_eq!((fired[0].task_id, fired[0].attempt), (1, 2));
        assert_eq!(clock.now_ms() - failed_at, 60_000);
    }

    #[test]
    fn losses_retry_at_once_without_spending_attempts() {
        let mut rng = StdRng::seed_from_u64(1);
        let now = 5;
        assert_eq!(
            decide(&ended(RunStatus::Lost, 1, 0, 1), now, &mut rng),
            TaskNext::Retry {
                due_at: now,
                lost: true
            }
        );
        // Attempt 2 after one loss is the first real failure: with max_attempts 2 it retries.
        assert!(matches!(
            decide(&ended(RunStatus::Failed, 2, 1, 2), now, &mut rng),
            TaskNext::Retry { lost: false, .. }
        ));
        assert_eq!(
            decide(&ended(RunStatus::Lost, 5, MAX_LOST - 1, 1), now, &mut rng),
            TaskNext::Dead
        );
    }

    #[test]
    fn success_and_kill() {
        let mut rng = StdRng::seed_from_u64(1);
        assert_eq!(
            decide(&ended(RunStatus::Succeeded, 1, 0, 1), 0, &mut rng),
            TaskNext::Succeeded
        );
        assert_eq!(
            decide(&ended(RunStatus::Killed, 1, 0, 3), 0, &mut rng),
            TaskNext::Cancelled
        );
    }
}
