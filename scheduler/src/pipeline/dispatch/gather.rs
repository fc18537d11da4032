//! A busy pull job's fires gather for a few milliseconds before they are handed over (issue
//! 41): one hand-over transaction, one answer to a waiting pull and then one ack carry
//! several tasks instead of one each.
//!
//! A pull task's cost is its round trips (the hand-over's transaction, the pull's answer,
//! the ack's request and transaction), not its bytes. At 1,000 tasks/s fires queue on their
//! own and a task costs a seventh of what it costs at 300/s, where each fire went alone. So
//! a job whose fires come 2 to 5 ms apart (on average, lately: [`QUEUING_GAP_MS`],
//! [`GATHER_MS`]) holds each fire in the wheel until the window its first one opened ends,
//! and they go out together, while a poll of the job waits on this node to be handed them.
//! A quiet job is never held (gathering there would add the wait and carry nothing more),
//! nor one whose fires queue anyway, nor one no poll waits for here (its fires become
//! ready, and the next poll takes all that are). A held fire keeps its due time (the
//! consumer sees the real one, and the wait counts as pickup latency); it stays in the
//! wheel, so a cancel still finds it.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::model::{DueTask, Millis};

/// How long a busy pull job's fires gather: the pickup latency traded for fewer round
/// trips. Within SPEC §8's pickup p99 of 10 ms with the hand-over's own few.
pub(crate) const GATHER_MS: i64 = 5;

/// A job whose fires come closer than this (on average, lately) is not held: above 500
/// fires a second they queue on their own while its consumers work, and each round trip
/// carries many already. Measured at 1,000 tasks/s with 4 consumers (docs/benchmarks.md):
/// holding them added 4 ms to the median pickup and saved no CPU.
const QUEUING_GAP_MS: f64 = 2.0;

/// The span a job's pace is counted over: its fresh fires in the last 100 ms. A count over
/// a span does not mind how the ring bunches them; an average moving a quarter of the way
/// to each new gap did, and a 1,000/s job whose fires came ten at a time crossed the 2 ms
/// floor and was held (pickup p50 4 → 7 ms, docs/benchmarks.md). A job opens a window once
/// more than 20 fires came in a span, so a lone fire or a burst of a few never does. (A
/// job that starts at 1,000/s is held while its first span counts up through 21 to 50:
/// for its first 50 ms or so.)
const PACE_SPAN_MS: i64 = 100;

/// Jobs remembered before the idle ones are forgotten.
const JOBS_KEPT: usize = 4_096;

/// The pace of each pull job's fires on this node, and the window each is gathering in.
#[derive(Default)]
pub(crate) struct Gather(Mutex<HashMap<i64, Pace>>);

#[derive(Default)]
struct Pace {
    /// Where the span being counted began, its fresh fires (not ones coming back from a
    /// hold) so far, and those of the span before it.
    span_start: Millis,
    this_span: u32,
    last_span: u32,
    /// The end of the window its fires are held until, while one is open.
    until: Option<Millis>,
    /// The fires held, by task id, with the end of their window.
    held: HashMap<i64, Millis>,
}

impl Pace {
    /// Counts a fresh fire at `now`, and gives the average gap between its fires over the
    /// last [`PACE_SPAN_MS`] (the span before weighted by how much of it is still inside).
    fn fired(&mut self, now: Millis) -> f64 {
        // Euclidean: a clock gone back puts `now` before the span, which starts afresh.
        match (now - self.span_start).div_euclid(PACE_SPAN_MS) {
            0 => {}
            1 => {
                self.last_span = self.this_span;
                self.this_span = 0;
                self.span_start += PACE_SPAN_MS;
            }
            _ => {
                self.last_span = 0;
                self.this_span = 0;
                self.span_start = now;
            }
        }
        self.this_span += 1;
        let inside = 1.0 - (now - self.span_start) as f64 / PACE_SPAN_MS as f64;
        let fires = f64::from(self.last_span) * inside + f64::from(self.this_span);
        PACE_SPAN_MS as f64 / fires
    }
}

