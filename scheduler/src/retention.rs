//! Retention: finished tasks and their runs are deleted once they are older than the
//! configured period — XXL-JOB's ever-growing log table is one of its users' top complaints.
//!
//! Deletion goes in small batches with pauses in between, so it never holds locks or a
//! connection long enough to delay the scan. Every node runs it; batches of different nodes
//! simply take different rows.

use std::sync::Arc;
use std::time::Duration;

use crate::pipeline::Cluster;

/// Tasks per delete batch.
const BATCH: u32 = 1_000;
/// Pause between batches.
const PAUSE: Duration = Duration::from_millis(100);
/// How often a purge round starts.
const EVERY: Duration = Duration::from_secs(60);

/// Purges rounds until shutdown; it reads only the cluster handle (store, retention
/// period, shutdown).
pub(crate) async fn retention_loop(cluster: Arc<Cluster>) {
    let mut every = crate::periodic::Every::after(EVERY, cluster.shutdown.clone());
    while every.tick().await {
        let before = cluster.clock.now_ms() - cluster.config.retention_ms;
        let mut purged = 0usize;
        loop {
            match cluster.store.purge_finished(before, BATCH).await {
                Ok(0) => break,
                Ok(n) => purged += n,
                Err(e) => {
                    tracing::warn!(error = %e, "retention purge failed; trying again next round");
                    break;
                }
            }
            if *cluster.shutdown.borrow() {
                return;
            }
            tokio::time::sleep(PAUSE).await;
        }
        if purged > 0 {
            metrics::counter!("rota_purged_tasks_total").increment(purged as u64);
            tracing::info!(tasks = purged, "purged finished tasks past retention");
        }
    }
}
