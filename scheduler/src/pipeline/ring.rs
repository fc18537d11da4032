//! The ring: the wheel of claimed tasks and the thread that fires each due tick.
//!
//! The scan puts claimed tasks in; a dedicated OS thread (not a tokio task, so a busy runtime
//! cannot delay a tick) sleeps until the earliest due time, takes every task due by now — the
//! highest priority first — and hands them to the pools. Cancelling goes through the same
//! lock, so a task is either still in the wheel (and removed), being fired (too late), or
//! not here; a cancelled task is never handed out.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use super::wheel::Wheel;
use crate::clock::Clock;
use crate::model::{DueTask, Millis};

/// Slots of the wheel: a power of two above the 5 s window in milliseconds.
const SLOTS: usize = 8192;

/// Tombstones of cancelled tasks are kept this long (longer than a scan window)…
const TOMBSTONE_MS: i64 = 60_000;
/// …and pruned once there are more than this many.
const TOMBSTONES: usize = 10_000;

/// Longest the ring thread sleeps without looking (also bounds how late a stop is noticed).
const MAX_SLEEP: Duration = Duration::from_millis(100);

#[derive(Clone)]
pub struct Ring {
    inner: Arc<RingInner>,
}

/// The wheel behind its lock, and the condition variable the ring thread sleeps on.
struct RingInner {
    state: Mutex<State>,
    wake: Condvar,
    /// `state.stopping`, readable without the lock: the heartbeat asks every beat, and
    /// must never queue behind the wheel's work (its lease to fire would lapse).
    stopped: AtomicBool,
    /// When "due" is: the node's time, or a paused clock in tests.
    clock: Clock,
}

/// Which of two copies of a task is current: a later lease epoch (after a rejoin, the old
/// epoch's copies are another node's), then a later attempt.
type Rank = (i64, i32);

fn rank(t: &DueTask) -> Rank {
    (t.epoch, t.attempt)
}

struct State {
    wheel: Wheel<DueTask>,
    /// Rank and slot of every task in the wheel, by task id: its due time, or later while
    /// it is held ([`Ring::hold`]).
    index: HashMap<i64, (Rank, Millis)>,
    /// Rank of every task handed to a pool and not yet recorded as dispatched. A task's
    /// next attempt may enter the wheel before its previous one is recorded (a fast failure
    /// report can beat the batched record), so entries are per attempt.
    firing: HashMap<i64, Rank>,
    /// Being cancelled: must not fire, whatever arrives meanwhile.
    cancelling: HashSet<i64>,
    /// Tasks that came due (or were claimed) while their cancel was open: out of the wheel
    /// until the cancel is settled.
    parked: HashMap<i64, DueTask>,
    /// Recently cancelled tasks, with when: a claim that raced the cancel (the scan read the
    /// task just before the database cancelled it) must not bring it back.
    tombstones: HashMap<i64, Millis>,
    stopping: bool,
}

/// Where a task was when a cancel looked for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelState {
    /// It was in the wheel and is now held out of it until the cancel is settled.
    Held,
    /// It is being dispatched: too late to cancel.
    Firing,
    /// Not in this node's wheel.
    Absent,
}

