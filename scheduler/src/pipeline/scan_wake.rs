//! When the scan runs before its interval: at once ([`ScanWake::now`]: a job changed, a
//! retry or a child falls due soon), or by a time ([`ScanWake::by`]: a limited job's task
//! due later, a limited job's slot freed).
//!
//! Requests by a time are gathered: a scan they wake starts no sooner than [`GAP_MS`] after
//! the one before began, and takes everything they asked for at once. A limited job's
//! tasks are claimed by the scan (under the job's lock, `store::limits`), so before this
//! each create of one and each end of its runs woke a scan of its own, and at 2,500
//! limited tasks/s the scans ran back to back, each claiming a few dozen tasks for the
//! same ten statements.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::Duration;

use tokio::sync::Notify;

use crate::model::Millis;

/// The least time between the start of one scan and a scan woken by a time. It bounds how
/// late a freed slot is noticed (SPEC §11: a throttled task starts within 100 ms of a slot
/// freeing; the scan's own time comes on top, tens of milliseconds when a busy limited job
/// has hundreds of tasks to claim) and how often a busy limited job is scanned for: at most
/// 20 times a second.
pub(crate) const GAP_MS: u64 = 50;

/// The scan's wake-up: a flag for "at once", the earliest time asked for, and the notice
/// that tells a sleeping scan either changed.
#[derive(Debug)]
pub(crate) struct ScanWake {
    notice: Notify,
    urgent: AtomicBool,
    by: AtomicI64,
}

/// What a scan took over when it began ([`ScanWake::taken`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Asked {
    urgent: bool,
    by: Millis,
}

impl Default for ScanWake {
    fn default() -> Self {
        ScanWake {
            notice: Notify::new(),
            urgent: AtomicBool::new(false),
            by: AtomicI64::new(Millis::MAX),
        }
    }
}

impl ScanWake {
    /// The scan runs at once.
    pub(crate) fn now(&self) {
        self.urgent.store(true, Ordering::Release);
        self.notice.notify_one();
    }

    /// The scan runs by `at` (the node's clock, ms), or [`GAP_MS`] after the last one
    /// began if that is later.
    pub(crate) fn by(&self, at: Millis) {
        if self.by.fetch_min(at, Ordering::AcqRel) > at {
            self.notice.notify_one();
        }
    }

    /// A scan begins: what was asked before is answered by it. Returns what it took, for a
    /// scan that failed to give back ([`ScanWake::again`]).
    pub(crate) fn taken(&self) -> Asked {
        Asked {
            urgent: self.urgent.swap(false, Ordering::AcqRel),
            by: self.by.swap(Millis::MAX, Ordering::AcqRel),
        }
    }

    /// A scan that read nothing (the database failed) gives back what it took, due by
    /// `now`: the next scan comes after the gap, not after the whole interval.
    pub(crate) fn again(&self, asked: Asked, now: Millis) {
        if asked.urgent || asked.by != Millis::MAX {
            self.by(asked.by.min(now));
        }
    }

    /// How long the scan may sleep, at most `rest`, when the last one began `since_began`
    /// ago (measured on the monotonic clock, so that a wall clock stepped back does not
    /// stretch the gap) and the node's clock reads `now`: zero when it was asked to run
    /// at once.
    pub(crate) fn sleep_for(&self, since_began: Duration, now: Millis, rest: Duration) -> Duration {
        if self.urgent.load(Ordering::Acquire) {
            return Duration::ZERO;
        }
        match self.by.load(Ordering::Acquire) {
            Millis::MAX => rest,
            by => {
                let asked = Duration::from_millis((by - now).max(0) as u64);
                let gap = Duration::from_millis(GAP_MS).saturating_sub(since_began);
                rest.min(asked.max(gap))
            }
        }
    }

    /// Resolves when a request arrives (then ask [`ScanWake::sleep_for`] again).
    pub(crate) async fn changed(&self) {
        self.notice.notified().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const REST: Duration = Duration::from_millis(1_000);

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn with_nothing_asked_the_scan_sleeps_its_interval() {
        let wake = ScanWake::default();
        assert_eq!(wake.sleep_for(ms(10), 10, REST), REST);
    }

    #[test]
    fn at_once_means_at_once_however_recent_the_last_scan() {
        let wake = ScanWake::default();
        wake.now();
        assert_eq!(wake.sleep_for(ms(1), 1, REST), Duration::ZERO);
    }

    #[test]
    fn requests_by_a_time_keep_the_earliest_and_wait_for_the_gap() {
        let wake = ScanWake::default();
        wake.by(400);
        wake.by(120);
        wake.by(300);
        // The earliest asked for, 20 ms after the last scan began at 0.
        assert_eq!(wake.sleep_for(ms(20), 20, REST), ms(100));
        // A time already past waits for the gap after the last scan's start.
        wake.by(5);
        assert_eq!(wake.sleep_for(ms(20), 20, REST), ms(GAP_MS - 20));
        // And never longer than the interval's rest.
        assert_eq!(wake.sleep_for(ms(20), 20, ms(10)), ms(10));
    }

    #[test]
    fn a_wall_clock_stepped_back_does_not_stretch_the_gap() {
        let wake = ScanWake::default();
        // The node's clock went back 10 s since the scan began, 60 ms ago: a request for
        // "now" is due now, not 10 s after the scan's start by the clock.
        wake.by(-10_000);
        assert_eq!(wake.sleep_for(ms(60), -10_000, REST), Duration::ZERO);
    }

    #[test]
    fn a_scan_that_begins_answers_what_was_asked_before() {
        let wake = ScanWake::default();
        wake.now();
        wake.by(100);
        let asked = wake.taken();
        assert_eq!(wake.sleep_for(ms(20), 20, REST), REST);
        // Given back by a scan that failed, it is due after the gap.
        wake.again(asked, 20);
        assert_eq!(wake.sleep_for(ms(20), 20, REST), ms(GAP_MS - 20));
        // Nothing asked, nothing given back.
        wake.taken();
        wake.again(wake.taken(), 20);
        assert_eq!(wake.sleep_for(ms(20), 20, REST), REST);
    }

    #[tokio::test]
    async fn a_request_made_after_the_scan_began_wakes_its_sleep() {
        let wake = std::sync::Arc::new(ScanWake::default());
        wake.taken();
        assert_eq!(wake.sleep_for(ms(60), 60, REST), REST);
        let asker = wake.clone();
        let waiting = tokio::spawn(async move { wake.changed().await });
        asker.by(60);
        waiting.await.unwrap();
        // A later time than one already asked for changes nothing and tells no one.
        asker.by(500);
        assert!(
            tokio::time::timeout(ms(20), asker.changed()).await.is_err(),
            "no notice for a later time"
        );
    }
}
