//! The scan: once a second (sooner when woken) it claims everything due in the next window —
//! recurring fire times turned into task rows and pending tasks — and puts it in the wheel.
//!
//! Also the recovery of claims made by another process: at start-up those of this node's
//! earlier incarnation, and every second those of any node that stopped heartbeating
//! (the take-over, `docs/cluster.md`). Claims never recorded as dispatched are checked
//! with the executors (`/runs/known`) so that what reached one is not sent again, and the
//! rest is fired now.
//!
//! And the rejoin after a take-over fenced this node ([`Scan::rejoin`]): the scan, the
//! take-over check and the heartbeat (through [`rejoin_loop`]) may each notice it, and the
//! rejoin drops the wheel's claims and recovers what is left of them.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rota_proto::{RunsKnownRequest, TaskAttempt};
use tokio::sync::{Notify, mpsc};

use super::ring::Ring;
use super::scan_wake::ScanWake;
use super::{Cluster, ExecutorCache, FireLease, JobCache};
use crate::client::ExecutorClient;
use crate::model::*;
use crate::schedule::{CompiledSchedule, plan_fires};
use crate::store::{DueJob, JobFires};

/// Fire times one job may add in one scan (a 1 ms fixed-rate job must not flood the wheel;
/// the rest come with the next scan).
const MAX_FIRES_PER_JOB: usize = 10_000;

/// What the scan reads and may call: it claims into the wheel, and for recovered claims
/// asks the app's executors (by the cached job and executor registry) what they have and
/// hands what they have to the dispatch recorder.
pub(crate) struct Scan {
    pub cluster: Arc<Cluster>,
    /// The wheel claims go into.
    pub ring: Ring,
    pub jobs: Arc<JobCache>,
    pub executors: Arc<ExecutorCache>,
    /// Opens apps' XXL-JOB tokens, for recovered runs on their executors.
    pub secrets: Arc<crate::secrets::SecretBox>,
    /// For recovery's `/runs/known`.
    pub client: ExecutorClient,
    /// Recovered attempts an executor already has, recorded as dispatched.
    pub recorder: mpsc::Sender<Dispatched>,
    /// Wakes the scan before its interval (a job changed, a retry or child due soon, a
    /// limited job's task due or slot freed).
    pub wake: Arc<ScanWake>,
    /// Held while a fenced node rejoins (the scan, the take-over check and the heartbeat
    /// may all notice).
    pub rejoining: tokio::sync::Mutex<()>,
}

pub(crate) async fn scan_loop(scan: Arc<Scan>) {
    let mut shutdown = scan.cluster.shutdown.clone();
    let clock = &scan.cluster.clock;
    let interval = Duration::from_millis(scan.cluster.config.scan_interval_ms);
    let mut compiled: HashMap<i64, (String, Option<CompiledSchedule>)> = HashMap::new();
    // Whether the last scan failed too: what a failed scan was asked is given back once,
    // so that a database that stays away is not asked twenty times a second.
    let mut failed_before = false;
    loop {
        if *shutdown.borrow() || scan.ring.is_stopped() {
            return;
        }
        let started = Instant::now();
        let asked = scan.wake.taken();
        let outcome = scan_once(&scan, &mut compiled).await;
        if outcome.is_err() && !failed_before {
            scan.wake.again(asked, clock.now_ms());
        }
        failed_before = outcome.is_err();
        let scanned = match outcome {
            Ok(scanned) => scanned,
            Err(crate::store::Error::Fenced) => {
                if !scan.rejoin().await {
                    return;
                }
                Scanned::default()
            }
            Err(e) => {
                tracing::warn!(error = %e, "scan failed; retrying");
                Scanned::default()
            }
        };
        metrics::histogram!("rota_scan_seconds").record(started.elapsed().as_secs_f64());
        if scanned.full {
            // The batch limit was hit: more is due. Go again at once (the wheel's capacity
            // bounds how far ahead this runs).
            tokio::task::yield_now().await;
            continue;
        }
        if let Some(at) = scanned.bounded_by {
            scan.wake.by(at);
        }
        let next = started + interval;
        loop {
            let rest = next.saturating_duration_since(Instant::now());
            let sleep = scan.wake.sleep_for(started.elapsed(), clock.now_ms(), rest);
            if sleep.is_zero() {
                break;
            }
            tokio::select! {
                _ = tokio::time::sleep(sleep) => break,
                _ = scan.wake.changed() => {}
                _ = shutdown.wait_for(|s| *s) => return,
            }
        }
    }
}

