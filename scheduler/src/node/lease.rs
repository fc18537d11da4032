//! This node's lease to fire: its epoch, the heartbeat that keeps it (on a thread and a
//! connection of its own), and the rejoin after a take-over fenced it (`docs/cluster.md`).

use super::*;

/// This node's identity and current epoch; the epoch changes when a fenced node rejoins.
pub(crate) struct Lease {
    node_id: i64,
    epoch: std::sync::atomic::AtomicI64,
}

impl Lease {
    pub(super) fn new(lease: NodeLease) -> Lease {
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

    pub(super) fn renew(&self, lease: NodeLease) {
        self.epoch.store(lease.epoch, Ordering::SeqCst);
    }
}

/// This node was fenced. If another node took its claims over (its row is marked taken
/// over), it drops its wheel (those claims are the taker's now), starts a new epoch and goes
/// on. If another process runs under its name, it stops scheduling for good. Returns
/// whether the node goes on.
pub(crate) async fn rejoin(shared: &Shared) -> bool {
    let _one_at_a_time = shared.rejoining.lock().await;
    // The other path may have rejoined meanwhile: then the lease holds again.
    let now = now_ms();
    if let Ok(true) = shared.store.heartbeat_node(shared.lease.get(), now).await {
        shared
            .lease_valid_until
            .fetch_max(now + shared.config.node_dead_after_ms / 2, Ordering::SeqCst);
        return true;
    }
    shared.lease_valid_until.store(0, Ordering::SeqCst);
    let name = &shared.config.node_name;
    let taken_over = match shared.store.node_heartbeat_at(name).await {
        Ok(at) => at == Some(0),
        Err(e) => {
            tracing::warn!(error = %e, "fenced, and cannot read this node's row; trying again");
            return true;
        }
    };
    if !taken_over {
        tracing::error!(
            node = %name,
            "this node was fenced: another process runs under its name; it stops scheduling"
        );
        drop(shared.ring.stop());
        return false;
    }
    // What this node held is the taker's now. The wheel is emptied; copies still with the
    // pools carry the old epoch, and are dropped when they come round (`drop_stale`).
    let dropped = shared.ring.clear();
    let now = now_ms();
    match shared
        .store
        .start_node(name, &shared.config.advertise_url, now)
        .await
    {
        Ok(lease) => {
            shared.lease.renew(lease);
            shared
                .lease_valid_until
                .store(now + shared.config.node_dead_after_ms / 2, Ordering::SeqCst);
            tracing::warn!(
                node = %name,
                epoch = lease.epoch,
                dropped,
                "this node was fenced (another node took its claims over while it was unresponsive); it rejoined with a new epoch"
            );
            // A take-over moves every claim in one transaction, so none of the old epoch
            // should be left; any that is (a write that raced the fencing) is in no wheel
            // now, and is recovered like a restart's.
            if let Err(e) = crate::scan::recover(shared).await {
                tracing::warn!(error = %format!("{e:#}"), "recovering this node's earlier claims after rejoining failed; a restart recovers them");
            }
            true
        }
        Err(e) => {
            tracing::warn!(error = %e, "fenced, and rejoining failed; trying again");
            true
        }
    }
}

/// Keeps this node's row fresh, and with it the lease to fire (`docs/cluster.md`), from a
/// thread of its own with a small runtime and (on MySQL) a connection of its own: a node
/// whose main runtime is saturated by a burst is busy, not dead, and must not look dead.
/// When the heartbeat finds the node taken over it wakes `fenced`; the rejoin runs on the
/// main runtime.
pub(super) fn spawn_heartbeat(shared: Arc<Shared>, fenced: Arc<Notify>) -> std::io::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    std::thread::Builder::new()
        .name("rota-heartbeat".into())
        .spawn(move || runtime.block_on(heartbeat_loop(shared, fenced)))?;
    Ok(())
}

pub(super) async fn heartbeat_loop(shared: Arc<Shared>, fenced: Arc<Notify>) {
    let mut shutdown = shared.shutdown.clone();
    let dead_after = shared.config.node_dead_after_ms.max(600);
    let period = Duration::from_millis(u64::try_from(dead_after / 6).unwrap_or(500));
    let beat = loop {
        match shared.store.beat().await {
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
        if shared.ring.is_stopped() {
            return;
        }
        // The lease counts from before the write: the database saw it no earlier.
        let sent = now_ms();
        match beat.heartbeat_node(shared.lease.get(), sent).await {
            Ok(true) => {
                shared
                    .lease_valid_until
                    .fetch_max(sent + dead_after / 2, Ordering::SeqCst);
            }
            Ok(false) => fenced.notify_one(),
            Err(e) => tracing::warn!(error = %e, "node heartbeat failed"),
        }
    }
}

/// Rejoins when the heartbeat found this node taken over.
pub(super) async fn fenced_loop(shared: Arc<Shared>, fenced: Arc<Notify>) {
    let mut shutdown = shared.shutdown.clone();
    loop {
        tokio::select! {
            _ = fenced.notified() => {}
            _ = shutdown.wait_for(|s| *s) => return,
        }
        if !rejoin(&shared).await {
            return;
        }
    }
}
