//! The threads that execute runs.
//!
//! A plugin runs synchronously on a thread of its own for as long as it executes (the
//! epoch deadline bounds it). Handing each run to tokio's `spawn_blocking` and back cost
//! a thread hand-off and several wake-ups per run, which at thousands of runs a second
//! was most of the executor's time. Here runs go into one queue served by long-lived
//! threads that carry a run from start to final report without returning to the async
//! side: a busy thread takes the next run without sleeping, so a burst of triggers runs
//! back to back, and a parked thread is woken only when work arrives and none is free.
//!
//! How many threads work at once: as many as there are cores while runs are short, so a
//! burst of thousands of runs is not spread over hundreds of threads that only switch
//! between each other; more, up to `max` (one per execution slot), when threads are stuck
//! in long runs (a plugin may sleep or block for its whole timeout). A supervisor thread
//! looks every [`STARVED`]: while runs wait, for each thread whose current run has gone on
//! longer than that, another is woken or started, so `eager` threads always make progress
//! on the queue; while nothing is queued it sleeps (a quiet executor would otherwise wake
//! it 200 times a second for nothing). Parked threads stay for the next burst. Dropping
//! the pool lets its threads finish the queue and exit.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// A unit of work for a worker thread.
pub(crate) type Work = Box<dyn FnOnce() + Send + 'static>;

/// How long a run may hold its thread before it counts as long and another thread joins in.
pub(crate) const STARVED: Duration = Duration::from_millis(5);

pub(crate) struct Workers {
    shared: Arc<Shared>,
}

struct Shared {
    state: Mutex<State>,
    ready: Condvar,
    /// Wakes the supervisor: work left waiting, or the pool closed.
    watch: Condvar,
    max: usize,
    /// Threads working at once without waiting for [`STARVED`]: the cores.
    eager: usize,
    /// [`STARVED`], but for tests.
    starved: Duration,
    /// Times the supervisor looked at the queue.
    #[cfg(test)]
    rounds: std::sync::atomic::AtomicUsize,
    name: &'static str,
}

#[derive(Default)]
struct State {
    queue: VecDeque<Work>,
    threads: usize,
    idle: usize,
    /// Idle threads woken but not yet running (so a wake is not counted twice).
    waking: usize,
    /// When each thread (by id) took its current run; `None` while it waits for one.
    started: Vec<Option<Instant>>,
    closed: bool,
}

impl State {
    fn busy(&self) -> usize {
        self.threads - self.idle + self.waking
    }
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        // Work runs outside the lock, so a poisoned lock only means a panic elsewhere.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Workers {
    /// A pool of at most `max` (≥ 1) threads named `name`.
    pub(crate) fn new(max: usize, name: &'static str) -> Self {
        let eager = std::thread::available_parallelism().map_or(2, |n| n.get());
        Self::with_policy(max, eager, STARVED, name)
    }

    fn with_policy(max: usize, eager: usize, starved: Duration, name: &'static str) -> Self {
        let max = max.max(1);
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            ready: Condvar::new(),
            watch: Condvar::new(),
            max,
            eager: eager.clamp(1, max),
            starved,
            name,
            #[cfg(test)]
            rounds: Default::default(),
        });
        let supervised = shared.clone();
        let started = std::thread::Builder::new()
            .name(format!("{name}-watch"))
            .spawn(move || supervise(&supervised));
        if let Err(e) = started {
            tracing::error!(error = %e, "cannot start the run workers' supervisor; long runs may hold up short ones");
        }
        Self { shared }
    }

    /// Queues `work` in order, waking or starting threads up to the eager count.
    pub(crate) fn submit_all(&self, work: impl IntoIterator<Item = Work>) {
        let mut state = self.shared.state();
        let before = state.queue.len();
        state.queue.extend(work);
        let added = state.queue.len() - before;
        let wanted = added.min(self.shared.eager.saturating_sub(state.busy()));
        let mut taken = 0;
        for _ in 0..wanted {
            taken += usize::from(add_worker(&self.shared, &mut state));
        }
        // Work left waiting for a busy thread (or for one that could not be started): the
        // supervisor watches for stuck ones, and starts threads again, until the queue is
        // empty again (it sleeps while nothing waits).
        if taken < added {
            self.shared.watch.notify_one();
        }
    }

    pub(crate) fn submit(&self, work: Work) {
        self.submit_all(std::iter::once(work));
    }

    /// Threads started so far.
    #[cfg(test)]
    fn threads(&self) -> usize {
        self.shared.state().threads
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        self.shared.state().closed = true;
        self.shared.ready.notify_all();
        self.shared.watch.notify_all();
    }
}

