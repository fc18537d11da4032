//! The `rota` import module: what a plugin may reach beyond WASI (`plugins/README.md`,
//! "Host imports", is the guest's side of this file).
//!
//! | import | does |
//! |---|---|
//! | `http_request(method, url, headers, body) -> status` | HTTP to the job's allow-list only |
//! | `http_header(name) -> len` | a header of the last response |
//! | `secret_get(name) -> len` | a secret of the job's app |
//! | `kv_get(key) -> len`, `kv_set(key, value)`, `kv_delete(key)` | the job's key-value state |
//! | `result_read(buf, cap) -> len` | copies out the last call's result |
//! | `output_set(ptr, len) -> 0` | the run's output (≤ [`OUTPUT_MAX`]): a workflow step's, passed to the next |
//!
//! Every argument is a `(pointer, length)` pair into the plugin's exported `memory`, every
//! return an `i32`. Results of variable size (a body, a value) cross in two steps: the call
//! keeps its result on the host (and returns its length, except `http_request`, which
//! returns the status); `result_read` copies up to `cap` bytes of it into a buffer the guest
//! allocated and returns the result's whole length, so `result_read(0, 0)` asks for the
//! length alone. A negative return is an error code ([`DENIED`] …); the
//! error's message is then the result, so a plugin can log it. A pointer outside the
//! plugin's memory traps (a bug in the plugin, not a condition to handle).
//!
//! HTTP: the URL must be on the job's allow-list (`rota_proto::allow`), redirects are
//! followed only to URLs on it (at most [`MAX_REDIRECTS`]), a request may take at most the
//! run's remaining time (and [`REQUEST_TIMEOUT`]), bodies are capped both ways
//! ([`BODY_MAX`]). Each request, or its denial, is a line of the run's log: method, URL
//! without its query (which may hold secrets), status and time. One HTTP client serves
//! every run of the process (connections are reused); a request blocks only its own run.
//!
//! Secrets and key-value state live on the scheduler (`api/plugin_host.rs` there) and are
//! fetched per call over the signed executor protocol; `rota plugin run` keeps them in
//! memory instead ([`Services::Local`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use rota_net::egress::{Denied, Egress, denied_in};
use rota_proto::allow::AllowList;
use rota_proto::error_chain;
use rota_proto::wire::{
    KV_KEY_MAX, KV_VALUE_MAX, KvOp, KvReply, KvRequest, SecretReply, SecretRequest,
};
use wasmtime::{Caller, Extern, Linker};

use super::gate::HttpGate;
use super::run::Ctx;
use crate::logs::RunLog;

/// The import module's name.
pub const MODULE: &str = "rota";

/// Not allowed: the URL (or a redirect) is not on the job's allow-list.
pub const DENIED: i32 = -1;
/// No such key, secret or header.
pub const NOT_FOUND: i32 = -2;
/// A body, value or key over its limit.
pub const TOO_LARGE: i32 = -3;
/// A malformed argument: not UTF-8, a bad URL, method or header.
pub const INVALID: i32 = -4;
/// The request failed (connection, timeout, the scheduler unreachable).
pub const FAILED: i32 = -5;

/// Largest request or response body.
pub const BODY_MAX: usize = 1 << 20;
/// Longest a single request may take (less if the run has less time left).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Redirects followed per request.
pub const MAX_REDIRECTS: usize = 5;

/// Each import and its number of `i32` parameters (all return one `i32`): what upload
/// validation accepts (`module.rs`) and what the linker provides.
pub const IMPORTS: &[(&str, usize)] = &[
    ("http_request", 8),
    ("http_header", 2),
    ("secret_get", 2),
    ("kv_get", 2),
    ("kv_set", 4),
    ("kv_delete", 2),
    ("result_read", 2),
    ("output_set", 2),
];

/// Largest output a run may set (`output_set`); a larger one is refused ([`INVALID`]).
pub const OUTPUT_MAX: usize = 64 * 1024;

/// What a run's imports may reach: its job's allow-list and where KV and secrets live.
#[derive(Debug, Clone)]
pub struct HostAccess {
    pub allow: AllowList,
    pub job_id: i64,
    pub services: Services,
}