/// What one scan claims: tasks and fire times due by `until`, at most `limit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Window {
    pub until: Millis,
    /// The tasks of jobs with a concurrency bound: only those due by then.
    pub bounded_until: Millis,
    pub limit: u32,
}

/// The window of a scan at `now` with `in_wheel` tasks already in the wheel: the next
/// `window_ms`, at most `scan_batch` and never more than the wheel has room for; `None`
/// when the wheel is full (the scan waits for it to drain).
pub(crate) fn window(
    now: Millis,
    config: &crate::config::Config,
    in_wheel: usize,
) -> Option<Window> {
    let room = config.wheel_capacity.saturating_sub(in_wheel);
    if room == 0 {
        return None;
    }
    Some(Window {
        until: now + config.window_ms,
        bounded_until: now + config.bounded_window_ms(),
        limit: (config.scan_batch as usize).min(room) as u32,
    })
}

/// What one scan tells the next.
#[derive(Debug, Default)]
struct Scanned {
    /// It claimed a full batch: more may be due.
    full: bool,
    /// When to come back for the next task of a limited job left unclaimed
    /// ([`crate::config::Config::limited_scan_by`]).
    bounded_by: Option<Millis>,
}

/// One scan.
#[tracing::instrument(skip_all, fields(claimed))]
async fn scan_once(
    scan: &Scan,
    compiled: &mut HashMap<i64, (String, Option<CompiledSchedule>)>,
) -> crate::store::Result<Scanned> {
    let cluster = &scan.cluster;
    let now = cluster.clock.now_ms();
    let Some(Window {
        until,
        bounded_until,
        limit,
    }) = window(now, &cluster.config, scan.ring.len())
    else {
        return Ok(Scanned::default());
    };
    let threshold = cluster.config.misfire_threshold_ms;
    let mut misfired = 0u64;
    let mut plan = |job: &DueJob| -> JobFires {
        let key = serde_json::to_string(&job.schedule).unwrap_or_default();
        let entry = compiled
            .entry(job.id)
            .or_insert_with(|| (String::new(), None));
        if entry.0 != key {
            *entry = (key, job.schedule.compile().ok());
        }
        let Some(schedule) = &entry.1 else {
            // Validated at write time; a stored schedule that no longer compiles stops firing.
            tracing::error!(
                job.id = job.id,
                "stored schedule does not compile; job stops firing"
            );
            return JobFires {
                fires: Vec::new(),
                next_fire_at: None,
            };
        };
        let p = plan_fires(
            schedule,
            job.next_fire_at,
            now,
            until,
            job.misfire,
            threshold,
            MAX_FIRES_PER_JOB,
        );
        misfired += u64::from(p.misfired);
        JobFires {
            fires: p.fires,
            next_fire_at: p.next_fire_at,
        }
    };
    let lease = cluster.lease.get();
    let claimed = cluster
        .store
        .claim_due(lease, now, until, bounded_until, limit, &mut plan)
        .await?;
    if misfired > 0 {
        metrics::counter!("rota_misfires_total").increment(misfired);
    }
    for (job_id, n) in &claimed.throttled {
        let job = match scan.jobs.get(&cluster.store, *job_id).await {
            Ok(Some(entry)) => entry.job.spec.name.clone(),
            _ => job_id.to_string(),
        };
        metrics::counter!("rota_throttled_total", "job" => job).increment(*n);
    }
    // Before the claimed tasks can fire: their dispatch asks whether their slot is awaited.
    scan.jobs.set_slot_waits(&claimed.slot_waits);
    let n = claimed.tasks.len();
    tracing::Span::current().record("claimed", n);
    metrics::counter!("rota_claimed_total").increment(n as u64);
    scan.ring.insert(DueTask::held_under(claimed.tasks, lease));
    Ok(Scanned {
        full: n as u32 >= limit,
        bounded_by: claimed
            .bounded_next
            .map(|due| cluster.config.limited_scan_by(due)),
    })
}

/// Recovers the claims of this node's earlier incarnations (it was killed after a scan).
pub(crate) async fn recover(scan: &Scan) -> anyhow::Result<()> {
    let claims = scan
        .cluster
        .store
        .claims_of(scan.cluster.lease.get())
        .await?;
    if claims.is_empty() {
        return Ok(());
    }
    tracing::info!(
        tasks = claims.len(),
        "recovering claims of an earlier run of this node"
    );
    recover_claims(scan, claims).await
}

