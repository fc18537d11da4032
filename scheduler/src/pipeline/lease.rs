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
    /// Why the last heartbeat was not written, until one is: what `/readyz` says.
    last_failure: std::sync::Mutex<Option<String>>,
}

impl FireLease {
    /// A lease confirmed at `now` (the node just registered).
    pub(crate) fn new(now: Millis, dead_after_ms: Millis) -> Self {
        FireLease {
            until: AtomicI64::new(now + dead_after_ms / 2),
            half_dead_after: dead_after_ms / 2,
            last_failure: std::sync::Mutex::new(None),
        }
    }

    /// Whether this node can serve at `now` (`/readyz`): it wrote its heartbeat to the
    /// database recently enough to fire. Else why not, in words — the database's last
    /// answer to the heartbeat (its disk is full, it is read-only, it does not answer) or
    /// that the node was fenced and is rejoining.
    pub(crate) fn readiness(&self, now: Millis) -> Result<(), String> {
        if self.holds_at(now) {
            return Ok(());
        }
        let until = self.until();
        if until == 0 {
            return Err("this node was taken over by another and is rejoining".into());
        }
        let since = now - (until - self.half_dead_after);
        let why = self
            .last_failure
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .unwrap_or_else(|| "it took too long".into());
        Err(format!(
            "this node's heartbeat has not been written to the database for {since} ms: {why}"
        ))
    }

    /// Notes why a heartbeat failed (`None`: one was written).
    pub(crate) fn note_failure(&self, why: Option<String>) {
        metrics::gauge!("rota_node_ready").set(if why.is_none() { 1.0 } else { 0.0 });
        *self.last_failure.lock().unwrap_or_else(|e| e.into_inner()) = why;
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
                cluster.fire_lease.note_failure(None);
                measure_clock(beat.database_time(), cluster.config.max_clock_offset_ms).await;
            }
            Ok(false) => fenced.notify_one(),
            Err(e) => {
                tracing::warn!(error = %e, "node heartbeat failed");
                let why = match e.exhausted() {
                    Some(exhausted) => exhausted.to_string(),
                    None => e.to_string(),
                };
                cluster.fire_lease.note_failure(Some(why));
            }
        }
    }
}

/// One reading of the database's clock (epoch ms) taken between two readings of this
/// process's monotonic clock (µs): the time base that makes [`crate::model::now_us`] read
/// the database's time (NTP-style: its reading against the midpoint of ours), and the
/// error of that, half the round trip (µs).
pub(crate) fn base_of(before_us: i64, database_ms: Millis, after_us: i64) -> (i64, i64) {
    let round_trip = (after_us - before_us).max(0);
    (
        database_ms * 1000 + 500 - (before_us + round_trip / 2),
        (round_trip + 1) / 2 + 500,
    )
}

/// Reads the database's clock (`read`, stamped on the monotonic clock around its
/// statement: [`crate::store::ClockReading`]) and moves this node's
/// time base ([`crate::model::now_us`]) to it when it moved by more than the reading's
/// error; an offset from the wall clock beyond `max_offset_ms` is logged. SQLite's clock is
/// this machine's: the base follows the wall clock. The metric `rota_clock_offset_seconds`
/// shows the offset.
pub(crate) async fn measure_clock<F>(read: F, max_offset_ms: Millis)
where
    F: std::future::Future<Output = crate::store::Result<Option<crate::store::ClockReading>>>,
{
    let reading = read.await;
    follow_database_clock(
        reading.map(|r| r.map(|r| (r.before_us, r.database_ms, r.after_us))),
        max_offset_ms,
    );
}

fn follow_database_clock(
    reading: crate::store::Result<Option<(i64, Millis, i64)>>,
    max_offset_ms: Millis,
) {
    let (base, error) = match reading {
        Ok(Some((before, database, after))) => base_of(before, database, after),
        // SQLite: the database's clock is the wall clock, read now.
        Ok(None) => (crate::model::wall_us() - crate::model::monotonic_us(), 500),
        Err(e) => {
            tracing::debug!(error = %e, "reading the database's clock failed");
            return;
        }
    };
    let moved = crate::model::time_base_us().is_none_or(|current| (base - current).abs() > error);
    if moved {
        crate::model::set_time_base_us(base);
    }
    // Said once per change of more than half the bound, not at every heartbeat.
    static SAID_MS: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(0);
    let offset = crate::model::clock_offset_ms();
    let said = SAID_MS.load(std::sync::atomic::Ordering::Relaxed);
    if (offset - said).abs() > max_offset_ms / 2 {
        SAID_MS.store(offset, std::sync::atomic::Ordering::Relaxed);
        if offset.abs() > max_offset_ms {
            tracing::warn!(
                offset_ms = offset,
                error_ms = error / 1000,
                max_clock_offset_ms = max_offset_ms,
                "this node's clock is off the database's by more than max_clock_offset_ms; its \
                 due times, leases and take-overs keep the database's time, but fix its time \
                 sync (NTP)"
            );
        }
    }
    metrics::gauge!("rota_clock_offset_seconds")
        .set(crate::model::clock_offset_ms() as f64 / 1000.0);
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::clock::Clock;

    const DEAD_AFTER: Millis = 3_000;

    #[test]
    fn a_reading_sets_the_base_at_the_midpoint_of_its_round_trip() {
        // Read between 1,000 µs and 3,000 µs of the monotonic clock, the database saying
        // 5,000 ms (so between 5,000,000 and 5,000,999 µs: 5,000,500 ± 500).
        let (base, error) = base_of(1_000, 5_000, 3_000);
        assert_eq!(base, 5_000_500 - 2_000);
        assert_eq!(error, 1_000 + 500);
    }

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
    async fn readiness_says_why_the_heartbeat_has_not_been_written() {
        let clock = Clock::tokio_from(10_000_000);
        let lease = FireLease::new(clock.now_ms(), DEAD_AFTER);
        assert_eq!(lease.readiness(clock.now_ms()), Ok(()));
        lease.note_failure(Some("the database's disk is full".into()));
        assert_eq!(
            lease.readiness(clock.now_ms()),
            Ok(()),
            "still within the lease"
        );
        tokio::time::advance(Duration::from_millis(2_000)).await;
        assert_eq!(
            lease.readiness(clock.now_ms()),
            Err(
                "this node's heartbeat has not been written to the database for 2000 ms: \
                 the database's disk is full"
                    .into()
            )
        );
        lease.confirmed(clock.now_ms());
        lease.note_failure(None);
        assert_eq!(lease.readiness(clock.now_ms()), Ok(()));
        lease.lapse();
        assert!(
            lease
                .readiness(clock.now_ms())
                .unwrap_err()
                .contains("taken over")
        );
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
