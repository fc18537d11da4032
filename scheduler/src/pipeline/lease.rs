//! This node's standing in the cluster, below every stage: the [`Cluster`] handle they all
//! read, the lease to fire with its epoch, and the heartbeat that keeps it (on a thread and
//! a connection of its own; `docs/cluster.md`). The heartbeat only signals when it finds the
//! node fenced; the rejoin belongs to the scan, which owns claims and their recovery.

use std::sync::atomic::AtomicI64;

use super::*;

/// What every stage reads about this node's standing, built once by the node at start and
/// held by each stage's handle: where the rows are, the settings, the time, the lease (epoch
/// and until when it may fire) and the shutdown signal. Nothing here is a stage's own
/// state, so the cluster layer calls no stage.
pub(crate) struct Cluster {
    pub store: Store,
    pub config: Config,
    /// The time the stages read.
    pub clock: crate::clock::Clock,
    /// This node's identity and current epoch.
    pub lease: Lease,
    /// Until when this node may fire (see [`FireLease`]).
    pub fire_lease: FireLease,
    pub shutdown: watch::Receiver<bool>,
    /// The alarm rules as last read: a stage that sees what a rule watches raises it.
    pub alarm_rules: Arc<crate::alarm::Rules>,
}

/// This node's identity and current epoch; the epoch changes when a fenced node rejoins.
pub(crate) struct Lease {
    node_id: i64,
    epoch: std::sync::atomic::AtomicI64,
}

impl Lease {
    pub(crate) fn new(lease: NodeLease) -> Lease {
        Lease {
            node_id: lease.node_id,
            epoch: std::sync::atomic::AtomicI64::new(lease.epoch),
        }
    }

    pub(crate) fn get(&self) -> NodeLease {
        NodeLease {
            node_id: self.node_id,
            epoch: self.epoch.load(Ordering::SeqCst),
        }
    }

    pub(crate) fn renew(&self, lease: NodeLease) {
        self.epoch.store(lease.epoch, Ordering::SeqCst);
    }
}

/// Until when this node may fire, epoch ms: its last confirmed heartbeat plus half the
/// dead-after time, so it stops before any other node could take its claims over
/// (`docs/cluster.md`). The ring, the dispatch rounds and the take-over check it with the
/// time they read.
pub(crate) struct FireLease {
    until: AtomicI64,
    half_dead_after: Millis,
}

impl FireLease {
    /// A lease confirmed at `now` (the node just registered).
    pub(crate) fn new(now: Millis, dead_after_ms: Millis) -> Self {
        FireLease {
            until: AtomicI64::new(now + dead_after_ms / 2),
            half_dead_after: dead_after_ms / 2,
        }
    }

    /// A heartbeat sent at `sent` was written: the lease runs from then (the database
    /// saw it no earlier). A late confirmation of an older beat never shortens it.
    pub(crate) fn confirmed(&self, sent: Millis) {
        self.until
            .fetch_max(sent + self.half_dead_after, Ordering::SeqCst);
    }

    /// A new epoch after a rejoin: the lease runs from `now`, whatever it was.
    pub(crate) fn restart(&self, now: Millis) {
        self.until
            .store(now + self.half_dead_after, Ordering::SeqCst);
    }

    /// Fenced: no more firing until a rejoin.
    pub(crate) fn lapse(&self) {
        self.until.store(0, Ordering::SeqCst);
    }

    pub(crate) fn until(&self) -> Millis {
        self.until.load(Ordering::SeqCst)
    }

    pub(crate) fn holds_at(&self, now: Millis) -> bool {
        now <= self.until()
    }
}

/// Keeps this node's row fresh, and with it the lease to fire (`docs/cluster.md`), from a
/// thread of its own with a small runtime and (on MySQL) a connection of its own: a node
/// whose main runtime is saturated by a burst is busy, not dead, and must not look dead.
/// When the heartbeat finds the node taken over it only wakes `fenced`: the rejoin is the
/// scan's (`scan::rejoin_loop`), on the main runtime. It ends with the shutdown signal, or
/// once `stopped` says the node stopped scheduling.
pub(crate) fn spawn_heartbeat(
    cluster: Arc<Cluster>,
    fenced: Arc<Notify>,
    stopped: impl Fn() -> bool + Send + 'static,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    std::thread::Builder::new()
        .name("rota-heartbeat".into())
        .spawn(move || runtime.block_on(heartbeat_loop(cluster, fenced, stopped)))
}

