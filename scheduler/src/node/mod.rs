//! A running scheduler node: its lifecycle and what the API and console ask of it.
//!
//! [`Node::start`] registers the node (a new epoch) and wires the pipeline once: the
//! [`Cluster`] handle every stage reads (store, config, clock, lease, shutdown), the parts
//! several stages share (the wheel, the job and executor caches, the router, the client,
//! run ids, the scan's wake-up), and one narrow handle per stage built from them — [`Scan`],
//! [`Dispatcher`], [`Completion`]; retention takes the cluster alone. It recovers what an
//! earlier incarnation had claimed and starts the loops: the scan with its take-over check
//! and rejoin, the ring thread, the fast and slow pools with the dispatch recorder, the
//! liveness loop, retention and the heartbeat (all in [`crate::pipeline`]).
//!
//! The node keeps what its API and console calls reach — the cluster, the wheel, the caches,
//! the router, the client, the scan's wake-up and completion (for executor reports) — and
//! what only it uses: the secret box, the replay guard, the wasm engine, the metrics handle
//! and the lateness dispatch records. One shutdown signal stops every loop;
//! [`Node::stopped`] waits until they drained. The pipeline never imports this module:
//! data flows from here down.

use std::collections::HashMap;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use rota_proto::{Deregistration, KillAck, LogPage, LogRequest, Registration, RunReport};
use tokio::sync::{Notify, mpsc, watch};
use tokio::task::JoinSet;

use crate::alarm::{self, outbox::Alarms};
use crate::client::{ClientError, ExecutorClient};
use crate::config::Config;
use crate::lateness::RecentLateness;
use crate::model::*;
use crate::pipeline::complete::{self, Completion};
use crate::pipeline::dispatch::{self, Dispatcher, Pools, Rooms, SlowTracker, Webhooks};
use crate::pipeline::ready::ReadyBoard;
use crate::pipeline::ring::{CancelState, Ring};
use crate::pipeline::scan::{self, Scan};
use crate::pipeline::{
    Cluster, ExecutorCache, FireLease, JobCache, Lease, RunIds, spawn_heartbeat,
};
use crate::route::Router;
use crate::secrets::SecretBox;
use crate::store::{self, NodeRef, Store};

pub use crate::pipeline::JobEntry;

mod queue;
mod warm;

/// How long a node waits for another to acknowledge a job change.
const PEER_NOTICE_TIMEOUT: Duration = Duration::from_secs(1);

/// Errors of node operations that reach an executor.
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

/// A handle on the running node; cheap to clone (every field is a handle or an `Arc`).
#[derive(Clone)]
pub struct Node {
    /// Store, config, clock, lease and shutdown: what every stage reads as well.
    cluster: Arc<Cluster>,
    /// The wheel: tasks created here go in, cancels take them out.
    ring: Ring,
    jobs: Arc<JobCache>,
    executors: Arc<ExecutorCache>,
    /// Forgets a deleted job's routing state.
    router: Arc<Router>,
    /// Calls to executors (kill, logs) and to other nodes (cancels, job changes).
    client: ExecutorClient,
    /// Wakes the scan: a job changed, tasks due soon, an executor registered.
    scan_wake: Arc<Notify>,
    /// Applies executor reports, reconciles the runs executors list.
    completion: Arc<Completion>,
    /// Seals and opens plugin secrets.
    secrets: Arc<SecretBox>,
    /// Nonces of the signed requests this node accepted (executors' and peers').
    replay: Arc<rota_proto::ReplayGuard>,
    /// Validates plugin uploads.
    engine: wasmtime::Engine,
    metrics: metrics_exporter_prometheus::PrometheusHandle,
    /// Recent fire lateness: dispatch writes it at each fire, the dashboard reads it.
    lateness: Arc<RecentLateness>,
    /// Pull jobs' ready tasks: dispatch announces them, long polls wait on it.
    ready: Arc<ReadyBoard>,
    /// Alarm rules, channels and the outbox.
    alarms: Arc<Alarms>,
    tasks: Arc<tokio::sync::Mutex<Option<JoinSet<()>>>>,
    ring_thread: Arc<Mutex<Option<std::thread::JoinHandle<()>>>>,
    /// The heartbeat's own thread: it ends with the shutdown signal and is joined.
    heartbeat_thread: Arc<Mutex<Option<std::thread::JoinHandle<()>>>>,
}

