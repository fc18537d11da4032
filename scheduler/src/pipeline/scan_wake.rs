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
/// freeing; the scan itself takes a few more milliseconds) and how often a busy limited job
/// is scanned for: at most 20 times a second.
pub(crate) const GAP_MS: Millis = 50;

/// The scan's wake-up: a flag for "at once", the earliest time asked for, and the notice
/// that tells a sleeping scan either changed.
#[derive(Debug)]
pub(crate) struct ScanWake {
    notice: Notify,
    urgent: AtomicBool,
    by: AtomicI64,
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

    /// The scan runs by `at` (node clock, ms), or [`GAP_MS`] after the last one began if
    /// that is later.
    pub(crate) fn by(&self, at: Millis) {
        if self.by.fetch_min(at, Ordering::AcqRel) > at {
            self.notice.notify_one();
        }
    }

    /// A scan begins: what was asked before is answered by it.
    pub(crate) fn taken(&self) {
        self.urgent.store(false, Ordering::Release);
        self.by.store(Millis::MAX, Ordering::Release);
    }

    /// How long a scan that began at `began` and ends at `now` may sleep before the next
    /// one, at most `rest`: zero when it was asked to run at once.
    pub(crate) fn sleep_for(&self, began: Millis, now: Millis, rest: Duration) -> Duration {
        if self.urgent.load(Ordering::Acquire) {
            return Duration::ZERO;
        }
        match self.by.load(Ordering::Acquire) {
            Millis::MAX => rest,
            by => {
                let at = by.max(began + GAP_MS);
                rest.min(Duration::from_millis((at - now).max(0) as u64))
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

    #[test]
    fn with_nothing_asked_the_scan_sleeps_its_interval() {
        let wake = ScanWake::default();
        assert_eq!(wake.sleep_for(0, 10, REST), REST);
    }

    #[test]
    fn at_once_means_at_once_however_recent_the_last_scan() {
        let wake = ScanWake::default();
        wake.now();
        assert_eq!(wake.sleep_for(0, 1, REST), Duration::ZERO);
    }

    #[test]
    fn requests_by_a_time_keep_the_earliest_and_wait_for_the_gap() {
        let wake = ScanWake::default();
        wake.by(400);
        wake.by(120);
        wake.by(300);
        // The earliest asked for, from a scan that began at 0 and ended at 20.
        assert_eq!(wake.sleep_for(0, 20, REST), Duration::from_millis(100));
        // A time already past waits for the gap after the last scan's start.
        wake.by(5);
        assert_eq!(
            wake.sleep_for(0, 20, REST),
            Duration::from_millis((GAP_MS - 20) as u64)
        );
        // And never longer than the interval's rest.
        assert_eq!(
            wake.sleep_for(0, 20, Duration::from_millis(10)),
            Duration::from_millis(10)
        );
    }

    #[test]
    fn a_scan_that_begins_answers_what_was_asked_before() {
        let wake = ScanWake::default();
        wake.now();
        wake.by(100);
        wake.taken();
        assert_eq!(wake.sleep_for(0, 20, REST), REST);
    }
}
