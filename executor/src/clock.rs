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

/// One exchange with a scheduler, NTP's four timestamps: this process's monotonic clock
/// when the request left and when the answer came back, the scheduler's clock (epoch µs)
/// when the request arrived and when the answer left, and how fine the scheduler's
/// readings are (µs: 1, or 1,000 from a scheduler that answers in ms).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Reading {
    pub sent_us: i64,
    pub received_us: i64,
    pub answered_us: i64,
    pub back_us: i64,
    pub resolution_us: i64,
}

impl Reading {
    /// The reading a heartbeat answer carries, sent and back at `sent_us` and `back_us`
    /// of this process's monotonic clock: in µs, or in ms from an older scheduler (each
    /// truncated to its millisecond, so taken at its middle); none without a time.
    pub(crate) fn of(
        ack: &rota_proto::RegistrationAck,
        sent_us: i64,
        back_us: i64,
    ) -> Option<Reading> {
        let (received_us, answered_us, resolution_us) =
            match (ack.scheduler_received_us, ack.scheduler_time_us) {
                (Some(received), Some(answered)) => (received, answered, 1),
                _ => {
                    let answered = ack.scheduler_time_ms?;
                    let received = ack.scheduler_received_ms.unwrap_or(answered);
                    (received * 1000 + 500, answered * 1000 + 500, 1000)
                }
            };
        Some(Reading {
            sent_us,
            received_us,
            answered_us,
            back_us,
            resolution_us,
        })
    }

    /// The schedulers' time at this process's monotonic zero, µs, and its error: the
    /// midpoint of the scheduler's two readings against the midpoint of ours; the error is
    /// half the round trip less the time the scheduler spent answering, plus the
    /// readings' resolution.
    fn base_and_error(&self) -> (i64, i64) {
        let theirs = (self.received_us + self.answered_us) / 2;
        let ours = (self.sent_us + self.back_us) / 2;
        let spent_us = (self.answered_us - self.received_us).max(0);
        let in_flight = (self.back_us - self.sent_us - spent_us).max(0);
        (theirs - ours, (in_flight + 1) / 2 + self.resolution_us)
    }
}

/// Follows one reading of a scheduler's clock: the base moves only when it differs from
/// the current one by more than the reading's error, so a slow answer does not make it
/// wander.
pub(crate) fn follow(reading: Reading) {
    let (base, error) = reading.base_and_error();
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

    /// A reading from a scheduler that answers in ms, as before 2026-12-04.
    fn reading(sent_us: i64, received_ms: i64, answered_ms: i64, back_us: i64) -> Reading {
        Reading {
            sent_us,
            received_us: received_ms * 1000 + 500,
            answered_us: answered_ms * 1000 + 500,
            back_us,
            resolution_us: 1000,
        }
    }

    #[test]
    fn follows_a_reading_beyond_its_error_only() {
        // One test owns the process-wide base.
        let mono = monotonic_us();
        let wall = wall_ms();
        // The scheduler is 2 s ahead, read over a 20 ms round trip.
        follow(reading(
            mono,
            wall + 10 + 2_000,
            wall + 10 + 2_000,
            mono + 20_000,
        ));
        assert!((offset_ms() - 2_000).abs() < 50, "{}", offset_ms());
        let base = BASE_US.load(Ordering::Relaxed);
        // Within the error: kept.
        follow(reading(
            mono,
            wall + 10 + 2_005,
            wall + 10 + 2_005,
            mono + 20_000,
        ));
        assert_eq!(BASE_US.load(Ordering::Relaxed), base);
        // The machine's clock was fixed.
        let now = wall_ms();
        follow(reading(monotonic_us(), now, now, monotonic_us()));
        assert!(offset_ms().abs() < 50, "{}", offset_ms());
    }

    #[test]
    fn the_time_the_scheduler_spent_answering_is_not_in_flight() {
        // Sent at 0, back 10 ms later; the scheduler read the request at 1,001 ms of its
        // clock and answered at 1,009 ms, 8 ms spent on it (a busy database, say). The
        // message was 1 ms in flight each way: its clock reads 1,000 at our zero.
        let (base, error) = reading(0, 1_001, 1_009, 10_000).base_and_error();
        assert!((base - 1_000_000).abs() <= 1_000, "base {base} µs");
        assert!(error <= 2_000, "error {error} µs");
        // Had it said only when it answered, the answer would have been taken as read
        // at our midpoint, 5 ms: 4 ms ahead.
        let (naive, _) = reading(0, 1_009, 1_009, 10_000).base_and_error();
        assert!((naive - 1_004_000).abs() <= 1_000, "naive {naive} µs");
    }

    /// In µs the reading is as fine as its round trip: a scheduler 1,000.3 ms ahead of our
    /// zero, read over 200 µs each way, is found within a tenth of a millisecond, where a
    /// millisecond reading could be half a millisecond off and would not be corrected.
    #[test]
    fn microsecond_readings_fix_the_clock_within_its_round_trip() {
        let ack = |received_us: i64, answered_us: i64| rota_proto::RegistrationAck {
            heartbeat_interval_ms: 30_000,
            plugins: Vec::new(),
            scheduler_time_ms: Some(answered_us / 1000),
            scheduler_received_ms: Some(received_us / 1000),
            scheduler_time_us: Some(answered_us),
            scheduler_received_us: Some(received_us),
        };
        // Sent at 0, arrived at 1,000,500 µs of its clock (200 µs later: it reads 1,000,300
        // at our zero), answered 600 µs later, back at 1,000 µs.
        let reading = Reading::of(&ack(1_000_500, 1_001_100), 0, 1_000).unwrap();
        let (base, error) = reading.base_and_error();
        assert!((base - 1_000_300).abs() <= 100, "base {base} µs");
        assert!(error <= 300, "error {error} µs");

        // The same answer from a scheduler of before: milliseconds only.
        let mut old = ack(1_000_500, 1_001_100);
        old.scheduler_time_us = None;
        old.scheduler_received_us = None;
        let (base, error) = Reading::of(&old, 0, 1_000).unwrap().base_and_error();
        assert!((base - 1_000_300).abs() <= 1_000, "base {base} µs");
        assert!(
            error >= 1_000,
            "a millisecond reading is no finer than its millisecond"
        );

        // No time in the answer: no reading.
        let mut none = old;
        none.scheduler_time_ms = None;
        assert!(Reading::of(&none, 0, 1_000).is_none());
    }
}
