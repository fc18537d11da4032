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

// ----- host capabilities: the optional `rota` import module -----------------------------
//
// HTTP to the job's allow-list, the app's secrets and the job's key-value state
// (`plugins/README.md`, "Host imports"). A plugin that calls none of these functions does
// not import anything from `rota` (the linker keeps only what is used), so it stays a plain
// WASI module. Outside a Rota run (a native build for tests) every call fails with
// `HostError { code: UNAVAILABLE, .. }`.

/// Not on the job's allow-list.
pub const DENIED: i32 = -1;
/// No such key, secret or header.
pub const NOT_FOUND: i32 = -2;
/// A body, key or value over its limit.
pub const TOO_LARGE: i32 = -3;
/// A malformed argument (a bad URL, method or header).
pub const INVALID: i32 = -4;
/// The request failed (connection, timeout, the scheduler unreachable).
pub const FAILED: i32 = -5;
/// Not running inside Rota (a native build).
pub const UNAVAILABLE: i32 = -100;

/// A failed host call: its code (one of the constants above) and Rota's message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostError {
    pub code: i32,
    pub message: String,
}

impl std::fmt::Display for HostError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (code {})", self.message, self.code)
    }
}

/// An HTTP response: status and body. Its headers are asked for with [`http_header`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    pub body: Vec<u8>,
}

impl Response {
    /// The body as text (invalid UTF-8 replaced).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// Sends an HTTP request to a URL on the job's allow-list. `headers` are `(name, value)`
/// pairs. Redirects within the allow-list are followed. A status of 4xx or 5xx is an `Ok`
/// response: only Rota's own refusals and network failures are errors.
pub fn http_request(
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Result<Response, HostError> {
    let mut header_text = String::new();
    for (name, value) in headers {
        header_text.push_str(name);
        header_text.push_str(": ");
        header_text.push_str(value);
        header_text.push('\n');
    }
    let status = imports::http_request(method, url, &header_text, body);
    if status < 0 {
        return Err(last_error(status));
    }
    Ok(Response {
        status: status as u16,
        body: read_result(imports::result_read(&mut [])),
    })
}

/// A header of the last response (case-insensitive name), if it had one.
pub fn http_header(name: &str) -> Option<String> {
    let n = imports::call1("http_header", name);
    if n < 0 {
        return None;
    }
    Some(String::from_utf8_lossy(&read_result(n as usize)).into_owned())
}

/// A secret of this job's app, set through the API or the console; `None` if it has none
/// of that name. Never log it.
pub fn secret(name: &str) -> Result<Option<String>, HostError> {
    match imports::call1("secret_get", name) {
        n if n >= 0 => Ok(Some(
            String::from_utf8_lossy(&read_result(n as usize)).into_owned(),
        )),
        NOT_FOUND => Ok(None),
        code => Err(last_error(code)),
    }
}

/// A value of this job's key-value state; `None` if the key is not set.
pub fn kv_get(key: &str) -> Result<Option<Vec<u8>>, HostError> {
    match imports::call1("kv_get", key) {
        n if n >= 0 => Ok(Some(read_result(n as usize))),
        NOT_FOUND => Ok(None),
        code => Err(last_error(code)),
    }
}

/// Sets a key of this job's state (keys up to 256 bytes, values up to 64 KiB).
pub fn kv_set(key: &str, value: &[u8]) -> Result<(), HostError> {
    match imports::kv_set(key, value) {
        0 => Ok(()),
        code => Err(last_error(code)),
    }
}

/// Deletes a key of this job's state (deleting a missing key is not an error).
pub fn kv_delete(key: &str) -> Result<(), HostError> {
    match imports::call1("kv_delete", key) {
        n if n >= 0 => Ok(()),
        code => Err(last_error(code)),
    }
}

/// Sets this run's output (at most 64 KiB of UTF-8; the last call wins): in a workflow,
/// what the steps after this one receive (as JSON if it parses as JSON, else as a string).
pub fn output_set(output: &str) -> Result<(), HostError> {
    match imports::call1("output_set", output) {
        n if n >= 0 => Ok(()),
        code => Err(last_error(code)),
    }
}

fn read_result(len: usize) -> Vec<u8> {
    let mut buf = vec![0u8; len];
    let total = imports::result_read(&mut buf);
    buf.truncate(total.min(len));
    buf
}

fn last_error(code: i32) -> HostError {
    if code == UNAVAILABLE {
        return HostError {
            code,
            message: "not running inside Rota".into(),
        };
    }
    let message = read_result(imports::result_read(&mut []));
    HostError {
        code,
        message: String::from_utf8_lossy(&message).into_owned(),
    }
}

#[cfg(target_arch = "wasm32")]
mod imports {
    #[link(wasm_import_module = "rota")]
    extern "C" {
        #[link_name = "http_request"]
        fn rota_http_request(
            mp: *const u8,
            ml: usize,
            up: *const u8,
            ul: usize,
            hp: *const u8,
            hl: usize,
            bp: *const u8,
            bl: usize,
        ) -> i32;
        #[link_name = "http_header"]
        fn rota_http_header(np: *const u8, nl: usize) -> i32;
        #[link_name = "secret_get"]
        fn rota_secret_get(np: *const u8, nl: usize) -> i32;
        #[link_name = "kv_get"]
        fn rota_kv_get(kp: *const u8, kl: usize) -> i32;
        #[link_name = "kv_set"]
        fn rota_kv_set(kp: *const u8, kl: usize, vp: *const u8, vl: usize) -> i32;
        #[link_name = "kv_delete"]
        fn rota_kv_delete(kp: *const u8, kl: usize) -> i32;
        #[link_name = "result_read"]
        fn rota_result_read(bp: *mut u8, cap: usize) -> i32;
        #[link_name = "output_set"]
        fn rota_output_set(vp: *const u8, vl: usize) -> i32;
    }

    pub fn http_request(method: &str, url: &str, headers: &str, body: &[u8]) -> i32 {
        unsafe {
            rota_http_request(
                method.as_ptr(),
                method.len(),
                url.as_ptr(),
                url.len(),
                headers.as_ptr(),
                headers.len(),
                body.as_ptr(),
                body.len(),
            )
        }
    }

    pub fn call1(name: &str, arg: &str) -> i32 {
        let (p, l) = (arg.as_ptr(), arg.len());
        unsafe {
            match name {
                "http_header" => rota_http_header(p, l),
                "secret_get" => rota_secret_get(p, l),
                "kv_get" => rota_kv_get(p, l),
                "output_set" => rota_output_set(p, l),
                _ => rota_kv_delete(p, l),
            }
        }
    }

    pub fn kv_set(key: &str, value: &[u8]) -> i32 {
        unsafe { rota_kv_set(key.as_ptr(), key.len(), value.as_ptr(), value.len()) }
    }

    /// Copies up to `buf.len()` bytes of the last result; returns its whole length.
    pub fn result_read(buf: &mut [u8]) -> usize {
        let n = unsafe { rota_result_read(buf.as_mut_ptr(), buf.len()) };
        if n < 0 {
            0
        } else {
            n as usize
        }
    }
}

#[cfg(not(target_arch = "wasm32"))]
mod imports {
    use super::UNAVAILABLE;

    pub fn http_request(_: &str, _: &str, _: &str, _: &[u8]) -> i32 {
        UNAVAILABLE
    }
    pub fn call1(_: &str, _: &str) -> i32 {
        UNAVAILABLE
    }
    pub fn kv_set(_: &str, _: &[u8]) -> i32 {
        UNAVAILABLE
    }
    pub fn result_read(_: &mut [u8]) -> usize {
        0
    }
}
