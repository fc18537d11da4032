//! Rota guest helper for Rust plugins: one dependency-free file.
//!
//! Use it from a plugin's `main.rs` with
//!
//! ```ignore
//! #[path = "../../sdk/rust/rota.rs"]
//! mod rota;
//! ```
//!
//! (or copy this file next to your `main.rs` and write `mod rota;`). It only wraps the
//! plugin contract (`plugins/README.md`): stdin is the run's input, the `ROTA_*`
//! environment variables describe the run, stdout/stderr are its log and the exit status
//! is its outcome. Nothing here is required: a plain Rust program that reads stdin and
//! prints is a plugin too.
//!
//! Compatible with Rust 1.63 (Debian's `rustc --target wasm32-wasi`) and current stable
//! (`wasm32-wasip1`); it also builds for the host, so plugin logic can be tested natively.

#![allow(dead_code)]

use std::io::{self, Read, Write};

/// Who and what this run is: the `ROTA_*` environment of the run.
///
/// Outside Rota (a variable missing or unparsable) each field has a neutral default:
/// ids and `scheduled_at` 0, `job_name` empty, `task_id` `None`, `attempt` 1,
/// `shard_index` 0 and `shard_total` 1.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Context {
    /// `ROTA_JOB_ID`.
    pub job_id: i64,
    /// `ROTA_JOB_NAME`.
    pub job_name: String,
    /// `ROTA_RUN_ID`: this attempt's run.
    pub run_id: i64,
    /// `ROTA_TASK_ID`: the task this run belongs to, if any.
    pub task_id: Option<i64>,
    /// `ROTA_ATTEMPT`: 1 for the first attempt, 2 for the first retry, ...
    pub attempt: u32,
    /// `ROTA_SCHEDULED_AT`: the attempt's due time, milliseconds since the Unix epoch.
    pub scheduled_at: i64,
    /// `ROTA_SHARD_INDEX`: 0-based; 0 unless the job's route is sharding broadcast.
    pub shard_index: u32,
    /// `ROTA_SHARD_TOTAL`: 1 unless the job's route is sharding broadcast.
    pub shard_total: u32,
}

/// The run's input: all of stdin (a delayed task's payload, or the job's params for a
/// scheduled or manual run), as text. Invalid UTF-8 is replaced with U+FFFD; use
/// [`payload_bytes`] for the raw bytes.
pub fn payload() -> String {
    match String::from_utf8(payload_bytes()) {
        Ok(text) => text,
        Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
    }
}

/// The run's input as raw bytes (all of stdin). A read error fails the run.
pub fn payload_bytes() -> Vec<u8> {
    let mut buf = Vec::new();
    if let Err(e) = io::stdin().lock().read_to_end(&mut buf) {
        fail(&format!("cannot read the payload from stdin: {}", e));
    }
    buf
}

/// The job's params (`ROTA_PARAMS`) verbatim, or `None` when the job has none.
/// (argv holds the same params split like a shell would: `std::env::args().skip(1)`.)
pub fn params() -> Option<String> {
    match std::env::var("ROTA_PARAMS") {
        Ok(p) if !p.is_empty() => Some(p),
        _ => None,
    }
}

/// The run's context, from the `ROTA_*` environment variables.
pub fn context() -> Context {
    Context {
        job_id: env_num("ROTA_JOB_ID").unwrap_or(0),
        job_name: std::env::var("ROTA_JOB_NAME").unwrap_or_default(),
        run_id: env_num("ROTA_RUN_ID").unwrap_or(0),
        task_id: env_num("ROTA_TASK_ID"),
        attempt: env_num("ROTA_ATTEMPT").unwrap_or(1),
        scheduled_at: env_num("ROTA_SCHEDULED_AT").unwrap_or(0),
        shard_index: env_num("ROTA_SHARD_INDEX").unwrap_or(0),
        shard_total: env_num("ROTA_SHARD_TOTAL").unwrap_or(1),
    }
}

/// Writes `msg` and a newline to stdout: one line of the run's log (a message with
/// newlines becomes several lines). Never panics, even if stdout is closed.
pub fn log(msg: &str) {
    let out = io::stdout();
    let mut out = out.lock();
    let _ = out.write_all(msg.as_bytes());
    let _ = out.write_all(b"\n");
}

/// Writes `msg` and a newline to stderr (also part of the run's log).
pub fn log_err(msg: &str) {
    let err = io::stderr();
    let mut err = err.lock();
    let _ = err.write_all(msg.as_bytes());
    let _ = err.write_all(b"\n");
}

/// Ends the run as failed: `msg` goes to stderr, the exit status is 1. The job's retry
/// policy decides whether another attempt follows.
pub fn fail(msg: &str) -> ! {
    log_err(msg);
    exit(1)
}

/// Ends the run as succeeded (exit status 0). Returning from `main` does the same.
pub fn succeed() -> ! {
    exit(0)
}

/// Ends the run with `code` (0 = succeeded, anything else = failed), after flushing
/// stdout and stderr (`std::process::exit` does not flush buffered output itself).
pub fn exit(code: i32) -> ! {
    let _ = io::stdout().lock().flush();
    let _ = io::stderr().lock().flush();
    std::process::exit(code)
}

fn env_num<T: std::str::FromStr>(name: &str) -> Option<T> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}