/// Where a run's secrets and key-value state come from.
#[derive(Clone)]
pub enum Services {
    /// The scheduler, for runs of an executor node serving `app`.
    Scheduler {
        client: Arc<dyn SchedulerCalls>,
        app: String,
    },
    /// Memory, for `rota plugin run`.
    Local(Arc<LocalServices>),
}

impl std::fmt::Debug for Services {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Services::Scheduler { app, .. } => write!(f, "Services::Scheduler({app})"),
            Services::Local(_) => f.write_str("Services::Local"),
        }
    }
}

/// The scheduler's side of the `kv` and `secret` imports. The executor's client to its
/// schedulers provides it; the sandbox knows nothing else of how the schedulers are
/// reached.
pub trait SchedulerCalls: Send + Sync {
    fn kv(self: Arc<Self>, req: KvRequest) -> Call<KvReply>;
    fn secret(self: Arc<Self>, req: SecretRequest) -> Call<SecretReply>;
}

/// A call to the schedulers in flight.
pub type Call<T> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<T, CallFailed>> + Send>>;

/// Why a call to the schedulers failed, as a plugin is told.
#[derive(Debug)]
pub struct CallFailed {
    /// The scheduler's own words when it refused the request as too large.
    pub too_large: Option<String>,
    /// What each scheduler tried answered.
    pub message: String,
}

/// In-memory KV and secrets for `rota plugin run`.
#[derive(Default)]
pub struct LocalServices {
    pub kv: Mutex<HashMap<String, Vec<u8>>>,
    pub secrets: HashMap<String, String>,
}

/// A failed import call: its code and the message kept as the result.
pub(super) struct Refused(i32, pub(super) String);

type Answer = Result<Vec<u8>, Refused>;

/// One run's side of the imports (in its store's data).
pub(super) struct Host {
    access: Option<HostAccess>,
    /// The plugins' HTTP clients, under the executor's egress policy.
    http: Arc<Egress>,
    /// The process's runtime, where network calls run ([`on_io`]).
    io: Option<tokio::runtime::Handle>,
    log: RunLog,
    deadline: Instant,
    /// The last call's result (or error message), for `result_read`.
    result: Vec<u8>,
    /// The last response's headers, for `http_header`.
    headers: Vec<(String, String)>,
    /// What the plugin set with `output_set` (the last call wins).
    output: Option<String>,
}

impl Host {
    pub(super) fn new(
        access: Option<HostAccess>,
        http: Arc<Egress>,
        io: Option<tokio::runtime::Handle>,
        log: RunLog,
        deadline: Instant,
    ) -> Host {
        Host {
            access,
            http,
            io,
            log,
            deadline,
            result: Vec::new(),
            headers: Vec::new(),
            output: None,
        }
    }

    /// The output the plugin set, taken when its run ends.
    pub(super) fn take_output(&mut self) -> Option<String> {
        self.output.take()
    }

    /// The output a handler component's `run` returned: [`Host::set_output`], refused with
    /// its message.
    pub(super) fn output_set(&mut self, value: Vec<u8>) -> Result<(), String> {
        self.set_output(value)
            .map(drop)
            .map_err(|Refused(_, why)| why)
    }

    /// `output_set`: keeps `value` as the run's output, or refuses it (too large, not
    /// UTF-8) with a message the plugin can read.
    fn set_output(&mut self, value: Vec<u8>) -> Answer {
        if value.len() > OUTPUT_MAX {
            return Err(Refused(
                INVALID,
                format!(
                    "output of {} bytes, at most {OUTPUT_MAX} allowed",
                    value.len()
                ),
            ));
        }
        match String::from_utf8(value) {
            Ok(text) => {
                self.output = Some(text);
                Ok(Vec::new())
            }
            Err(_) => Err(Refused(INVALID, "output is not UTF-8 text".into())),
        }
    }

