//! An executor node's life: [`run`] wires everything together on the listener it is given
//! (libraries never bind sockets) and takes it down again.
//!
//! - the HTTP endpoints ([`crate::server`]), all signed, over the [`Node`];
//! - registration and heartbeats: `register` to the first scheduler that answers (retried
//!   with backoff), then a heartbeat every interval the scheduler's ack names, each
//!   answer setting the schedulers' time ([`crate::clock`]);
//! - the reporter ([`crate::report`]): batched callbacks, spooled when no scheduler
//!   answers;
//! - a log sweep every hour ([`crate::logs`]).
//!
//! Shutdown: the node drains ([`Node::drain`]: triggers answered `full`, runs not started
//! handed back, running runs given `drain_grace`), the loops stop, reports are flushed (or
//! spooled), the node tells the schedulers what it still owes and deregisters
//! ([`Node::leave`]), and the server closes last.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use rota_proto::RegistrationAck;
use rota_proto::wire::{PATH_HEARTBEAT, PATH_REGISTER};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::client::SchedulerClient;
use crate::config::ExecutorConfig;
use crate::logs::LogStore;
use crate::node::Node;
use crate::report::{Spool, Unacked, report_channel, run_reporter};
use crate::runtime::Runtime;

/// How often old logs are swept.
const SWEEP_EVERY: Duration = Duration::from_secs(3600);
/// Registration retries back off up to this.
const REGISTER_BACKOFF_MAX: Duration = Duration::from_secs(10);
/// How long the HTTP server gets to finish its requests at the very end.
const SERVER_GRACE: Duration = Duration::from_secs(5);

/// Runs an executor node on `listener` until `shutdown` resolves, then drains.
pub async fn run(
    config: ExecutorConfig,
    listener: TcpListener,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    let mut config = config;
    config.seal_egress(listener.local_addr()?).await;
    let runtime =
        Runtime::new(config.runtime_config()).context("starting the WebAssembly runtime")?;
    run_with_runtime(config, runtime, listener, shutdown).await
}

/// [`run`] with a runtime built by the caller (`rota standalone` shares its engine with
/// plugin validation).
pub async fn run_with_runtime(
    config: ExecutorConfig,
    runtime: Runtime,
    listener: TcpListener,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    config.check()?;
    let logs = LogStore::open_with(config.data_dir.join("logs"), config.logs)
        .with_context(|| format!("opening the log directory in {}", config.data_dir.display()))?;
    let unacked = Unacked::default();
    let spool = Spool::open(config.data_dir.join("spool"), unacked.clone())
        .with_context(|| format!("opening the report spool in {}", config.data_dir.display()))?;
    if !spool.is_empty() {
        tracing::info!(
            batches = spool.len(),
            "run reports from an earlier start wait in the spool"
        );
    }
    let client = Arc::new(SchedulerClient::new(
        &config.schedulers,
        &config.app,
        config.secret.clone(),
        &config.tls,
    )?);
    let (reports_tx, reports_rx) = report_channel(report_queue(&config));
    let report_window = config.report_window;
    let node = Node::new(config, runtime, logs, client.clone(), reports_tx, unacked);

    let stop_loops = CancellationToken::new();
    let stop_reporter = CancellationToken::new();
    let stop_server = CancellationToken::new();
    let reporter = tokio::spawn(run_reporter(
        report_window,
        reports_rx,
        client,
        spool,
        node.logs.clone(),
        stop_reporter.clone(),
    ));
    let heartbeat = tokio::spawn(heartbeat_loop(node.clone(), stop_loops.clone()));
    let sweeper = tokio::spawn(sweep_loop(node.logs.clone(), stop_loops.clone()));
    let app = crate::server::router(node.clone());
    let server_stop = stop_server.clone();
    let listener = node.config.tls.listener(listener);
    let mut server = tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async move { server_stop.cancelled().await })
            .await
    });
    tracing::info!(
        app = %node.config.app,
        address = %node.config.advertise_url,
        capacity = node.config.capacity,
        "executor started"
    );

    let server_ended = tokio::select! {
        () = shutdown => None,
        ended = &mut server => Some(ended),
    };
    tracing::info!("executor shutting down");
    node.drain().await;
    stop_loops.cancel();
    let _ = heartbeat.await;
    let _ = sweeper.await;
    stop_reporter.cancel();
    let _ = reporter.await;
    node.leave().await;
    stop_server.cancel();
    let ended = match server_ended {
        Some(ended) => ended,
        None => match tokio::time::timeout(SERVER_GRACE, &mut server).await {
            Ok(ended) => ended,
            Err(_) => {
                server.abort();
                Ok(Ok(()))
            }
        },
    };
    ended
        .context("the executor's HTTP server panicked")?
        .context("the executor's HTTP server failed")?;
    tracing::info!("executor stopped");
    Ok(())
}

/// Reports in flight: two per active run is the most there can be.
fn report_queue(config: &ExecutorConfig) -> usize {
    config
        .capacity
        .saturating_add(config.queue)
        .saturating_mul(2)
        .clamp(1024, 65_536)
}

/// Registers (until a scheduler answers), then heartbeats, until `stop`.
async fn heartbeat_loop(node: Arc<Node>, stop: CancellationToken) {
    let mut registered = false;
    let mut interval = node.config.heartbeat_interval;
    let mut backoff = Duration::from_millis(250);
    loop {
        let path = if registered {
            PATH_HEARTBEAT
        } else {
            PATH_REGISTER
        };
        let registration = node.registration();
        let sent = crate::clock::monotonic_us();
        let answer = node
            .client
            .post::<_, RegistrationAck>(path, &registration)
            .await;
        let wait = match answer {
            Ok(ack) => {
                let back = crate::clock::monotonic_us();
                if let Some(reading) = crate::clock::Reading::of(&ack, sent, back) {
                    crate::clock::follow(reading);
                }
                if !registered {
                    tracing::info!(app = %registration.app, address = %registration.address, "registered with a scheduler");
                }
                registered = true;
                backoff = Duration::from_millis(250);
                node.warm(ack.plugins);
                if let Ok(ms) = u64::try_from(ack.heartbeat_interval_ms)
                    && ms > 0
                {
                    interval = Duration::from_millis(ms.clamp(50, 600_000));
                }
                interval
            }
            Err(e) if registered => {
                tracing::warn!(error = %e, "heartbeat failed");
                interval.min(Duration::from_secs(5))
            }
            Err(e) => {
                tracing::warn!(error = %e, retry_in_ms = backoff.as_millis() as u64, "cannot register with any scheduler");
                let wait = backoff;
                backoff = (backoff * 2).min(REGISTER_BACKOFF_MAX);
                wait
            }
        };
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

/// Deletes old logs now and every [`SWEEP_EVERY`], until `stop`.
async fn sweep_loop(logs: LogStore, stop: CancellationToken) {
    loop {
        let store = logs.clone();
        match tokio::task::spawn_blocking(move || store.sweep()).await {
            Ok(Ok(0)) => {}
            Ok(Ok(removed)) => tracing::info!(removed, "old run logs deleted"),
            Ok(Err(e)) => tracing::warn!(error = %e, "sweeping old run logs failed"),
            Err(e) => tracing::warn!(error = %e, "the log sweep failed"),
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(SWEEP_EVERY) => {}
        }
    }
}
