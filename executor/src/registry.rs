//! Which runs this executor has, and the rules for taking a new one.
//!
//! The [`Registry`] is the executor's bookkeeping, behind one `std` mutex in the node and
//! never held across an `.await`:
//!
//! - *active* runs (queued or running), bounded by `capacity + queue` (`full` beyond);
//! - a dedupe index by (task, attempt, shard) over active and recently finished runs, so
//!   a repeated trigger is a `duplicate` and `/runs/known` can answer a restarted
//!   scheduler; finished runs are remembered for [`RECENT_TTL`] (at most
//!   [`RECENT_MAX`]);
//! - one *lane* per job for exclusive triggers (recurring and manual fires), where the
//!   job's block strategy applies: `serial` queues behind the lane, `discard_later`
//!   refuses (`busy`), `cover_early` kills everything in the lane and queues behind it
//!   (the killed runs leave within a tick). Only the head of a lane may run. Delayed
//!   tasks (non-exclusive) have no lane and run concurrently.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rota_proto::{BlockStrategy, KnownRun, TaskAttempt, Trigger, TriggerOutcome};
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;

use crate::runtime::RunStatus;

/// How long a finished run is remembered for dedupe and `/runs/known`.
pub const RECENT_TTL: Duration = Duration::from_secs(5 * 60);
/// Most finished runs remembered, whatever their age.
pub const RECENT_MAX: usize = 100_000;

/// What a run's task needs to take part: its kill switch and its turn signal.
#[derive(Debug)]
pub struct Admission {
    pub kill: CancellationToken,
    /// Notified when the run becomes the head of its job's lane.
    pub turn: Arc<Notify>,
}

#[derive(Debug)]
struct Active {
    known: KnownRun,
    job_id: i64,
    exclusive: bool,
    started: bool,
    kill: CancellationToken,
    turn: Arc<Notify>,
    /// Set to the final status when the run ends; dropped (closed) if it is released.
    done: watch::Sender<Option<RunStatus>>,
}

#[derive(Debug)]
pub struct Registry {
    limit: usize,
    active: HashMap<i64, Active>,
    /// (task, attempt) → its shards, active or recently finished.
    attempts: HashMap<(i64, i32), Vec<KnownRun>>,
    lanes: HashMap<i64, VecDeque<i64>>,
    job_runs: HashMap<i64, usize>,
    recent: VecDeque<(Instant, KnownRun)>,
    running: usize,
}

impl Registry {
    /// `limit`: most active (queued + running) runs.
    pub fn new(limit: usize) -> Self {
        Self {
            limit,
            active: HashMap::new(),
            attempts: HashMap::new(),
            lanes: HashMap::new(),
            job_runs: HashMap::new(),
            recent: VecDeque::new(),
            running: 0,
        }
    }

    /// Why `trigger` cannot be taken, if it cannot; `None` if [`Registry::admit`] would
    /// take it now.
    pub fn check(&self, trigger: &Trigger) -> Option<TriggerOutcome> {
        let known = self
            .attempts
            .get(&(trigger.task_id, trigger.attempt))
            .is_some_and(|runs| runs.iter().any(|r| r.shard_index == trigger.shard_index));
        if known || self.active.contains_key(&trigger.run_id) {
            return Some(TriggerOutcome::Duplicate);
        }
        if self.active.len() >= self.limit {
            return Some(TriggerOutcome::Full);
        }
        let lane_busy = trigger.exclusive
            && self
                .lanes
                .get(&trigger.job_id)
                .is_some_and(|lane| !lane.is_empty());
        if lane_busy && trigger.block == BlockStrategy::DiscardLater {
            return Some(TriggerOutcome::Busy);
        }
        None
    }

    /// Takes `trigger` (applying its block strategy), or says why not.
    pub fn admit(&mut self, trigger: &Trigger) -> Result<Admission, TriggerOutcome> {
        if let Some(outcome) = self.check(trigger) {
            return Err(outcome);
        }
        let known = KnownRun {
            task_id: trigger.task_id,
            attempt: trigger.attempt,
            run_id: trigger.run_id,
            shard_index: trigger.shard_index,
        };
        if trigger.exclusive {
            let lane = self.lanes.entry(trigger.job_id).or_default();
            if trigger.block == BlockStrategy::CoverEarly {
                for earlier in lane.iter() {
                    if let Some(run) = self.active.get(earlier) {
                        run.kill.cancel();
                    }
                }
            }
            lane.push_back(trigger.run_id);
        }
        let kill = CancellationToken::new();
        let turn = Arc::new(Notify::new());
        self.active.insert(
            trigger.run_id,
            Active {
                known,
                job_id: trigger.job_id,
                exclusive: trigger.exclusive,
                started: false,
                kill: kill.clone(),
                turn: turn.clone(),
                done: watch::Sender::new(None),
            },
        );
        self.attempts
            .entry((trigger.task_id, trigger.attempt))
            .or_default()
            .push(known);
        *self.job_runs.entry(trigger.job_id).or_default() += 1;
        Ok(Admission { kill, turn })
    }

