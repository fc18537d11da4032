//! Dispatch: the fast and slow pools, routing, the trigger requests to executors and the
//! batched record of what was sent.
//!
//! The ring thread hands each tick's due tasks to [`Pools::fire`], which splits them by job
//! into the fast pool or — for jobs whose dispatches keep being slow — the slow pool. Both
//! are bounded queues feeding a bounded number of concurrent dispatches; a full queue blocks
//! the ring thread (back-pressure, never a silent drop).
//!
//! A dispatch resolves each task's job, picks executors with the job's route strategy, and
//! sends **one request per executor** carrying every trigger for it. Executors that cannot
//! be reached, or answer `busy`/`full`, are skipped for the next candidate where the strategy
//! allows failover; a trigger nobody can take fails its run with the reason (and the retry
//! policy applies), except when every executor is merely full: then it waits in the wheel.
//! What was sent is recorded by [`record_loop`] in batches after the send, so the fire path
//! has no database write; the claim made by the scan keeps a crash from losing it.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use rota_proto::{
    PluginRef, RunsKnownRequest, TaskAttempt, Trigger, TriggerBatch, TriggerBatchAck,
    TriggerOutcome,
};
use tokio::sync::{Semaphore, mpsc};

use crate::client::ClientError;
use crate::model::*;
use crate::node::{JobEntry, Shared};
use crate::route::Route;

/// Triggers per request to one executor at most.
const MAX_PER_REQUEST: usize = 1_000;

/// How often held fires look again while this node's lease is unconfirmed.
const LEASE_RETRY_MS: i64 = 50;

/// Longest a round keeps feeding one executor before what is left goes back to the wheel.
const ROUND_MAX_MS: i64 = 200;

/// How long a task whose job could not be loaded (the database is unreachable) waits in
/// the wheel before it is tried again.
const JOB_RETRY_MS: i64 = 200;

/// How long triggers that found every executor of their app full wait in the wheel
/// (where a cancel still finds them) before they are sent again: far shorter than an
/// executor's full queue takes to drain at speed, so it is refilled before it runs dry.
/// Measured with the fire benchmark (docs/benchmarks.md): 200 ms let a 10,000-run queue
/// run dry between refills; 50 ms kept it fed.
const FULL_HOLD_MS: i64 = 50;
/// …and when the dispatch got nothing out at all (its executors are busy with long runs),
/// this long, so a large held-back backlog is not planned again every few milliseconds.
const FULL_IDLE_HOLD_MS: i64 = 250;

/// A first request to an executor that last said it was full carries at most this many:
/// it has drained since, and the answer says by how much.
const PROBE: usize = 64;

/// What each executor last said about its room, and when. A dispatch sizes its first
/// request to it (later ones to each answer), and sends nothing to an executor that had
/// none left less than half a [`FULL_HOLD_MS`] ago: a burst larger than an executor's
/// queue waits in the wheel instead of being sent, refused and sent again (which cost
/// both sides more than the runs themselves).
#[derive(Default)]
pub(crate) struct Rooms(Mutex<HashMap<String, (usize, Millis)>>);

impl Rooms {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (usize, Millis)>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn note(&self, address: &str, room: usize, at: Millis) {
        let mut rooms = self.lock();
        // Executors come and go: forget those not heard from for a minute.
        if rooms.len() >= 1_024 {
            rooms.retain(|_, (_, said)| *said > at - 60_000);
        }
        rooms.insert(address.to_owned(), (room, at));
    }

    fn is_full(&self, address: &str, now: Millis) -> bool {
        matches!(self.lock().get(address), Some(&(0, at)) if now < at + FULL_HOLD_MS / 2)
    }

    /// How many triggers the first request of a round carries at most.
    fn first_request(&self, address: &str) -> usize {
        self.lock()
            .get(address)
            .map_or(MAX_PER_REQUEST, |&(room, _)| room.max(PROBE))
    }
}

/// Records dispatches in batches of at most this many rows…
const RECORD_BATCH: usize = 2_000;
/// …or after this long. Long enough that most short runs' reports are applied first:
/// then the record has nothing to write (`Store::record_dispatches`).
const RECORD_LINGER: Duration = Duration::from_millis(100);

/// Counts slow dispatches per job in the current minute (XXL-JOB's rule, configurable).
pub(crate) struct SlowTracker {
    state: Mutex<(i64, HashMap<i64, u32>)>,
    slow_ms: u64,
    max_count: u32,
}

impl SlowTracker {
    pub(crate) fn new(slow_ms: u64, max_count: u32) -> Self {
        SlowTracker {
            state: Mutex::new((0, HashMap::new())),
            slow_ms,
            max_count,
        }
    }

    fn with<R>(&self, f: impl FnOnce(&mut HashMap<i64, u32>) -> R) -> R {
        let mut g = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let minute = now_ms() / 60_000;
        if g.0 != minute {
            g.0 = minute;
            g.1.clear();
        }
        f(&mut g.1)
    }

    pub(crate) fn is_slow(&self, job_id: i64) -> bool {
        self.with(|m| m.get(&job_id).is_some_and(|&n| n > self.max_count))
    }

