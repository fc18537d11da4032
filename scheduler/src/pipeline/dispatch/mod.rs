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

use super::complete::Completion;
use super::ready::ReadyBoard;
use super::ring::Ring;
use super::{Cluster, ExecutorCache, JobCache, JobEntry, RunIds};
use crate::client::{ClientError, ExecutorClient};
use crate::clock::Clock;
use crate::lateness::RecentLateness;
use crate::model::*;
use crate::periodic::Retrying;
use crate::route::{Route, Router};

mod gather;
mod handoff;
mod record;
mod round;
mod send;
mod settle;
mod webhook;
mod xxl;

pub(crate) use record::record_loop;
use round::*;
use send::*;
use settle::*;
pub(crate) use webhook::Webhooks;
use webhook::deliver;

/// What the pools and a dispatch read and may call: due tasks come from the wheel (and
/// go back to it when they must wait), jobs and executors from the caches, the order from
/// the router; triggers go out through the client under run ids taken here, sent ones to
/// the recorder, failed ones to completion. Owned by dispatch alone: the slow tracker that
/// picks the pool, what each executor said about its room, and the dispatches in flight.
pub(crate) struct Dispatcher {
    pub cluster: Arc<Cluster>,
    pub ring: Ring,
    pub jobs: Arc<JobCache>,
    pub executors: Arc<ExecutorCache>,
    pub router: Arc<Router>,
    pub client: ExecutorClient,
    pub run_ids: Arc<RunIds>,
    /// Records the runs that end at the scheduler (failed dispatches).
    pub completion: Arc<Completion>,
    /// What was sent, for [`record_loop`].
    pub recorder: mpsc::Sender<Dispatched>,
    /// Each fire's lateness, for the dashboard (the node reads it).
    pub lateness: Arc<RecentLateness>,
    /// Where a pull job's fires are announced once they are ready for its consumers.
    pub ready: Arc<ReadyBoard>,
    /// Delivers the fires of `http` jobs.
    pub webhooks: Webhooks,
    pub slow: SlowTracker,
    /// The room each executor said it had left, for sizing trigger requests.
    pub rooms: Rooms,
    /// Dispatches in progress (the recorder waits for them at shutdown).
    pub in_flight: std::sync::atomic::AtomicUsize,
    /// One job's `/run`s to one XXL-JOB executor go one at a time, whichever batch they
    /// are in ([`xxl::JobSends`]).
    pub xxl_sends: xxl::JobSends,
    /// Busy pull jobs' fires gather before they are handed over ([`gather::Gather`]).
    pub pull_gather: gather::Gather,
}

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
    clock: Clock,
    slow_ms: u64,
    max_count: u32,
}

impl SlowTracker {
    pub(crate) fn new(clock: Clock, slow_ms: u64, max_count: u32) -> Self {
        SlowTracker {
            state: Mutex::new((0, HashMap::new())),
            clock,
            slow_ms,
            max_count,
        }
    }

    fn with<R>(&self, f: impl FnOnce(&mut HashMap<i64, u32>) -> R) -> R {
        let mut g = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let minute = self.clock.now_ms() / 60_000;
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
    pub(crate) fn start(
        dispatcher: &Arc<Dispatcher>,
        tasks: &mut tokio::task::JoinSet<()>,
    ) -> Pools {
        let capacity = dispatcher.cluster.config.pool_queue.max(1);
        let (fast, fast_rx) = mpsc::channel(capacity);
        let (slow, slow_rx) = mpsc::channel(capacity);
        tasks.spawn(pool_loop(
            dispatcher.clone(),
            Lane::Fast,
            fast_rx,
            dispatcher.cluster.config.fast_pool_size,
        ));
        tasks.spawn(pool_loop(
            dispatcher.clone(),
            Lane::Slow,
            slow_rx,
            dispatcher.cluster.config.slow_pool_size,
        ));
        Pools {
            fast,
            slow,
            capacity,
        }
    }

    /// Called on the ring thread with one tick's due tasks (highest priority first).
    pub(crate) fn fire(&self, dispatcher: &Dispatcher, batch: Vec<DueTask>) {
        let now = dispatcher.cluster.clock.now_ms();
        let batch = drop_stale(dispatcher, batch, |t| t);
        if batch.is_empty() {
            return;
        }
        // Fire only under a confirmed lease: a node that could not heartbeat (a stall, a
        // lost database) holds its wheel until it can, or until it learns it was fenced,
        // so a take-over never races a late fire (docs/cluster.md).
        if !dispatcher.cluster.fire_lease.holds_at(now) {
            metrics::counter!("rota_fires_held_total").increment(batch.len() as u64);
            dispatcher.ring.defer(batch, now + LEASE_RETRY_MS);
            return;
        }
        for t in &batch {
            metrics::histogram!("rota_fire_lateness_seconds")
                .record((now - t.due_at).max(0) as f64 / 1000.0);
        }
        dispatcher
            .lateness
            .record(now, batch.iter().map(|t| now - t.due_at));
        metrics::counter!("rota_fires_total").increment(batch.len() as u64);
        let (slow, fast): (Vec<DueTask>, Vec<DueTask>) = batch
            .into_iter()
            .partition(|t| dispatcher.slow.is_slow(t.job_id));
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
                dispatcher.ring.defer(tasks, now);
            }
        }
    }
}