    /// Whether the run may start as far as its job's lane goes.
    pub fn is_turn(&self, run_id: i64) -> bool {
        match self.active.get(&run_id) {
            Some(run) if run.exclusive => self
                .lanes
                .get(&run.job_id)
                .and_then(|lane| lane.front())
                .is_some_and(|&head| head == run_id),
            _ => true,
        }
    }

    /// Marks the run as executing. `false` if it is not active.
    pub fn start(&mut self, run_id: i64) -> bool {
        match self.active.get_mut(&run_id) {
            Some(run) if !run.started => {
                run.started = true;
                self.running += 1;
                true
            }
            Some(_) => true,
            None => false,
        }
    }

    /// The run is over: `Some(status)` if it ended (remembered as recent), `None` if it
    /// was released unstarted at shutdown (forgotten, so the scheduler may resend it).
    /// The next run of its lane gets its turn.
    pub fn finish(&mut self, run_id: i64, status: Option<RunStatus>, now: Instant) {
        let Some(run) = self.active.remove(&run_id) else {
            return;
        };
        if run.started {
            self.running -= 1;
        }
        if let Some(count) = self.job_runs.get_mut(&run.job_id) {
            *count -= 1;
            if *count == 0 {
                self.job_runs.remove(&run.job_id);
            }
        }
        if run.exclusive
            && let Some(lane) = self.lanes.get_mut(&run.job_id)
        {
            let was_head = lane.front() == Some(&run_id);
            lane.retain(|&id| id != run_id);
            if lane.is_empty() {
                self.lanes.remove(&run.job_id);
            } else if was_head && let Some(next) = lane.front().and_then(|id| self.active.get(id)) {
                next.turn.notify_one();
            }
        }
        match status {
            Some(status) => {
                self.recent.push_back((now, run.known));
                run.done.send_replace(Some(status));
            }
            None => self.forget(&run.known),
        }
        self.prune(now);
    }

    /// Signals the run to stop; returns a receiver of its final status (closed if it is
    /// released instead). `None` if the run is not active here.
    pub fn kill(&self, run_id: i64) -> Option<watch::Receiver<Option<RunStatus>>> {
        let run = self.active.get(&run_id)?;
        run.kill.cancel();
        Some(run.done.subscribe())
    }

    /// Signals every active run to stop; returns how many there were.
    pub fn kill_all(&self) -> usize {
        for run in self.active.values() {
            run.kill.cancel();
        }
        self.active.len()
    }

    pub fn is_active(&self, run_id: i64) -> bool {
        self.active.contains_key(&run_id)
    }

    pub fn is_empty(&self) -> bool {
        self.active.is_empty()
    }

    /// Runs executing now.
    pub fn running(&self) -> usize {
        self.running
    }

    /// How many more runs would be admitted now (queued + running below the limit).
    pub fn room(&self) -> usize {
        self.limit.saturating_sub(self.active.len())
    }

    /// Ids of the runs queued or running.
    pub fn active_ids(&self) -> Vec<i64> {
        self.active.keys().copied().collect()
    }

    /// No run of this job is queued or running here.
    pub fn job_idle(&self, job_id: i64) -> bool {
        !self.job_runs.contains_key(&job_id)
    }

    /// Which of these attempts this executor has (active or recently finished), one
    /// entry per shard.
    pub fn known(&mut self, attempts: &[TaskAttempt], now: Instant) -> Vec<KnownRun> {
        self.prune(now);
        attempts
            .iter()
            .filter_map(|a| self.attempts.get(&(a.task_id, a.attempt)))
            .flatten()
            .copied()
            .collect()
    }

    /// Forgets finished runs past [`RECENT_TTL`] or beyond [`RECENT_MAX`].
    fn prune(&mut self, now: Instant) {
        while let Some(&(at, known)) = self.recent.front() {
            let expired = now.saturating_duration_since(at) > RECENT_TTL;
            if !expired && self.recent.len() <= RECENT_MAX {
                break;
            }
            self.recent.pop_front();
            self.forget(&known);
        }
    }