impl Node {
    /// Starts the node on an open store. The loops run until `shutdown` turns true; then
    /// [`Node::stopped`] drains them.
    pub async fn start(
        config: Config,
        store: Store,
        shutdown: watch::Receiver<bool>,
    ) -> anyhow::Result<Node> {
        // Due times, leases and take-overs are in the database's time from the start.
        crate::pipeline::measure_clock(store.database_time(), config.max_clock_offset_ms).await;
        wait_for_name(&store, &config.node_name, config.node_dead_after_ms).await?;
        let now = now_ms();
        let lease = store
            .start_node(&config.node_name, &config.advertise_url, now)
            .await
            .context("registering this scheduler node")?;
        tracing::info!(node = %config.node_name, node.id = lease.node_id, epoch = lease.epoch, "scheduler node starting");
        let node = Node::wire(config, store, shutdown, lease, now)?;
        let (recorder, recorder_rx) = mpsc::channel(65_536);
        let scan = node.scan_handle(recorder.clone());
        let dispatcher = node.dispatcher_handle(recorder);
        let config = &node.cluster.config;
        if config.executors_die_with_node {
            // Everything registered before this start ran inside the previous process.
            complete::reap_dead_executors(&node.completion, now, now)
                .await
                .context("releasing the runs of the previous embedded executor")?;
        }
        node.executors
            .refresh(&node.cluster.store, now - config.executor_dead_after_ms)
            .await
            .context("loading the executor registry")?;
        crate::credentials::seed_admin(&node.cluster.store, config.admin_password.as_deref())
            .await
            .context("seeding the console's admin user")?;
        // Only the admin's configuration can change where jobs' HTTP may go: each start
        // says so in the audit log, with the rules it runs with.
        for rule in config.egress.admin_rules() {
            tracing::info!(%rule, "egress policy");
            node.audit(
                &format!("config of node {}", config.node_name),
                "egress policy",
                rule,
            )
            .await;
        }
        node.start_loops(scan, dispatcher, recorder_rx).await?;
        Ok(node)
    }

    /// The cluster handle, the parts the stages share and what only the node uses, built
    /// once; the loops are not started yet.
    fn wire(
        config: Config,
        store: Store,
        shutdown: watch::Receiver<bool>,
        lease: NodeLease,
        now: Millis,
    ) -> anyhow::Result<Node> {
        let client = ExecutorClient::new(
            config.executor_secret.clone(),
            Duration::from_millis(config.dispatch_timeout_ms),
            &config.tls,
        );
        let engine = match &config.engine {
            Some(engine) => engine.clone(),
            None => validation_engine()?,
        };
        let metrics = crate::metrics::handle();
        let secrets = Arc::new(SecretBox::of(&config));
        let alarm_rules = Arc::new(alarm::Rules::default());
        let alarms = Arc::new(Alarms::new(
            store.clone(),
            alarm_rules.clone(),
            alarm::channel::Sender::new(
                config.tls.clone(),
                Arc::new(config.egress.clone()),
                config.smtp_url.clone(),
                config.alarm_from.clone(),
            ),
            secrets.clone(),
        ));
        let cluster = Arc::new(Cluster {
            fire_lease: FireLease::new(now, config.node_dead_after_ms),
            clock: crate::clock::Clock::Wall,
            shutdown,
            lease: Lease::new(lease),
            store,
            config,
            alarm_rules,
        });
        let executors = Arc::new(ExecutorCache {
            by_app: Mutex::new(Arc::new(HashMap::new())),
        });
        let scan_wake = Arc::new(Notify::new());
        let jobs = Arc::new(JobCache::new(Duration::from_secs(5)));
        let completion = Arc::new(Completion {
            cluster: cluster.clone(),
            executors: executors.clone(),
            jobs: jobs.clone(),
            run_ids: Arc::new(RunIds::new()),
            scan_wake: scan_wake.clone(),
        });
        Ok(Node {
            cluster,
            ring: Ring::new(now),
            jobs,
            executors,
            router: Arc::new(Router::default()),
            client,
            scan_wake,
            completion,
            secrets,
            replay: Arc::new(rota_proto::ReplayGuard::new(rota_proto::MAX_SKEW_MS)),
            engine,
            metrics,
            lateness: Arc::new(RecentLateness::default()),
            ready: Arc::new(ReadyBoard::default()),
            alarms,
            tasks: Arc::new(tokio::sync::Mutex::new(None)),
            ring_thread: Arc::new(Mutex::new(None)),
            heartbeat_thread: Arc::new(Mutex::new(None)),
        })
    }

