//! The ready board: where a long poll of a `pull` job waits for the job's tasks to fall due.
//!
//! Dispatch puts a pull job's due fires in the database as `ready` and then posts the job
//! and how many fires became ready here ([`ReadyBoard::announce`]): as many pulls waiting
//! on this node for that job wake and look again — one per task, all of them when there are
//! at least as many tasks as pulls — and the job goes out to the other nodes (their pulls
//! wait on their own boards) through [`ReadyBoard::next_announcements`], which the node's
//! notice loop drains. So a consumer's long poll costs no database reads while nothing
//! falls due, whichever node's wheel holds the task, and a task falling due costs one
//! look per node, not one per waiting pull.
//!
//! A pull woken for a task that another pull took first finds nothing and waits again; a
//! pull woken one by one that leaves (its own look found tasks, or its wait ended) passes
//! the wake on to the next waiting pull ([`Notify::notify_one`] does), so no task waits
//! for a wake that went to a pull no longer listening.
//!
//! A pull that waits also stands on the board as a *taker* ([`ReadyBoard::wait_to_take`]):
//! a fire of its job that falls due on this node's wheel is leased straight to it by
//! dispatch (one transaction, no `ready` step, no look of its own), the takers served in
//! the order they came. Only the fires no taker here wants become `ready` and are
//! announced as above.
//!
//! A pull that arrives looks at the queue first, unless a look found it empty and nothing
//! was announced for the job since (here or by another node), within the last 500 ms
//! ([`ReadyBoard::known_empty`]): a consumer that acks and pulls again after being handed
//! a fire then waits without a transaction that would find nothing (issue 41).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use tokio::sync::{Notify, oneshot};

use crate::store::Leased;

/// Waiting pulls by job, and the jobs to announce to the other nodes.
#[derive(Default)]
pub(crate) struct ReadyBoard {
    waiting: Mutex<HashMap<i64, Weak<Notify>>>,
    /// Jobs to announce to the other nodes, with how many tasks became ready.
    outbox: Mutex<BTreeMap<i64, u64>>,
    posted: Notify,
    /// Pulls waiting on this node to be handed fires as they fall due here, by job, in the
    /// order they came.
    takers: Mutex<HashMap<i64, VecDeque<Taker>>>,
    next_taker: AtomicU64,
    /// Per job: how many times tasks were announced ready here, and since when (at which
    /// count) a look at the queue found none. A pull that arrives while the queue is known
    /// empty waits without looking.
    looks: Mutex<HashMap<i64, Looks>>,
}

/// A job's announcements and its last empty look.
#[derive(Default, Clone, Copy)]
struct Looks {
    announced: u64,
    empty: Option<(u64, std::time::Instant)>,
}

/// How long a look that found nothing is believed: a notice from another node that is
/// lost (they time out at 500 ms) cannot keep a new pull from looking for longer.
const EMPTY_FOR: std::time::Duration = std::time::Duration::from_millis(500);

/// What a waiting pull takes, should its job's fires fall due on this node.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Want {
    pub consumer: String,
    pub max: usize,
    pub lease_ms: i64,
}

/// A pull on the board waiting to be handed fires; dispatch takes it off the board with
/// [`ReadyBoard::takers`], leases it fires and hands them over ([`Taker::hand`]).
#[derive(Debug)]
pub(crate) struct Taker {
    id: u64,
    pub want: Want,
    give: oneshot::Sender<Vec<Leased>>,
}

impl Taker {
    /// Gives the pull its leases; they come back if it is gone (its consumer left, or its
    /// wait ended as dispatch leased them).
    pub(crate) fn hand(self, leased: Vec<Leased>) -> Result<(), Vec<Leased>> {
        self.give.send(leased)
    }
}

/// A pull's place among the takers; it leaves the board when dropped.
pub(crate) struct Waiting<'a> {
    board: &'a ReadyBoard,
    job_id: i64,
    id: u64,
    /// The leases dispatch hands this pull; closed without any when dispatch took the pull
    /// but could not lease it a fire (the pull looks again).
    pub handed: oneshot::Receiver<Vec<Leased>>,
}

impl Waiting<'_> {
    /// Leaves the board. False when dispatch has already taken this pull: its leases (or
    /// the word that there are none) are on their way through `handed`.
    pub(crate) fn withdraw(&mut self) -> bool {
        let mut takers = self.board.takers.lock().unwrap_or_else(|e| e.into_inner());
        let Some(queue) = takers.get_mut(&self.job_id) else {
            return false;
        };
        let before = queue.len();
        queue.retain(|t| t.id != self.id);
        let left = queue.len() < before;
        if queue.is_empty() {
            takers.remove(&self.job_id);
        }
        left
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.withdraw();
    }
}