    fn forget(&mut self, known: &KnownRun) {
        let key = (known.task_id, known.attempt);
        if let Some(runs) = self.attempts.get_mut(&key) {
            runs.retain(|r| r.run_id != known.run_id);
            if runs.is_empty() {
                self.attempts.remove(&key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rota_proto::PluginRef;
    use std::future::Future;

    fn trigger(run_id: i64, job_id: i64, task_id: i64) -> Trigger {
        Trigger {
            run_id,
            job_id,
            job_name: "job".into(),
            task_id,
            attempt: 1,
            scheduled_at: 0,
            dispatched_at: None,
            plugin: PluginRef {
                name: "p".into(),
                sha256: "0".repeat(64),
            },
            input: String::new(),
            params: None,
            shard_index: 0,
            shard_total: 1,
            timeout_ms: 1000,
            memory_mb: 64,
            block: BlockStrategy::Serial,
            exclusive: false,
            http_allow: Vec::new(),
            traceparent: None,
            report_within_ms: None,
        }
    }

    fn exclusive(run_id: i64, job_id: i64, block: BlockStrategy) -> Trigger {
        Trigger {
            exclusive: true,
            block,
            ..trigger(run_id, job_id, run_id * 100)
        }
    }

    #[test]
    fn duplicates_by_task_attempt_and_shard() {
        let mut reg = Registry::new(10);
        let now = Instant::now();
        reg.admit(&trigger(1, 1, 42)).unwrap();
        // Same attempt and shard under another run id.
        assert_eq!(
            reg.check(&trigger(2, 1, 42)),
            Some(TriggerOutcome::Duplicate)
        );
        // Same run id again.
        assert_eq!(
            reg.check(&trigger(1, 1, 43)),
            Some(TriggerOutcome::Duplicate)
        );
        // Another shard or attempt is a new run.
        let shard = Trigger {
            shard_index: 1,
            shard_total: 2,
            ..trigger(3, 1, 42)
        };
        assert!(reg.admit(&shard).is_ok());
        let retry = Trigger {
            attempt: 2,
            ..trigger(4, 1, 42)
        };
        assert!(reg.admit(&retry).is_ok());
        // Still a duplicate after it finished (recent), not after a release.
        reg.finish(1, Some(RunStatus::Succeeded), now);
        assert_eq!(
            reg.check(&trigger(5, 1, 42)),
            Some(TriggerOutcome::Duplicate)
        );
        reg.finish(3, None, now);
        let again = Trigger {
            shard_index: 1,
            ..trigger(6, 1, 42)
        };
        assert_eq!(reg.check(&again), None);
        // Forgotten after the TTL.
        reg.prune(now + RECENT_TTL + Duration::from_secs(1));
        assert_eq!(reg.check(&trigger(5, 1, 42)), None);
    }

    #[test]
    fn full_beyond_the_limit() {
        let mut reg = Registry::new(2);
        assert_eq!(reg.room(), 2);
        reg.admit(&trigger(1, 1, 1)).unwrap();
        assert_eq!(reg.room(), 1);
        reg.admit(&trigger(2, 1, 2)).unwrap();
        assert_eq!(reg.room(), 0);
        assert_eq!(
            reg.admit(&trigger(3, 1, 3)).unwrap_err(),
            TriggerOutcome::Full
        );
        reg.finish(1, Some(RunStatus::Failed), Instant::now());
        assert_eq!(reg.room(), 1);
        assert!(reg.admit(&trigger(3, 1, 3)).is_ok());
    }

    #[test]
    fn delayed_tasks_of_one_job_run_concurrently() {
        let mut reg = Registry::new(10);
        for id in 1..=3 {
            reg.admit(&trigger(id, 7, id)).unwrap();
            assert!(reg.is_turn(id));
        }
        assert!(!reg.job_idle(7));
        assert!(reg.job_idle(8));
    }

    #[test]
    fn serial_queues_behind_the_lane() {
        let mut reg = Registry::new(10);
        let first = reg.admit(&exclusive(1, 7, BlockStrategy::Serial)).unwrap();
        let second = reg.admit(&exclusive(2, 7, BlockStrategy::Serial)).unwrap();
        assert!(reg.is_turn(1));
        assert!(!reg.is_turn(2));
        // Another job's lane is independent.
        reg.admit(&exclusive(3, 8, BlockStrategy::Serial)).unwrap();
        assert!(reg.is_turn(3));
        assert!(reg.start(1));
        assert_eq!(reg.running(), 1);
        reg.finish(1, Some(RunStatus::Succeeded), Instant::now());
        assert_eq!(reg.running(), 0);
        assert!(reg.is_turn(2));
        assert!(!first.kill.is_cancelled() && !second.kill.is_cancelled());
        // The head change was signalled (the permit is stored).
        let notified = second.turn.notified();
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        let mut notified = std::pin::pin!(notified);
        assert!(notified.as_mut().poll(&mut cx).is_ready());
    }

    #[test]
    fn discard_later_refuses_while_the_lane_is_busy() {
        let mut reg = Registry::new(10);
        reg.admit(&exclusive(1, 7, BlockStrategy::Serial)).unwrap();
        assert_eq!(
            reg.admit(&exclusive(2, 7, BlockStrategy::DiscardLater))
                .unwrap_err(),
            TriggerOutcome::Busy
        );
        // A delayed task of the same job is not blocked.
        assert!(reg.admit(&trigger(3, 7, 3)).is_ok());
        reg.finish(1, Some(RunStatus::Succeeded), Instant::now());
        assert!(
            reg.admit(&exclusive(2, 7, BlockStrategy::DiscardLater))
                .is_ok()
        );
    }

    #[test]
    fn cover_early_kills_the_lane_and_runs_next() {
        let mut reg = Registry::new(10);
        let running = reg.admit(&exclusive(1, 7, BlockStrategy::Serial)).unwrap();
        let queued = reg.admit(&exclusive(2, 7, BlockStrategy::Serial)).unwrap();
        reg.start(1);
        let cover = reg
            .admit(&exclusive(3, 7, BlockStrategy::CoverEarly))
            .unwrap();
        assert!(running.kill.is_cancelled());
        assert!(queued.kill.is_cancelled());
        assert!(!cover.kill.is_cancelled());
        assert!(!reg.is_turn(3));
        // The queued one leaves first (killed while waiting), then the running one.
        reg.finish(2, Some(RunStatus::Killed), Instant::now());
        assert!(!reg.is_turn(3));
        reg.finish(1, Some(RunStatus::Killed), Instant::now());
        assert!(reg.is_turn(3));
    }

    #[test]
    fn kill_reports_the_final_status() {
        let mut reg = Registry::new(10);
        let adm = reg.admit(&trigger(1, 1, 1)).unwrap();
        assert!(reg.kill(99).is_none());
        let rx = reg.kill(1).unwrap();
        assert!(adm.kill.is_cancelled());
        assert_eq!(*rx.borrow(), None);
        reg.finish(1, Some(RunStatus::Killed), Instant::now());
        assert_eq!(*rx.borrow(), Some(RunStatus::Killed));
        assert!(reg.is_empty());
        assert!(reg.kill(1).is_none());
    }

    #[test]
    fn known_lists_active_and_recent_shards() {
        let mut reg = Registry::new(10);
        let now = Instant::now();
        for shard in 0..2 {
            let t = Trigger {
                shard_index: shard,
                shard_total: 2,
                ..trigger(10 + i64::from(shard), 1, 42)
            };
            reg.admit(&t).unwrap();
        }
        reg.finish(10, Some(RunStatus::Succeeded), now);
        let mut known = reg.known(
            &[
                TaskAttempt {
                    task_id: 42,
                    attempt: 1,
                },
                TaskAttempt {
                    task_id: 43,
                    attempt: 1,
                },
            ],
            now,
        );
        known.sort_by_key(|k| k.run_id);
        assert_eq!(
            known
                .iter()
                .map(|k| (k.run_id, k.shard_index))
                .collect::<Vec<_>>(),
            [(10, 0), (11, 1)]
        );
    }

    #[test]
    fn recent_is_bounded() {
        let mut reg = Registry::new(RECENT_MAX + 10);
        let now = Instant::now();
        for id in 0..(RECENT_MAX as i64 + 5) {
            reg.admit(&trigger(id, 1, id)).unwrap();
            reg.finish(id, Some(RunStatus::Succeeded), now);
        }
        assert_eq!(reg.recent.len(), RECENT_MAX);
        assert_eq!(reg.attempts.len(), RECENT_MAX);
        assert_eq!(reg.check(&trigger(1_000_000_000, 1, 0)), None);
    }
}
