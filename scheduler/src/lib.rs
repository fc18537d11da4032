//! Rota's scheduler node: storage, the scan → wheel → ring → pools → dispatch pipeline,
//! callbacks and the REST API. `docs/architecture.md` walks the pipeline end to end.
//!
//! # Layout
//!
//! - [`config`]: a node's settings.
//! - [`model`]: the domain's nouns (jobs, tasks, runs, executors, plugins); their named
//!   variants (statuses, kinds, routes, misfire policies) come from one macro, `names.rs`.
//! - [`store`]: every row, on MySQL or SQLite; the scan's claim and batched writes.
//! - [`schedule`]: cron (Quartz, seconds, time zones) and fixed-rate fire times, misfires.
//! - [`backoff`]: retry delays.
//! - [`route`]: the ten route strategies that pick executors.
//! - [`pipeline`]: the stages a fire goes through, one way — [`scan`](pipeline::scan)
//!   claims what is due in the next window (and recovers claims after a crash) into the
//!   millisecond [`wheel`](pipeline::wheel) the [`ring`](pipeline::ring) thread turns;
//!   [`dispatch`](pipeline::dispatch) routes each tick's tasks through the fast and slow
//!   pools; [`complete`](pipeline::complete) ends runs from reports, retries and lost
//!   executors.
//! - [`client`]: signed HTTP calls to executors.
//! - [`lateness`]: recent fire lateness in memory, for the dashboard.
//! - [`alarm`]: alarm rules, the events they raise, the throttle, the outbox and its
//!   channels (webhook, email, Slack, DingTalk, Feishu, WeCom).
//! - [`retention`]: deletes finished tasks and runs past the retention period.
//! - [`clock`]: the time the stages read; paused in unit tests.
//! - [`usecase`]: what a person, an executor or a peer may do — checked, stored, notified,
//!   audited — for every door into the node.
//! - [`secrets`]: apps' secrets, sealed at rest.
//! - [`node`]: a running node — wires each stage's handle, start-up, shutdown.
//! - [`api`]: the node's HTTP surface — the REST API, `/healthz`, `/readyz`, `/metrics` —
//!   and the guards of every route.
//! - [`protocol`]: the signed routes' handlers — the executor protocol, calls between nodes.
//! - [`status`]: the HTTP status of a use case's error, for the API and the console.
//! - [`metrics`]: the Prometheus recorder.
//! - [`access`]: roles, app scopes and the principal behind a request.
//! - [`credentials`]: password hashes, random tokens, the first `admin`.
//! - [`workflow`]: workflows' graphs — validation, what a step's ending starts or skips,
//!   the payloads that pass outputs along.
//! - [`limits`]: the bucket a task falls in under its job's concurrency bound per key.
//! - [`console`]: the web console (server-rendered pages, sessions, CSRF) on the same port.

pub mod access;
pub mod alarm;
pub mod api;
pub mod backoff;
pub mod client;
pub mod clock;
pub mod config;
pub mod console;
pub mod credentials;
pub mod lateness;
pub mod limits;
pub mod metrics;
pub mod model;
mod names;
pub mod node;
mod periodic;
pub mod pipeline;
pub mod ports;
pub mod protocol;
pub mod retention;
pub mod route;
pub mod schedule;
pub mod secrets;
pub mod sso;
pub mod status;
pub mod store;
pub mod usecase;
pub mod workflow;
pub mod xxl;

use std::future::Future;

use anyhow::Context;
use tokio::net::TcpListener;

pub use config::Config;
pub use node::Node;
pub use store::Store;

/// Runs a scheduler node on `listener` until `shutdown` completes, then drains everything.
pub async fn run(
    config: Config,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let mut config = config;
    seal_egress(&mut config, listener.local_addr()?).await;
    let store = Store::connect(&config.database_url)
        .await
        .context("opening the database")?;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let tls = config.tls.clone();
    let node = Node::start(config, store, stop_rx.clone()).await?;
    let app = api::router(api::AppState {
        ports: node.ports().clone(),
    });
    let mut server_stop = stop_rx.clone();
    // Client addresses key the console's slowing of failed logins.
    let app = app.into_make_service_with_connect_info::<rota_net::ClientAddr>();
    let server = axum::serve(tls.listener(listener), app).with_graceful_shutdown(async move {
        let _ = server_stop.wait_for(|s| *s).await;
    });
    let server = tokio::spawn(async move { server.await });
    shutdown.await;
    tracing::info!("shutting down");
    let _ = stop_tx.send(true);
    let _ = server.await;
    node.stopped().await;
    node.ports().store().close().await;
    Ok(())
}

/// Adds this node's own door and its database to the admin's egress policy: whatever the
/// admin opened, a job's HTTP never reaches them.
async fn seal_egress(config: &mut Config, listen: std::net::SocketAddr) {
    config
        .egress
        .deny_own_port(listen, "this node's API and console");
    for (host, port) in store::database_endpoints(&config.database_url) {
        config
            .egress
            .deny_service(&host, port, "this node's database")
            .await;
    }
}
