//! The ready board: where a long poll of a `pull` job waits for the job's tasks to fall due.
//!
//! Dispatch puts a pull job's due fires in the database as `ready` and then posts the job
//! here ([`ReadyBoard::announce`]): every pull waiting on this node for that job wakes and
//! looks again, and the job goes out to the other nodes (their pulls wait on their own
//! boards) through [`ReadyBoard::next_announcements`], which the node's notice loop drains.
//! So a consumer's long poll costs no database reads while nothing falls due, whichever
//! node's wheel holds the task.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, Weak};

use tokio::sync::Notify;

/// Waiting pulls by job, and the jobs to announce to the other nodes.
#[derive(Default)]
pub(crate) struct ReadyBoard {
    waiting: Mutex<HashMap<i64, Weak<Notify>>>,
    outbox: Mutex<BTreeSet<i64>>,
    posted: Notify,
}

impl ReadyBoard {
    /// The signal of `job_id`'s ready tasks; a pull holds it while it waits.
    pub(crate) fn subscribe(&self, job_id: i64) -> Arc<Notify> {
        let mut waiting = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(signal) = waiting.get(&job_id).and_then(Weak::upgrade) {
            return signal;
        }
        // Boards forget the jobs nobody waits on any more.
        waiting.retain(|_, w| w.strong_count() > 0);
        let signal = Arc::new(Notify::new());
        waiting.insert(job_id, Arc::downgrade(&signal));
        signal
    }

    /// Tasks of these jobs became ready here: wake this node's pulls and tell the others.
    pub(crate) fn announce(&self, jobs: impl IntoIterator<Item = i64> + Clone) {
        self.wake(jobs.clone());
        let mut outbox = self.outbox.lock().unwrap_or_else(|e| e.into_inner());
        let before = outbox.len();
        outbox.extend(jobs);
        if outbox.len() > before {
            self.posted.notify_one();
        }
    }

    /// Tasks of these jobs became ready (on another node, or this one): wake the pulls that
    /// wait for them here.
    pub(crate) fn wake(&self, jobs: impl IntoIterator<Item = i64>) {
        let waiting = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
        for job in jobs {
            if let Some(signal) = waiting.get(&job).and_then(Weak::upgrade) {
                signal.notify_waiters();
            }
        }
    }

    /// The jobs announced since the last call, once there is one: the notice loop sends
    /// them to the other nodes in one request each (while it sends, new ones gather).
    pub(crate) async fn next_announcements(&self) -> Vec<i64> {
        loop {
            let posted = self.posted.notified();
            {
                let mut outbox = self.outbox.lock().unwrap_or_else(|e| e.into_inner());
                if !outbox.is_empty() {
                    return std::mem::take(&mut *outbox).into_iter().collect();
                }
            }
            posted.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn a_pull_waiting_on_a_job_wakes_when_the_job_is_announced_and_not_for_another() {
        let board = ReadyBoard::default();
        let signal = board.subscribe(7);
        let woken = signal.notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        board.announce([8]);
        assert!(
            tokio::time::timeout(Duration::from_millis(20), &mut woken)
                .await
                .is_err(),
            "another job's announcement woke the pull"
        );
        board.announce([7]);
        tokio::time::timeout(Duration::from_secs(5), woken)
            .await
            .expect("the pull was not woken");
        assert_eq!(board.next_announcements().await, vec![7, 8]);
    }

    #[tokio::test]
    async fn announcements_gather_while_none_is_taken() {
        let board = Arc::new(ReadyBoard::default());
        let taker = tokio::spawn({
            let board = board.clone();
            async move { board.next_announcements().await }
        });
        tokio::task::yield_now().await;
        board.announce([3, 1]);
        let first = taker.await.expect("the taker panicked");
        assert_eq!(first, vec![1, 3]);
        board.announce([5]);
        board.announce([5, 4]);
        assert_eq!(board.next_announcements().await, vec![4, 5]);
    }

    #[test]
    fn a_board_forgets_jobs_nobody_waits_on() {
        let board = ReadyBoard::default();
        drop(board.subscribe(1));
        let _held = board.subscribe(2);
        assert_eq!(
            board.waiting.lock().expect("poisoned").len(),
            1,
            "job 1's signal outlived its last pull"
        );
    }
}
