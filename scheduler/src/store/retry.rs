//! Transactions a concurrent writer made fail, tried again.
//!
//! On a Galera cluster, two members' transactions that write the same row both run; the one
//! that certifies second is rolled back at COMMIT with a deadlock error (1213). On a single
//! MySQL/MariaDB the same error is a plain deadlock, 1205 a lock wait that timed out; on
//! SQLite, a file busy past the busy timeout. Each rolls back the whole transaction (a
//! dropped sqlx transaction rolls back what a lock timeout left open), so the store's
//! write methods run their transaction again: a few times, with growing, jittered pauses,
//! each counted in `rota_db_retries_total{op, reason}`. A transaction whose COMMIT got no
//! answer (the connection died) is not retried: whether it committed is unknown, and
//! the caller's own recovery (a report re-sent, a claim found by a take-over) covers it.

use std::time::Duration;

use super::Error;

/// Tries after the first; the pauses before them add up to ~0.4 s at most.
const RETRIES: u32 = 6;

/// Why `e` is worth another try, as the metric's `reason`; `None` if it is not.
pub(crate) fn retry_reason(e: &sqlx::Error) -> Option<&'static str> {
    let sqlx::Error::Database(d) = e else {
        return None;
    };
    if let Some(my) = d.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>() {
        return match my.number() {
            // A deadlock, or on Galera a certification conflict with another member; 3101:
            // MySQL Group Replication rolled the transaction back at commit (a conflict).
            1213 | 3101 => Some("conflict"),
            1205 => Some("lock_wait_timeout"),
            _ => None,
        };
    }
    // SQLite: SQLITE_BUSY, SQLITE_LOCKED and their extended codes.
    matches!(d.code().as_deref(), Some("5" | "6" | "517" | "262")).then_some("busy")
}

pub(crate) fn is_retryable(e: &sqlx::Error) -> bool {
    retry_reason(e).is_some()
}

/// After an attempt of `op` failed with `e`: whether to run it again ([`retrying!`]),
/// having counted the retry and paused; false once it was retried [`RETRIES`] times or
/// when `e` is not worth another try.
pub(crate) async fn again(e: &Error, op: &'static str, retries: &mut u32) -> bool {
    let Error::Database(e) = e else {
        return false;
    };
    let Some(reason) = retry_reason(e) else {
        return false;
    };
    if *retries >= RETRIES {
        return false;
    }
    *retries += 1;
    metrics::counter!("rota_db_retries_total", "op" => op, "reason" => reason).increment(1);
    tracing::debug!(
        op,
        reason,
        retries = *retries,
        "retrying a transaction: {e}"
    );
    tokio::time::sleep(pause(*retries)).await;
    true
}

/// 2, 4, 8, … ms, each with up to as much again at random: two members retrying the same
/// conflict do not meet again in step.
fn pause(retry: u32) -> Duration {
    let base = 1u64 << retry.min(8);
    Duration::from_millis(base + rand::random::<u64>() % (base + 1))
}

#[cfg(test)]
mod tests {
    use super::super::Result;
    use super::*;

    #[test]
    fn pauses_grow_and_stay_bounded() {
        let total: Duration = (1..=RETRIES).map(pause).sum();
        assert!(
            total <= Duration::from_millis(2 * ((1 << (RETRIES + 1)) - 2)),
            "{total:?}"
        );
        assert!(pause(1) >= Duration::from_millis(2));
        assert!(pause(RETRIES) >= Duration::from_millis(1 << RETRIES));
    }

    #[tokio::test(start_paused = true)]
    async fn other_errors_are_not_retried() {
        let mut calls = 0;
        let r: Result<()> = retrying!("test", {
            calls += 1;
            Err(Error::Corrupt("no".into()))
        });
        assert!(matches!(r, Err(Error::Corrupt(_))));
        assert_eq!(calls, 1);
    }
}
