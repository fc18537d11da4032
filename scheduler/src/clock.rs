//! The time the pipeline reads. In production the node's time ([`crate::model::now_ms`]:
//! epoch ms by the database's clock, kept on the monotonic clock). In unit tests
//! tokio's clock counted from a fixed start: `#[tokio::test(start_paused = true)]` holds it
//! still and `tokio::time::advance` moves it, so the scan window, the lease to fire and the
//! dispatch rounds are tested without sleeping and without a flaky margin.

use crate::model::Millis;

#[derive(Debug, Clone, Default)]
pub enum Clock {
    /// The node's time, [`crate::model::now_ms`].
    #[default]
    Wall,
    /// `start_ms` at `origin`, then tokio's time since.
    Tokio {
        start_ms: Millis,
        origin: tokio::time::Instant,
    },
}

impl Clock {
    /// Tokio's clock reading `start_ms` now.
    pub fn tokio_from(start_ms: Millis) -> Clock {
        Clock::Tokio {
            start_ms,
            origin: tokio::time::Instant::now(),
        }
    }

    /// Now, epoch ms.
    pub fn now_ms(&self) -> Millis {
        self.now_us().div_euclid(1000)
    }

    /// Now, epoch µs (the ring sleeps to the microsecond).
    pub fn now_us(&self) -> i64 {
        match self {
            Clock::Wall => crate::model::now_us(),
            Clock::Tokio { start_ms, origin } => start_ms
                .saturating_mul(1000)
                .saturating_add(i64::try_from(origin.elapsed().as_micros()).unwrap_or(i64::MAX)),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_tokio_clock_moves_only_when_time_does() {
        let clock = Clock::tokio_from(1_000_000);
        assert_eq!(clock.now_ms(), 1_000_000);
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(clock.now_ms(), 1_000_000, "wall time does not move it");
        tokio::time::advance(Duration::from_millis(1_500)).await;
        assert_eq!(clock.now_ms(), 1_001_500);
    }

    #[test]
    fn the_wall_clock_is_epoch_milliseconds() {
        let before = crate::model::now_ms();
        let now = Clock::Wall.now_ms();
        assert!(now >= before && now < before + 60_000);
    }
}