/// One more thread at work: a parked one woken, else a new one (up to the max). Whether
/// one was.
fn add_worker(shared: &Arc<Shared>, state: &mut MutexGuard<'_, State>) -> bool {
    if state.idle > state.waking {
        state.waking += 1;
        shared.ready.notify_one();
        return true;
    }
    if state.threads >= shared.max {
        return false;
    }
    state.threads += 1;
    let id = state.started.len();
    state.started.push(None);
    let worker = shared.clone();
    let started = std::thread::Builder::new()
        .name(shared.name.to_owned())
        .spawn(move || work_loop(&worker, id));
    if let Err(e) = started {
        // The queued work is still taken by the threads that exist.
        tracing::error!(error = %e, "cannot start a run worker thread");
        state.threads -= 1;
        state.started.pop();
        return false;
    }
    true
}

/// Every [`STARVED`]: while runs wait, threads stuck in long runs are made up for, so
/// `eager` threads keep taking from the queue.
fn supervise(shared: &Arc<Shared>) {
    let mut state = shared.state();
    loop {
        if state.closed {
            return;
        }
        #[cfg(test)]
        shared
            .rounds
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if !state.queue.is_empty() {
            let now = Instant::now();
            let stuck = state
                .started
                .iter()
                .flatten()
                .filter(|&&at| now.duration_since(at) >= shared.starved)
                .count();
            let progressing = state.busy().saturating_sub(stuck);
            for _ in progressing..shared.eager.min(state.queue.len() + progressing) {
                add_worker(shared, &mut state);
            }
        }
        // Nothing queued: nothing can starve until `submit_all` leaves work waiting and
        // wakes this thread, so an idle pool costs no wake-ups.
        state = if state.queue.is_empty() {
            shared.watch.wait(state).unwrap_or_else(|e| e.into_inner())
        } else {
            shared
                .watch
                .wait_timeout(state, shared.starved)
                .map(|(s, _)| s)
                .unwrap_or_else(|e| e.into_inner().0)
        };
    }
}