    /// Keeps a call's result and turns it into the guest's return value.
    fn settle(&mut self, answer: Answer, ok: impl FnOnce(usize) -> i32) -> i32 {
        match answer {
            Ok(bytes) => {
                let n = bytes.len();
                self.result = bytes;
                ok(n)
            }
            Err(Refused(code, message)) => {
                self.result = message.into_bytes();
                code
            }
        }
    }

    /// The run's log.
    pub(super) fn log(&self) -> &RunLog {
        &self.log
    }

    /// The gate a component's `wasi:http` requests pass: this run's allow-list, client,
    /// log and deadline.
    pub(super) fn http_gate(&self) -> HttpGate {
        HttpGate {
            allow: self.access.as_ref().map(|a| a.allow.clone()),
            egress: self.http.clone(),
            io: self.io.clone(),
            log: self.log.clone(),
            deadline: self.deadline,
        }
    }

    /// A key-value call of the component world: `Ok(None)` for a key without a value,
    /// `Err` with the reason otherwise.
    pub(super) async fn kv_call(
        &self,
        op: KvOp,
        key: String,
        value: Option<Vec<u8>>,
    ) -> Result<Option<Vec<u8>>, String> {
        match self.kv(op, key, value).await {
            Ok(bytes) => Ok(Some(bytes)),
            Err(Refused(NOT_FOUND, _)) => Ok(None),
            Err(Refused(_, message)) => Err(message),
        }
    }

    /// A secret for the component world: `Ok(None)` if the app has no such secret.
    pub(super) async fn secret_call(&self, name: String) -> Result<Option<String>, String> {
        match self.secret(name).await {
            Ok(bytes) => Ok(Some(String::from_utf8_lossy(&bytes).into_owned())),
            Err(Refused(NOT_FOUND, _)) => Ok(None),
            Err(Refused(_, message)) => Err(message),
        }
    }

    fn access(&self) -> Result<&HostAccess, Refused> {
        self.access.as_ref().ok_or_else(|| {
            Refused(
                DENIED,
                "this run has no host access (no job, no scheduler)".into(),
            )
        })
    }

    async fn kv(&self, op: KvOp, key: String, value: Option<Vec<u8>>) -> Answer {
        let access = self.access()?;
        if key.is_empty() || key.len() > KV_KEY_MAX {
            return Err(Refused(
                if key.is_empty() { INVALID } else { TOO_LARGE },
                format!(
                    "a key must be 1 to {KV_KEY_MAX} bytes long, not {}",
                    key.len()
                ),
            ));
        }
        if let Some(v) = &value
            && v.len() > KV_VALUE_MAX
        {
            return Err(Refused(
                TOO_LARGE,
                format!(
                    "a value may be at most {KV_VALUE_MAX} bytes, not {}",
                    v.len()
                ),
            ));
        }
        match &access.services {
            Services::Local(local) => {
                let mut kv = local.kv.lock().unwrap_or_else(|e| e.into_inner());
                match op {
                    KvOp::Get => kv
                        .get(&key)
                        .cloned()
                        .ok_or_else(|| Refused(NOT_FOUND, format!("no key `{key}`"))),
                    KvOp::Set => {
                        let value = value.unwrap_or_default();
                        let others = kv.iter().filter(|(k, _)| **k != key);
                        let bytes = others.clone().map(|(k, v)| k.len() + v.len()).sum();
                        if let Some(full) = rota_proto::wire::kv_over_quota(
                            others.count(),
                            bytes,
                            &key,
                            value.len(),
                        ) {
                            return Err(Refused(TOO_LARGE, full));
                        }
                        kv.insert(key, value);
                        Ok(Vec::new())
                    }
                    KvOp::Delete => {
                        kv.remove(&key);
                        Ok(Vec::new())
                    }
                }
            }
            Services::Scheduler { client, app } => {
                let req = KvRequest {
                    app: app.clone(),
                    job_id: access.job_id,
                    op,
                    key: key.clone(),
                    value: value.map(|v| BASE64.encode(v)),
                };
                let reply: KvReply =
                    on_io(&self.io, client.clone().kv(req))
                        .await?
                        .map_err(|e| match e.too_large {
                            // The scheduler's own words: the value or the state is too big.
                            Some(message) => Refused(TOO_LARGE, message),
                            None => Refused(FAILED, format!("key-value store: {}", e.message)),
                        })?;
                match (op, reply.value) {
                    (KvOp::Get, Some(v)) => BASE64
                        .decode(v.as_bytes())
                        .map_err(|e| Refused(FAILED, format!("key-value store: bad value: {e}"))),
                    (KvOp::Get, None) => Err(Refused(NOT_FOUND, format!("no key `{key}`"))),
                    _ => Ok(Vec::new()),
                }
            }
        }
    }

