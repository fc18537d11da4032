//! The node's ports: the one handle every use case takes (`usecase/`), and through them the
//! REST API, the console and the signed protocol. Adapters hold a [`Ports`], never the
//! [`crate::node::Node`] (which owns the lifecycle alone).
//!
//! Each file owns one part of what the use cases ask of the node beyond the store:
//! `jobs.rs` the job-change protocol (every node forgets its copy before a change
//! returns) and the job cache; `tasks.rs` storing tasks and starting workflow instances
//! (their tasks claimed into this wheel when due soon) and cancelling tasks wherever they
//! are claimed; `executors.rs` the executor
//! registry (registrations, heartbeats, goodbyes, reports); `runs.rs` killing a run and
//! reading its log on its executor; `queue.rs` what pull delivery needs (the ready board,
//! run ids, ending leases, the notices to other nodes); `warm.rs` telling executors
//! which plugins to compile ahead. Here: the shared accessors, the audit note and
//! readiness.

use std::sync::Arc;

use crate::alarm::outbox::Alarms;
use crate::client::{ClientError, ExecutorClient};
use crate::clock::Clock;
use crate::config::Config;
use crate::lateness::RecentLateness;
use crate::model::*;
use crate::pipeline::complete::Completion;
use crate::pipeline::ready::ReadyBoard;
use crate::pipeline::ring::Ring;
use crate::pipeline::{Cluster, ExecutorCache, JobCache, ScanWake};
use crate::route::Router;
use crate::secrets::SecretBox;
use crate::store::{self, Store};

mod executors;
mod jobs;
mod queue;
mod runs;
mod tasks;
mod warm;
mod xxl;

pub use crate::pipeline::JobEntry;
pub(crate) use queue::announce_loop;

/// Errors of node operations that reach an executor or another node.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error("run {0} has no executor yet")]
    NoExecutor(i64),
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error(transparent)]
    Store(#[from] store::Error),
    /// The scheduler node holding a claimed task did not answer a forwarded cancel.
    #[error(
        "task {task_id} is about to fire on scheduler node {address}, which does not answer ({reason}); try again in a few seconds"
    )]
    OwnerUnreachable {
        task_id: i64,
        address: String,
        reason: String,
    },
}

/// What the use cases reach of the running node, built once at start: the store, the
/// clock and config (through the cluster handle), the wheel, the caches, the client and the
/// notices that keep nodes and executors in step. Cheap to clone (every field is a handle
/// or an `Arc`). The lifecycle — loops, threads, the stop — is [`crate::node::Node`]'s.
#[derive(Clone)]
pub struct Ports {
    /// Store, config, clock, lease and shutdown: what every stage reads as well.
    pub(crate) cluster: Arc<Cluster>,
    /// The wheel: tasks created here go in, cancels take them out.
    pub(crate) ring: Ring,
    pub(crate) jobs: Arc<JobCache>,
    pub(crate) executors: Arc<ExecutorCache>,
    /// Forgets a deleted job's routing state.
    pub(crate) router: Arc<Router>,
    /// Calls to executors (kill, logs) and to other nodes (cancels, job changes).
    pub(crate) client: ExecutorClient,
    /// Wakes the scan: a job changed, tasks due soon, an executor registered.
    pub(crate) scan_wake: Arc<ScanWake>,
    /// Applies executor reports, reconciles the runs executors list.
    pub(crate) completion: Arc<Completion>,
    /// Seals and opens plugin secrets.
    pub(crate) secrets: Arc<SecretBox>,
    /// Nonces of the signed requests this node accepted (executors' and peers').
    pub(crate) replay: Arc<rota_proto::ReplayGuard>,
    /// Validates plugin uploads.
    pub(crate) engine: wasmtime::Engine,
    pub(crate) metrics: metrics_exporter_prometheus::PrometheusHandle,
    /// Recent fire lateness: dispatch writes it at each fire, the dashboard reads it.
    pub(crate) lateness: Arc<RecentLateness>,
    /// Pull jobs' ready tasks: dispatch announces them, long polls wait on it.
    pub(crate) ready: Arc<ReadyBoard>,
    /// Alarm rules, channels and the outbox.
    pub(crate) alarms: Arc<Alarms>,
    /// Workflows as this node's API starts last read them, by the id or name asked for:
    /// a start checks in its transaction that its workflow's row is still so (one read of
    /// that row, not of its steps: [`Ports::start_instance`]), and reads it whole again
    /// only when it is not.
    pub(crate) started_workflows: Arc<std::sync::Mutex<StartedWorkflows>>,
    /// The company's directory, when console sign-in goes through it (`--ldap-url`).
    pub(crate) directory: Option<Arc<crate::sso::ldap::Directory>>,
    /// The OpenID provider, when console sign-in goes through one (`--oidc-issuer`).
    pub(crate) provider: Option<Arc<crate::sso::oidc::Provider>>,
}