    /// The scan's handle: it claims into the wheel and recovers claims through the caches,
    /// the client and the recorder.
    fn scan_handle(&self, recorder: mpsc::Sender<Dispatched>) -> Arc<Scan> {
        Arc::new(Scan {
            cluster: self.cluster.clone(),
            ring: self.ring.clone(),
            jobs: self.jobs.clone(),
            executors: self.executors.clone(),
            client: self.client.clone(),
            recorder,
            wake: self.scan_wake.clone(),
            rejoining: tokio::sync::Mutex::new(()),
        })
    }

    /// The dispatcher's handle, with its own slow tracker, executor rooms and in-flight
    /// count.
    fn dispatcher_handle(&self, recorder: mpsc::Sender<Dispatched>) -> Arc<Dispatcher> {
        let config = &self.cluster.config;
        Arc::new(Dispatcher {
            cluster: self.cluster.clone(),
            ring: self.ring.clone(),
            jobs: self.jobs.clone(),
            executors: self.executors.clone(),
            router: self.router.clone(),
            client: self.client.clone(),
            run_ids: self.completion.run_ids.clone(),
            completion: self.completion.clone(),
            recorder,
            lateness: self.lateness.clone(),
            ready: self.ready.clone(),
            webhooks: Webhooks::new(
                &config.tls,
                Arc::new(config.egress.clone()),
                self.secrets.clone(),
            ),
            slow: SlowTracker::new(config.slow_dispatch_ms, config.slow_dispatch_count),
            rooms: Rooms::default(),
            in_flight: AtomicUsize::new(0),
        })
    }

    /// Starts every loop, each with its stage's handle: the pools and the ring thread that
    /// feeds them, the recorder, liveness, the heartbeat thread (which only signals when it
    /// finds this node fenced) and the scan's rejoin on that signal, the take-over check,
    /// retention, and the scan after recovering an earlier incarnation's claims.
    async fn start_loops(
        &self,
        scan: Arc<Scan>,
        dispatcher: Arc<Dispatcher>,
        recorder_rx: mpsc::Receiver<Dispatched>,
    ) -> anyhow::Result<()> {
        let mut tasks = JoinSet::new();
        let pools = Pools::start(&dispatcher, &mut tasks);
        let ring_thread = {
            let dispatcher = dispatcher.clone();
            self.ring
                .clone()
                .spawn(move |batch| pools.fire(&dispatcher, batch))
                .context("starting the ring thread")?
        };
        tasks.spawn(dispatch::record_loop(dispatcher, recorder_rx));
        tasks.spawn(complete::liveness_loop(self.completion.clone()));
        let fenced = Arc::new(Notify::new());
        let ring = self.ring.clone();
        let heartbeat_thread = spawn_heartbeat(self.cluster.clone(), fenced.clone(), move || {
            ring.is_stopped()
        })
        .context("starting the heartbeat thread")?;
        tasks.spawn(scan::rejoin_loop(scan.clone(), fenced));
        tasks.spawn(scan::take_over_loop(scan.clone()));
        tasks.spawn(crate::retention::retention_loop(self.cluster.clone()));
        tasks.spawn(queue::announce_loop(self.clone()));
        let shutdown = self.cluster.shutdown.clone();
        tasks.spawn(alarm::outbox::outbox_loop(
            self.alarms.clone(),
            shutdown.clone(),
        ));
        let executors = self.executors.clone();
        let has_executor = Arc::new(move |app: &str| !executors.of_app(app).is_empty());
        let watching = alarm::watch::Watching {
            has_executor,
            max_clock_offset_ms: self.cluster.config.max_clock_offset_ms,
            node_dead_after_ms: self.cluster.config.node_dead_after_ms,
        };
        tasks.spawn(alarm::watch::watch_loop(
            self.alarms.clone(),
            watching,
            shutdown,
        ));
        tasks.spawn(async move {
            if let Err(e) = scan::recover(&scan).await {
                tracing::error!(error = %format!("{e:#}"), "recovering claims of an earlier run failed");
            }
            scan::scan_loop(scan).await;
        });
        *self.tasks.lock().await = Some(tasks);
        *self.ring_thread.lock().unwrap_or_else(|e| e.into_inner()) = Some(ring_thread);
        *self
            .heartbeat_thread
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(heartbeat_thread);
        Ok(())
    }