    async fn secret(&self, name: String) -> Answer {
        let access = self.access()?;
        let value = match &access.services {
            Services::Local(local) => local.secrets.get(&name).cloned(),
            Services::Scheduler { client, app } => {
                let req = SecretRequest {
                    app: app.clone(),
                    job_id: access.job_id,
                    name: name.clone(),
                };
                let reply: SecretReply = on_io(&self.io, client.clone().secret(req))
                    .await?
                    .map_err(|e| Refused(FAILED, format!("secrets: {}", e.message)))?;
                reply.value
            }
        };
        value
            .map(String::into_bytes)
            .ok_or_else(|| Refused(NOT_FOUND, format!("no secret `{name}` for this app")))
    }

    /// One HTTP exchange, redirects included. `Ok` is the status; the body is the result.
    async fn http(
        &mut self,
        method: &str,
        url: &str,
        headers: &str,
        body: Vec<u8>,
    ) -> Result<i32, Refused> {
        let allow = self.access()?.allow.clone();
        let mut method = reqwest::Method::from_bytes(method.trim().to_ascii_uppercase().as_bytes())
            .map_err(|_| Refused(INVALID, format!("`{method}` is not an HTTP method")))?;
        let mut url = reqwest::Url::parse(url.trim())
            .map_err(|e| Refused(INVALID, format!("`{}` is not a URL: {e}", shown(url))))?;
        let headers = parse_headers(headers)?;
        if body.len() > BODY_MAX {
            return Err(Refused(
                TOO_LARGE,
                format!(
                    "a request body may be at most {BODY_MAX} bytes, not {}",
                    body.len()
                ),
            ));
        }
        let mut body = Some(body);
        let started = Instant::now();
        for _ in 0..=MAX_REDIRECTS {
            if !allow.allows(&url) {
                let line = format!(
                    "http {method} {} denied: not on the job's allow-list",
                    redacted(&url)
                );
                self.log.note(&line);
                return Err(Refused(DENIED, line));
            }
            let client = match self.http.client(&url) {
                Ok(client) => client,
                Err(refused) => {
                    let line = format!("http {method} {} refused: {refused}", redacted(&url));
                    self.log.note(&line);
                    return Err(Refused(DENIED, line));
                }
            };
            let left = self.deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Refused(FAILED, "the run's time is up".into()));
            }
            let mut req = client
                .request(method.clone(), url.clone())
                .timeout(left.min(REQUEST_TIMEOUT));
            for (k, v) in &headers {
                req = req.header(k.as_str(), v.as_str());
            }
            if let Some(b) = &body
                && !b.is_empty()
            {
                req = req.body(b.clone());
            }
            let sent = Instant::now();
            let exchange = on_io(&self.io, exchange(req)).await?;
            let elapsed = sent.elapsed().as_millis();
            let (status, location, headers, out) = match exchange {
                Err(NoAnswer::Denied(denied)) => {
                    let line = format!("http {method} {} refused: {denied}", redacted(&url));
                    self.log.note(&line);
                    return Err(Refused(DENIED, line));
                }
                Err(NoAnswer::Failed(why)) => {
                    self.log.note(&format!(
                        "http {method} {} failed after {elapsed} ms: {why}",
                        redacted(&url)
                    ));
                    return Err(Refused(
                        FAILED,
                        format!("{method} {}: {why}", redacted(&url)),
                    ));
                }
                Ok(e) => e,
            };
            self.log.note(&format!(
                "http {method} {} -> {} ({elapsed} ms)",
                redacted(&url),
                status.as_u16()
            ));
            if status.is_redirection()
                && let Some(location) = location
            {
                url = url.join(&location).map_err(|e| {
                    Refused(
                        FAILED,
                        format!("a redirect to `{location}` is not a URL: {e}"),
                    )
                })?;
                // 303 always, and 301/302 after a POST, continue as a GET without a body.
                if status == reqwest::StatusCode::SEE_OTHER
                    || (method == reqwest::Method::POST && matches!(status.as_u16(), 301 | 302))
                {
                    method = reqwest::Method::GET;
                    body = None;
                }
                continue;
            }
            self.headers = headers;
            let out = match out {
                Body::Whole(bytes) => bytes,
                Body::TooLarge => {
                    let line = format!(
                        "http {method} {}: the response body is over {BODY_MAX} bytes; refused",
                        redacted(&url)
                    );
                    self.log.note(&line);
                    return Err(Refused(TOO_LARGE, line));
                }
                Body::Broken(why) => {
                    return Err(Refused(
                        FAILED,
                        format!("{method} {}: reading the body: {why}", redacted(&url)),
                    ));
                }
            };
            self.result = out;
            tracing::debug!(
                ms = started.elapsed().as_millis() as u64,
                "plugin http request"
            );
            return Ok(i32::from(status.as_u16()));
        }
        Err(Refused(
            FAILED,
            format!(
                "more than {MAX_REDIRECTS} redirects from {}",
                redacted(&url)
            ),
        ))
    }
}

