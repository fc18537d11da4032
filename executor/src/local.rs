//! `rota plugin run`: one run of a plugin file on this machine, without any scheduler.
//!
//! The same sandbox as a real run ([`Runtime::run`]): the same WASI contract, limits and
//! outcome rules, with the log kept in memory so the CLI can print it. The module is
//! first checked with [`crate::validate_plugin`], so a bad file gets the same message an upload
//! would.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio_util::sync::CancellationToken;

use crate::logs::{DEFAULT_LOG_CAP_BYTES, RunLog};
use crate::module::{PluginError, validate_compiled};
use crate::runtime::host::HostAccess;
use crate::runtime::{Invocation, PluginEnv, RunStatus, Runtime, RuntimeError};

/// What to run locally.
#[derive(Debug, Clone, Copy)]
pub struct LocalRun<'a> {
    /// The plugin's name: `argv[0]` and `ROTA_JOB_NAME`.
    pub name: &'a str,
    /// `.wasm` bytes or `.wat` text.
    pub module: &'a [u8],
    /// stdin (a task's payload).
    pub input: &'a [u8],
    /// The job's params: argv after the name, and `ROTA_PARAMS`.
    pub params: Option<&'a str>,
    pub timeout: Duration,
    /// 0 means the default (64 MiB); capped by the runtime's memory cap.
    pub memory_mb: u32,
    /// What the `rota` imports reach: an allow-list, and KV and secrets in memory.
    pub host: Option<&'a HostAccess>,
}

/// How a local run ended, with its whole log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalOutcome {
    pub status: RunStatus,
    pub exit_code: Option<i32>,
    pub message: Option<String>,
    /// stdout and stderr, line by line (capped at 1 MiB like a real run's log).
    pub log_lines: Vec<String>,
    /// SHA-256 of the binary module: the plugin's identity once uploaded.
    pub sha256: String,
}

/// Why a local run could not start.
#[derive(Debug, thiserror::Error)]
pub enum LocalError {
    #[error(transparent)]
    Plugin(#[from] PluginError),
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    #[error("cannot start the run's thread: {0}")]
    Thread(String),
}

/// Validates, compiles and runs a plugin once. Blocks the caller until the run ends; safe
/// to call from async code too (the run gets its own thread), though a long run then
/// holds that task for its duration.
pub fn run_local(runtime: &Runtime, run: &LocalRun<'_>) -> Result<LocalOutcome, LocalError> {
    let (plugin, artifact) =
        validate_compiled(runtime.engine(), runtime.component_engine(), run.module)?;
    let compiled = runtime.adopt(&plugin.sha256, &artifact)?;
    let scheduled_at = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    let env = PluginEnv {
        job_id: 0,
        job_name: run.name.to_owned(),
        run_id: 0,
        task_id: None,
        attempt: 1,
        scheduled_at,
        shard_index: 0,
        shard_total: 1,
        traceparent: None,
    };
    let invocation = Invocation {
        plugin_name: run.name,
        input: run.input,
        params: run.params,
        env: &env,
        timeout: run.timeout,
        memory_mb: run.memory_mb,
        host: run.host,
    };
    let log = RunLog::memory(DEFAULT_LOG_CAP_BYTES);
    let kill = CancellationToken::new();
    // A scoped thread of its own: `Runtime::run` blocks, which an async caller's thread
    // must not do.
    let outcome = std::thread::scope(|scope| {
        std::thread::Builder::new()
            .name("rota-plugin-run".into())
            .spawn_scoped(scope, || runtime.run(&compiled, &invocation, &log, &kill))
            .map_err(|e| LocalError::Thread(e.to_string()))?
            .join()
            .map_err(|_| LocalError::Thread("the run's thread panicked".into()))
    })?;
    Ok(LocalOutcome {
        status: outcome.status,
        exit_code: outcome.exit_code,
        message: outcome.message,
        log_lines: log.lines(),
        sha256: plugin.sha256,
    })
}