/// Four times a second: takes over the claims of nodes that stopped heartbeating, and fires
/// them (after asking the executors which they already have). The check is one indexed
/// read of the `nodes` table; running it often keeps the take-over close to dead-after.
pub(crate) async fn take_over_loop(scan: Arc<Scan>) {
    let cluster = &scan.cluster;
    let mut every =
        crate::periodic::Every::new(Duration::from_millis(250), cluster.shutdown.clone());
    // Claims taken over but not yet fired (the database failed under the recovery): they
    // are this node's now, so they are tried again every round until they are in the wheel.
    let mut unfired: Vec<DueTask> = Vec::new();
    while every.tick().await {
        if scan.ring.is_stopped() {
            return;
        }
        // Only a node whose own lease holds may take others' work.
        let now = cluster.clock.now_ms();
        let Some(dead_before) =
            dead_before(now, &cluster.fire_lease, cluster.config.node_dead_after_ms)
        else {
            continue;
        };
        let started = Instant::now();
        let fenced = match cluster
            .store
            .take_over_dead(cluster.lease.get(), dead_before)
            .await
        {
            Ok((nodes, claims)) => {
                if !nodes.is_empty() {
                    tracing::warn!(
                        nodes = ?nodes,
                        claims = claims.len(),
                        took_ms = started.elapsed().as_millis() as u64,
                        "took over the claims of scheduler nodes that stopped heartbeating"
                    );
                    metrics::counter!("rota_takeovers_total").increment(nodes.len() as u64);
                    let message = format!(
                        "scheduler node(s) {nodes:?} stopped heartbeating; {} took over {} claims",
                        cluster.config.node_name,
                        claims.len()
                    );
                    let events = crate::alarm::app_events(
                        &cluster.alarm_rules.snapshot(),
                        crate::alarm::On::NodeTakenOver,
                        None,
                        false,
                        &message,
                        now,
                    );
                    if let Err(e) = cluster.store.raise_alarm_events(&events).await {
                        tracing::warn!(error = %e, "recording node_taken_over alarms failed");
                    }
                }
                unfired.extend(claims);
                false
            }
            Err(crate::store::Error::Fenced) => true,
            Err(e) => {
                tracing::warn!(error = %e, "checking for dead scheduler nodes failed");
                false
            }
        };
        let fenced = fenced
            || match recover_claims(&scan, unfired.clone()).await {
                Ok(()) => {
                    unfired.clear();
                    false
                }
                Err(e) if is_fenced(&e) => true,
                Err(e) => {
                    tracing::error!(
                        error = %format!("{e:#}"),
                        claims = unfired.len(),
                        "firing taken-over claims failed; trying again in a second"
                    );
                    false
                }
            };
        if fenced {
            // Taken over itself: whatever it held, taken-over claims included, is the
            // taker's now.
            unfired.clear();
            if !scan.rejoin().await {
                return;
            }
        }
    }
}

impl Scan {
    /// This node was fenced. If another node took its claims over (its row is marked taken
    /// over), it drops its wheel (those claims are the taker's now), starts a new epoch and
    /// goes on. If another process runs under its name, it stops scheduling for good.
    /// Returns whether the node goes on.
    pub(crate) async fn rejoin(&self) -> bool {
        let _one_at_a_time = self.rejoining.lock().await;
        let cluster = &self.cluster;
        // The other path may have rejoined meanwhile: then the lease holds again.
        let now = cluster.clock.now_ms();
        if let Ok(true) = cluster.store.heartbeat_node(cluster.lease.get(), now).await {
            cluster.fire_lease.confirmed(now);
            return true;
        }
        cluster.fire_lease.lapse();
        let name = &cluster.config.node_name;
        let taken_over = match cluster.store.node_heartbeat_at(name).await {
            Ok(at) => at == Some(0),
            Err(e) => {
                tracing::warn!(error = %e, "fenced, and cannot read this node's row; trying again");
                return true;
            }
        };
        if !taken_over {
            tracing::error!(
                node = %name,
                "this node was fenced: another process runs under its name; it stops scheduling"
            );
            drop(self.ring.stop());
            return false;
        }
        // What this node held is the taker's now. The wheel is emptied; copies still with
        // the pools carry the old epoch, and are dropped when they come round (`drop_stale`).
        let dropped = self.ring.clear();
        let now = cluster.clock.now_ms();
        match cluster
            .store
            .start_node(name, &cluster.config.advertise_url, now)
            .await
        {
            Ok(lease) => {
                cluster.lease.renew(lease);
                cluster.fire_lease.restart(now);
                tracing::warn!(
                    node = %name,
                    epoch = lease.epoch,
                    dropped,
                    "this node was fenced (another node took its claims over while it was unresponsive); it rejoined with a new epoch"
                );
                // A take-over moves every claim in one transaction, so none of the old epoch
                // should be left; any that is (a write that raced the fencing) is in no
                // wheel now, and is recovered like a restart's.
                if let Err(e) = recover(self).await {
                    tracing::warn!(error = %format!("{e:#}"), "recovering this node's earlier claims after rejoining failed; a restart recovers them");
                }
                true
            }
            Err(e) => {
                tracing::warn!(error = %e, "fenced, and rejoining failed; trying again");
                true
            }
        }
    }
}