    pub(crate) fn record(&self, job_ids: impl IntoIterator<Item = i64>, elapsed: Duration) {
        if elapsed < Duration::from_millis(self.slow_ms) {
            return;
        }
        self.with(|m| {
            for id in job_ids {
                *m.entry(id).or_default() += 1;
            }
        });
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Lane {
    Fast,
    Slow,
}

impl Lane {
    fn as_str(self) -> &'static str {
        match self {
            Lane::Fast => "fast",
            Lane::Slow => "slow",
        }
    }
}

/// The fast and slow pools.
#[derive(Clone)]
pub(crate) struct Pools {
    fast: mpsc::Sender<Vec<DueTask>>,
    slow: mpsc::Sender<Vec<DueTask>>,
    capacity: usize,
}

impl Pools {
    pub(crate) fn start(shared: &Arc<Shared>, tasks: &mut tokio::task::JoinSet<()>) -> Pools {
        let capacity = shared.config.pool_queue.max(1);
        let (fast, fast_rx) = mpsc::channel(capacity);
        let (slow, slow_rx) = mpsc::channel(capacity);
        tasks.spawn(pool_loop(
            shared.clone(),
            Lane::Fast,
            fast_rx,
            shared.config.fast_pool_size,
        ));
        tasks.spawn(pool_loop(
            shared.clone(),
            Lane::Slow,
            slow_rx,
            shared.config.slow_pool_size,
        ));
        Pools {
            fast,
            slow,
            capacity,
        }
    }

    /// Called on the ring thread with one tick's due tasks (highest priority first).
    pub(crate) fn fire(&self, shared: &Shared, batch: Vec<DueTask>) {
        let now = now_ms();
        let batch = drop_stale(shared, batch, |t| t);
        if batch.is_empty() {
            return;
        }
        // Fire only under a confirmed lease: a node that could not heartbeat (a stall, a
        // lost database) holds its wheel until it can, or until it learns it was fenced,
        // so a take-over never races a late fire (docs/cluster.md).
        if now > shared.lease_valid_until.load(Ordering::SeqCst) {
            metrics::counter!("rota_fires_held_total").increment(batch.len() as u64);
            shared.ring.defer(batch, now + LEASE_RETRY_MS);
            return;
        }
        for t in &batch {
            metrics::histogram!("rota_fire_lateness_seconds")
                .record((now - t.due_at).max(0) as f64 / 1000.0);
        }
        shared
            .lateness
            .record(now, batch.iter().map(|t| now - t.due_at));
        metrics::counter!("rota_fires_total").increment(batch.len() as u64);
        let (slow, fast): (Vec<DueTask>, Vec<DueTask>) = batch
            .into_iter()
            .partition(|t| shared.slow.is_slow(t.job_id));
        for (lane, tasks) in [(Lane::Fast, fast), (Lane::Slow, slow)] {
            if tasks.is_empty() {
                continue;
            }
            let tx = match lane {
                Lane::Fast => &self.fast,
                Lane::Slow => &self.slow,
            };
            metrics::gauge!("rota_pool_queue_depth", "pool" => lane.as_str())
                .set((self.capacity - tx.capacity()) as f64);
            // Blocks the ring thread while the pool is saturated: back-pressure.
            if let Err(e) = tx.blocking_send(tasks) {
                // Only when the node is stopping: hand the claims back through the ring.
                let tasks = e.0;
                shared.ring.defer(tasks, now);
            }
        }
    }
}

async fn pool_loop(
    shared: Arc<Shared>,
    lane: Lane,
    mut rx: mpsc::Receiver<Vec<DueTask>>,
    size: usize,
) {
    let permits = Arc::new(Semaphore::new(size.max(1)));
    let mut shutdown = shared.shutdown.clone();
    loop {
        let batch = tokio::select! {
            b = rx.recv() => b,
            _ = shutdown.wait_for(|s| *s) => None,
        };
        let Some(batch) = batch else { break };
        let Ok(permit) = permits.clone().acquire_owned().await else {
            break;
        };
        if *shutdown.borrow() {
            // Stopping: hand it back rather than start a dispatch nobody would record.
            shared.ring.defer(batch, now_ms());
            break;
        }
        // Counted before the task starts, so the recorder never sees a gap at shutdown.
        shared.in_flight.fetch_add(1, Ordering::SeqCst);
        let shared = shared.clone();
        tokio::spawn(async move {
            dispatch_tasks(&shared, batch).await;
            shared.in_flight.fetch_sub(1, Ordering::SeqCst);
            drop(permit);
        });
        metrics::gauge!("rota_pool_queue_depth", "pool" => lane.as_str()).set(rx.len() as f64);
    }
    // Whatever is still queued goes back to the wheel, to be handed back as claims.
    rx.close();
    while let Some(batch) = rx.recv().await {
        shared.ring.defer(batch, now_ms());
    }
    // Wait for in-flight dispatches.
    let _ = permits.acquire_many(size.max(1) as u32).await;
}

/// One shard of a trigger: its index, the total, and the executors it may go to in order.
struct Shard {
    index: i32,
    total: i32,
    candidates: Vec<String>,
}

/// One trigger on its way: the task, its run, and where it may still go.
struct Pending {
    task: DueTask,
    job: Arc<JobEntry>,
    /// Numbered when first sent, so triggers held back in the wheel use up no ids; kept
    /// through failover, since an executor that answered `full` or was not reached did not
    /// take it.
    run_id: Option<i64>,
    shard_index: i32,
    shard_total: i32,
    candidates: Vec<String>,
    next: usize,
    failover: bool,
    last_error: Option<String>,
    all_full: bool,
    /// Executors that surely did not get it (no connection, or a 503)…
    unreachable: usize,
    /// …out of this many live executors of the app: when it is all of them, the app has
    /// no executor to run it for now, and it waits (SPEC §4, "No executor yet").
    live: usize,
}

/// A trigger that ends at the scheduler: its run is recorded `failed` with the reason.
struct Failed {
    task: DueTask,
    /// `None` if it was never sent: numbered when recorded.
    run_id: Option<i64>,
    shard_index: i32,
    shard_total: i32,
    executor: Option<String>,
    at: Millis,
    reason: String,
}

impl Failed {
    fn of(p: Pending, executor: Option<&str>, at: Millis, reason: String) -> Self {
        Failed {
            task: p.task,
            run_id: p.run_id,
            shard_index: p.shard_index,
            shard_total: p.shard_total,
            executor: executor.map(str::to_owned),
            at,
            reason,
        }
    }
}

/// One request to an executor: its triggers, the answer, when it was sent (the runs'
/// `dispatched_at`) and when the answer came.
struct Answered {
    group: Vec<Pending>,
    result: Result<TriggerBatchAck, ClientError>,
    sent_at: Millis,
    answered_at: Millis,
}

/// What became of one round's triggers for one executor.
struct Sent {
    /// Each request sent.
    answered: Vec<Answered>,
    /// Triggers not sent, and why.
    unsent: Vec<Pending>,
    why: Unsent,
}

enum Unsent {
    /// The executor has no room left (it said so, or it took all this round's time).
    Full,
    /// The previous request failed (surely undelivered: the flag); the rest would have too.
    Failed(String, bool),
    /// No run ids could be reserved (the database is unreachable).
    NoIds(String),
}

/// Dispatches one tick's tasks of one pool: plan each task's triggers, send them in rounds
/// (each round sends every remaining trigger to its next candidate, one request per
/// executor), classify the answers, then hand on what became of each.
#[tracing::instrument(skip_all, fields(tasks = batch.len()))]
async fn dispatch_tasks(shared: &Shared, batch: Vec<DueTask>) {
    let mut dispatch = Dispatch::new(now_ms());
    for task in batch {
        dispatch.plan(shared, task).await;
    }
    while !dispatch.pending.is_empty() && dispatch.round(shared).await {}
    dispatch.finish(shared).await;
}

/// One pool batch on its way out: the triggers still to send, and what became of the rest.
struct Dispatch {
    /// When the batch left the pool.
    now: Millis,
    /// Triggers for their next candidate.
    pending: Vec<Pending>,
    /// Triggers an executor took: recorded.
    sent: Vec<Dispatched>,
    /// Tasks every candidate was too full for: back to the wheel for a moment.
    deferred: Vec<DueTask>,
    /// Triggers that end here as failed runs.
    failed: Vec<Failed>,
    /// Fires that will not go out and need no run (see `settle_unsent`).
    unsent: Unsendable,
}

impl Dispatch {
    fn new(now: Millis) -> Self {
        Dispatch {
            now,
            pending: Vec::new(),
            sent: Vec::new(),
            deferred: Vec::new(),
            failed: Vec::new(),
            unsent: Unsendable::default(),
        }
    }