impl Gather {
    /// Where fire `task` of an enabled pull job goes at `now`: `Some(at)`, held in the
    /// wheel until `at` (the end of its job's open window, or of one it opens); `None`,
    /// out now (its job is quiet, or it is a held fire whose window ended). A window opens
    /// only while a poll of the job `waits` on this node to be handed fires: when none
    /// does, the fires become ready at once, and the next poll takes all that are in one
    /// look (at 1,000 tasks/s they queue so on their own).
    pub(crate) fn hold(&self, task: &DueTask, now: Millis, waits: bool) -> Option<Millis> {
        let mut jobs = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if jobs.len() >= JOBS_KEPT {
            jobs.retain(|_, p| p.span_start > now - 60_000);
        }
        let pace = jobs.entry(task.job_id).or_insert_with(|| Pace {
            span_start: now,
            ..Pace::default()
        });
        if pace.held.remove(&task.task_id).is_some() {
            return None;
        }
        let gap_ms = pace.fired(now);
        let until = match pace.until {
            Some(until) if now < until => until,
            _ if waits && (QUEUING_GAP_MS..GATHER_MS as f64).contains(&gap_ms) => now + GATHER_MS,
            _ => {
                pace.until = None;
                return None;
            }
        };
        pace.until = Some(until);
        // A held fire that never came back (cancelled in the wheel, or the wheel cleared
        // by a take-over) is forgotten once its window is long past.
        if pace.held.len() >= 1_024 {
            pace.held.retain(|_, at| *at > now - 60_000);
        }
        pace.held.insert(task.task_id, until);
        Some(until)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fire(task_id: i64, job_id: i64) -> DueTask {
        DueTask::for_test(task_id, job_id, 0)
    }

    #[test]
    fn a_quiet_job_is_never_held() {
        let gather = Gather::default();
        // 20 fires a second: 50 ms apart.
        for i in 0..200 {
            assert_eq!(gather.hold(&fire(i, 1), i * 50, true), None, "fire {i}");
        }
    }

    #[test]
    fn a_busy_jobs_fires_gather_in_windows_and_each_goes_once_its_window_ends() {
        let gather = Gather::default();
        let mut now = 0;
        let mut id = 0;
        // 300 fires a second (3 ms apart) until the job counts as busy.
        let first_held = loop {
            id += 1;
            now += 3;
            if let Some(until) = gather.hold(&fire(id, 1), now, true) {
                break until;
            }
            assert!(id < 100, "a job with fires 3 ms apart is busy");
        };
        assert_eq!(
            first_held,
            now + GATHER_MS,
            "the first held fire opens a window"
        );
        let opened = now;
        // The fires inside the window join it (whether a poll still waits: the window's
        // fires go together); the others of another job do not.
        let joined: Vec<i64> = (1..=2).map(|k| id + k).collect();
        for (k, &t) in joined.iter().enumerate() {
            let at = opened + 2 * (k as i64 + 1) - 1;
            assert_eq!(gather.hold(&fire(t, 1), at, false), Some(first_held));
        }
        assert_eq!(gather.hold(&fire(9_999, 2), opened + 1, true), None);
        // At the window's end the held ones come back and go, each exactly once…
        for t in std::iter::once(id).chain(joined.iter().copied()) {
            assert_eq!(gather.hold(&fire(t, 1), first_held, true), None, "task {t}");
        }
        // …and the next fresh fire opens the next window.
        let next = gather.hold(&fire(id + 10, 1), first_held + 1, true);
        assert_eq!(next, Some(first_held + 1 + GATHER_MS));
    }

    #[test]
    fn no_window_opens_while_no_poll_waits_on_the_node() {
        let gather = Gather::default();
        // 300 fires a second, one every 3 ms.
        for i in 0..100 {
            assert_eq!(gather.hold(&fire(i, 1), 3 * i, false), None, "fire {i}");
        }
        assert_eq!(gather.hold(&fire(100, 1), 300, true), Some(300 + GATHER_MS));
    }

    #[test]
    fn a_job_whose_fires_queue_on_their_own_is_not_held() {
        let gather = Gather::default();
        // 1,000 fires a second, one a millisecond (polls waiting once the pace is known).
        for i in 0..100 {
            gather.hold(&fire(i, 1), i, false);
        }
        for i in 100..200 {
            assert_eq!(gather.hold(&fire(i, 1), i, true), None, "fire {i}");
        }
    }

    #[test]
    fn a_job_whose_fires_come_in_bunches_is_paced_by_their_count_not_their_gaps() {
        let gather = Gather::default();
        // 1,000 fires a second as a busy ring fires them: ten at once every 10 ms. The gaps
        // (nine of 0 ms, one of 10) average above the 2 ms floor for a moment after each
        // bunch; the count over the span stays at a hundred.
        let mut id = 0;
        for bunch in 0..50 {
            for _ in 0..10 {
                id += 1;
                let held = gather.hold(&fire(id, 1), bunch * 10, bunch >= 20);
                assert_eq!(held, None, "fire {id} of bunch {bunch}");
            }
        }
    }

    #[test]
    fn twenty_fires_in_a_span_do_not_open_a_window_and_the_twenty_first_does() {
        let gather = Gather::default();
        // Fires 3 ms apart: the first twenty are a burst, not a pace.
        for i in 0..20 {
            assert_eq!(gather.hold(&fire(i, 1), 3 * i, true), None, "fire {i}");
        }
        assert_eq!(gather.hold(&fire(20, 1), 60, true), Some(60 + GATHER_MS));
    }

    #[test]
    fn a_clock_gone_back_starts_the_count_afresh() {
        let gather = Gather::default();
        // Fifteen fires in the first span and one in the second: a quiet job.
        for i in 0..15 {
            gather.hold(&fire(i, 1), 6 * i, false);
        }
        assert_eq!(gather.hold(&fire(15, 1), 100, false), None);
        // The clock steps back 90 ms. Counting the span before as if 190 % of it were
        // still inside would make the fifteen look like 28 and open a window.
        assert_eq!(gather.hold(&fire(16, 1), 10, true), None);
    }

    #[test]
    fn a_job_that_quiets_down_stops_being_held() {
        let gather = Gather::default();
        for i in 0..100 {
            gather.hold(&fire(i, 1), i, true);
        }
        let mut now = 1_000;
        let mut last = Some(0);
        for i in 100..120 {
            now += 200;
            last = gather.hold(&fire(i, 1), now, true);
        }
        assert_eq!(last, None, "fires 200 ms apart go at once");
    }
}