impl ReadyBoard {
    /// The signal of `job_id`'s ready tasks; a pull holds it while it waits.
    pub(crate) fn subscribe(&self, job_id: i64) -> Arc<Notify> {
        let mut waiting = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(signal) = waiting.get(&job_id).and_then(Weak::upgrade) {
            return signal;
        }
        // Boards forget the jobs nobody waits on any more, and what their looks found (a
        // pull subscribes before it looks, so no look of theirs is under way).
        waiting.retain(|_, w| w.strong_count() > 0);
        self.looks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|job, _| *job == job_id || waiting.contains_key(job));
        let signal = Arc::new(Notify::new());
        waiting.insert(job_id, Arc::downgrade(&signal));
        signal
    }

    /// `(job, tasks)`: this many tasks of these jobs became ready here: wake as many of this
    /// node's pulls and tell the others.
    pub(crate) fn announce(&self, ready: &[(i64, u64)]) {
        self.wake(ready);
        let mut outbox = self.outbox.lock().unwrap_or_else(|e| e.into_inner());
        let was_empty = outbox.is_empty();
        for &(job, tasks) in ready {
            *outbox.entry(job).or_default() += tasks;
        }
        if was_empty && !outbox.is_empty() {
            self.posted.notify_one();
        }
    }

    /// `(job, tasks)`: this many tasks of these jobs became ready (on another node, or this
    /// one): wake that many of the pulls that wait for them here, one per task.
    pub(crate) fn wake(&self, ready: &[(i64, u64)]) {
        {
            let mut looks = self.looks.lock().unwrap_or_else(|e| e.into_inner());
            for &(job, _) in ready {
                let l = looks.entry(job).or_default();
                l.announced += 1;
                l.empty = None;
            }
        }
        let waiting = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
        for &(job, tasks) in ready {
            let Some(signal) = waiting.get(&job).and_then(Weak::upgrade) else {
                continue;
            };
            // Every pull of the job holds the signal (less the one just upgraded).
            let pulls = Arc::strong_count(&signal) as u64 - 1;
            if tasks >= pulls {
                signal.notify_waiters();
            } else {
                for _ in 0..tasks {
                    signal.notify_one();
                }
            }
        }
    }

    /// Every pull waiting for these jobs looks again (a job enabled again, or a node that
    /// did not say how many tasks).
    pub(crate) fn wake_all(&self, jobs: impl IntoIterator<Item = i64>) {
        let every: Vec<(i64, u64)> = jobs.into_iter().map(|job| (job, u64::MAX)).collect();
        self.wake(&every);
    }

    /// A mark to give [`ReadyBoard::found_empty`] after a look at `job_id`'s queue.
    pub(crate) fn before_look(&self, job_id: i64) -> u64 {
        let looks = self.looks.lock().unwrap_or_else(|e| e.into_inner());
        looks.get(&job_id).map_or(0, |l| l.announced)
    }

    /// A look begun at `mark` found `job_id`'s queue empty: believed until something is
    /// announced (here or by another node) or for [`EMPTY_FOR`].
    pub(crate) fn found_empty(&self, job_id: i64, mark: u64) {
        let mut looks = self.looks.lock().unwrap_or_else(|e| e.into_inner());
        let l = looks.entry(job_id).or_default();
        if l.announced == mark {
            l.empty = Some((mark, std::time::Instant::now()));
        }
    }

    /// Whether `job_id`'s queue is known to hold no ready task (no look is needed).
    pub(crate) fn known_empty(&self, job_id: i64) -> bool {
        let looks = self.looks.lock().unwrap_or_else(|e| e.into_inner());
        looks.get(&job_id).is_some_and(|l| {
            l.empty
                .is_some_and(|(mark, at)| mark == l.announced && at.elapsed() < EMPTY_FOR)
        })
    }

    /// Puts a pull of `job_id` on the board as a taker of the job's fires that fall due
    /// here, until the returned place is withdrawn or dropped.
    pub(crate) fn wait_to_take(&self, job_id: i64, want: Want) -> Waiting<'_> {
        let id = self.next_taker.fetch_add(1, Ordering::Relaxed);
        let (give, handed) = oneshot::channel();
        let mut takers = self.takers.lock().unwrap_or_else(|e| e.into_inner());
        takers
            .entry(job_id)
            .or_default()
            .push_back(Taker { id, want, give });
        Waiting {
            board: self,
            job_id,
            id,
            handed,
        }
    }

    /// Whether a pull of `job_id` waits on this node to be handed its fires.
    pub(crate) fn is_waited_on(&self, job_id: i64) -> bool {
        let takers = self.takers.lock().unwrap_or_else(|e| e.into_inner());
        takers
            .get(&job_id)
            .is_some_and(|queue| queue.iter().any(|t| !t.give.is_closed()))
    }

    /// Takes off the board the pulls of `job_id` that `fires` fires are handed to: the
    /// first come first, each taking up to its `max`, until the fires are all taken.
    pub(crate) fn takers(&self, job_id: i64, fires: usize) -> Vec<Taker> {
        let mut takers = self.takers.lock().unwrap_or_else(|e| e.into_inner());
        let Some(queue) = takers.get_mut(&job_id) else {
            return Vec::new();
        };
        let mut taken = Vec::new();
        let mut left = fires;
        while left > 0 {
            let Some(taker) = queue.pop_front() else {
                break;
            };
            if taker.give.is_closed() {
                continue;
            }
            left = left.saturating_sub(taker.want.max);
            taken.push(taker);
        }
        if queue.is_empty() {
            takers.remove(&job_id);
        }
        taken
    }

    /// The jobs announced since the last call with their tasks, once there is one: the
    /// notice loop sends them to the other nodes in one request each (while it sends, new
    /// ones gather).
    pub(crate) async fn next_announcements(&self) -> Vec<(i64, u64)> {
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
    use std::pin::Pin;
    use std::time::Duration;

    use tokio::sync::futures::OwnedNotified;

    use super::*;

    /// A pull of `job` listening on `board`, as the pull route listens (the future holds the
    /// job's signal).
    struct Listener {
        woken: Pin<Box<OwnedNotified>>,
    }

    fn listen(board: &ReadyBoard, job: i64) -> Listener {
        let mut woken = Box::pin(board.subscribe(job).notified_owned());
        woken.as_mut().enable();
        Listener { woken }
    }

    impl Listener {
        async fn woken_within(&mut self, ms: u64) -> bool {
            tokio::time::timeout(Duration::from_millis(ms), self.woken.as_mut())
                .await
                .is_ok()
        }
    }

    #[test]
    fn an_empty_look_is_believed_until_the_job_is_announced_and_a_look_overtaken_is_not() {
        let board = ReadyBoard::default();
        assert!(!board.known_empty(7), "nothing was looked at yet");
        let mark = board.before_look(7);
        board.found_empty(7, mark);
        assert!(board.known_empty(7));
        assert!(
            !board.known_empty(8),
            "another job's look says nothing of this one"
        );
        board.announce(&[(7, 1)]);
        assert!(!board.known_empty(7), "tasks were announced since the look");
        // A look that began before an announcement and ended after it proves nothing.
        let mark = board.before_look(7);
        board.wake(&[(7, 1)]);
        board.found_empty(7, mark);
        assert!(!board.known_empty(7));
    }

    #[tokio::test]
    async fn a_pull_waiting_on_a_job_wakes_when_the_job_is_announced_and_not_for_another() {
        let board = ReadyBoard::default();
        let mut pull = listen(&board, 7);
        board.announce(&[(8, 1)]);
        assert!(
            !pull.woken_within(20).await,
            "another job's announcement woke the pull"
        );
        board.announce(&[(7, 1)]);
        assert!(pull.woken_within(5_000).await, "the pull was not woken");
        assert_eq!(board.next_announcements().await, vec![(7, 1), (8, 1)]);
    }

    #[tokio::test]
    async fn one_ready_task_wakes_one_waiting_pull_and_as_many_as_pulls_wake_all() {
        let board = ReadyBoard::default();
        let mut pulls: Vec<Listener> = (0..4).map(|_| listen(&board, 7)).collect();
        board.wake(&[(7, 1)]);
        let mut woken = 0;
        for pull in &mut pulls {
            woken += usize::from(pull.woken_within(20).await);
        }
        assert_eq!(woken, 1, "one task woke {woken} of 4 waiting pulls");

        let mut pulls: Vec<Listener> = (0..4).map(|_| listen(&board, 9)).collect();
        board.wake(&[(9, 4)]);
        for (i, pull) in pulls.iter_mut().enumerate() {
            assert!(
                pull.woken_within(5_000).await,
                "pull {i} of 4 slept through 4 tasks"
            );
        }
    }

    #[tokio::test]
    async fn a_woken_pull_that_leaves_passes_its_wake_on() {
        let board = ReadyBoard::default();
        let first = listen(&board, 7);
        let mut second = listen(&board, 7);
        board.wake(&[(7, 1)]);
        // The first in line got the wake; it leaves without looking (its own look found
        // tasks, or its wait ended).
        drop(first);
        assert!(
            second.woken_within(5_000).await,
            "the wake went with a pull that left"
        );
    }

    #[tokio::test]
    async fn wake_all_wakes_every_waiting_pull() {
        let board = ReadyBoard::default();
        let mut pulls: Vec<Listener> = (0..3).map(|_| listen(&board, 7)).collect();
        board.wake_all([7]);
        for (i, pull) in pulls.iter_mut().enumerate() {
            assert!(pull.woken_within(5_000).await, "pull {i} was not woken");
        }
    }

    #[tokio::test]
    async fn announcements_gather_with_their_counts_while_none_is_taken() {
        let board = Arc::new(ReadyBoard::default());
        let taker = tokio::spawn({
            let board = board.clone();
            async move { board.next_announcements().await }
        });
        tokio::task::yield_now().await;
        board.announce(&[(3, 2), (1, 1)]);
        let first = taker.await.expect("the taker panicked");
        assert_eq!(first, vec![(1, 1), (3, 2)]);
        board.announce(&[(5, 1)]);
        board.announce(&[(5, 3), (4, 1)]);
        assert_eq!(board.next_announcements().await, vec![(4, 1), (5, 4)]);
    }

    fn want(consumer: &str, max: usize) -> Want {
        Want {
            consumer: consumer.into(),
            max,
            lease_ms: 30_000,
        }
    }

    fn consumers(takers: &[Taker]) -> Vec<&str> {
        takers.iter().map(|t| t.want.consumer.as_str()).collect()
    }

    #[test]
    fn fires_go_to_the_first_pulls_that_came_each_up_to_its_max() {
        let board = ReadyBoard::default();
        let _a = board.wait_to_take(7, want("a", 2));
        let _b = board.wait_to_take(7, want("b", 1));
        let _c = board.wait_to_take(7, want("c", 5));
        let _other = board.wait_to_take(8, want("x", 5));
        // Three fires: a takes two, b the third; c waits on.
        assert_eq!(consumers(&board.takers(7, 3)), vec!["a", "b"]);
        assert_eq!(consumers(&board.takers(7, 100)), vec!["c"]);
        assert!(board.takers(7, 1).is_empty(), "a pull was taken twice");
        assert_eq!(consumers(&board.takers(8, 1)), vec!["x"]);
    }

    #[test]
    fn a_pull_that_withdrew_or_left_is_not_handed_fires() {
        let board = ReadyBoard::default();
        let mut a = board.wait_to_take(7, want("a", 1));
        assert!(a.withdraw(), "a waiting pull could not withdraw");
        drop(board.wait_to_take(7, want("b", 1)));
        let c = board.wait_to_take(7, want("c", 1));
        assert_eq!(consumers(&board.takers(7, 3)), vec!["c"]);
        drop(c);
        assert!(board.takers.lock().expect("poisoned").is_empty());
    }

    #[tokio::test]
    async fn a_pull_taken_by_dispatch_cannot_withdraw_and_gets_its_leases() {
        let board = ReadyBoard::default();
        let mut waiting = board.wait_to_take(7, want("a", 1));
        let taker = board.takers(7, 1).pop().expect("the pull was not taken");
        assert!(!waiting.withdraw(), "a taken pull withdrew");
        let lease = Leased {
            task_id: 1,
            job_id: 7,
            attempt: 1,
            run_id: 10,
            lease: "10.1".into(),
            payload: None,
            key: None,
            priority: 0,
            due_at: 0,
            lease_expires_at: 30_000,
            traceparent: None,
        };
        taker.hand(vec![lease.clone()]).expect("the pull is there");
        assert_eq!(
            (&mut waiting.handed).await.expect("handed"),
            vec![lease.clone()]
        );
        // A pull that left gives its leases back.
        let gone = board.wait_to_take(7, want("b", 1));
        let taker = board.takers(7, 1).pop().expect("the pull was not taken");
        drop(gone);
        assert_eq!(taker.hand(vec![lease.clone()]), Err(vec![lease]));
    }

    #[test]
    fn a_board_forgets_jobs_nobody_waits_on() {
        let board = ReadyBoard::default();
        let first = board.subscribe(1);
        board.found_empty(1, board.before_look(1));
        board.announce(&[(3, 1)]);
        let looks = |board: &ReadyBoard| {
            let mut jobs: Vec<i64> = board
                .looks
                .lock()
                .expect("poisoned")
                .keys()
                .copied()
                .collect();
            jobs.sort_unstable();
            jobs
        };
        assert_eq!(looks(&board), [1, 3]);
        drop(first);
        let _held = board.subscribe(2);
        assert_eq!(
            board.waiting.lock().expect("poisoned").len(),
            1,
            "job 1's signal outlived its last pull"
        );
        assert!(
            looks(&board).is_empty(),
            "the looks of jobs nobody waits on were kept"
        );
    }
}