/// [`Ports`]' `started_workflows`.
pub(crate) type StartedWorkflows = std::collections::HashMap<String, Arc<store::Workflow>>;

/// How many workflows [`Ports`] keeps as last started before it starts over.
const STARTED_WORKFLOWS_KEPT: usize = 1024;

impl Ports {
    /// The key sealing plugin secrets.
    pub fn secrets(&self) -> &crate::secrets::SecretBox {
        &self.secrets
    }

    pub fn store(&self) -> &Store {
        &self.cluster.store
    }

    /// Alarm rules, channels and the outbox.
    pub(crate) fn alarms(&self) -> &Arc<Alarms> {
        &self.alarms
    }

    /// The node's time: every due time, lease and record is read from it.
    pub fn clock(&self) -> &Clock {
        &self.cluster.clock
    }

    /// The directory users sign in with, if one is configured.
    pub fn directory(&self) -> Option<&crate::sso::ldap::Directory> {
        self.directory.as_deref()
    }

    /// The OpenID provider users sign in with, if one is configured.
    pub fn provider(&self) -> Option<&crate::sso::oidc::Provider> {
        self.provider.as_deref()
    }

    pub fn config(&self) -> &Config {
        &self.cluster.config
    }

    /// Notes in the audit log that `user` did `action` to `target`. A failure to note it is
    /// logged, not returned: the change itself is done.
    pub async fn audit(&self, user: &str, action: &str, target: &str) {
        if let Err(e) = self
            .cluster
            .store
            .record_audit(None, user, action, target, self.cluster.clock.now_ms())
            .await
        {
            tracing::error!(error = %e, action, "writing the audit log failed");
        }
    }

    /// Workflow `id_or_name` as an API start on this node last read it.
    pub(crate) fn started_workflow(&self, id_or_name: &str) -> Option<Arc<store::Workflow>> {
        let known = self
            .started_workflows
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        known.get(id_or_name).cloned()
    }

    /// Keeps `workflow` as an API start read it by `id_or_name` (`None`: forgets it).
    pub(crate) fn remember_started_workflow(
        &self,
        id_or_name: &str,
        workflow: Option<Arc<store::Workflow>>,
    ) {
        let mut known = self
            .started_workflows
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        match workflow {
            Some(wf) => {
                if known.len() >= STARTED_WORKFLOWS_KEPT {
                    known.clear();
                }
                known.insert(id_or_name.to_owned(), wf);
            }
            None => {
                known.remove(id_or_name);
            }
        }
    }

    /// The nonces of signed requests this node accepted.
    pub fn replay_guard(&self) -> &rota_proto::ReplayGuard {
        &self.replay
    }

    /// This node's recent fire lateness (the dashboard's).
    pub fn lateness(&self) -> &crate::lateness::RecentLateness {
        &self.lateness
    }

    pub fn lease(&self) -> NodeLease {
        self.cluster.lease.get()
    }

    /// The engine plugin uploads are validated with.
    pub fn engine(&self) -> &wasmtime::Engine {
        &self.engine
    }

    /// Tasks in this node's wheel.
    pub fn wheel_len(&self) -> usize {
        self.ring.len()
    }

    /// Whether this node can serve now (`GET /readyz`): it writes its heartbeat — else why
    /// not. Ready, it may carry a warning: its clock is further than `max_clock_offset_ms`
    /// from the database's. That alone does not make it unready: its times are corrected,
    /// and when the database's own clock is the one that is off, every node sees the same
    /// offset — a probe that failed them all would drain the whole cluster for nothing.
    pub fn readiness(&self) -> Result<Option<String>, String> {
        let cluster = &self.cluster;
        cluster.fire_lease.readiness(cluster.clock.now_ms())?;
        let offset = crate::model::clock_offset_ms();
        let max = cluster.config.max_clock_offset_ms;
        Ok((offset.abs() > max).then(|| {
            format!(
                "this node's clock is {offset} ms off the database's (more than \
                 max_clock_offset_ms, {max} ms): its times are corrected, but fix the time sync"
            )
        }))
    }

    pub fn render_metrics(&self) -> String {
        metrics::gauge!("rota_wheel_tasks").set(self.ring.len() as f64);
        self.metrics.render()
    }
}
