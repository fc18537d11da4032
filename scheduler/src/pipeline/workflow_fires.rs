//! Scheduled workflows fire here (SPEC §10): every node, every [`EVERY`], fires the
//! workflows whose next fire time has come ([`Store::fire_workflows`]: a fire starts one
//! instance whichever node takes it, its key being the fire time) and wakes the scan when
//! it started some, since their first steps' tasks are due at once.
//!
//! [`Store::fire_workflows`]: crate::store::Store::fire_workflows

use std::sync::Arc;
use std::time::Duration;

use super::{Cluster, ScanWake};
use crate::workflow::InstanceStatus;

/// How often a node looks for due workflow fires: a scheduled instance starts at most this
/// late (plus the database's time).
pub const EVERY: Duration = Duration::from_millis(250);
/// Workflows fired per round at most (the rest in the next).
const BATCH: u32 = 100;

pub(crate) async fn workflow_fires_loop(cluster: Arc<Cluster>, scan_wake: Arc<ScanWake>) {
    let mut every = crate::periodic::Every::new(EVERY, cluster.shutdown.clone());
    while every.tick().await {
        let now = cluster.clock.now_ms();
        let threshold = cluster.config.misfire_threshold_ms;
        match cluster.store.fire_workflows(now, threshold, BATCH).await {
            Ok(done) => {
                if done.started > 0 {
                    scan_wake.now();
                    crate::metrics::workflow_instances(
                        InstanceStatus::Running,
                        done.started as u64,
                    );
                }
                if done.skipped > 0 {
                    metrics::counter!("rota_workflow_fires_skipped_total")
                        .increment(done.skipped as u64);
                }
                if done.misfired > 0 {
                    metrics::counter!("rota_misfires_total").increment(u64::from(done.misfired));
                }
            }
            Err(e) => tracing::warn!(error = %e, "firing scheduled workflows failed; trying again"),
        }
    }
}