    /// Resolves a task's job and executors and queues its triggers (one per shard) with
    /// their candidates in route order.
    async fn plan(&mut self, shared: &Shared, task: DueTask) {
        let job = match shared.jobs.get(&shared.store, task.job_id).await {
            Ok(Some(job)) => job,
            Ok(None) => return self.unsent.orphans.push(task),
            Err(e) => {
                tracing::warn!(error = %e, "loading a job for dispatch failed; retrying shortly");
                shared.ring.defer(vec![task], self.now + JOB_RETRY_MS);
                return;
            }
        };
        if task.kind == TaskKind::Cron && task.generation != job.job.generation {
            // Planned under a schedule the job no longer has: its row is gone.
            return self.unsent.void.push(task);
        }
        let spec = &job.job.spec;
        if job.plugin.is_none() {
            let reason = format!("plugin `{}` does not exist", spec.plugin);
            return self.failed.push(Failed {
                task,
                run_id: None,
                shard_index: 0,
                shard_total: 1,
                executor: None,
                at: self.now,
                reason,
            });
        }
        let executors = shared.executors.of_app(&spec.app);
        if executors.is_empty() {
            return self.unsent.no_executor.push(task);
        }
        let live = executors.len();
        let addresses: Vec<String> = executors.into_iter().map(|e| e.address).collect();
        let shards = if spec.route == Route::ShardingBroadcast {
            let total = addresses.len() as i32;
            addresses
                .iter()
                .enumerate()
                .map(|(i, address)| Shard {
                    index: i as i32,
                    total,
                    candidates: vec![address.clone()],
                })
                .collect()
        } else {
            let order = shared.router.order(spec.route, task.job_id, &addresses);
            let mut candidates: Vec<String> = order.iter().map(|&i| addresses[i].clone()).collect();
            if spec.route == Route::Busyover {
                candidates = idle_first(shared, &spec.app, task.job_id, candidates).await;
            }
            vec![Shard {
                index: 0,
                total: 1,
                candidates,
            }]
        };
        let failover = spec.route.allows_failover();
        for shard in shards {
            self.pending.push(Pending {
                task: task.clone(),
                job: job.clone(),
                run_id: None,
                shard_index: shard.index,
                shard_total: shard.total,
                candidates: shard.candidates,
                next: 0,
                failover,
                last_error: None,
                all_full: true,
                unreachable: 0,
                live,
            });
        }
    }