/// A response body as the exchange read it.
pub(super) enum Body {
    Whole(Vec<u8>),
    TooLarge,
    Broken(String),
}

/// Why an exchange brought no answer.
pub(super) enum NoAnswer {
    /// The egress policy refused every address the name resolved to: nothing was sent.
    Denied(Denied),
    /// No connection, a timeout, a broken exchange: its causes on one line.
    Failed(String),
}

/// One request and its response: status, `Location`, headers and body (up to
/// [`BODY_MAX`]); `Err` if no response came. Runs on the I/O runtime ([`on_io`]).
pub(super) async fn exchange(
    req: reqwest::RequestBuilder,
) -> Result<
    (
        reqwest::StatusCode,
        Option<String>,
        Vec<(String, String)>,
        Body,
    ),
    NoAnswer,
> {
    let mut resp = req.send().await.map_err(|e| match denied_in(&e) {
        Some(denied) => NoAnswer::Denied(denied.clone()),
        None => NoAnswer::Failed(error_chain(&e)),
    })?;
    let status = resp.status();
    let location = resp
        .headers()
        .get(reqwest::header::LOCATION)
        .and_then(|l| l.to_str().ok())
        .map(str::to_owned);
    let headers = resp
        .headers()
        .iter()
        .filter_map(|(k, v)| Some((k.as_str().to_owned(), v.to_str().ok()?.to_owned())))
        .collect();
    if status.is_redirection() && location.is_some() {
        return Ok((status, location, headers, Body::Whole(Vec::new())));
    }
    let mut out = Vec::new();
    let body = loop {
        match resp.chunk().await {
            Ok(Some(chunk)) if out.len() + chunk.len() > BODY_MAX => break Body::TooLarge,
            Ok(Some(chunk)) => out.extend_from_slice(&chunk),
            Ok(None) => break Body::Whole(out),
            Err(e) => break Body::Broken(error_chain(&e)),
        }
    };
    Ok((status, location, headers, body))
}

/// Runs `f` on the process's I/O runtime. A run executes on a thread of its own (with a
/// small runtime of that thread's); a pooled connection opened there would be driven only
/// while that thread runs a plugin, and the next run to reuse it from another thread would
/// wait for nothing. The process's runtime drives every connection all the time.
///
/// The work ends with the run: when the run is killed or times out, its future — and this
/// one with it — is dropped, and the spawned work (an HTTP exchange, say) is aborted
/// rather than left to run out its own timeout.
pub(super) async fn on_io<T: Send + 'static>(
    io: &Option<tokio::runtime::Handle>,
    f: impl std::future::Future<Output = T> + Send + 'static,
) -> Result<T, Refused> {
    match io {
        Some(handle) => AbortOnDrop(handle.spawn(f))
            .join()
            .await
            .map_err(|e| Refused(FAILED, format!("the executor is stopping: {e}"))),
        None => Ok(f.await),
    }
}

