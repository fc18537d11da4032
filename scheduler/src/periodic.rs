//! "Every period until the node shuts down", written once for the node's background loops
//! (executor liveness, take-over, retention, the alarm watcher and outbox); and "try
//! again, waiting longer each time, until the node shuts down" for the work the database
//! refused that must not be dropped while the node runs (recording dispatches, runs that
//! ended at the scheduler).

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

/// Pauses between tries of work the database refused: 50 ms, doubling up to 5 s, until
/// the node shuts down. At shutdown the work is left to the next start's recovery (the
/// claims stay in the database), so a database that went away cannot hold the stop.
pub(crate) struct Retrying {
    next: Duration,
    shutdown: watch::Receiver<bool>,
}

impl Retrying {
    const FIRST: Duration = Duration::from_millis(50);
    const LONGEST: Duration = Duration::from_secs(5);

    pub(crate) fn new(shutdown: watch::Receiver<bool>) -> Retrying {
        Retrying {
            next: Retrying::FIRST,
            shutdown,
        }
    }

    /// Waits before the next try: `false`, without waiting, once the node shuts down
    /// (and as soon as it does during the pause).
    pub(crate) async fn pause(&mut self) -> bool {
        if *self.shutdown.borrow() {
            return false;
        }
        let wait = self.next;
        self.next = (self.next * 2).min(Retrying::LONGEST);
        tokio::select! {
            _ = tokio::time::sleep(wait) => true,
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

    #[tokio::test(start_paused = true)]
    async fn retries_wait_twice_as_long_each_time_up_to_five_seconds() {
        let (_stop, shutdown) = watch::channel(false);
        let mut retrying = Retrying::new(shutdown);
        let mut waits = Vec::new();
        for _ in 0..9 {
            let before = Instant::now();
            assert!(retrying.pause().await);
            waits.push(before.elapsed().as_millis());
        }
        assert_eq!(
            waits,
            vec![50, 100, 200, 400, 800, 1_600, 3_200, 5_000, 5_000]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_shutdown_ends_the_retries_even_during_a_pause() {
        let (stop, shutdown) = watch::channel(false);
        let mut retrying = Retrying::new(shutdown);
        for _ in 0..7 {
            assert!(retrying.pause().await); // the next pause is 5 s
        }
        let before = Instant::now();
        let pause = tokio::spawn(async move { retrying.pause().await });
        tokio::time::sleep(Duration::from_millis(1_000)).await;
        stop.send(true).unwrap();
        assert!(!pause.await.unwrap(), "a shutdown during the pause ends it");
        assert_eq!(before.elapsed(), Duration::from_millis(1_000));

        let (_stop, stopped) = watch::channel(true);
        let before = Instant::now();
        assert!(!Retrying::new(stopped).pause().await);
        assert_eq!(before.elapsed(), Duration::ZERO, "no pause once stopped");
    }
}
