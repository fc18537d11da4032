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
//! The pool grows lazily up to `max` threads (one per execution slot: a plugin may block
//! for its whole timeout, so fewer threads could starve the slots), and parked threads
//! stay for the next burst. Dropping the pool lets its threads finish the queue and exit.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

/// A unit of work for a worker thread.
pub(crate) type Work = Box<dyn FnOnce() + Send + 'static>;

pub(crate) struct Workers {
    shared: Arc<Shared>,
}

struct Shared {
    state: Mutex<State>,
    ready: Condvar,
    max: usize,
    name: &'static str,
}

#[derive(Default)]
struct State {
    queue: VecDeque<Work>,
    threads: usize,
    idle: usize,
    closed: bool,
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
        Self {
            shared: Arc::new(Shared {
                state: Mutex::new(State::default()),
                ready: Condvar::new(),
                max: max.max(1),
                name,
            }),
        }
    }

    /// Queues `work` in order, waking parked threads and starting new ones as needed.
    pub(crate) fn submit_all(&self, work: impl IntoIterator<Item = Work>) {
        let (wake, spawn) = {
            let mut state = self.shared.state();
            let before = state.queue.len();
            state.queue.extend(work);
            let added = state.queue.len() - before;
            if added == 0 {
                return;
            }
            let wake = added.min(state.idle);
            let spawn = (added - wake).min(self.shared.max - state.threads);
            state.threads += spawn;
            (wake, spawn)
        };
        for _ in 0..wake {
            self.shared.ready.notify_one();
        }
        for _ in 0..spawn {
            let shared = self.shared.clone();
            let started = std::thread::Builder::new()
                .name(self.shared.name.to_owned())
                .spawn(move || work_loop(&shared));
            if let Err(e) = started {
                // The queued work is still taken by the threads that exist.
                tracing::error!(error = %e, "cannot start a run worker thread");
                self.shared.state().threads -= 1;
            }
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
    }
}

fn work_loop(shared: &Shared) {
    loop {
        let work = {
            let mut state = shared.state();
            loop {
                if let Some(work) = state.queue.pop_front() {
                    break work;
                }
                if state.closed {
                    state.threads -= 1;
                    return;
                }
                state.idle += 1;
                state = shared.ready.wait(state).unwrap_or_else(|e| e.into_inner());
                state.idle -= 1;
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
        let pool = Workers::new(4, "test-worker");
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
