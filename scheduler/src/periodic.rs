//! "Every period until the node shuts down", written once for the node's background loops
//! (executor liveness, take-over, retention, the alarm watcher and outbox).

use std::time::Duration;

use tokio::sync::watch;
use tokio::time::{Instant, Interval, MissedTickBehavior};

/// A period's ticks until shutdown. A tick that comes late (the loop's work took longer
/// than the period) delays the next ones instead of bunching them.
pub(crate) struct Every {
    tick: Interval,
    shutdown: watch::Receiver<bool>,
}

impl Every {
    /// Ticks every `period`, the first at once.
    pub(crate) fn new(period: Duration, shutdown: watch::Receiver<bool>) -> Every {
        Every::starting(Instant::now(), period, shutdown)
    }

    /// Ticks every `period`, the first one period from now.
    pub(crate) fn after(period: Duration, shutdown: watch::Receiver<bool>) -> Every {
        Every::starting(Instant::now() + period, period, shutdown)
    }

    fn starting(first: Instant, period: Duration, shutdown: watch::Receiver<bool>) -> Every {
        let mut tick = tokio::time::interval_at(first, period);
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        Every { tick, shutdown }
    }

    /// Waits for the next tick: `false` once the node shuts down (at once if it has).
    pub(crate) async fn tick(&mut self) -> bool {
        tokio::select! {
            _ = self.tick.tick() => true,
            _ = self.shutdown.wait_for(|s| *s) => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn ticks_every_period_until_shutdown() {
        let (stop, shutdown) = watch::channel(false);
        let mut every = Every::after(Duration::from_secs(60), shutdown);
        let started = Instant::now();
        assert!(every.tick().await);
        assert_eq!(started.elapsed(), Duration::from_secs(60));
        assert!(every.tick().await);
        assert_eq!(started.elapsed(), Duration::from_secs(120));
        stop.send(true).unwrap();
        assert!(!every.tick().await, "a tick after shutdown");
    }

    #[tokio::test(start_paused = true)]
    async fn the_first_tick_of_new_is_at_once() {
        let (_stop, shutdown) = watch::channel(false);
        let mut every = Every::new(Duration::from_secs(1), shutdown);
        let started = Instant::now();
        assert!(every.tick().await);
        assert_eq!(started.elapsed(), Duration::ZERO);
    }
}