    /// Waits until every loop has stopped (after the shutdown signal) and hands unfired
    /// claims back to the database.
    pub async fn stopped(&self) {
        // Stop firing first, so nothing new reaches the pools while they drain.
        let mut left = self.ring.stop();
        let ring_thread = self
            .ring_thread
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(t) = ring_thread {
            let _ = tokio::task::spawn_blocking(move || t.join()).await;
        }
        let tasks = self.tasks.lock().await.take();
        if let Some(mut tasks) = tasks {
            while tasks.join_next().await.is_some() {}
        }
        let heartbeat_thread = self
            .heartbeat_thread
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(t) = heartbeat_thread {
            let _ = tokio::task::spawn_blocking(move || t.join()).await;
        }
        // What the pools had not started went back into the (stopped) wheel.
        left.extend(self.ring.stop());
        if !left.is_empty() {
            let ids: Vec<i64> = left.iter().map(|t| t.task_id).collect();
            match self
                .cluster
                .store
                .release_claims(self.cluster.lease.get(), &ids)
                .await
            {
                Ok(()) => tracing::info!(tasks = ids.len(), "handed unfired claims back"),
                Err(e) => {
                    tracing::warn!(error = %e, "could not hand claims back; the next start recovers them")
                }
            }
        }
        tracing::info!("scheduler node stopped");
    }

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

    pub fn config(&self) -> &Config {
        &self.cluster.config
    }