fn work_loop(shared: &Shared, id: usize) {
    loop {
        let work = {
            let mut state = shared.state();
            loop {
                if let Some(work) = state.queue.pop_front() {
                    state.started[id] = Some(Instant::now());
                    break work;
                }
                state.started[id] = None;
                if state.closed {
                    state.threads -= 1;
                    return;
                }
                state.idle += 1;
                state = shared.ready.wait(state).unwrap_or_else(|e| e.into_inner());
                state.idle -= 1;
                state.waking = state.waking.saturating_sub(1);
            }
        };
        // A panicking run must not take the thread (and its slot in the pool) with it.
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(work)).is_err() {
            tracing::error!("a run panicked on its worker thread");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::mpsc;
    use std::time::Duration;

    #[test]
    fn runs_everything_in_order_on_one_thread() {
        let pool = Workers::new(1, "test-worker");
        let (tx, rx) = mpsc::channel();
        pool.submit_all((0..100).map(|i| {
            let tx = tx.clone();
            Box::new(move || tx.send(i).unwrap()) as Work
        }));
        let got: Vec<i32> = (0..100)
            .map(|_| rx.recv_timeout(Duration::from_secs(5)).unwrap())
            .collect();
        assert_eq!(got, (0..100).collect::<Vec<_>>());
        assert_eq!(pool.threads(), 1);
    }

    #[test]
    fn blocked_work_does_not_hold_up_the_rest_while_threads_remain() {
        // One eager thread: the others join only because the queue starves.
        let pool = Workers::with_policy(4, 1, STARVED, "test-worker");
        let (release_tx, release_rx) = mpsc::channel::<()>();
        let release_rx = Arc::new(Mutex::new(release_rx));
        // Three runs block until released; a fourth must still run.
        for _ in 0..3 {
            let rx = release_rx.clone();
            pool.submit(Box::new(move || {
                let _ = rx.lock().unwrap().recv();
            }));
        }
        let (done_tx, done_rx) = mpsc::channel();
        pool.submit(Box::new(move || done_tx.send(()).unwrap()));
        done_rx
            .recv_timeout(Duration::from_secs(5))
            .expect("the fourth run ran beside three blocked ones");
        assert!(pool.threads() <= 4);
        for _ in 0..3 {
            release_tx.send(()).unwrap();
        }
    }

    /// Whether `pool`'s supervisor (its period 1 ms) settles: fifty periods without a round
    /// (it used to look at the empty queue every period); tried a few times, so a slow
    /// start of its thread does not count.
    fn supervisor_settles(pool: &Workers) -> bool {
        let rounds = || pool.shared.rounds.load(Ordering::Relaxed);
        (0..20).any(|_| {
            let before = rounds();
            std::thread::sleep(Duration::from_millis(50));
            rounds() == before
        })
    }

    #[test]
    fn an_idle_pool_does_not_wake_its_supervisor() {
        let pool = Workers::with_policy(4, 1, Duration::from_millis(1), "test-worker");
        let (tx, rx) = mpsc::channel();
        pool.submit(Box::new(move || tx.send(()).unwrap()));
        rx.recv_timeout(Duration::from_secs(5)).unwrap();
        assert!(
            supervisor_settles(&pool),
            "the supervisor keeps waking while nothing is queued"
        );
    }

    #[test]
    fn a_sleeping_supervisor_wakes_for_work_stuck_behind_a_long_run() {
        // One eager thread, the supervisor asleep: a run that blocks, then another, which
        // only a second thread (started by the supervisor) can run.
        let pool = Workers::with_policy(2, 1, Duration::from_millis(1), "test-worker");
        assert!(supervisor_settles(&pool));
        let (release_tx, release_rx) = mpsc::channel::<()>();
        pool.submit(Box::new(move || {
            let _ = release_rx.recv();
        }));
        let (done_tx, done_rx) = mpsc::channel();
        pool.submit(Box::new(move || done_tx.send(()).unwrap()));
        done_rx
            .recv_timeout(Duration::from_secs(5))
            .expect("the second run ran beside the blocked one");
        release_tx.send(()).unwrap();
    }

    #[test]
    fn short_work_stays_on_the_eager_threads() {
        // Nothing ever counts as starved here, so only the eager threads may work.
        let pool = Workers::with_policy(64, 2, Duration::from_secs(3600), "test-worker");
        let (tx, rx) = mpsc::channel();
        pool.submit_all((0..10_000).map(|_| {
            let tx = tx.clone();
            Box::new(move || tx.send(()).unwrap()) as Work
        }));
        for _ in 0..10_000 {
            rx.recv_timeout(Duration::from_secs(5)).unwrap();
        }
        assert_eq!(pool.threads(), 2);
    }

    #[test]
    fn never_starts_more_threads_than_its_max_and_survives_a_panic() {
        let pool = Workers::new(2, "test-worker");
        let count = Arc::new(AtomicUsize::new(0));
        pool.submit(Box::new(|| panic!("a broken run")));
        let (tx, rx) = mpsc::channel();
        pool.submit_all((0..50).map(|_| {
            let count = count.clone();
            let tx = tx.clone();
            Box::new(move || {
                count.fetch_add(1, Ordering::SeqCst);
                tx.send(()).unwrap();
            }) as Work
        }));
        for _ in 0..50 {
            rx.recv_timeout(Duration::from_secs(5)).unwrap();
        }
        assert_eq!(count.load(Ordering::SeqCst), 50);
        assert_eq!(pool.threads(), 2);
    }
}
