//! Prometheus metrics: one recorder per process, rendered by every node's `/metrics`.
//!
//! Names: `rota_fires_total`, `rota_fire_lateness_seconds` (ring fire time − due time),
//! `rota_run_start_lateness_seconds` (plugin start − due time, from executor reports),
//! `rota_dispatch_seconds` (one trigger request), `rota_pool_queue_depth{pool}`,
//! `rota_scan_seconds`, `rota_claimed_total`, `rota_misfires_total`, `rota_wheel_tasks`,
//! `rota_dispatched_total`, `rota_dispatch_failures_total`, `rota_deferred_total`,
//! `rota_runs_finished_total{status}`, `rota_workflow_instances_total{status}` (instances
//! started — `running` — and ended, by how), `rota_workflow_handoff_seconds` (a step's run
//! end → the commit that created the next steps' tasks; their start lateness is
//! `rota_run_start_lateness_seconds`), `rota_throttled_total{job}` (tasks over a limit),
//! `rota_schedule_drift_seconds{job}` (a recurring job's last fire: its start − its fire
//! time) and `rota_schedule_skipped_total{job}` (its fires that never ran).

use std::sync::OnceLock;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

/// Buckets for latency histograms, in seconds: sub-millisecond to tens of seconds.
const BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// The process-wide recorder, installed on first use.
pub fn handle() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let builder = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), BUCKETS)
                .unwrap_or_else(|_| PrometheusBuilder::new());
            match builder.install_recorder() {
                Ok(handle) => handle,
                // Another recorder is installed (a host program's): render ours unattached.
                Err(_) => PrometheusBuilder::new().build_recorder().handle(),
            }
        })
        .clone()
}

/// `rota_workflow_instances_total{status}`: `n` instances started (`running`) or ended as
/// `status`. The one place the counter is named.
pub fn workflow_instances(status: crate::workflow::InstanceStatus, n: u64) {
    metrics::counter!("rota_workflow_instances_total", "status" => status.as_str()).increment(n);
}
