//! A running scheduler node: its lifecycle — start, wire, stop — and nothing else.
//!
//! [`Node::start`] registers the node (a new epoch) and wires the pipeline once: the
//! [`Cluster`] handle every stage reads (store, config, clock, lease, shutdown), the parts
//! several stages share (the wheel, the job and executor caches, the router, the client,
//! run ids, the scan's wake-up), and one narrow handle per stage built from them — [`Scan`],
//! [`Dispatcher`], [`Completion`]; retention takes the cluster alone. It recovers what an
//! earlier incarnation had claimed and starts the loops: the scan with its take-over check
//! and rejoin, the ring thread, the fast and slow pools with the dispatch recorder, the
//! liveness loop, retention and the heartbeat (all in [`crate::pipeline`]), the alarm
//! watcher and outbox, and the ready notices to other nodes.
//!
//! What the API, the console and the signed protocol reach is [`Ports`]
//! (`scheduler/src/ports/`), built here and handed to them; they never hold the `Node`.
//! One shutdown signal stops every loop; [`Node::stopped`] waits until they drained and
//! hands unfired claims back. The pipeline never imports this module: data flows from
//! here down.

use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use tokio::sync::{Notify, mpsc, watch};
use tokio::task::JoinSet;

use crate::alarm::{self, outbox::Alarms};
use crate::client::ExecutorClient;
use crate::clock::Clock;
use crate::config::Config;
use crate::lateness::RecentLateness;
use crate::model::*;
use crate::pipeline::complete::{self, Completion};
use crate::pipeline::dispatch::{self, Dispatcher, Pools, Rooms, SlowTracker, Webhooks};
use crate::pipeline::ready::ReadyBoard;
use crate::pipeline::ring::Ring;
use crate::pipeline::scan::{self, Scan};
use crate::pipeline::{
    Cluster, ExecutorCache, FireLease, JobCache, Lease, RunIds, ScanWake, spawn_heartbeat,
};
use crate::route::Router;
use crate::secrets::SecretBox;
use crate::store::Store;

use crate::ports::Ports;