    /// Sends every pending trigger to its next candidate and sorts the answers; `false`
    /// when no further round can help (nothing left, or the lease is gone).
    async fn round(&mut self, shared: &Shared) -> bool {
        // The lease is checked again right before sending, not only when the ring fired:
        // a batch that waited in a pool past it (a starved or paused node) may belong to
        // another node by now. Send nothing; the wheel holds it, and drops it if this node
        // turns out to be fenced (docs/cluster.md).
        let round_at = now_ms();
        // The lease as this round saw it travels with the triggers: an executor refuses
        // them past it (`expired`), so a stall between this check and the send (the
        // process paused, the request slow to go out) cannot deliver them after another
        // node took them over.
        let lease_until = shared.lease_valid_until.load(Ordering::SeqCst);
        // Read after the lease (a rejoin renews the epoch first, then the lease): under a
        // lease of the new epoch, the old epoch's fires are always seen as stale here.
        self.pending = drop_stale(shared, std::mem::take(&mut self.pending), |p| &p.task);
        if self.pending.is_empty() {
            return false;
        }
        // What the executor checks: the lease plus a quarter of dead-after, so a busy
        // executor has time to admit what was sent near the lease's end, while every
        // admission still precedes by a quarter of dead-after the earliest moment a taker
        // could ask it (`docs/cluster.md`, argument 4).
        let not_after = lease_until + shared.config.node_dead_after_ms / 4;
        if round_at > lease_until {
            hold_for_lease(shared, self.pending.drain(..), round_at);
            return false;
        }
        let by_executor = self.by_executor(shared, round_at);
        if by_executor.is_empty() {
            return false;
        }
        let requests = by_executor
            .into_iter()
            .map(|((app, address), group)| async move {
                let out = send_to(shared, &app, &address, group, not_after).await;
                (app, address, out)
            });
        let mut expired: Vec<Pending> = Vec::new();
        for (app, address, out) in join_all(requests).await {
            for answered in out.answered {
                self.classify(shared, &app, &address, answered, not_after, &mut expired)
                    .await;
            }
            self.not_sent(&address, out.unsent, out.why);
        }
        if !expired.is_empty() {
            tracing::warn!(
                triggers = expired.len(),
                "executors refused triggers sent after this node's lease had lapsed; holding them"
            );
            // The rest of this dispatch waits too: the lease is gone for all of it.
            hold_for_lease(
                shared,
                expired.into_iter().chain(self.pending.drain(..)),
                now_ms(),
            );
            return false;
        }
        true
    }

    /// This round's requests: the pending triggers by (app, executor), oldest first within
    /// each. Executors still marked full count as having said so again, without a request;
    /// triggers out of candidates end here.
    fn by_executor(
        &mut self,
        shared: &Shared,
        round_at: Millis,
    ) -> HashMap<(String, String), Vec<Pending>> {
        let mut held = std::mem::take(&mut self.pending);
        let mut ready = Vec::with_capacity(held.len());
        while let Some(mut p) = held.pop() {
            match p.candidates.get(p.next) {
                Some(address) if shared.rooms.is_full(address, round_at) => {
                    p.last_error = Some(format!("executor {address} is at capacity"));
                    p.next += 1;
                    held.push(p);
                }
                _ => ready.push(p),
            }
        }
        // Oldest first within each executor's requests: the pops above reversed them.
        ready.reverse();
        // Keyed by app too: the app decides the key a request is signed with.
        let mut by_executor: HashMap<(String, String), Vec<Pending>> = HashMap::new();
        for p in ready {
            match p.candidates.get(p.next).cloned() {
                Some(address) => {
                    let key = (p.job.job.spec.app.clone(), address);
                    by_executor.entry(key).or_default().push(p);
                }
                None => self.exhausted(p),
            }
        }
        by_executor
    }

    /// A trigger every candidate turned down: deferred if they were all full, waiting if
    /// none could be reached, failed otherwise.
    fn exhausted(&mut self, p: Pending) {
        if p.all_full && p.last_error.is_some() && p.shard_total == 1 {
            self.deferred.push(p.task);
        } else if p.shard_total == 1 && p.unreachable >= p.live {
            let limit = p.job.job.spec.no_executor_timeout_ms();
            match unreachable_wait(p, self.now, limit) {
                Wait::Again(task) => self.unsent.unreachable.push(task),
                Wait::Over(f) => self.failed.push(f),
            }
        } else {
            let reason = p
                .last_error
                .clone()
                .unwrap_or_else(|| "no executor could take it".into());
            self.failed.push(Failed::of(p, None, self.now, reason));
        }
    }

