//! The executor node: the life of a run, from trigger to report, and the drain.
//!
//! Triggers are taken by [`Node::accept_all`]: dedupe, queue bound and block strategy
//! ([`crate::registry`]), the plugin fetched from a scheduler, verified and compiled once
//! if it is not cached. A run that is due and not in an exclusive lane goes straight to
//! the run workers' queue ([`crate::workers`]); any other waits in a tokio task for
//! `scheduled_at` (a run never starts early) and for its turn in its job's lane, then goes
//! there. At most `capacity` worker threads run plugins at once (the execution slots). A
//! worker thread runs the plugin ([`Runtime::run`]) and hands the `running` and final
//! reports to the reporter, which sends a `running` report only for runs that outlive its
//! hold.
//!
//! Draining ([`Node::drain`]): triggers are answered `full`, runs that have not started
//! are handed back (dropped without a report), running runs get `drain_grace` to finish
//! and are then killed. Leaving ([`Node::leave`]): the node registers once more with the
//! runs it still owes results for — so the scheduler marks the handed-back runs lost at
//! once and retries them elsewhere — and deregisters. [`crate::start`] wires the node up
//! and calls both at shutdown.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use crate::clock::now_ms;

use rota_proto::wire::{PATH_DEREGISTER, PATH_REGISTER};
use rota_proto::{
    Deregistration, KnownRun, Registration, RegistrationAck, ReportStatus, RunReport, TaskAttempt,
    Trigger, TriggerAck, TriggerOutcome,
};
use tokio::sync::{Notify, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::client::SchedulerClient;
use crate::config::ExecutorConfig;
use crate::logs::LogStore;
use crate::registry::Registry;
use crate::report::{Queued, ReportSender, Unacked};
use crate::runtime::host::{HostAccess, Services};
use crate::runtime::{Invocation, Plugin, PluginEnv, RunOutcome, RunStatus, Runtime};
use crate::workers::{Work, Workers};
use rota_proto::allow::AllowList;

/// A plugin load in progress: its result, once there is one.
type PluginLoad = tokio::sync::watch::Receiver<Option<Result<Plugin, String>>>;

/// After the drain grace, how long killed runs get to report.
const KILL_GRACE: Duration = Duration::from_secs(10);

/// The node's shared state, behind an `Arc`.
pub struct Node {
    pub(crate) config: ExecutorConfig,
    runtime: Runtime,
    pub(crate) logs: LogStore,
    pub(crate) client: Arc<SchedulerClient>,
    registry: Mutex<Registry>,
    /// The threads runs execute on, at most `capacity` of them.
    workers: Workers,
    reports: ReportSender,
    /// Plugins being fetched and compiled, by SHA-256: a burst of triggers loads each once.
    fetches: Mutex<HashMap<String, PluginLoad>>,
    /// Plugins to compile ahead of their first run, one after another ([`Node::warm`]).
    warming: Mutex<Warming>,
    draining: AtomicBool,
    /// Cancelled at shutdown: runs that have not started are handed back.
    release: CancellationToken,
    /// Notified whenever a run leaves the registry.
    idle: Notify,
    /// Runs whose final reports no scheduler has taken yet: listed in registrations.
    unacked: Unacked,
    /// Nonces of the schedulers' requests accepted lately.
    pub(crate) replay: rota_proto::ReplayGuard,
}

/// The plugins [`Node::warm`] has still to load, and whether its loop is running: a list
/// that arrives during a long compile joins the queue instead of waiting for the next.
#[derive(Default)]
struct Warming {
    queue: std::collections::VecDeque<String>,
    busy: bool,
}

impl Node {
    /// The node over its parts, before anything runs.
    pub(crate) fn new(
        config: ExecutorConfig,
        runtime: Runtime,
        logs: LogStore,
        client: Arc<SchedulerClient>,
        reports: ReportSender,
        unacked: Unacked,
    ) -> Arc<Node> {
        Arc::new(Node {
            registry: Mutex::new(Registry::new(config.capacity.saturating_add(config.queue))),
            workers: Workers::new(config.capacity, "rota-run"),
            config,
            runtime,
            logs,
            client,
            reports,
            fetches: Mutex::new(HashMap::new()),
            warming: Mutex::new(Warming::default()),
            draining: AtomicBool::new(false),
            release: CancellationToken::new(),
            idle: Notify::new(),
            unacked,
            replay: rota_proto::ReplayGuard::new(rota_proto::MAX_SKEW_MS),
        })
    }

    fn registry(&self) -> MutexGuard<'_, Registry> {
        self.registry.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn running(&self) -> u32 {
        u32::try_from(self.registry().running()).unwrap_or(u32::MAX)
    }

    /// Triggers this node would take now: none while it drains.
    pub(crate) fn room(&self) -> usize {
        if self.draining.load(Ordering::SeqCst) {
            0
        } else {
            self.registry().room()
        }
    }

    pub(crate) fn capacity(&self) -> u32 {
        u32::try_from(self.config.capacity).unwrap_or(u32::MAX)
    }

    pub(crate) fn is_active(&self, run_id: i64) -> bool {
        self.registry().is_active(run_id)
    }

    pub(crate) fn job_idle(&self, job_id: i64) -> bool {
        self.registry().job_idle(job_id)
    }

    pub(crate) fn known(&self, attempts: &[TaskAttempt]) -> Vec<KnownRun> {
        self.registry().known(attempts, std::time::Instant::now())
    }

    pub(crate) fn kill(&self, run_id: i64) -> Option<watch::Receiver<Option<RunStatus>>> {
        self.registry().kill(run_id)
    }

    /// Takes a request's triggers, one ack each, in order (see the module docs). Runs
    /// that can start at once go to the workers in chunks, so the first of a large
    /// request starts while the rest are still being admitted. Past `not_after` (the
    /// sender's lease) a trigger is not taken: it is answered `expired`, checked as each
    /// one is admitted, since admitting a large request can take a while.
    pub(crate) async fn accept_all(
        self: &Arc<Self>,
        triggers: Vec<Trigger>,
        not_after: Option<i64>,
    ) -> Vec<TriggerAck> {
        const CHUNK: usize = 64;
        let mut acks = Vec::with_capacity(triggers.len());
        let mut ready: Vec<Work> = Vec::with_capacity(CHUNK.min(triggers.len()));
        for trigger in triggers {
            let run_id = trigger.run_id;
            let outcome = match self.take(trigger, not_after).await {
                Taken::Now(work) => {
                    ready.push(work);
                    if ready.len() == CHUNK {
                        self.workers.submit_all(ready.drain(..));
                    }
                    TriggerOutcome::Accepted
                }
                Taken::Later => TriggerOutcome::Accepted,
                Taken::Not(outcome) => outcome,
            };
            acks.push(TriggerAck { run_id, outcome });
        }
        self.workers.submit_all(ready);
        acks
    }

    /// Admits one trigger: ready to run now, queued to wait, or refused with the reason.
    /// Past `not_after` (checked before fetching the plugin, and again at the moment of
    /// admission, which a slow fetch or compile can delay) it is `expired`.
    async fn take(self: &Arc<Self>, trigger: Trigger, not_after: Option<i64>) -> Taken {
        let expired = || not_after.is_some_and(|t| now_ms() > t);
        if self.draining.load(Ordering::SeqCst) {
            return Taken::Not(TriggerOutcome::Full);
        }
        if expired() {
            return Taken::Not(TriggerOutcome::Expired);
        }
        if let Some(outcome) = self.registry().check(&trigger) {
            return Taken::Not(outcome);
        }
        let plugin = match self.plugin(&trigger.plugin.sha256).await {
            Ok(plugin) => plugin,
            Err(reason) => {
                tracing::warn!(run.id = trigger.run_id, %reason, "trigger rejected");
                return Taken::Not(TriggerOutcome::Rejected { reason });
            }
        };
        if self.draining.load(Ordering::SeqCst) {
            return Taken::Not(TriggerOutcome::Full);
        }
        if expired() {
            return Taken::Not(TriggerOutcome::Expired);
        }
        let admission = match self.registry().admit(&trigger) {
            Ok(admission) => admission,
            Err(outcome) => return Taken::Not(outcome),
        };
        let run = Run {
            node: self.clone(),
            trigger: Arc::new(trigger),
            plugin,
            kill: admission.kill,
        };
        if !run.trigger.exclusive && run.trigger.scheduled_at <= now_ms() {
            return Taken::Now(Box::new(move || run.execute()));
        }
        tokio::spawn(run.wait(admission.turn));
        Taken::Later
    }

    /// The compiled plugin: from memory, the disk cache, or fetched from a scheduler,
    /// verified and compiled. `Err` is the reason for a `rejected` ack.
    async fn plugin(self: &Arc<Self>, sha256: &str) -> Result<Plugin, String> {
        let is_hash = sha256.len() == 64
            && sha256
                .bytes()
                .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        if !is_hash {
            return Err(format!(
                "plugin sha256 `{}` is not 64 lower-case hex characters",
                crate::runtime::bounded(sha256, 80)
            ));
        }
        if let Some(plugin) = self.runtime.cached(sha256) {
            return Ok(plugin);
        }
        // The load runs as a task of its own: a trigger request that gives up (its sender
        // timed out while a large module compiled) must not cancel it, or every retry
        // would start the compile over and none would finish.
        let mut done = {
            let mut fetches = self.fetches.lock().unwrap_or_else(|e| e.into_inner());
            match fetches.get(sha256) {
                Some(load) => load.clone(),
                None => {
                    let (tx, rx) = tokio::sync::watch::channel(None);
                    fetches.insert(sha256.to_owned(), rx.clone());
                    let (node, sha) = (self.clone(), sha256.to_owned());
                    tokio::spawn(async move {
                        let result = node.load_plugin(&sha).await;
                        node.fetches
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .remove(&sha);
                        let _ = tx.send(Some(result));
                    });
                    rx
                }
            }
        };
        let stopped = || format!("loading plugin {sha256} stopped");
        let result = match done.wait_for(Option::is_some).await {
            Ok(result) => result.clone(),
            Err(_) => {
                // The load's task ended without an answer (it panicked): forget it, so the
                // next trigger tries again rather than waiting on it forever.
                self.fetches
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(sha256);
                return Err(stopped());
            }
        };
        result.unwrap_or_else(|| Err(stopped()))
    }

    /// Loads, one after another in the background, the plugins among `shas` this node does
    /// not hold in memory: the app's jobs bind them (a scheduler said so in its answer to a
    /// heartbeat), so their first trigger finds them compiled, or at worst waits for the
    /// load already under way rather than starting its own.
    pub(crate) fn warm(self: &Arc<Self>, shas: Vec<String>) {
        let start = {
            let mut warming = self.warming.lock().unwrap_or_else(|e| e.into_inner());
            for sha in shas {
                if self.runtime.cached(&sha).is_none() && !warming.queue.contains(&sha) {
                    warming.queue.push_back(sha);
                }
            }
            let start = !warming.busy && !warming.queue.is_empty();
            warming.busy |= start;
            start
        };
        if !start {
            // Nothing to do, or the loop under way takes what was just queued.
            return;
        }
        let node = self.clone();
        tokio::spawn(async move {
            loop {
                let next = {
                    let mut warming = node.warming.lock().unwrap_or_else(|e| e.into_inner());
                    let next = warming.queue.pop_front();
                    warming.busy = next.is_some();
                    next
                };
                let Some(sha) = next else { return };
                if let Err(e) = node.plugin(&sha).await {
                    tracing::warn!(plugin.sha256 = %sha, error = %e, "cannot prepare a plugin ahead of its first run");
                }
            }
        });
    }

    async fn load_plugin(&self, sha256: &str) -> Result<Plugin, String> {
        let runtime = self.runtime.clone();
        let sha = sha256.to_owned();
        let cached = tokio::task::spawn_blocking(move || runtime.load_cached(&sha))
            .await
            .map_err(|e| format!("executor error while loading plugin {sha256}: {e}"))?
            .map_err(|e| e.to_string())?;
        if let Some(plugin) = cached {
            return Ok(plugin);
        }
        let wasm = self
            .client
            .fetch_plugin(sha256)
            .await
            .map_err(|e| format!("cannot fetch plugin {sha256}: {e}"))?;
        let runtime = self.runtime.clone();
        let sha = sha256.to_owned();
        tracing::info!(
            plugin.sha256 = sha256,
            bytes = wasm.len(),
            "compiling plugin"
        );
        tokio::task::spawn_blocking(move || runtime.compile(&sha, &wasm))
            .await
            .map_err(|e| format!("executor error while compiling plugin {sha256}: {e}"))?
            .map_err(|e| e.to_string())
    }

    /// What this node tells the schedulers about itself.
    pub(crate) fn registration(&self) -> Registration {
        let (mut active_runs, running) = {
            let registry = self.registry();
            (registry.active_ids(), registry.running())
        };
        active_runs.extend(self.unacked.run_ids());
        active_runs.sort_unstable();
        active_runs.dedup();
        Registration {
            app: self.config.app.clone(),
            address: self.config.advertise_url.clone(),
            capacity: self.capacity(),
            running: u32::try_from(running).unwrap_or(u32::MAX),
            active_runs,
        }
    }

    /// Queues `report` of a run `trigger` started for the reporter.
    async fn report(&self, trigger: &Trigger, report: RunReport) {
        self.unacked.add_report(&report);
        if self.reports.send(queued(trigger, report)).await.is_err() {
            tracing::error!("the reporter has stopped; a run report is lost");
        }
    }

    /// [`Node::report`] from a worker thread; waits if the reporter is behind.
    fn report_blocking(&self, trigger: &Trigger, report: RunReport) {
        self.unacked.add_report(&report);
        if self.reports.blocking_send(queued(trigger, report)).is_err() {
            tracing::error!("the reporter has stopped; a run report is lost");
        }
    }

    fn finish(&self, run_id: i64, status: Option<RunStatus>) {
        self.registry()
            .finish(run_id, status, std::time::Instant::now());
        self.idle.notify_waiters();
    }

    /// Stops taking work and lets the runs end (see the module docs).
    pub(crate) async fn drain(&self) {
        self.draining.store(true, Ordering::SeqCst);
        self.release.cancel();
        let grace = Instant::now() + self.config.drain_grace;
        if !self.wait_idle(grace).await {
            let killed = self.registry().kill_all();
            tracing::warn!(
                runs = killed,
                "runs still going after the drain grace; killing them"
            );
            if !self.wait_idle(Instant::now() + KILL_GRACE).await {
                tracing::error!("runs did not stop after being killed");
            }
        }
    }

    /// Waits until no run is active, or `deadline`; whether none is.
    async fn wait_idle(&self, deadline: Instant) -> bool {
        loop {
            let notified = self.idle.notified();
            let mut notified = std::pin::pin!(notified);
            notified.as_mut().enable();
            if self.registry().is_empty() {
                return true;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return self.registry().is_empty();
            }
        }
    }

    /// Last words to the schedulers: the runs this node still owes a result for (so the
    /// others, handed back, are lost and retried at once), then goodbye.
    pub(crate) async fn leave(&self) {
        let registration = self.registration();
        if let Err(e) = self
            .client
            .post::<_, RegistrationAck>(PATH_REGISTER, &registration)
            .await
        {
            tracing::warn!(error = %e, "cannot tell a scheduler which runs are handed back; they are lost after the heartbeat timeout instead");
        }
        let goodbye = Deregistration {
            app: self.config.app.clone(),
            address: self.config.advertise_url.clone(),
        };
        let body = match serde_json::to_vec(&goodbye) {
            Ok(body) => body,
            Err(e) => {
                tracing::error!(error = %e, "cannot encode the deregistration");
                return;
            }
        };
        match self
            .client
            .post_accepted(PATH_DEREGISTER, body.into())
            .await
        {
            Ok(()) => tracing::info!("deregistered"),
            Err(e) => tracing::warn!(error = %e, "cannot deregister"),
        }
    }
}

/// What became of a trigger at admission.
enum Taken {
    /// Due and free to run: work for the run workers.
    Now(Work),
    /// Admitted; a task waits for its time, turn and slot.
    Later,
    Not(TriggerOutcome),
}

/// How a queued run's wait ended.
enum Waited {
    Ready,
    Killed,
    Released,
}

/// One admitted run, from acceptance to its final report.
struct Run {
    node: Arc<Node>,
    trigger: Arc<Trigger>,
    plugin: Plugin,
    kill: CancellationToken,
}

impl Run {
    /// Waits for the run's time, turn and slot, then hands it to the workers.
    async fn wait(self, turn: Arc<Notify>) {
        let run_id = self.trigger.run_id;
        let waited = tokio::select! {
            biased;
            _ = self.kill.cancelled() => Waited::Killed,
            _ = self.node.release.cancelled() => Waited::Released,
            () = wait_ready(&self.node, &self.trigger, &turn) => Waited::Ready,
        };
        match waited {
            Waited::Ready => {
                let node = self.node.clone();
                node.workers.submit(Box::new(move || self.execute()));
            }
            Waited::Released => {
                tracing::debug!(run.id = run_id, "run handed back unstarted");
                self.node.finish(run_id, None);
            }
            Waited::Killed => {
                self.node
                    .report(&self.trigger, self.killed_before_start())
                    .await;
                self.node.finish(run_id, Some(RunStatus::Killed));
            }
        }
    }

    fn killed_before_start(&self) -> RunReport {
        let outcome = RunOutcome {
            status: RunStatus::Killed,
            exit_code: None,
            message: Some("killed before it started".into()),
            output: None,
        };
        final_report(&self.node, &self.trigger, None, &outcome)
    }

    /// Runs the plugin on this (worker) thread and reports.
    fn execute(self) {
        let run_id = self.trigger.run_id;
        if self.kill.is_cancelled() {
            self.node
                .report_blocking(&self.trigger, self.killed_before_start());
            self.node.finish(run_id, Some(RunStatus::Killed));
            return;
        }
        let Self {
            node,
            trigger,
            plugin,
            kill,
        } = self;
        if node.release.is_cancelled() {
            tracing::debug!(run.id = run_id, "run handed back unstarted");
            node.finish(run_id, None);
            return;
        }
        node.registry().start(run_id);
        let span = run_span(&trigger);
        let _in_span = span.enter();
        // What the module and the scheduler's report handling continue: this run's span,
        // or the dispatch's when this process exports no traces.
        let traceparent =
            rota_net::trace::traceparent(&span).or_else(|| trigger.traceparent.clone());
        let started_at = now_ms();
        node.report_blocking(
            &trigger,
            RunReport {
                traceparent: traceparent.clone(),
                ..running_report(&node, &trigger, started_at)
            },
        );
        let log = node.logs.create(run_id);
        let env = PluginEnv {
            job_id: trigger.job_id,
            job_name: trigger.job_name.clone(),
            run_id,
            task_id: Some(trigger.task_id),
            attempt: trigger.attempt,
            scheduled_at: trigger.scheduled_at,
            shard_index: trigger.shard_index,
            shard_total: trigger.shard_total,
            traceparent: traceparent.clone(),
        };
        let allow = AllowList::parse(&trigger.http_allow).unwrap_or_else(|e| {
            // The scheduler validates the list; one that does not parse allows nothing.
            log.note(&format!(
                "the job's HTTP allow-list {e}; no request is allowed"
            ));
            AllowList::default()
        });
        let access = HostAccess {
            allow,
            job_id: trigger.job_id,
            services: Services::Scheduler {
                client: node.client.clone(),
                app: node.config.app.clone(),
            },
        };
        let invocation = Invocation {
            plugin_name: &trigger.plugin.name,
            input: trigger.input.as_bytes(),
            params: trigger.params.as_deref(),
            env: &env,
            timeout: Duration::from_millis(u64::try_from(trigger.timeout_ms.max(1)).unwrap_or(1)),
            memory_mb: trigger.memory_mb,
            host: Some(&access),
        };
        let outcome = node.runtime.run(&plugin, &invocation, &log, &kill);
        tracing::debug!(run.id = run_id, status = %outcome.status, "run ended");
        span.record("rota.status", outcome.status.to_string());
        node.report_blocking(
            &trigger,
            RunReport {
                traceparent,
                ..final_report(&node, &trigger, Some(started_at), &outcome)
            },
        );
        node.finish(run_id, Some(outcome.status));
    }
}

/// The span of a run, when the scheduler sent the trigger in a trace: a child of its
/// dispatch, from start to final report. A trigger outside any trace gets none.
fn run_span(trigger: &Trigger) -> tracing::Span {
    if trigger.traceparent.is_none() {
        return tracing::Span::none();
    }
    let span = tracing::info_span!(
        parent: None,
        "run",
        otel.name = %format!("run {}", trigger.job_name),
        otel.kind = "consumer",
        rota.job = %trigger.job_name,
        rota.plugin = %trigger.plugin.name,
        rota.task.id = trigger.task_id,
        rota.run.id = trigger.run_id,
        rota.attempt = trigger.attempt,
        rota.status = tracing::field::Empty,
    );
    rota_net::trace::continue_from(&span, trigger.traceparent.as_deref());
    span
}

/// Waits until the run may start: its time, and its turn in an exclusive lane.
async fn wait_ready(node: &Node, trigger: &Trigger, turn: &Notify) {
    sleep_until_ms(trigger.scheduled_at).await;
    if trigger.exclusive {
        loop {
            let notified = turn.notified();
            if node.registry().is_turn(trigger.run_id) {
                break;
            }
            notified.await;
        }
    }
}

/// Sleeps until the wall clock reads `at` (epoch ms) or later; never returns early.
async fn sleep_until_ms(at: i64) {
    loop {
        let now = now_ms();
        if now >= at {
            return;
        }
        let wait = u64::try_from(at - now).unwrap_or(0);
        tokio::time::sleep(Duration::from_millis(wait)).await;
    }
}

/// `report` for the reporter, with when it must leave when something waits on the run
/// (now + the trigger's `report_within_ms`).
fn queued(trigger: &Trigger, report: RunReport) -> Queued {
    Queued {
        report,
        send_by: trigger
            .report_within_ms
            .map(|ms| Instant::now() + Duration::from_millis(u64::from(ms))),
    }
}

fn running_report(node: &Node, trigger: &Trigger, started_at: i64) -> RunReport {
    RunReport {
        run_id: trigger.run_id,
        job_id: trigger.job_id,
        task_id: trigger.task_id,
        attempt: trigger.attempt,
        shard_index: trigger.shard_index,
        shard_total: trigger.shard_total,
        executor: node.config.advertise_url.clone(),
        scheduled_at: trigger.scheduled_at,
        dispatched_at: trigger.dispatched_at,
        started_at: Some(started_at),
        finished_at: None,
        status: ReportStatus::Running,
        exit_code: None,
        message: None,
        output: None,
        traceparent: None,
    }
}

fn final_report(
    node: &Node,
    trigger: &Trigger,
    started_at: Option<i64>,
    outcome: &RunOutcome,
) -> RunReport {
    RunReport {
        started_at,
        finished_at: Some(now_ms()),
        status: outcome.status.report_status(),
        exit_code: outcome.exit_code,
        message: outcome.message.clone(),
        output: outcome.output.clone(),
        ..running_report(node, trigger, 0)
    }
}
