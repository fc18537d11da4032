//! The executor's clock: its schedulers' time, kept on the monotonic clock. Each
//! registration or heartbeat answer carries the scheduler's (itself database-corrected)
//! time; the executor reads it between two readings of its monotonic clock and fixes its
//! time base NTP-style, so a run waits for its due time, expires at `not_after` and reports
//! its start and end by the cluster's clock even when this machine's wall clock is off —
//! or is stepped between two heartbeats. Signatures keep the wall clock ([`wall_ms`]):
//! both ends check them against their own.

use std::sync::LazyLock;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// Beyond this offset from its scheduler the executor logs a warning (its times follow
/// the scheduler's all the same).
pub const WARN_OFFSET_MS: i64 = 500;

/// The schedulers' time in µs at the zero of [`monotonic_us`]; `i64::MIN` until the first
/// answer (the wall clock until then).
static BASE_US: AtomicI64 = AtomicI64::new(i64::MIN);
static MONOTONIC_ZERO: LazyLock<Instant> = LazyLock::new(Instant::now);
/// The offset last warned about.
static SAID_MS: AtomicI64 = AtomicI64::new(0);

/// This machine's wall clock, epoch ms: for signatures only.
pub(crate) fn wall_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// This process's monotonic clock, µs since its first reading.
pub(crate) fn monotonic_us() -> i64 {
    i64::try_from(MONOTONIC_ZERO.elapsed().as_micros()).unwrap_or(i64::MAX)
}

/// The cluster's time, epoch ms.
pub(crate) fn now_ms() -> i64 {
    match BASE_US.load(Ordering::Relaxed) {
        i64::MIN => wall_ms(),
        base => base.saturating_add(monotonic_us()).div_euclid(1000),
    }
}

/// How far the schedulers' clock is ahead of this machine's wall clock (ms).
pub fn offset_ms() -> i64 {
    now_ms() - wall_ms()
}

/// Follows one reading of a scheduler's clock (`scheduler_ms`, taken between this
/// process's monotonic `before_us` and `after_us`): the base is the reading against the
/// midpoint, and it moves only when it differs from the current one by more than the
/// reading's error (half the round trip, and the reading's millisecond), so a slow answer
/// does not make it wander.
pub(crate) fn follow(before_us: i64, scheduler_ms: i64, after_us: i64) {
    let round_trip = (after_us - before_us).max(0);
    let base = scheduler_ms * 1000 + 500 - (before_us + round_trip / 2);
    let error = (round_trip + 1) / 2 + 500;
    let current = BASE_US.load(Ordering::Relaxed);
    if current == i64::MIN || (base - current).abs() > error {
        BASE_US.store(base, Ordering::Relaxed);
    }
    let offset = offset_ms();
    if (offset - SAID_MS.load(Ordering::Relaxed)).abs() > WARN_OFFSET_MS / 2 {
        SAID_MS.store(offset, Ordering::Relaxed);
        if offset.abs() > WARN_OFFSET_MS {
            tracing::warn!(
                offset_ms = offset,
                error_ms = error / 1000,
                "this executor's clock is off its scheduler's by more than {WARN_OFFSET_MS} ms; \
                 its runs keep the scheduler's time, but fix its time sync (NTP)"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn follows_a_reading_beyond_its_error_only() {
        // One test owns the process-wide base.
        let mono = monotonic_us();
        let wall = wall_ms();
        // The scheduler is 2 s ahead, read over a 20 ms round trip.
        follow(mono, wall + 10 + 2_000, mono + 20_000);
        assert!((offset_ms() - 2_000).abs() < 50, "{}", offset_ms());
        let base = BASE_US.load(Ordering::Relaxed);
        follow(mono, wall + 10 + 2_005, mono + 20_000); // within the error: kept
        assert_eq!(BASE_US.load(Ordering::Relaxed), base);
        follow(monotonic_us(), wall_ms(), monotonic_us()); // the machine's clock was fixed
        assert!(offset_ms().abs() < 50, "{}", offset_ms());
    }
}
