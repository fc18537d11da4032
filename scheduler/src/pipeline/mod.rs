//! The pipeline a fire goes through, one way: the scan claims what falls due in the next
//! window ([`scan`]) into the millisecond wheel ([`wheel`]) that the ring thread turns
//! ([`ring`]); each tick's due tasks go to the fast or slow pool and are dispatched to
//! executors ([`dispatch`]), recorded after the send, and completed from the executors'
//! reports ([`complete`]). Below the stages: what they keep in memory ([`caches`]) and the
//! node's standing in the cluster ([`lease`]: the [`Cluster`] handle, the lease to fire and
//! the heartbeat, which calls no stage).
//!
//! Each stage owns a narrow handle of what it reads and may call, built and wired once by
//! the node (`crate::node`), which this folder never imports:
//!
//! - [`scan::Scan`]: the cluster, the wheel, the job and executor caches, the client (for
//!   recovery's `/runs/known`), the recorder and its wake-up; it also rejoins after a
//!   take-over, since it owns claims and their recovery.
//! - [`dispatch::Dispatcher`]: the cluster, the wheel, the caches, the router, the client, run
//!   ids, completion (for failed dispatches), the recorder, lateness, and its own slow
//!   tracker, executor rooms and in-flight count.
//! - [`complete::Completion`]: the cluster, the executor cache, run ids and the scan's wake-up.
//! - Retention (`crate::retention`) needs only the [`Cluster`].
//! - [`ready::ReadyBoard`]: where dispatch announces a `pull` job's fires that became
//!   ready, and where the node's long polls wait for them (SPEC §8).
//!
//! What several stages share (the wheel, the caches, the wake-up) is an `Arc` or a handle
//! that is cheap to clone.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{Notify, watch};

use crate::config::Config;
use crate::model::*;
use crate::store::{self, Store};

mod caches;
pub mod complete;
pub mod dispatch;
mod lease;
pub(crate) mod ready;
pub mod ring;
pub mod scan;
pub(crate) mod scan_wake;
pub mod wheel;
pub mod workflow_fires;
mod xxl_recovery;

pub use caches::JobEntry;
pub(crate) use caches::{ExecutorCache, JobCache, RunIds};
pub(crate) use lease::{Cluster, FireLease, Lease, measure_clock, spawn_heartbeat};
pub(crate) use scan_wake::ScanWake;
