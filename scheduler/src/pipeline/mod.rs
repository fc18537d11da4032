//! The pipeline a fire goes through, one way: the scan claims what falls due in the next
//! window ([`scan`]) into the millisecond wheel ([`wheel`]) that the ring thread turns
//! ([`ring`]); each tick's due tasks go to the fast or slow pool and are dispatched to
//! executors ([`dispatch`]), recorded after the send, and completed from the executors'
//! reports ([`complete`]). Below the stages: what they keep in memory ([`caches`]) and the
//! lease that lets this node fire, with its heartbeat and rejoin ([`lease`]). The stages
//! share [`Shared`], built by the node (`crate::node`), which this folder never imports.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{Notify, mpsc, watch};

use crate::client::ExecutorClient;
use crate::config::Config;
use crate::model::*;
use crate::route::Router;
use crate::store::{self, Store};

mod caches;
pub mod complete;
pub mod dispatch;
mod lease;
pub mod ring;
pub mod scan;
pub mod wheel;

pub use caches::JobEntry;
pub(crate) use caches::{ExecutorCache, JobCache, RunIds};
use dispatch::SlowTracker;
pub(crate) use lease::{FireLease, Lease, fenced_loop, rejoin, spawn_heartbeat};
use ring::Ring;

/// What every stage reads and shares, built once by the node at start.
pub(crate) struct Shared {
    pub store: Store,
    pub config: Config,
    pub lease: Lease,
    pub ring: Ring,
    pub jobs: JobCache,
    pub executors: ExecutorCache,
    pub router: Router,
    pub client: ExecutorClient,
    pub run_ids: RunIds,
    pub slow: SlowTracker,
    pub recorder: mpsc::Sender<Dispatched>,
    /// Seals and opens plugin secrets.
    pub secrets: crate::secrets::SecretBox,
    /// Nonces of the signed requests this node accepted (executors' and peers').
    pub replay: rota_proto::ReplayGuard,
    pub scan_wake: Notify,
    /// Dispatches in progress (the recorder waits for them at shutdown).
    pub in_flight: std::sync::atomic::AtomicUsize,
    pub engine: wasmtime::Engine,
    pub metrics: metrics_exporter_prometheus::PrometheusHandle,
    pub lateness: crate::lateness::RecentLateness,
    /// The room each executor said it had left, for sizing trigger requests.
    pub rooms: dispatch::Rooms,
    /// Held while a fenced node rejoins (the heartbeat and the scan may both notice).
    pub rejoining: tokio::sync::Mutex<()>,
    /// Until when this node may fire (see [`FireLease`]).
    pub fire_lease: FireLease,
    /// The time the stages read.
    pub clock: crate::clock::Clock,
    pub shutdown: watch::Receiver<bool>,
}