    /// What one request's answer means for each of its triggers.
    async fn classify(
        &mut self,
        shared: &Shared,
        app: &str,
        address: &str,
        answered: Answered,
        not_after: Millis,
        expired: &mut Vec<Pending>,
    ) {
        let Answered {
            group,
            result,
            sent_at,
            answered_at,
        } = answered;
        match result {
            Ok(ack) if ack.acks.len() == group.len() => {
                for (p, a) in group.into_iter().zip(ack.acks) {
                    self.acked(p, a.outcome, address, sent_at, expired);
                }
            }
            Ok(ack) => {
                let reason = format!(
                    "executor {address} answered {} acks for {} triggers",
                    ack.acks.len(),
                    group.len()
                );
                requeue(&mut self.pending, group, reason, false);
            }
            Err(e) if e.not_delivered() => {
                tracing::warn!(error = %e, "dispatch failed");
                requeue(&mut self.pending, group, e.to_string(), true);
            }
            Err(e) if answered_at > not_after => {
                // No answer, and the lease ran out meanwhile (this node stalled, or the
                // request took that long): past `not_after` the executor takes none of them
                // any more, so what it has now is final. Ask it.
                tracing::warn!(error = %e, triggers = group.len(), "dispatch unanswered past this node's lease; asking the executor what it took");
                let (taken, not_taken) = resolve_unanswered(shared, app, address, group).await;
                self.sent.extend(taken);
                expired.extend(not_taken);
            }
            Err(e) => {
                // Connected, but no answer: the executor may have the triggers. Sending
                // them elsewhere could run an attempt twice, so they count as dispatched to
                // it; if they never arrived, its next heartbeat (which lists the runs it
                // has) marks them lost and they are retried.
                tracing::warn!(error = %e, triggers = group.len(), "dispatch unanswered; treating it as delivered");
                self.sent
                    .extend(group.iter().filter_map(|p| dispatched(p, address, sent_at)));
            }
        }
    }

    /// One trigger's answer from the executor it was sent to.
    fn acked(
        &mut self,
        mut p: Pending,
        outcome: TriggerOutcome,
        address: &str,
        sent_at: Millis,
        expired: &mut Vec<Pending>,
    ) {
        match outcome {
            TriggerOutcome::Accepted | TriggerOutcome::Duplicate => {
                self.sent.extend(dispatched(&p, address, sent_at));
            }
            TriggerOutcome::Full => {
                p.last_error = Some(format!("executor {address} is at capacity"));
                p.next += 1;
                self.pending.push(p);
            }
            TriggerOutcome::Busy => {
                p.all_full = false;
                p.last_error = Some(format!(
                    "executor {address} is still running this job (block strategy discard_later)"
                ));
                p.next = if p.job.job.spec.route == Route::Busyover {
                    p.next + 1
                } else {
                    usize::MAX
                };
                self.pending.push(p);
            }
            TriggerOutcome::Expired => expired.push(p),
            TriggerOutcome::Rejected { reason } => {
                self.failed
                    .push(Failed::of(p, Some(address), sent_at, reason));
            }
        }
    }

    /// Triggers of one executor that this round did not send, and why.
    fn not_sent(&mut self, address: &str, unsent: Vec<Pending>, why: Unsent) {
        match why {
            Unsent::Full => {
                for mut p in unsent {
                    p.last_error = Some(format!("executor {address} is at capacity"));
                    p.next += 1;
                    self.pending.push(p);
                }
            }
            Unsent::Failed(reason, unreachable) => {
                requeue(&mut self.pending, unsent, reason, unreachable)
            }
            Unsent::NoIds(reason) => {
                for p in unsent {
                    if p.shard_total == 1 {
                        self.deferred.push(p.task);
                    } else {
                        // Other shards of the task may be out: fail this one alone.
                        let reason = format!("no run id could be reserved: {reason}");
                        self.failed.push(Failed::of(p, None, now_ms(), reason));
                    }
                }
            }
        }
    }