    /// Notes in the audit log that `user` did `action` to `target`. A failure to note it is
    /// logged, not returned: the change itself is done.
    pub async fn audit(&self, user: &str, action: &str, target: &str) {
        // The column holds 400 characters.
        let target: String = target.chars().take(400).collect();
        if let Err(e) = self
            .cluster
            .store
            .record_audit(user, action, &target, now_ms())
            .await
        {
            tracing::error!(error = %e, action, "writing the audit log failed");
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

    /// A job was created, changed or deleted here (and committed). Every node forgets its
    /// cached copy before this returns — this one at once, the others through a signed
    /// call — so a fire planned under the old schedule, wherever it was claimed, is
    /// dropped when it comes due instead of sent (SPEC §4, "Disable, delete,
    /// reschedule"); and every node scans now, so the new schedule is planned at once. A
    /// node that does not answer within [`PEER_NOTICE_TIMEOUT`] is logged; it re-reads
    /// the job within the job cache's lifetime (5 s).
    pub async fn job_changed(&self, job_id: i64) {
        self.forget_job(job_id);
        let me = self.cluster.lease.get().node_id;
        let alive_after = now_ms() - self.cluster.config.node_dead_after_ms;
        let peers = match self.cluster.store.live_nodes(alive_after).await {
            Ok(nodes) => nodes,
            Err(e) => {
                tracing::warn!(error = %e, job.id = job_id, "listing the other nodes to tell them of a job change failed");
                return;
            }
        };
        let notice = &rota_proto::wire::PeerJobChanged { job_id };
        let client = &self.client;
        let calls = peers
            .iter()
            .filter(|peer| peer.id != me)
            .map(|NodeRef { address, .. }| async move {
                let call = client.node_job_changed(address, notice);
                match tokio::time::timeout(PEER_NOTICE_TIMEOUT, call).await {
                    Ok(Ok(_)) => {}
                    Ok(Err(e)) => {
                        tracing::warn!(node = %address, job.id = job_id, error = %e, "a node was not told of a job change; it re-reads the job within 5 s")
                    }
                    Err(_) => {
                        tracing::warn!(node = %address, job.id = job_id, "a node did not answer the notice of a job change in time; it re-reads the job within 5 s")
                    }
                }
            });
        futures_util::future::join_all(calls).await;
    }

    /// Creates a job (validated) and tells every node.
    pub async fn create_job(
        &self,
        spec: &JobSpec,
        schedule: &crate::schedule::CompiledSchedule,
    ) -> Result<Job, store::Error> {
        let now = now_ms();
        let next = first_fire(spec, schedule, now);
        let job = self.cluster.store.insert_job(spec, next, now).await?;
        self.job_changed(job.id).await;
        self.warm_app(&job.spec);
        Ok(job)
    }

    /// Replaces a job's settings (validated) and tells every node. A change of schedule or
    /// `enabled` re-plans it from now: the fires planned under the old one are void on
    /// every node before this returns ([`Node::job_changed`]).
    ///
    /// A change of delivery with tasks on their way to the old receivers (in a wheel,
    /// ready for a consumer, or running) is a conflict unless `force`d; a job that stops
    /// being pulled, or an http job enabled again, hands its ready tasks back to the scan.
    pub async fn update_job(
        &self,
        job: &Job,
        spec: &JobSpec,
        schedule: &crate::schedule::CompiledSchedule,
        force: bool,
    ) -> Result<Job, store::Error> {
        let now = now_ms();
        let (from, to) = (&job.spec.delivery, &spec.delivery);
        if from.kind() != to.kind() && !force {
            let busy = self.cluster.store.tasks_in_flight(job.id).await?;
            if busy > 0 {
                return Err(store::Error::Conflict(format!(
                    "job `{}` has {busy} task(s) on their way to its `{}` receivers (in a wheel, \
                     ready or running); changing its delivery to `{}` now could strand them: \
                     wait for them, or change it with ?force=true",
                    job.spec.name,
                    from.kind(),
                    to.kind()
                )));
            }
        }
        let replan = job.spec.replans(spec);
        let next = if replan {
            first_fire(spec, schedule, now)
        } else {
            job.next_fire_at
        };
        let job = self
            .cluster
            .store
            .update_job(job.id, spec, next, replan, now)
            .await?;
        // Tasks held `ready` go back to the scan once nothing holds them: a job no longer
        // pulled, or an http job enabled again.
        if *to != Delivery::Pull && spec.enabled {
            self.cluster.store.unready(job.id, now).await?;
        }
        self.job_changed(job.id).await;
        self.warm_app(spec);
        Ok(job)
    }

    /// Drops this node's cached copy of a job and scans now.
    pub fn forget_job(&self, job_id: i64) {
        self.jobs.invalidate(job_id);
        self.scan_wake.notify_one();
        // A pull job enabled again: its waiting pulls look now.
        self.ready.wake_all([job_id]);
    }

    /// A plugin got a new version: jobs bound to it must see it, and their executors
    /// compile it now.
    pub fn plugin_changed(&self, name: &str) {
        self.jobs.clear();
        self.warm_binders(name);
    }

    /// Stores new tasks (all or nothing; an existing key yields its task, `false`). Those
    /// due inside the window, of jobs without `max_concurrency`, are created already
    /// claimed by this node and go straight into its wheel: no scan, no claim statement of
    /// their own. The rest wait for a scan (woken at once when one is due soon).
    pub async fn store_tasks(
        &self,
        tasks: &[NewTask],
        now: Millis,
    ) -> Result<Vec<(i64, bool)>, store::Error> {
        let store = &self.cluster.store;
        let until = now + self.cluster.config.window_ms;
        let mut limited: HashMap<i64, bool> = HashMap::new();
        for t in tasks {
            if let std::collections::hash_map::Entry::Vacant(e) = limited.entry(t.job_id) {
                let job = self.jobs.get(store, t.job_id).await?;
                e.insert(job.is_none_or(|j| j.job.spec.max_concurrency.is_some()));
            }
        }
        let claimable: Vec<bool> = tasks
            .iter()
            .map(|t| t.due_at <= until && !limited[&t.job_id])
            .collect();
        let lease = self.cluster.lease.get();
        let (ids, claimed) = match store
            .insert_tasks_claiming(tasks, Some((lease, &claimable)), now)
            .await
        {
            Ok(ids) => (ids, true),
            // Fenced (rejoining): the tasks are stored unclaimed, for any node's scan.
            Err(store::Error::Fenced) => (store.insert_tasks(tasks, now).await?, false),
            Err(e) => return Err(e),
        };
        let mut due = Vec::new();
        let mut soon = false;
        for (((id, created), t), claim) in ids.iter().zip(tasks).zip(&claimable) {
            if !created {
                continue;
            }
            if claimed && *claim {
                due.push(DueTask {
                    task_id: *id,
                    job_id: t.job_id,
                    kind: t.kind,
                    due_at: t.due_at,
                    attempt: 1,
                    priority: t.priority,
                    payload: t.payload.clone(),
                    params: t.params.clone(),
                    epoch: lease.epoch,
                    generation: 0,
                    waiting_since: None,
                });
            } else if t.due_at <= until {
                soon = true;
            }
        }
        self.ring.insert(due);
        if soon {
            self.scan_wake.notify_one();
        }
        Ok(ids)
    }

    /// A job by id, as the job cache has it (re-read at most every few seconds): what task
    /// creation needs of it, without a read per request. `None` if there is none.
    pub async fn cached_job(&self, id: i64) -> Result<Option<Arc<JobEntry>>, store::Error> {
        self.jobs.get(&self.cluster.store, id).await
    }

    /// [`Node::cached_job`] by the job's name.
    pub async fn cached_job_named(
        &self,
        name: &str,
    ) -> Result<Option<Arc<JobEntry>>, store::Error> {
        match self.jobs.id_named(&self.cluster.store, name).await? {
            Some(id) => self.cached_job(id).await,
            None => Ok(None),
        }
    }

    /// Deletes a job (see [`Store::delete_job`]); the pending tasks it cancels leave the wheel.
    pub async fn delete_job(&self, job_id: i64, force: bool) -> Result<Vec<i64>, store::Error> {
        let cancelled = self
            .cluster
            .store
            .delete_job(job_id, force, now_ms())
            .await?;
        for &id in &cancelled {
            if self.ring.begin_cancel(id) != CancelState::Firing {
                self.ring.finish_cancel(id, true);
            }
        }
        self.jobs.invalidate(job_id);
        self.router.forget_job(job_id);
        Ok(cancelled)
    }

    /// Cancels a task that has not started, even if it sits in a wheel: this node's, or
    /// (forwarded) that of the node that claimed it.
    pub async fn cancel_task(&self, id: i64) -> Result<(Task, bool), NodeError> {
        let owner = self.cluster.store.task_owner(id).await?;
        let Some(NodeRef { address, .. }) =
            owner.filter(|node| node.id != self.cluster.lease.get().node_id)
        else {
            return Ok(self.cancel_here(id).await?);
        };
        match self
            .client
            .node_cancel(&address, &rota_proto::wire::PeerCancel { task_id: id })
            .await
        {
            Ok(ack) => Ok((self.cluster.store.get_task(id).await?, ack.cancelled)),
            // The owner's own answer (a 409 for a task being dispatched, a 404) stands.
            Err(ClientError::Refused { status, body, .. }) if (400..500).contains(&status) => {
                let message = serde_json::from_str::<rota_proto::ErrorBody>(&body)
                    .map(|b| b.error)
                    .unwrap_or(body);
                Err(if status == 404 {
                    store::Error::NotFound(format!("task {id}"))
                } else {
                    store::Error::Conflict(message)
                }
                .into())
            }
            Err(e) => Err(NodeError::OwnerUnreachable {
                task_id: id,
                address,
                reason: e.to_string(),
            }),
        }
    }

    /// Cancels a task here, taking it out of this node's wheel if it is there.
    pub async fn cancel_here(&self, id: i64) -> Result<(Task, bool), store::Error> {
        match self.ring.begin_cancel(id) {
            CancelState::Firing => {
                return Err(store::Error::Conflict(format!(
                    "task {id} is being dispatched; only a pending task can be cancelled"
                )));
            }
            CancelState::Held | CancelState::Absent => {}
        }
        let result = self.cluster.store.cancel_task(id, now_ms()).await;
        self.ring.finish_cancel(id, result.is_ok());
        result
    }

    /// Whether a registration, heartbeat or goodbye signed at `signed_at` is newer than
    /// what the executor sent before (to any node). An older one is a captured request
    /// replayed to another node within the signature window: it must not report a stale
    /// list of runs, nor remove a live executor.
    async fn is_newest(&self, app: &str, address: &str, signed_at: Millis) -> anyhow::Result<bool> {
        let newest = self.cluster.store.executor_clock(app, address).await?;
        let fresh = newest.is_none_or(|newest| signed_at > newest);
        if !fresh {
            tracing::warn!(
                app,
                executor = address,
                signed_at,
                "ignoring a request older than one already accepted from this executor (replayed?)"
            );
        }
        Ok(fresh)
    }

    pub async fn executor_registered(
        &self,
        reg: &Registration,
        signed_at: Millis,
    ) -> anyhow::Result<()> {
        if !self.is_newest(&reg.app, &reg.address, signed_at).await? {
            return Ok(());
        }
        let now = now_ms();
        self.upsert_executor(reg, now, signed_at).await?;
        // A (re)started executor lists the runs it still has; the others it was given are lost.
        complete::reconcile_executor(
            &self.completion,
            &reg.app,
            &reg.address,
            &reg.active_runs,
            None,
            now,
        )
        .await?;
        self.refresh_executors().await?;
        // Fires that found no executor of this app go out now.
        let woken = self
            .cluster
            .store
            .wake_waiting(std::slice::from_ref(&reg.app))
            .await?;
        if woken > 0 {
            tracing::info!(app = %reg.app, tasks = woken, "an executor registered; fires that waited for one go out");
            self.scan_wake.notify_one();
        }
        Ok(())
    }

    pub async fn executor_heartbeat(
        &self,
        reg: &Registration,
        signed_at: Millis,
    ) -> anyhow::Result<()> {
        if !self.is_newest(&reg.app, &reg.address, signed_at).await? {
            return Ok(());
        }
        let now = now_ms();
        let previous = self
            .cluster
            .store
            .executor_heartbeat_at(&reg.app, &reg.address)
            .await?;
        self.upsert_executor(reg, now, signed_at).await?;
        // A run dispatched before the previous heartbeat arrived was known to the executor
        // before it built this one (heartbeats go one at a time), so it must be listed.
        // Anything dispatched later may legitimately be missing.
        if let Some(previous) = previous {
            complete::reconcile_executor(
                &self.completion,
                &reg.app,
                &reg.address,
                &reg.active_runs,
                Some(previous),
                now,
            )
            .await?;
        }
        Ok(())
    }

    /// An executor's goodbye, unless it sent something signed later (a replayed goodbye
    /// does not remove an executor that registered again).
    pub async fn executor_deregistered(
        &self,
        d: &Deregistration,
        signed_at: Millis,
    ) -> anyhow::Result<()> {
        self.cluster
            .store
            .remove_executor(&d.app, &d.address, Some(signed_at))
            .await?;
        self.refresh_executors().await
    }

    /// Records a registration or heartbeat, and moves the executor's clock to its signed time.
    async fn upsert_executor(
        &self,
        reg: &Registration,
        now: Millis,
        signed_at: Millis,
    ) -> anyhow::Result<()> {
        let clamp = |n: u32| i32::try_from(n).unwrap_or(i32::MAX);
        self.cluster
            .store
            .upsert_executor(
                &reg.app,
                &reg.address,
                clamp(reg.capacity),
                clamp(reg.running),
                now,
            )
            .await?;
        self.cluster
            .store
            .advance_executor_clock(&reg.app, &reg.address, signed_at)
            .await?;
        Ok(())
    }

    async fn refresh_executors(&self) -> anyhow::Result<()> {
        let alive_after = now_ms() - self.cluster.config.executor_dead_after_ms;
        self.executors
            .refresh(&self.cluster.store, alive_after)
            .await?;
        Ok(())
    }

    /// Applies executor reports; returns how many run rows were written.
    pub async fn apply_reports(&self, reports: &[RunReport]) -> anyhow::Result<usize> {
        let updates: Vec<RunUpdate> = reports.iter().map(RunUpdate::from_report).collect();
        let applied = complete::apply(&self.completion, &updates).await?;
        Ok(applied.written)
    }

    pub async fn kill_run(&self, run: &Run) -> Result<KillAck, NodeError> {
        let (app, address) = self.executor_of(run).await?;
        Ok(self.client.kill(&app, address, run.id).await?)
    }

    /// The app and address of the executor a run went to: the app its address is registered
    /// under (whose key it checks), else its job's.
    async fn executor_of<'r>(&self, run: &'r Run) -> Result<(String, &'r str), NodeError> {
        // A pulled or webhook-delivered run (`pull:…`, `webhook:…`) is on no executor.
        let address = run
            .executor
            .as_deref()
            .filter(|e| e.starts_with("http://") || e.starts_with("https://"))
            .ok_or(NodeError::NoExecutor(run.id))?;
        let app = match self
            .cluster
            .store
            .apps_at_address(address)
            .await?
            .as_slice()
        {
            [app] => app.clone(),
            _ => self.cluster.store.get_job(run.job_id).await?.spec.app,
        };
        Ok((app, address))
    }

    pub async fn read_log(
        &self,
        run: &Run,
        from_line: u64,
        max_lines: u32,
    ) -> Result<LogPage, NodeError> {
        let (app, address) = self.executor_of(run).await?;
        let req = LogRequest {
            run_id: run.id,
            from_line,
            max_lines,
        };
        Ok(self.client.log(&app, address, &req).await?)
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

/// A job's first fire time from `now`: none for schedule `none` or a disabled job.
pub(crate) fn first_fire(
    spec: &JobSpec,
    schedule: &crate::schedule::CompiledSchedule,
    now: Millis,
) -> Option<Millis> {
    if spec.enabled {
        schedule.next_after(now)
    } else {
        None
    }
}

/// The engine used to validate uploads: compiles like the executors do, but runs nothing.
fn validation_engine() -> anyhow::Result<wasmtime::Engine> {
    let mut config = wasmtime::Config::new();
    config.epoch_interruption(true);
    wasmtime::Engine::new(&config).map_err(|e| anyhow::anyhow!("creating the wasm engine: {e:#}"))
}

/// A node name is one process at a time: if its heartbeat is fresh, another process holds it
/// (two servers started with the same name) or a killed one just stopped. Wait until it is
/// stale; refuse to start if it keeps beating.
async fn wait_for_name(store: &Store, name: &str, stale_ms: i64) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_millis(stale_ms.max(0) as u64 * 2);
    loop {
        let Some(at) = store.node_heartbeat_at(name).await? else {
            return Ok(());
        };
        if now_ms() - at > stale_ms {
            return Ok(());
        }
        if Instant::now() > deadline {
            anyhow::bail!(
                "another scheduler node named `{name}` is running (its heartbeat is fresh); \
                 give this one another name (--node-name)"
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
