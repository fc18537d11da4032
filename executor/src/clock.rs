//! The executor's clock: its wall clock corrected by its measured offset from its
//! schedulers'. Each registration or heartbeat answer carries the scheduler's (itself
//! database-corrected) time; the executor reads it between two readings of its own and
//! follows it NTP-style, so a run waits for its due time, expires at `not_after` and
//! reports its start and end by the cluster's clock even when this machine's is off.
//! Signatures keep the wall clock ([`wall_ms`]): both ends check them against their own.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Beyond this offset from its scheduler the executor logs a warning (its times are
/// corrected all the same).
pub const WARN_OFFSET_MS: i64 = 500;

static OFFSET_MS: AtomicI64 = AtomicI64::new(0);

/// This machine's wall clock, epoch ms: for signatures only.
pub(crate) fn wall_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// The cluster's time, epoch ms: the wall clock corrected by the measured offset.
pub(crate) fn now_ms() -> i64 {
    wall_ms().saturating_add(offset_ms())
}

/// How far the schedulers' clock is ahead of this machine's, as last measured (ms).
pub fn offset_ms() -> i64 {
    OFFSET_MS.load(Ordering::Relaxed)
}

/// Follows one reading of a scheduler's clock (`scheduler`, taken between this
/// machine's `before` and `after`): the offset is the reading against the midpoint, and
/// it moves only when it differs from the current one by more than the reading's error
/// (half the round trip), so a slow answer does not make it wander.
pub(crate) fn follow(before: i64, scheduler: i64, after: i64) {
    let round_trip = (after - before).max(0);
    let offset = scheduler - (before + round_trip / 2);
    let error = (round_trip + 1) / 2;
    let current = offset_ms();
    if (offset - current).abs() <= error + 1 {
        return;
    }
    OFFSET_MS.store(offset, Ordering::Relaxed);
    if offset.abs() > WARN_OFFSET_MS {
        tracing::warn!(
            offset_ms = offset,
            error_ms = error,
            "this executor's clock is off its scheduler's by more than {WARN_OFFSET_MS} ms; \
             its runs keep the scheduler's time, but fix its time sync (NTP)"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn follows_a_reading_beyond_its_error_only() {
        // One test owns the process-wide offset.
        follow(1_000, 3_010, 1_020); // 2 s ahead, ±10 ms
        assert_eq!(offset_ms(), 2_000);
        follow(1_000, 3_015, 1_020); // within the error: kept
        assert_eq!(offset_ms(), 2_000);
        follow(1_000, 1_005, 1_010); // the machine's clock was fixed
        assert_eq!(offset_ms(), 0);
        let before = now_ms();
        assert!((before - wall_ms()).abs() < 1_000);
    }
}