/// A spawned task that is aborted if whoever waits for it goes away.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> AbortOnDrop<T> {
    async fn join(mut self) -> Result<T, tokio::task::JoinError> {
        (&mut self.0).await
    }
}

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// `Name: value` lines; empty lines are skipped. `Host` and hop-by-hop headers are the
/// client's to set.
fn parse_headers(text: &str) -> Result<Vec<(String, String)>, Refused> {
    let mut out = Vec::new();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let (name, value) = line
            .split_once(':')
            .ok_or_else(|| Refused(INVALID, format!("header line `{}` has no `:`", shown(line))))?;
        let name = name.trim();
        if reqwest::header::HeaderName::from_bytes(name.as_bytes()).is_err()
            || reqwest::header::HeaderValue::from_str(value.trim()).is_err()
        {
            return Err(Refused(
                INVALID,
                format!("header `{}` is not valid", shown(name)),
            ));
        }
        if ["host", "connection", "transfer-encoding", "content-length"]
            .contains(&name.to_ascii_lowercase().as_str())
        {
            return Err(Refused(
                INVALID,
                format!("header `{name}` is set by Rota, not the plugin"),
            ));
        }
        out.push((name.to_owned(), value.trim().to_owned()));
    }
    Ok(out)
}

/// A URL for the log: without its query and fragment, which may hold tokens.
pub(super) fn redacted(url: &reqwest::Url) -> String {
    let mut u = url.clone();
    let had_query = u.query().is_some();
    u.set_query(None);
    u.set_fragment(None);
    if had_query {
        format!("{u}?…")
    } else {
        u.to_string()
    }
}

/// At most 100 characters of guest text, for messages.
fn shown(text: &str) -> String {
    let mut s: String = text.chars().take(100).collect();
    if s.len() < text.len() {
        s.push('…');
    }
    s
}

// ----- the guest boundary ------------------------------------------------------------------

fn bytes(caller: &mut Caller<'_, Ctx>, ptr: i32, len: i32) -> wasmtime::Result<Vec<u8>> {
    let Some(Extern::Memory(memory)) = caller.get_export("memory") else {
        return Err(wasmtime::Error::msg(
            "the plugin calls a `rota` import but exports no memory named `memory`",
        ));
    };
    let (start, len) = (ptr as u32 as usize, len as u32 as usize);
    memory
        .data(&*caller)
        .get(start..start.saturating_add(len))
        .map(<[u8]>::to_vec)
        .ok_or_else(|| {
            wasmtime::Error::msg(format!(
                "a `rota` import was given bytes {start}..{} outside the plugin's memory",
                start.saturating_add(len)
            ))
        })
}

/// Guest text: `Err` (an `INVALID` answer) if it is not UTF-8.
fn text(
    caller: &mut Caller<'_, Ctx>,
    ptr: i32,
    len: i32,
) -> wasmtime::Result<Result<String, Refused>> {
    Ok(String::from_utf8(bytes(caller, ptr, len)?)
        .map_err(|_| Refused(INVALID, "an argument is not UTF-8 text".into())))
}

/// The imports that take one key or name.
#[derive(Clone, Copy)]
enum KeyCall {
    Secret,
    KvGet,
    KvDelete,
}

