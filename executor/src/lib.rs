//! Rota's executor node: runs plugins — WASI preview 1 command modules and components of
//! the `rota:plugin` world — sandboxed in wasmtime, for the schedulers that trigger them.
//!
//! One `Engine` per kind of plugin and process; plugins compiled once and cached by
//! SHA-256 in memory and on disk; a fresh `Store` per run with its memory, time and egress
//! limits; a bounded run queue with the block strategies; per-run logs; reports batched
//! to the schedulers and spooled while none answers — all over the signed protocol of
//! `rota-proto`. The scheduler links it for one thing: validating an uploaded plugin
//! ([`validate_plugin`]).
//!
//! # Layout
//!
//! - [`module`]: plugin validation: is this `.wasm`/`.wat` upload a WASI preview 1
//!   command module Rota can run ([`validate_plugin`]), and what is its binary form and
//!   SHA-256.
//! - [`runtime`]: the sandbox: the one `Engine` (pooling allocator, epoch ticker),
//!   compiled plugins cached by SHA-256 in memory and on disk, and one run = a fresh
//!   `Store` with the WASI contract, memory limit, timeout and kill switch.
//! - [`logs`]: run logs in append-only segment files (`<data_dir>/logs/<seq>.seg`): written line by
//!   line while the run is live, capped, read by line range, swept after retention.
//! - [`config`]: what a node is configured with ([`ExecutorConfig`]) and its defaults.
//! - `start`: [`run`]: the node wired up — server, heartbeats, reporter, log sweep — and
//!   taken down again.
//! - `node`: the life of a run (wait for its time, its turn, a slot; run; report) and the
//!   drain.
//! - `server`: the signed HTTP endpoints the scheduler calls (`/trigger`, `/kill`,
//!   `/log`, `/beat`, `/idle-beat`, `/runs/known`), and the open `GET /healthz` for probes.
//! - `registry`: the runs this node has: dedupe, queue bound, block strategies per job
//!   lane, recently finished runs.
//! - `report`: run reports batched to the scheduler's callback, spooled to
//!   `<data_dir>/spool/` while no scheduler answers.
//! - `client`: signed HTTP calls to the schedulers (register, heartbeat, callback,
//!   plugin download), first one that answers.
//! - `workers`: the threads runs execute on, fed in batches from one queue.
//! - [`clock`]: the schedulers' time, kept on the monotonic clock between heartbeats.
//! - `shell` → argv words, split like a shell would.
//! - [`local`]: `rota plugin run`: one run of a plugin file without a scheduler.

mod client;
pub mod clock;
pub mod config;
pub mod local;
pub mod logs;
pub mod module;
mod node;
mod registry;
mod report;
pub mod runtime;
mod server;
mod shell;
mod start;
mod workers;

pub use config::ExecutorConfig;
pub use module::{PluginError, PluginKind, ValidPlugin, validate_plugin};
pub use runtime::component::World;
pub use start::{run, run_with_runtime};