/// A running node: its loops, its threads and the stop that drains them, around the
/// [`Ports`] its API, console and protocol reach.
#[derive(Clone)]
pub struct Node {
    ports: Ports,
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
        let clock = Clock::Wall;
        wait_for_name(&store, &clock, &config.node_name, config.node_dead_after_ms).await?;
        let now = clock.now_ms();
        let lease = store
            .start_node(&config.node_name, &config.advertise_url, now)
            .await
            .context("registering this scheduler node")?;
        tracing::info!(node = %config.node_name, node.id = lease.node_id, epoch = lease.epoch, "scheduler node starting");
        let node = Node::wire(config, store, shutdown, lease, clock)?;
        let (recorder, recorder_rx) = mpsc::channel(65_536);
        let scan = node.scan_handle(recorder.clone());
        let dispatcher = node.dispatcher_handle(recorder);
        let config = &node.ports.cluster.config;
        if config.executors_die_with_node {
            // Everything registered before this start ran inside the previous process.
            complete::reap_dead_executors(&node.ports.completion, now, now)
                .await
                .context("releasing the runs of the previous embedded executor")?;
        }
        node.ports
            .executors
            .refresh(
                &node.ports.cluster.store,
                now - config.executor_dead_after_ms,
            )
            .await
            .context("loading the executor registry")?;
        crate::credentials::seed_admin(
            &node.ports.cluster.store,
            config.admin_password.as_deref(),
            now,
        )
        .await
        .context("seeding the console's admin user")?;
        // Only the admin's configuration can change where jobs' HTTP may go: each start
        // says so in the audit log, with the rules it runs with.
        for rule in config.egress.admin_rules() {
            tracing::info!(%rule, "egress policy");
            node.ports
                .audit(
                    &format!("config of node {}", config.node_name),
                    "egress policy",
                    rule,
                )
                .await;
        }
        crate::sso::announce(node.ports.directory.clone(), node.ports.provider.clone());
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
        clock: Clock,
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
        let (directory, provider) = crate::sso::of(&config)?;
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
            clock.clone(),
        ));
        let cluster = Arc::new(Cluster {
            fire_lease: FireLease::new(clock.now_ms(), config.node_dead_after_ms),
            clock: clock.clone(),
            shutdown,
            lease: Lease::new(lease),
            store,
            config,
            alarm_rules,
        });
        let executors = Arc::new(ExecutorCache::default());
        let scan_wake = Arc::new(ScanWake::default());
        let jobs = Arc::new(JobCache::new(Duration::from_secs(5)));
        let ring = Ring::new(clock);
        let completion = Arc::new(Completion {
            cluster: cluster.clone(),
            executors: executors.clone(),
            jobs: jobs.clone(),
            run_ids: Arc::new(RunIds::new()),
            scan_wake: scan_wake.clone(),
            ring: ring.clone(),
        });
        Ok(Node {
            ports: Ports {
                cluster,
                ring,
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
                started_workflows: Arc::default(),
                directory,
                provider,
            },
            tasks: Arc::new(tokio::sync::Mutex::new(None)),
            ring_thread: Arc::new(Mutex::new(None)),
            heartbeat_thread: Arc::new(Mutex::new(None)),
        })
    }

    /// The scan's handle: it claims into the wheel and recovers claims through the caches,
    /// the client and the recorder.
    fn scan_handle(&self, recorder: mpsc::Sender<Dispatched>) -> Arc<Scan> {
        Arc::new(Scan {
            cluster: self.ports.cluster.clone(),
            ring: self.ports.ring.clone(),
            jobs: self.ports.jobs.clone(),
            executors: self.ports.executors.clone(),
            secrets: self.ports.secrets.clone(),
            client: self.ports.client.clone(),
            recorder,
            wake: self.ports.scan_wake.clone(),
            rejoining: tokio::sync::Mutex::new(()),
        })
    }

    /// The dispatcher's handle, with its own slow tracker, executor rooms and in-flight count.
    fn dispatcher_handle(&self, recorder: mpsc::Sender<Dispatched>) -> Arc<Dispatcher> {
        let config = &self.ports.cluster.config;
        let (slow_ms, slow_count) = (config.slow_dispatch_ms, config.slow_dispatch_count);
        Arc::new(Dispatcher {
            cluster: self.ports.cluster.clone(),
            ring: self.ports.ring.clone(),
            jobs: self.ports.jobs.clone(),
            executors: self.ports.executors.clone(),
            router: self.ports.router.clone(),
            client: self.ports.client.clone(),
            run_ids: self.ports.completion.run_ids.clone(),
            completion: self.ports.completion.clone(),
            recorder,
            lateness: self.ports.lateness.clone(),
            ready: self.ports.ready.clone(),
            webhooks: Webhooks::new(
                &config.tls,
                Arc::new(config.egress.clone()),
                self.ports.secrets.clone(),
            ),
            slow: SlowTracker::new(self.ports.cluster.clock.clone(), slow_ms, slow_count),
            rooms: Rooms::default(),
            in_flight: AtomicUsize::new(0),
            xxl_sends: Default::default(),
            pull_gather: Default::default(),
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
            self.ports
                .ring
                .clone()
                .spawn(move |batch| pools.fire(&dispatcher, batch))
                .context("starting the ring thread")?
        };
        tasks.spawn(dispatch::record_loop(dispatcher, recorder_rx));
        tasks.spawn(complete::liveness_loop(self.ports.completion.clone()));
        let fenced = Arc::new(Notify::new());
        let ring = self.ports.ring.clone();
        let heartbeat_thread =
            spawn_heartbeat(self.ports.cluster.clone(), fenced.clone(), move || {
                ring.is_stopped()
            })
            .context("starting the heartbeat thread")?;
        tasks.spawn(scan::rejoin_loop(scan.clone(), fenced));
        tasks.spawn(scan::take_over_loop(scan.clone()));
        tasks.spawn(crate::retention::retention_loop(self.ports.cluster.clone()));
        tasks.spawn(crate::pipeline::workflow_fires::workflow_fires_loop(
            self.ports.cluster.clone(),
            self.ports.scan_wake.clone(),
        ));
        tasks.spawn(crate::ports::announce_loop(self.ports.clone()));
        let shutdown = self.ports.cluster.shutdown.clone();
        tasks.spawn(alarm::outbox::outbox_loop(
            self.ports.alarms.clone(),
            shutdown.clone(),
        ));
        let executors = self.ports.executors.clone();
        let has_executor = Arc::new(move |app: &str| !executors.of_app(app).is_empty());
        let watching = alarm::watch::Watching {
            has_executor,
            max_clock_offset_ms: self.ports.cluster.config.max_clock_offset_ms,
            node_dead_after_ms: self.ports.cluster.config.node_dead_after_ms,
        };
        tasks.spawn(alarm::watch::watch_loop(
            self.ports.alarms.clone(),
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
        let mut left = self.ports.ring.stop();
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
        left.extend(self.ports.ring.stop());
        if !left.is_empty() {
            let ids: Vec<i64> = left.iter().map(|t| t.task_id).collect();
            match self
                .ports
                .cluster
                .store
                .release_claims(self.ports.cluster.lease.get(), &ids)
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

    /// What the API, the console and the protocol reach: the use cases' handle.
    pub fn ports(&self) -> &Ports {
        &self.ports
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
async fn wait_for_name(
    store: &Store,
    clock: &Clock,
    name: &str,
    stale_ms: i64,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_millis(stale_ms.max(0) as u64 * 2);
    loop {
        let Some(at) = store.node_heartbeat_at(name).await? else {
            return Ok(());
        };
        if clock.now_ms() - at > stale_ms {
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