/// Adds the `rota` functions to the runs' linker.
pub(super) fn add_to_linker(linker: &mut Linker<Ctx>) -> wasmtime::Result<()> {
    linker.func_wrap_async(
        MODULE,
        "http_request",
        |mut caller: Caller<'_, Ctx>,
         (mp, ml, up, ul, hp, hl, bp, bl): (i32, i32, i32, i32, i32, i32, i32, i32)| {
            Box::new(async move {
                let method = text(&mut caller, mp, ml)?;
                let url = text(&mut caller, up, ul)?;
                let headers = text(&mut caller, hp, hl)?;
                let body = bytes(&mut caller, bp, bl)?;
                let host = &mut caller.data_mut().host;
                let answer = match (method, url, headers) {
                    (Ok(m), Ok(u), Ok(h)) => host.http(&m, &u, &h, body).await,
                    (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => Err(e),
                };
                Ok(match answer {
                    Ok(status) => status,
                    Err(Refused(code, message)) => {
                        host.result = message.into_bytes();
                        code
                    }
                })
            })
        },
    )?;
    linker.func_wrap_async(
        MODULE,
        "http_header",
        |mut caller: Caller<'_, Ctx>, (np, nl): (i32, i32)| {
            Box::new(async move {
                let name = text(&mut caller, np, nl)?;
                let host = &mut caller.data_mut().host;
                let answer = name.and_then(|name| {
                    host.headers
                        .iter()
                        .find(|(k, _)| k.eq_ignore_ascii_case(&name))
                        .map(|(_, v)| v.clone().into_bytes())
                        .ok_or_else(|| Refused(NOT_FOUND, format!("no header `{name}`")))
                });
                Ok(host.settle(answer, len))
            })
        },
    )?;
    for (name, call) in [
        ("secret_get", KeyCall::Secret),
        ("kv_get", KeyCall::KvGet),
        ("kv_delete", KeyCall::KvDelete),
    ] {
        linker.func_wrap_async(
            MODULE,
            name,
            move |mut caller: Caller<'_, Ctx>, (kp, kl): (i32, i32)| {
                Box::new(async move {
                    let key = text(&mut caller, kp, kl)?;
                    let host = &mut caller.data_mut().host;
                    let answer = match (key, call) {
                        (Err(e), _) => Err(e),
                        (Ok(name), KeyCall::Secret) => host.secret(name).await,
                        (Ok(key), KeyCall::KvGet) => host.kv(KvOp::Get, key, None).await,
                        (Ok(key), KeyCall::KvDelete) => host.kv(KvOp::Delete, key, None).await,
                    };
                    Ok(match call {
                        KeyCall::KvDelete => host.settle(answer, |_| 0),
                        _ => host.settle(answer, len),
                    })
                })
            },
        )?;
    }
    linker.func_wrap_async(
        MODULE,
        "kv_set",
        |mut caller: Caller<'_, Ctx>, (kp, kl, vp, vl): (i32, i32, i32, i32)| {
            Box::new(async move {
                let key = text(&mut caller, kp, kl)?;
                let value = bytes(&mut caller, vp, vl)?;
                let host = &mut caller.data_mut().host;
                let answer = match key {
                    Ok(key) => host.kv(KvOp::Set, key, Some(value)).await,
                    Err(e) => Err(e),
                };
                Ok(host.settle(answer, |_| 0))
            })
        },
    )?;
    linker.func_wrap_async(
        MODULE,
        "result_read",
        |mut caller: Caller<'_, Ctx>, (bp, cap): (i32, i32)| {
            Box::new(async move {
                let total = caller.data().host.result.len();
                let n = total.min(cap.max(0) as usize);
                let chunk = caller.data().host.result[..n].to_vec();
                let Some(Extern::Memory(memory)) = caller.get_export("memory") else {
                    return Err(wasmtime::Error::msg(
                        "the plugin calls a `rota` import but exports no memory named `memory`",
                    ));
                };
                memory
                    .write(&mut caller, bp as u32 as usize, &chunk)
                    .map_err(|_| {
                        wasmtime::Error::msg(
                            "`result_read` was given a buffer outside the plugin's memory",
                        )
                    })?;
                Ok(len(total))
            })
        },
    )?;
    linker.func_wrap_async(
        MODULE,
        "output_set",
        |mut caller: Caller<'_, Ctx>, (vp, vl): (i32, i32)| {
            Box::new(async move {
                let value = bytes(&mut caller, vp, vl)?;
                let host = &mut caller.data_mut().host;
                let answer = host.set_output(value);
                Ok(host.settle(answer, |_| 0))
            })
        },
    )?;
    Ok(())
}

/// A length as the guest's return value (results are far below `i32::MAX`: bodies and
/// values are capped).
fn len(n: usize) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}