async fn heartbeat_loop(cluster: Arc<Cluster>, fenced: Arc<Notify>, stopped: impl Fn() -> bool) {
    let mut shutdown = cluster.shutdown.clone();
    let dead_after = cluster.config.node_dead_after_ms.max(600);
    let period = Duration::from_millis(u64::try_from(dead_after / 6).unwrap_or(500));
    let beat = loop {
        match cluster.store.beat().await {
            Ok(beat) => break beat,
            Err(e) => {
                tracing::warn!(error = %e, "cannot open the heartbeat's connection; retrying")
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(period) => {}
            _ = shutdown.wait_for(|s| *s) => return,
        }
    };
    let mut tick = tokio::time::interval(period);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.wait_for(|s| *s) => return,
        }
        if stopped() {
            return;
        }
        // The lease counts from before the write: the database saw it no earlier.
        let sent = cluster.clock.now_ms();
        let started = std::time::Instant::now();
        let outcome = beat.heartbeat_node(cluster.lease.get(), sent).await;
        let took = started.elapsed();
        metrics::histogram!("rota_heartbeat_seconds").record(took.as_secs_f64());
        if took.as_millis() as i64 > dead_after / 4 {
            // Slower than this and the lease to fire may lapse before the next beat lands.
            tracing::warn!(
                took_ms = took.as_millis() as u64,
                "a node heartbeat was slow"
            );
        }
        match outcome {
            Ok(true) => {
                cluster.fire_lease.confirmed(sent);
            }
            Ok(false) => fenced.notify_one(),
            Err(e) => tracing::warn!(error = %e, "node heartbeat failed"),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::clock::Clock;

    const DEAD_AFTER: Millis = 3_000;

    #[tokio::test(start_paused = true)]
    async fn the_lease_to_fire_lapses_half_the_dead_after_time_after_the_last_beat() {
        let clock = Clock::tokio_from(10_000_000);
        let lease = FireLease::new(clock.now_ms(), DEAD_AFTER);
        tokio::time::advance(Duration::from_millis(1_500)).await;
        assert!(lease.holds_at(clock.now_ms()), "exactly half of dead-after");
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(!lease.holds_at(clock.now_ms()), "no beat confirmed since");

        // A beat sent now and confirmed later counts from when it was sent.
        let sent = clock.now_ms();
        tokio::time::advance(Duration::from_millis(400)).await;
        lease.confirmed(sent);
        assert_eq!(lease.until(), sent + DEAD_AFTER / 2);
        // …and an older beat confirmed after it does not shorten the lease.
        lease.confirmed(sent - 1_000);
        assert_eq!(lease.until(), sent + DEAD_AFTER / 2);
        tokio::time::advance(Duration::from_millis(1_100)).await;
        assert!(lease.holds_at(clock.now_ms()));
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(!lease.holds_at(clock.now_ms()));
    }

    #[tokio::test(start_paused = true)]
    async fn a_fenced_node_fires_nothing_until_it_rejoins() {
        let clock = Clock::tokio_from(10_000_000);
        let lease = FireLease::new(clock.now_ms(), DEAD_AFTER);
        lease.lapse();
        assert!(
            !lease.holds_at(clock.now_ms()),
            "at once, whatever was left"
        );
        // A rejoin (a new epoch) starts a fresh lease from its own time.
        tokio::time::advance(Duration::from_millis(2_000)).await;
        lease.restart(clock.now_ms());
        assert!(lease.holds_at(clock.now_ms() + DEAD_AFTER / 2));
        assert!(!lease.holds_at(clock.now_ms() + DEAD_AFTER / 2 + 1));
    }
}