/// Rejoins when the heartbeat found this node taken over (it wakes `fenced`).
pub(crate) async fn rejoin_loop(scan: Arc<Scan>, fenced: Arc<Notify>) {
    let mut shutdown = scan.cluster.shutdown.clone();
    loop {
        tokio::select! {
            _ = fenced.notified() => {}
            _ = shutdown.wait_for(|s| *s) => return,
        }
        if !scan.rejoin().await {
            return;
        }
    }
}

/// The heartbeat time before which another node counts as dead, seen at `now` (its row's
/// `heartbeat_at` is older); `None` while this node's own lease does not hold: only a node
/// that may fire may take others' work.
pub(crate) fn dead_before(now: Millis, own: &FireLease, dead_after_ms: Millis) -> Option<Millis> {
    own.holds_at(now).then(|| now - dead_after_ms)
}

fn is_fenced(e: &anyhow::Error) -> bool {
    matches!(
        e.downcast_ref::<crate::store::Error>(),
        Some(crate::store::Error::Fenced)
    )
}

/// Claims made by another process (an earlier incarnation, a dead node): attempts an
/// executor already has are recorded as dispatched; the others are fired, each exactly
/// once.
async fn recover_claims(scan: &Scan, claims: Vec<DueTask>) -> anyhow::Result<()> {
    if claims.is_empty() {
        return Ok(());
    }
    let cluster = &scan.cluster;
    // Ask every live executor of each involved app which of these attempts it has.
    let mut by_app: HashMap<String, Vec<&DueTask>> = HashMap::new();
    for t in &claims {
        if let Some(entry) = scan.jobs.get(&cluster.store, t.job_id).await? {
            by_app
                .entry(entry.job.spec.app.clone())
                .or_default()
                .push(t);
        }
    }
    let mut known: Vec<Dispatched> = Vec::new();
    // Tasks whose runs may or may not have reached an XXL-JOB executor, by app.
    let mut watching: Vec<(String, Vec<(DueTask, Run)>)> = Vec::new();
    let mut held: std::collections::HashSet<i64> = std::collections::HashSet::new();
    let now = cluster.clock.now_ms();
    for (app, tasks) in by_app {
        let req = RunsKnownRequest {
            runs: tasks
                .iter()
                .map(|t| TaskAttempt {
                    task_id: t.task_id,
                    attempt: t.attempt,
                })
                .collect(),
        };
        let (xxl, rota): (Vec<_>, Vec<_>) = scan
            .executors
            .of_app(&app)
            .into_iter()
            .partition(|e| e.protocol == ExecutorProtocol::Xxl);
        // XXL-JOB executors cannot be asked: their runs were written before being sent, and
        // whether they went out is settled in the background (`xxl_recovery.rs`).
        let addresses: Vec<String> = xxl.into_iter().map(|e| e.address).collect();
        let mut unsure = Vec::new();
        for run in cluster.store.unfinished_runs_at(&addresses).await? {
            if let Some(t) = tasks
                .iter()
                .find(|t| t.task_id == run.task_id && t.attempt == run.attempt)
            {
                held.insert(t.task_id);
                unsure.push(((*t).clone(), run));
            }
        }
        if !unsure.is_empty() {
            watching.push((app.clone(), unsure));
        }
        for executor in rota {
            match scan.client.runs_known(&app, &executor.address, &req).await {
                Ok(ack) => {
                    for k in ack.known {
                        let Some(t) = tasks
                            .iter()
                            .find(|t| t.task_id == k.task_id && t.attempt == k.attempt)
                        else {
                            continue;
                        };
                        known.push(Dispatched {
                            run_id: k.run_id,
                            job_id: t.job_id,
                            task_id: t.task_id,
                            attempt: t.attempt,
                            shard_index: k.shard_index,
                            shard_total: 1,
                            executor: executor.address.clone(),
                            scheduled_at: t.due_at,
                            dispatched_at: now,
                        });
                    }
                }
                Err(e) => tracing::warn!(error = %e, "executor did not answer the recovery check"),
            }
        }
    }
    // All of them under this lease first (an earlier epoch's claims after a restart), so
    // that what the executors have is recorded as this lease's.
    let lease = cluster.lease.get();
    let all: Vec<i64> = claims.iter().map(|t| t.task_id).collect();
    cluster.store.adopt_claims(lease, &all).await?;
    let known_ids: std::collections::HashSet<i64> = known.iter().map(|d| d.task_id).collect();
    let refire: Vec<DueTask> = claims
        .into_iter()
        .filter(|t| !known_ids.contains(&t.task_id) && !held.contains(&t.task_id))
        .collect();
    for (app, runs) in watching {
        let probe = super::xxl_recovery::Probe {
            cluster: scan.cluster.clone(),
            client: scan.client.clone(),
            ring: scan.ring.clone(),
            secrets: scan.secrets.clone(),
        };
        super::xxl_recovery::watch(probe, app, runs, lease);
    }
    tracing::info!(
        already_dispatched = known_ids.len(),
        refired = refire.len(),
        "recovered claims"
    );
    // Fire first: the overdue are late already. What the executors have is recorded by
    // the recorder, batched like any dispatch.
    scan.ring.insert(DueTask::held_under(refire, lease));
    for d in known {
        if scan.recorder.send(d).await.is_err() {
            break;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::clock::Clock;
    use crate::config::Config;

    /// The take-over argument of `docs/cluster.md` on a paused clock: a node stops firing
    /// half a dead-after after its last heartbeat, and another takes its claims only a whole
    /// dead-after after it, so at no moment do both fire them.
    #[tokio::test(start_paused = true)]
    async fn no_node_takes_over_claims_while_their_holder_may_still_fire_them() {
        const DEAD_AFTER: Millis = 3_000;
        let clock = Clock::tokio_from(2_000_000);
        let stalled = FireLease::new(clock.now_ms(), DEAD_AFTER);
        let last_beat = clock.now_ms();
        let taker = FireLease::new(clock.now_ms(), DEAD_AFTER);
        let mut taken_at = None;
        for _ in 0..(2 * DEAD_AFTER / 50) {
            tokio::time::advance(Duration::from_millis(50)).await;
            let now = clock.now_ms();
            taker.confirmed(now); // the taker keeps heartbeating; the stalled node does not
            let dead = dead_before(now, &taker, DEAD_AFTER).is_some_and(|cut| last_beat < cut);
            assert!(
                !(dead && stalled.holds_at(now)),
                "at {now} the stalled node may fire what was taken over"
            );
            if dead && taken_at.is_none() {
                taken_at = Some(now);
            }
        }
        assert_eq!(
            taken_at,
            Some(last_beat + DEAD_AFTER + 50),
            "taken over on the first check past dead-after"
        );

        // A taker whose own lease lapsed (it is stalled too) takes nothing over.
        taker.lapse();
        assert_eq!(dead_before(clock.now_ms(), &taker, DEAD_AFTER), None);
    }

    #[tokio::test(start_paused = true)]
    async fn each_scan_reaches_one_window_past_its_own_now_within_the_wheels_room() {
        let mut config = Config::for_tests("sqlite::memory:");
        config.window_ms = 5_000;
        config.scan_interval_ms = 1_000;
        config.scan_batch = 20_000;
        config.wheel_capacity = 50_000;
        let clock = Clock::tokio_from(1_000_000);

        let first = window(clock.now_ms(), &config, 0).unwrap();
        assert_eq!(
            first,
            Window {
                until: 1_005_000,
                bounded_until: 1_000_300,
                limit: 20_000
            }
        );
        // A second later (the scan interval) the window has moved on by a second: what
        // falls due in between is claimed by one of the two scans, never skipped.
        tokio::time::advance(Duration::from_millis(1_000)).await;
        let next = window(clock.now_ms(), &config, 0).unwrap();
        assert_eq!(next.until, first.until + 1_000);

        // The wheel's room bounds a claim, and a full wheel claims nothing.
        assert_eq!(
            window(clock.now_ms(), &config, 45_000).unwrap().limit,
            5_000
        );
        assert_eq!(window(clock.now_ms(), &config, 50_000), None);
        assert_eq!(window(clock.now_ms(), &config, 60_000), None);
    }
}