async fn pool_loop(
    dispatcher: Arc<Dispatcher>,
    lane: Lane,
    mut rx: mpsc::Receiver<Vec<DueTask>>,
    size: usize,
) {
    let permits = Arc::new(Semaphore::new(size.max(1)));
    let mut shutdown = dispatcher.cluster.shutdown.clone();
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
            dispatcher
                .ring
                .defer(batch, dispatcher.cluster.clock.now_ms());
            break;
        }
        // Counted before the task starts, so the recorder never sees a gap at shutdown.
        dispatcher.in_flight.fetch_add(1, Ordering::SeqCst);
        let dispatcher = dispatcher.clone();
        tokio::spawn(async move {
            dispatch_tasks(&dispatcher, batch).await;
            dispatcher.in_flight.fetch_sub(1, Ordering::SeqCst);
            drop(permit);
        });
        metrics::gauge!("rota_pool_queue_depth", "pool" => lane.as_str()).set(rx.len() as f64);
    }
    // Whatever is still queued goes back to the wheel, to be handed back as claims.
    rx.close();
    while let Some(batch) = rx.recv().await {
        dispatcher
            .ring
            .defer(batch, dispatcher.cluster.clock.now_ms());
    }
    // Wait for in-flight dispatches.
    let _ = permits.acquire_many(size.max(1) as u32).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::Clock;

    /// A dispatch round's view of an executor that said it was full: no request for half a
    /// hold, then a small probe, then requests sized to what it says.
    #[tokio::test(start_paused = true)]
    async fn a_full_executor_is_left_alone_for_a_moment_then_probed() {
        let clock = Clock::tokio_from(5_000_000);
        let rooms = Rooms::default();
        let e = "http://127.0.0.1:9999";
        assert_eq!(
            rooms.first_request(e),
            MAX_PER_REQUEST,
            "never heard of: a full request"
        );

        rooms.note(e, 0, clock.now_ms());
        assert!(rooms.is_full(e, clock.now_ms()));
        tokio::time::advance(Duration::from_millis((FULL_HOLD_MS / 2 - 1) as u64)).await;
        assert!(rooms.is_full(e, clock.now_ms()), "still within half a hold");
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(
            !rooms.is_full(e, clock.now_ms()),
            "tried again after half a hold"
        );
        assert_eq!(
            rooms.first_request(e),
            PROBE,
            "with a probe, not a full request"
        );

        rooms.note(e, 300, clock.now_ms());
        assert!(!rooms.is_full(e, clock.now_ms()));
        assert_eq!(
            rooms.first_request(e),
            300,
            "sized to the room it said it has"
        );
    }

    /// Slow dispatches count per minute of the node's clock: a job moved to the slow pool
    /// comes back at the next minute.
    #[tokio::test(start_paused = true)]
    async fn slow_dispatches_count_per_minute_of_the_nodes_clock() {
        let clock = Clock::tokio_from(60_000 * 1_000);
        let slow = SlowTracker::new(clock.clone(), 500, 10);
        for _ in 0..11 {
            slow.record([7], Duration::from_millis(600));
        }
        assert!(slow.is_slow(7));
        tokio::time::advance(Duration::from_millis(59_999)).await;
        assert!(slow.is_slow(7), "still the same minute");
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(!slow.is_slow(7), "a new minute counts afresh");
    }

    #[test]
    fn a_job_with_more_than_the_allowed_slow_dispatches_moves_to_the_slow_pool() {
        let slow = SlowTracker::new(Clock::Wall, 500, 10);
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