    /// Hands on what became of the batch: sends to the recorder, full ones back to the
    /// wheel, the rest settled or completed as failed.
    async fn finish(self, shared: &Shared) {
        let got_out = !self.sent.is_empty();
        if got_out {
            metrics::counter!("rota_dispatched_total").increment(self.sent.len() as u64);
            for d in self.sent {
                // The recorder is bounded; waiting here is back-pressure on the pool.
                if shared.recorder.send(d).await.is_err() {
                    break;
                }
            }
        }
        if !self.deferred.is_empty() {
            metrics::counter!("rota_deferred_total").increment(self.deferred.len() as u64);
            let hold = if got_out {
                FULL_HOLD_MS
            } else {
                FULL_IDLE_HOLD_MS
            };
            shared.ring.defer(self.deferred, now_ms() + hold);
        }
        settle_unsent(shared, self.unsent).await;
        complete_failures(shared, self.failed).await;
    }
}

/// Fires a dispatch takes no run for.
#[derive(Default)]
struct Unsendable {
    /// Of jobs that no longer exist.
    orphans: Vec<DueTask>,
    /// Recurring fires planned under a job generation that has since changed (their rows
    /// were deleted by the change).
    void: Vec<DueTask>,
    /// Of apps without a live executor: they wait in the database.
    no_executor: Vec<DueTask>,
    /// Whose app's every executor is registered but unreachable: they wait in the wheel.
    unreachable: Vec<DueTask>,
}

/// How long a fire that reached none of its app's executors waits before it is tried
/// again (an executor that died stays registered until its heartbeat is 90 s old).
const UNREACHABLE_HOLD_MS: i64 = 1_000;

/// What becomes of a fire that reached none of its app's executors.
enum Wait {
    /// It waits in the wheel and is tried again.
    Again(DueTask),
    /// It waited long enough: a failed attempt.
    Over(Failed),
}

/// A fire that reached none of its app's executors waits (not an attempt) until it has
/// waited `limit_ms`; then it fails as an attempt.
fn unreachable_wait(p: Pending, now: Millis, limit_ms: i64) -> Wait {
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
async fn settle_unsent(shared: &Shared, u: Unsendable) {
    let now = now_ms();
    if !u.orphans.is_empty() {
        let ids: Vec<i64> = u.orphans.iter().map(|t| t.task_id).collect();
        match shared.store.cancel_orphans(&ids, now).await {
            Ok(()) => shared
                .ring
                .fired(u.orphans.iter().map(|t| (t.task_id, t.attempt))),
            Err(e) => {
                tracing::warn!(error = %e, "cancelling tasks of deleted jobs failed; retrying shortly");
                shared.ring.defer(u.orphans, now + JOB_RETRY_MS);
            }
        }
    }
    if !u.void.is_empty() {
        metrics::counter!("rota_fires_void_total").increment(u.void.len() as u64);
        shared
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
        match shared.store.park_waiting(shared.lease.get(), &parked).await {
            Ok(()) => {
                tracing::info!(
                    tasks = parked.len(),
                    "fires found no live executor of their app; they wait for one"
                );
                shared
                    .ring
                    .fired(u.no_executor.iter().map(|t| (t.task_id, t.attempt)));
            }
            Err(e) => {
                tracing::warn!(error = %e, "parking fires without an executor failed; holding them");
                shared.ring.defer(u.no_executor, now + UNREACHABLE_HOLD_MS);
            }
        }
    }
    if !u.unreachable.is_empty() {
        metrics::counter!("rota_fires_waiting_total").increment(u.unreachable.len() as u64);
        shared.ring.defer(u.unreachable, now + UNREACHABLE_HOLD_MS);
    }
}

/// Sends one round's triggers for one executor: requests of at most [`MAX_PER_REQUEST`]
/// one after another, each sized to the room the executor said it had left, until it is
/// full, a request fails, or the round has taken [`ROUND_MAX_MS`]. A burst larger than
/// the executor's queue so costs one refused request, not a refused copy of the whole
/// burst every round; what is not sent goes back to the caller, for the next candidate
/// or the wheel. Run ids are taken per request, so triggers held back use up none.
async fn send_to(
    shared: &Shared,
    app: &str,
    address: &str,
    mut rest: Vec<Pending>,
    not_after: Millis,
) -> Sent {
    let started = Instant::now();
    let mut answered = Vec::new();
    let mut room = shared.rooms.first_request(address);
    let why = loop {
        if rest.is_empty() {
            break Unsent::Full;
        }
        let tail = rest.split_off(room.clamp(1, MAX_PER_REQUEST).min(rest.len()));
        let mut group = std::mem::replace(&mut rest, tail);
        let unnumbered = group.iter().filter(|p| p.run_id.is_none()).count();
        if unnumbered > 0 {
            match shared.run_ids.take(&shared.store, unnumbered).await {
                Ok(ids) => {
                    let slots = group.iter_mut().filter(|p| p.run_id.is_none());
                    for (p, id) in slots.zip(ids) {
                        p.run_id = Some(id);
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "reserving run ids failed; retrying shortly");
                    group.append(&mut rest);
                    rest = group;
                    break Unsent::NoIds(e.to_string());
                }
            }
        }
        let sent_at = now_ms();
        let batch = TriggerBatch {
            triggers: group
                .iter()
                .filter_map(|p| to_trigger(p, sent_at))
                .collect(),
            not_after: Some(not_after),
        };
        let sending = Instant::now();
        let result = shared.client.trigger(app, address, &batch).await;
        let elapsed = sending.elapsed();
        metrics::histogram!("rota_dispatch_seconds").record(elapsed.as_secs_f64());
        shared
            .slow
            .record(group.iter().map(|p| p.task.job_id), elapsed);
        let answered_at = now_ms();
        let stop = match &result {
            Ok(ack) => {
                let full = ack.acks.iter().any(|a| a.outcome == TriggerOutcome::Full);
                // An executor that does not say its room is sent full requests.
                room = match ack.room {
                    Some(r) => r as usize,
                    None if full => 0,
                    None => MAX_PER_REQUEST,
                };
                shared.rooms.note(address, room, answered_at);
                (room == 0 || full).then_some(Unsent::Full)
            }
            Err(e) => Some(Unsent::Failed(
                format!("not sent after the request before it failed: {e}"),
                e.not_delivered(),
            )),
        };
        answered.push(Answered {
            group,
            result,
            sent_at,
            answered_at,
        });
        if let Some(why) = stop {
            break why;
        }
        if started.elapsed() >= Duration::from_millis(ROUND_MAX_MS as u64) {
            break Unsent::Full;
        }
    };
    Sent {
        answered,
        unsent: rest,
        why,
    }
}

/// After an unanswered send whose `not_after` has passed: which of the triggers the
/// executor took (recorded as dispatched, under the run id it has) and which it did not
/// (held like any fire without a lease). If it does not answer this either, all count as
/// delivered, as for any unanswered send (its heartbeat sorts out the rest).
async fn resolve_unanswered(
    shared: &Shared,
    app: &str,
    address: &str,
    group: Vec<Pending>,
) -> (Vec<Dispatched>, Vec<Pending>) {
    let req = RunsKnownRequest {
        runs: group
            .iter()
            .map(|p| TaskAttempt {
                task_id: p.task.task_id,
                attempt: p.task.attempt,
            })
            .collect(),
    };
    let now = now_ms();
    let known = match shared.client.runs_known(app, address, &req).await {
        Ok(ack) => ack.known,
        Err(e) => {
            tracing::warn!(error = %e, "the executor did not answer which triggers it took; treating them as delivered");
            return (
                group
                    .iter()
                    .filter_map(|p| dispatched(p, address, now))
                    .collect(),
                Vec::new(),
            );
        }
    };
    let mut taken = Vec::new();
    let mut not_taken = Vec::new();
    for p in group {
        match known.iter().find(|k| {
            k.task_id == p.task.task_id
                && k.attempt == p.task.attempt
                && k.shard_index == p.shard_index
        }) {
            Some(k) => {
                // Under the run id the executor has: the one this node sent, or an
                // earlier node's.
                let numbered = Pending {
                    run_id: Some(k.run_id),
                    ..p
                };
                taken.extend(dispatched(&numbered, address, now));
            }
            None => not_taken.push(p),
        }
    }
    (taken, not_taken)
}

/// Drops fires held under an epoch of this node's lease that has ended: the node was taken
/// over since, and they are the taker's (`docs/cluster.md`).
fn drop_stale<T>(shared: &Shared, items: Vec<T>, task: impl Fn(&T) -> &DueTask) -> Vec<T> {
    let epoch = shared.lease.get().epoch;
    let before = items.len();
    let kept: Vec<T> = items
        .into_iter()
        .filter(|i| task(i).epoch == epoch)
        .collect();
    if kept.len() < before {
        let dropped = before - kept.len();
        metrics::counter!("rota_fires_dropped_stale_total").increment(dropped as u64);
        tracing::info!(dropped, "dropped fires of a lease epoch this node lost");
    }
    kept
}

/// Gives fires back to the wheel, unsent, while this node's lease is unconfirmed: they go
/// out when a heartbeat renews it, or are dropped with the wheel if the node was fenced.
fn hold_for_lease(shared: &Shared, pending: impl Iterator<Item = Pending>, now: Millis) {
    let mut held: HashMap<i64, DueTask> = HashMap::new();
    for p in pending {
        held.entry(p.task.task_id).or_insert(p.task);
    }
    metrics::counter!("rota_fires_held_total").increment(held.len() as u64);
    shared
        .ring
        .defer(held.into_values().collect(), now + LEASE_RETRY_MS);
}

/// Busyover (XXL-JOB's semantics): ask the executors in order whether they run this job now
/// (`/idle-beat`) and put the first idle one first; executors that do not answer go last.
async fn idle_first(
    shared: &Shared,
    app: &str,
    job_id: i64,
    candidates: Vec<String>,
) -> Vec<String> {
    let mut busy = Vec::new();
    let mut silent = Vec::new();
    for (i, address) in candidates.iter().enumerate() {
        match shared.client.idle_beat(app, address, job_id).await {
            Ok(ack) if ack.idle => {
                let mut ordered = vec![address.clone()];
                ordered.extend(busy);
                ordered.extend(candidates[i + 1..].iter().cloned());
                ordered.extend(silent);
                return ordered;
            }
            Ok(_) => busy.push(address.clone()),
            Err(_) => silent.push(address.clone()),
        }
    }
    busy.extend(silent);
    busy
}

/// Triggers whose request surely did not arrive go to their next candidate if the strategy
/// allows it; the others fail with the reason.
fn requeue(pending: &mut Vec<Pending>, group: Vec<Pending>, reason: String, unreachable: bool) {
    for mut p in group {
        p.all_full = false;
        p.unreachable += usize::from(unreachable);
        p.last_error = Some(reason.clone());
        p.next = if p.failover { p.next + 1 } else { usize::MAX };
        pending.push(p);
    }
}

/// Records the runs that ended at the scheduler, numbering those never sent. Waits for
/// the database (retrying) rather than forget a failure; at shutdown the claims stay in
/// the database and the next start recovers them.
async fn complete_failures(shared: &Shared, failed: Vec<Failed>) {
    if failed.is_empty() {
        return;
    }
    metrics::counter!("rota_dispatch_failures_total").increment(failed.len() as u64);
    let attempts: Vec<(i64, i32)> = failed
        .iter()
        .map(|f| (f.task.task_id, f.task.attempt))
        .collect();
    let unnumbered = failed.iter().filter(|f| f.run_id.is_none()).count();
    let mut delay = Duration::from_millis(50);
    let mut ids = loop {
        match shared.run_ids.take(&shared.store, unnumbered).await {
            Ok(ids) => break ids.into_iter(),
            Err(e) => {
                tracing::warn!(error = %e, "reserving run ids for failed dispatches failed; retrying");
                if *shared.shutdown.borrow() {
                    shared.ring.fired(attempts);
                    return;
                }
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(5));
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
    loop {
        match crate::complete::apply(shared, &updates).await {
            Ok(_) => break,
            Err(e) => {
                tracing::warn!(error = %format!("{e:#}"), "recording failed dispatches failed; retrying");
                if *shared.shutdown.borrow() {
                    break;
                }
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(5));
            }
        }
    }
    shared.ring.fired(attempts);
}

/// The trigger of a numbered pending run (`None` before it has a run id).
fn to_trigger(p: &Pending, sent_at: Millis) -> Option<Trigger> {
    let run_id = p.run_id?;
    let spec = &p.job.job.spec;
    let params = p.task.params.clone().or_else(|| spec.params.clone());
    let exclusive = !matches!(p.task.kind, TaskKind::Delayed);
    let input = match p.task.kind {
        TaskKind::Delayed => p.task.payload.clone().unwrap_or_default(),
        _ => params.clone().unwrap_or_default(),
    };
    let plugin = p.job.plugin.as_ref();
    Some(Trigger {
        run_id,
        job_id: p.job.job.id,
        job_name: spec.name.clone(),
        task_id: p.task.task_id,
        attempt: p.task.attempt,
        scheduled_at: p.task.due_at,
        dispatched_at: Some(sent_at),
        plugin: PluginRef {
            name: plugin.map(|p| p.name.clone()).unwrap_or_default(),
            sha256: plugin.map(|p| p.sha256.clone()).unwrap_or_default(),
        },
        input,
        params,
        shard_index: p.shard_index,
        shard_total: p.shard_total,
        timeout_ms: spec.timeout_ms,
        memory_mb: u32::try_from(spec.memory_mb).unwrap_or(64),
        block: spec.block,
        exclusive,
        http_allow: spec.http_allow.clone(),
    })
}

/// The record of a sent trigger (`None` for one never numbered, hence never sent).
fn dispatched(p: &Pending, address: &str, at: Millis) -> Option<Dispatched> {
    Some(Dispatched {
        run_id: p.run_id?,
        job_id: p.task.job_id,
        task_id: p.task.task_id,
        attempt: p.task.attempt,
        shard_index: p.shard_index,
        shard_total: p.shard_total,
        executor: address.to_owned(),
        scheduled_at: p.task.due_at,
        dispatched_at: at,
    })
}

/// A run that ended at the scheduler: it never reached a plugin.
fn failure(f: &Failed, run_id: i64) -> RunUpdate {
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
    }
}

/// Writes what was sent, in batches, after the fact; then the ring forgets those tasks.
pub(crate) async fn record_loop(shared: Arc<Shared>, mut rx: mpsc::Receiver<Dispatched>) {
    let mut buf: Vec<Dispatched> = Vec::with_capacity(RECORD_BATCH);
    let mut shutdown = shared.shutdown.clone();
    loop {
        let got = if *shutdown.borrow() {
            // Stopping: drain what in-flight dispatches still send, then end.
            match tokio::time::timeout(
                Duration::from_millis(50),
                rx.recv_many(&mut buf, RECORD_BATCH),
            )
            .await
            {
                Ok(n) => n,
                Err(_) if shared.in_flight.load(Ordering::SeqCst) == 0 => return,
                Err(_) => continue,
            }
        } else {
            tokio::select! {
                n = rx.recv_many(&mut buf, RECORD_BATCH) => n,
                r = shutdown.changed() => {
                    if r.is_err() {
                        return;
                    }
                    continue;
                }
            }
        };
        if got == 0 {
            return;
        }
        // Linger briefly to fill the batch: fewer, larger statements.
        let deadline = tokio::time::Instant::now() + RECORD_LINGER;
        while buf.len() < RECORD_BATCH {
            let room = RECORD_BATCH - buf.len();
            match tokio::time::timeout_at(deadline, rx.recv_many(&mut buf, room)).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
        let mut delay = Duration::from_millis(50);
        loop {
            // Under the lease held now: what was sent under an epoch this node lost is not
            // recorded (the taker recorded what had arrived).
            match shared
                .store
                .record_dispatches(shared.lease.get(), &buf, now_ms())
                .await
            {
                Ok(elsewhere) => {
                    if elsewhere > 0 {
                        tracing::warn!(
                            dropped = elsewhere,
                            "dispatches of claims taken over by another node were not recorded"
                        );
                    }
                    break;
                }
                Err(crate::store::Error::Fenced) => {
                    tracing::warn!(
                        dropped = buf.len(),
                        "this node was taken over: its unrecorded dispatches are the taker's to record"
                    );
                    break;
                }
                Err(e) => {
                    tracing::warn!(error = %e, rows = buf.len(), "recording dispatches failed; retrying");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(5));
                }
            }
        }
        shared
            .ring
            .fired(buf.iter().map(|d| (d.task_id, d.attempt)));
        buf.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_with_more_than_the_allowed_slow_dispatches_moves_to_the_slow_pool() {
        let slow = SlowTracker::new(500, 10);
        for _ in 0..10 {
            slow.record([7], Duration::from_millis(600));
            slow.record([8], Duration::from_millis(100));
        }
        assert!(!slow.is_slow(7), "10 slow dispatches are allowed");
        slow.record([7], Duration::from_millis(501));
        assert!(slow.is_slow(7), "the 11th moves it");
        assert!(!slow.is_slow(8), "fast dispatches never count");
    }
}