impl Ring {
    pub fn new(clock: Clock) -> Self {
        Ring {
            inner: Arc::new(RingInner {
                state: Mutex::new(State {
                    wheel: Wheel::new(clock.now_ms(), SLOTS),
                    index: HashMap::new(),
                    firing: HashMap::new(),
                    cancelling: HashSet::new(),
                    parked: HashMap::new(),
                    tombstones: HashMap::new(),
                    stopping: false,
                }),
                wake: Condvar::new(),
                stopped: AtomicBool::new(false),
                clock,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic elsewhere must not stop the ring: the state stays consistent per operation.
        self.inner.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Puts claimed tasks in the wheel (a task already here or firing is not added twice).
    /// Returns how many went in.
    pub fn insert(&self, tasks: impl IntoIterator<Item = DueTask>) -> usize {
        let mut st = self.lock();
        let mut n = 0;
        if st.stopping {
            return 0; // claims stay in the database for recovery
        }
        if st.tombstones.len() > TOMBSTONES {
            let horizon = self.inner.clock.now_ms() - TOMBSTONE_MS;
            st.tombstones.retain(|_, at| *at > horizon);
        }
        for t in tasks {
            if st.tombstones.contains_key(&t.task_id) {
                continue;
            }
            if st.cancelling.contains(&t.task_id) {
                st.parked.insert(t.task_id, t);
                continue;
            }
            let newer_here = st
                .index
                .get(&t.task_id)
                .is_some_and(|&(r, _)| r >= rank(&t));
            let firing = st.firing.get(&t.task_id).is_some_and(|&r| r >= rank(&t));
            if newer_here || firing {
                continue;
            }
            if let Some((_, due)) = st.index.remove(&t.task_id) {
                // An older attempt (or an older epoch's copy) still waiting here is superseded.
                st.wheel.remove(due, |old| old.task_id == t.task_id);
            }
            st.index.insert(t.task_id, (rank(&t), t.due_at));
            st.wheel.insert(t.due_at, t);
            n += 1;
        }
        drop(st);
        if n > 0 {
            self.inner.wake.notify_one();
        }
        n
    }

    /// Has the ring stopped (shutdown, or fenced)? Lock-free.
    pub fn is_stopped(&self) -> bool {
        self.inner.stopped.load(Ordering::SeqCst)
    }

    /// Tasks in the wheel (not counting those being fired).
    pub fn len(&self) -> usize {
        self.lock().index.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Is this task in the wheel or being fired?
    pub fn holds(&self, task_id: i64) -> bool {
        let st = self.lock();
        st.index.contains_key(&task_id) || st.firing.contains_key(&task_id)
    }

    /// First half of a cancel: stops the task from firing from now on.
    pub fn begin_cancel(&self, task_id: i64) -> CancelState {
        let mut st = self.lock();
        if st.index.contains_key(&task_id) {
            st.cancelling.insert(task_id);
            return CancelState::Held;
        }
        if st.firing.contains_key(&task_id) {
            return CancelState::Firing;
        }
        st.cancelling.insert(task_id);
        CancelState::Absent
    }

    /// Second half: if the database cancelled the task, drop it from the wheel; otherwise let
    /// it fire as planned.
    pub fn finish_cancel(&self, task_id: i64, cancelled: bool) {
        let mut st = self.lock();
        st.cancelling.remove(&task_id);
        let parked = st.parked.remove(&task_id);
        if cancelled {
            if let Some((_, due)) = st.index.remove(&task_id) {
                st.wheel.remove(due, |t| t.task_id == task_id);
            }
            st.tombstones.insert(task_id, self.inner.clock.now_ms());
        } else if let Some(t) = parked {
            st.index.insert(t.task_id, (rank(&t), t.due_at));
            st.wheel.insert(t.due_at, t);
            drop(st);
            self.inner.wake.notify_one();
        }
    }

    /// Attempts handed out by the ring are recorded as dispatched (or failed): forget them.
    pub fn fired(&self, attempts: impl IntoIterator<Item = (i64, i32)>) {
        let mut st = self.lock();
        for (id, attempt) in attempts {
            if st.firing.get(&id).is_some_and(|&(_, a)| a == attempt) {
                st.firing.remove(&id);
            }
        }
    }

    /// Puts tasks that could not go out yet (every executor full) back, due at `due_at`.
    pub fn defer(&self, tasks: Vec<DueTask>, due_at: Millis) {
        self.put_back(tasks.into_iter().map(|mut t| {
            t.due_at = t.due_at.max(due_at);
            (t.due_at, t)
        }));
    }

    /// Puts a fired task back to fire again at `at`, its due time unchanged (a pull job's
    /// fire gathering with the next ones, [`super::dispatch`]).
    pub fn hold(&self, task: DueTask, at: Millis) {
        self.put_back(std::iter::once((at.max(task.due_at), task)));
    }

    /// Puts fired tasks back in the wheel, each to fire at its time, unless a newer copy
    /// came meanwhile.
    fn put_back(&self, tasks: impl Iterator<Item = (Millis, DueTask)>) {
        let mut st = self.lock();
        for (at, t) in tasks {
            if st.firing.get(&t.task_id) == Some(&rank(&t)) {
                st.firing.remove(&t.task_id);
            }
            if st.index.get(&t.task_id).is_some_and(|&(r, _)| r > rank(&t)) {
                continue;
            }
            if let Some((_, slot)) = st.index.remove(&t.task_id) {
                st.wheel.remove(slot, |old| old.task_id == t.task_id);
            }
            st.index.insert(t.task_id, (rank(&t), at));
            st.wheel.insert(at, t);
        }
        drop(st);
        self.inner.wake.notify_one();
    }

    /// Empties the wheel without stopping the ring (its claims were taken over by another
    /// node); returns how many tasks it held. Copies still with the pools come back later
    /// under their old epoch, and are dropped then.
    pub fn clear(&self) -> usize {
        let mut st = self.lock();
        let mut out = Vec::new();
        st.wheel.advance(Millis::MAX, &mut out);
        st.index.clear();
        st.firing.clear();
        out.len() + st.parked.drain().count()
    }

    /// Stops the ring thread and returns what was left in the wheel (to hand the claims back).
    pub fn stop(&self) -> Vec<DueTask> {
        let mut st = self.lock();
        st.stopping = true;
        self.inner.stopped.store(true, Ordering::SeqCst);
        let mut out = Vec::new();
        st.wheel.advance(Millis::MAX, &mut out);
        st.index.clear();
        let parked: Vec<DueTask> = st.parked.drain().map(|(_, t)| t).collect();
        out.extend(parked.into_iter().map(|t| (t.due_at, t)));
        drop(st);
        self.inner.wake.notify_all();
        out.into_iter().map(|(_, t)| t).collect()
    }

    /// Starts the ring thread. `fire` gets every batch of due tasks, highest priority first;
    /// it may block (the pools apply back-pressure by blocking it).
    pub fn spawn(
        &self,
        mut fire: impl FnMut(Vec<DueTask>) + Send + 'static,
    ) -> std::io::Result<JoinHandle<()>> {
        let ring = self.clone();
        std::thread::Builder::new()
            .name("rota-ring".into())
            .spawn(move || ring.run(&mut fire))
    }

    fn run(&self, fire: &mut dyn FnMut(Vec<DueTask>)) {
        let mut due = Vec::new();
        loop {
            let mut st = self.lock();
            if st.stopping {
                return;
            }
            let now_us = self.inner.clock.now_us();
            let mut batch = take_due(&mut st, now_us.div_euclid(1000), &mut due);
            if batch.is_empty() {
                let wait = match st.wheel.next_due() {
                    Some(next) => {
                        let us = (next.saturating_mul(1000)).saturating_sub(now_us).max(0) as u64;
                        Duration::from_micros(us).min(MAX_SLEEP)
                    }
                    None => MAX_SLEEP,
                };
                if !wait.is_zero() {
                    drop(self.inner.wake.wait_timeout(st, wait));
                }
                continue;
            }
            drop(st);
            by_priority(&mut batch);
            metrics::histogram!("rota_ring_batch_size").record(batch.len() as f64);
            fire(batch);
        }
    }

    /// What is due by the ring's clock now, as the ring thread would fire it (tests drive
    /// the ring on a paused clock through this instead of the thread).
    #[cfg(test)]
    pub(crate) fn due_now(&self) -> Vec<DueTask> {
        let now = self.inner.clock.now_ms();
        let mut batch = take_due(&mut self.lock(), now, &mut Vec::new());
        by_priority(&mut batch);
        batch
    }
}

/// Takes every task due by `now` out of the wheel and marks it firing; a cancelled or
/// superseded copy is dropped, one whose cancel is open is parked. `due`: a scratch buffer.
fn take_due(st: &mut State, now: Millis, due: &mut Vec<(Millis, DueTask)>) -> Vec<DueTask> {
    st.wheel.advance(now, due);
    let mut batch = Vec::with_capacity(due.len());
    for (_, t) in due.drain(..) {
        match st.index.get(&t.task_id) {
            Some(&(r, _)) if r == rank(&t) => {}
            _ => continue, // cancelled or superseded
        }
        st.index.remove(&t.task_id);
        if st.cancelling.contains(&t.task_id) {
            // Settled by finish_cancel: out of the wheel, out of reach.
            st.parked.insert(t.task_id, t);
            continue;
        }
        st.firing.insert(t.task_id, rank(&t));
        batch.push(t);
    }
    batch
}

/// The order a batch is handed out in: highest priority first, then the earliest due.
fn by_priority(batch: &mut [DueTask]) {
    batch.sort_by_key(|t| (std::cmp::Reverse(t.priority), t.due_at, t.task_id));
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    fn task(id: i64, due_at: Millis, priority: i32) -> DueTask {
        DueTask {
            priority,
            ..DueTask::for_test(id, 1, due_at)
        }
    }

    #[test]
    fn fires_due_tasks_in_priority_order_and_never_early() {
        let now = Clock::Wall.now_ms();
        let ring = Ring::new(Clock::Wall);
        let (tx, rx) = mpsc::channel();
        let handle = ring
            .spawn(move |batch| {
                let at = Clock::Wall.now_ms();
                tx.send((at, batch)).unwrap();
            })
            .unwrap();
        let due = now + 30;
        ring.insert([task(1, due, 0), task(2, due, 5), task(3, due, -1)]);
        let (fired_at, batch) = rx.recv_timeout(Duration::from_secs(5)).unwrap();
        assert!(fired_at >= due, "fired at {fired_at}, due {due}");
        let ids: Vec<i64> = batch.iter().map(|t| t.task_id).collect();
        assert_eq!(ids, vec![2, 1, 3]);
        assert!(ring.holds(1), "firing until recorded");
        ring.fired(ids.iter().map(|&id| (id, 1)));
        assert!(!ring.holds(1));
        ring.stop();
        handle.join().unwrap();
    }

    #[test]
    fn a_cancelled_task_never_fires() {
        let now = Clock::Wall.now_ms();
        let ring = Ring::new(Clock::Wall);
        let (tx, rx) = mpsc::channel();
        let handle = ring.spawn(move |batch| tx.send(batch).unwrap()).unwrap();
        ring.insert([task(1, now + 40, 0), task(2, now + 40, 0)]);
        assert_eq!(ring.begin_cancel(1), CancelState::Held);
        ring.finish_cancel(1, true);
        let batch = rx.recv_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!(batch.iter().map(|t| t.task_id).collect::<Vec<_>>(), vec![2]);
        assert_eq!(ring.begin_cancel(2), CancelState::Firing);
        assert!(rx.recv_timeout(Duration::from_millis(100)).is_err());
        ring.stop();
        handle.join().unwrap();
    }

    #[test]
    fn a_task_being_cancelled_is_held_until_settled() {
        let now = Clock::Wall.now_ms();
        let ring = Ring::new(Clock::Wall);
        let (tx, rx) = mpsc::channel();
        let handle = ring.spawn(move |batch| tx.send(batch).unwrap()).unwrap();
        assert_eq!(ring.begin_cancel(7), CancelState::Absent);
        // The scan claims it concurrently: it must not fire while the cancel is open.
        ring.insert([task(7, now, 0)]);
        assert!(rx.recv_timeout(Duration::from_millis(50)).is_err());
        // The database said no (it was not cancellable): it fires after all.
        ring.finish_cancel(7, false);
        let batch = rx.recv_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!(batch[0].task_id, 7);
        ring.stop();
        handle.join().unwrap();
    }

    #[test]
    fn a_next_attempt_may_enter_while_the_previous_is_being_recorded() {
        let now = Clock::Wall.now_ms();
        let ring = Ring::new(Clock::Wall);
        let (tx, rx) = mpsc::channel();
        let handle = ring.spawn(move |batch| tx.send(batch).unwrap()).unwrap();
        ring.insert([task(1, now, 0)]);
        let first = rx.recv_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!(first[0].attempt, 1);
        // Attempt 1 failed fast; attempt 2 is claimed before attempt 1's record is written.
        let mut retry = task(1, now + 20, 0);
        retry.attempt = 2;
        assert_eq!(ring.insert([retry.clone()]), 1);
        assert_eq!(
            ring.insert([task(1, now, 0)]),
            0,
            "the old attempt does not come back"
        );
        ring.fired([(1, 1)]);
        let second = rx.recv_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!(second[0].attempt, 2);
        ring.stop();
        handle.join().unwrap();
    }

    #[test]
    fn a_claim_racing_a_cancel_does_not_bring_the_task_back() {
        let now = Clock::Wall.now_ms();
        let ring = Ring::new(Clock::Wall);
        // The cancel runs while the task is not here yet…
        assert_eq!(ring.begin_cancel(9), CancelState::Absent);
        ring.finish_cancel(9, true);
        // …and the scan, which read it just before the database cancelled it, inserts it.
        assert_eq!(ring.insert([task(9, now, 0)]), 0);
        assert!(!ring.holds(9));
    }

    /// Every executor was full: the deferred task waits for its new due time, not a
    /// millisecond less, and a deferral never brings a task forward.
    #[tokio::test(start_paused = true)]
    async fn a_deferred_task_fires_at_its_new_due_time_and_never_before() {
        let clock = Clock::tokio_from(1_000_000);
        let ring = Ring::new(clock.clone());
        let now = clock.now_ms();
        ring.insert([task(1, now, 0), task(2, now + 800, 0)]);
        let first = ring.due_now();
        assert_eq!(first.iter().map(|t| t.task_id).collect::<Vec<_>>(), vec![1]);

        ring.defer(first, now + 500);
        ring.defer(vec![task(2, now + 800, 0)], now + 500);
        assert!(ring.holds(1) && ring.holds(2));
        tokio::time::advance(Duration::from_millis(499)).await;
        assert!(
            ring.due_now().is_empty(),
            "fired before its deferred due time"
        );
        tokio::time::advance(Duration::from_millis(1)).await;
        let second = ring.due_now();
        assert_eq!(
            second.iter().map(|t| t.task_id).collect::<Vec<_>>(),
            vec![1]
        );
        assert_eq!(second[0].due_at, now + 500);

        tokio::time::advance(Duration::from_millis(299)).await;
        assert!(
            ring.due_now().is_empty(),
            "a deferral brought task 2 forward"
        );
        tokio::time::advance(Duration::from_millis(1)).await;
        assert_eq!(ring.due_now()[0].task_id, 2);
    }

    /// A held task fires again at the hold's end with its own due time (what a pull
    /// consumer is told, and pickup latency is measured from), and a cancel still finds it.
    #[tokio::test(start_paused = true)]
    async fn a_held_task_fires_at_the_holds_end_keeping_its_due_time() {
        let clock = Clock::tokio_from(1_000_000);
        let ring = Ring::new(clock.clone());
        let now = clock.now_ms();
        ring.insert([task(1, now, 0), task(2, now, 0)]);
        let mut fired = ring.due_now().into_iter();
        ring.hold(fired.next().unwrap(), now + 5);
        ring.hold(fired.next().unwrap(), now + 5);
        assert!(ring.holds(1) && ring.holds(2));
        assert_eq!(ring.begin_cancel(2), CancelState::Held);
        ring.finish_cancel(2, true);
        tokio::time::advance(Duration::from_millis(4)).await;
        assert!(ring.due_now().is_empty(), "fired before the hold ended");
        tokio::time::advance(Duration::from_millis(1)).await;
        let again = ring.due_now();
        assert_eq!(again.iter().map(|t| t.task_id).collect::<Vec<_>>(), vec![1]);
        assert_eq!(again[0].due_at, now, "a hold moves no due time");
    }

    /// A cancelled task's tombstone outlives any claim that raced the cancel (a scan
    /// window), and is pruned a minute on, once there are many.
    #[tokio::test(start_paused = true)]
    async fn tombstones_refuse_a_racing_claim_for_a_minute_then_are_pruned() {
        let clock = Clock::tokio_from(1_000_000);
        let ring = Ring::new(clock.clone());
        assert_eq!(ring.begin_cancel(9), CancelState::Absent);
        ring.finish_cancel(9, true);

        tokio::time::advance(Duration::from_millis(TOMBSTONE_MS as u64 - 1_000)).await;
        assert_eq!(ring.insert([task(9, clock.now_ms(), 0)]), 0);
        // Many more cancels, 59 s after the first: over the bound, so the next claim prunes.
        for id in 100..(100 + TOMBSTONES as i64 + 1) {
            ring.begin_cancel(id);
            ring.finish_cancel(id, true);
        }
        assert_eq!(
            ring.insert([task(9, clock.now_ms(), 0)]),
            0,
            "pruned before a minute"
        );

        tokio::time::advance(Duration::from_millis(1_001)).await;
        let now = clock.now_ms();
        assert_eq!(
            ring.insert([task(9, now, 0)]),
            1,
            "a minute on, task 9 may come back"
        );
        assert_eq!(
            ring.insert([task(100, now, 0)]),
            0,
            "a younger tombstone was pruned"
        );
    }

    #[test]
    fn stop_returns_what_is_left() {
        let now = Clock::Wall.now_ms();
        let ring = Ring::new(Clock::Wall);
        ring.insert([task(1, now + 60_000, 0), task(2, now + 10, 0)]);
        assert_eq!(ring.insert([task(1, now + 60_000, 0)]), 0, "no duplicates");
        let mut left: Vec<i64> = ring.stop().into_iter().map(|t| t.task_id).collect();
        left.sort();
        assert_eq!(left, vec![1, 2]);
    }
}
