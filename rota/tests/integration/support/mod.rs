//! Test bed for end-to-end tests: a scheduler node on port 0, an executor double that speaks
//! the real protocol over real HTTP (signed both ways), and a small API client.
#![allow(dead_code)]

pub mod chaos;
pub mod mariadb;
pub mod netns;
pub mod sink;

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use rota_proto::wire::{PATH_CALLBACK, PATH_HEARTBEAT, PATH_REGISTER};
use rota_proto::*;
use serde_json::{Value, json};
use tokio::net::TcpListener;

pub const SECRET: &[u8] = b"e2e-secret-0123456789";

/// The key of `app`'s executors under the test master secret [`SECRET`].
pub fn app_key(app: &str) -> Secret {
    app_secret(&Secret::new(SECRET), app)
}

/// [`app_key`] as text, for an executor's `ROTA_EXECUTOR_SECRET`.
pub fn app_key_text(app: &str) -> String {
    String::from_utf8(app_key(app).as_bytes().to_vec()).unwrap()
}
pub const TOKEN: &str = "e2e-token";

pub fn now_ms() -> i64 {
    rota_scheduler::model::now_ms()
}

pub fn now_us() -> i64 {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    since.as_micros() as i64
}

/// Waits until `check` returns `Some`, polling; panics with `what` after `timeout`.
pub async fn eventually<T, F, Fut>(timeout: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        if Instant::now() > deadline {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// A small client of the REST API.
#[derive(Clone)]
pub struct Api {
    pub base: String,
    pub http: reqwest::Client,
}

impl Api {
    pub fn new(base: impl Into<String>) -> Self {
        Self::with_client(base, reqwest::Client::new())
    }

    /// A client of the API at `base` through `http` (one that trusts a test CA, say).
    pub fn with_client(base: impl Into<String>, http: reqwest::Client) -> Self {
        Api {
            base: base.into(),
            http,
        }
    }

    /// The node's Prometheus text (`/metrics`).
    pub async fn metrics(&self) -> String {
        self.http
            .get(format!("{}/metrics", self.base))
            .bearer_auth(TOKEN)
            .send()
            .await
            .expect("GET /metrics")
            .text()
            .await
            .expect("the /metrics text")
    }

    pub async fn call(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let mut req = self
            .http
            .request(method, format!("{}{}", self.base, path))
            .bearer_auth(TOKEN);
        if let Some(body) = body {
            req = req.json(&body);
        }
        let resp = req.send().await.expect("API request");
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap_or_default();
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    pub async fn ok(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let (status, v) = self.call(method, path, body).await;
        assert!(
            (200..300).contains(&status),
            "{method} {path} answered {status}: {v}"
        );
        v
    }

    /// Creates `tasks` in one batch (all or nothing) and returns their ids, in order.
    pub async fn add_tasks(&self, tasks: Vec<Value>) -> Vec<i64> {
        let created = self
            .ok("POST", "/api/v1/tasks/batch", Some(json!({"tasks": tasks})))
            .await;
        created["ids"]
            .as_array()
            .expect("the batch's ids")
            .iter()
            .map(|v| v.as_i64().expect("a task id"))
            .collect()
    }

    /// Uploads a `.wat` plugin that does nothing.
    pub async fn upload_plugin(&self, name: &str) {
        self.upload(
            name,
            r#"(module (memory (export "memory") 1) (func (export "_start")))"#,
        )
        .await;
    }

    /// Uploads a plugin (`.wasm` bytes or `.wat` text) under `name`.
    pub async fn upload(&self, name: &str, module: impl Into<reqwest::Body>) {
        let (status, answer) = self.try_upload(name, module).await;
        assert!(
            (200..300).contains(&status),
            "plugin upload: {status} {answer}"
        );
    }

    /// Uploads a plugin under `name`: the status and the answer, whatever they are.
    pub async fn try_upload(&self, name: &str, module: impl Into<reqwest::Body>) -> (u16, Value) {
        let resp = self
            .http
            .post(format!("{}/api/v1/plugins?name={name}", self.base))
            .bearer_auth(TOKEN)
            .body(module)
            .send()
            .await
            .unwrap();
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap_or_default();
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }
}

/// What the double does with the triggers it accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Behaviour {
    /// Report `succeeded` right away (at the scheduled time, never before).
    Succeed,
    /// Report `failed` with exit code 1.
    Fail,
    /// Accept and never report (a run in progress when the executor dies).
    Hang,
    /// Refuse the connection-level work: answer 503 to triggers.
    Refuse,
    /// Like `Succeed`, with this many run slots: a run holds one from its acceptance until
    /// its report is acknowledged. Triggers beyond the free slots are answered `full`, and
    /// every answer says how many are free (`room`).
    Slots(usize),
    /// Like `Succeed`, but each run takes this many milliseconds from its start (its
    /// report says so, and is sent when it ends).
    Takes(u64),
    /// Like `Succeed`, with the run's params (if it has any, else its input) as its output:
    /// the `relay` plugin of the workflow tests, as a double.
    Relay,
    /// Leaves the first trigger request unanswered, as if never read (the executor's
    /// runtime was busy until the node hung up), and takes nothing from it; then `Succeed`.
    UnansweredOnce,
}

#[derive(Debug, Clone)]
pub struct Received {
    pub trigger: Trigger,
    pub received_at: i64,
    /// Epoch microseconds, for lateness measurements.
    pub received_at_us: i64,
    /// The sender's lease, as the batch carried it.
    pub not_after: Option<i64>,
    /// Answered `duplicate`: the double already had this attempt.
    pub duplicate: bool,
}

pub struct DoubleState {
    pub app: String,
    pub address: Mutex<String>,
    pub scheduler: Mutex<String>,
    pub behaviour: Mutex<Behaviour>,
    pub received: Mutex<Vec<Received>>,
    /// (task, attempt, shard) → run id: what this executor "has".
    pub known: Mutex<HashMap<(i64, i32, i32), i64>>,
    /// Runs accepted whose report the scheduler has not acknowledged: what a heartbeat
    /// lists as still here.
    pub active: Mutex<HashSet<i64>>,
    pub bad_signatures: Mutex<u32>,
    /// Runs holding a slot (`Behaviour::Slots`).
    pub busy: Mutex<usize>,
    /// Each trigger request: how many triggers it carried, and the `room` answered.
    pub requests: Mutex<Vec<(usize, Option<u32>)>>,
    replay: ReplayGuard,
    http: reqwest::Client,
}

/// An executor double: real HTTP, real signatures, canned behaviour.
pub struct ExecutorDouble {
    pub state: Arc<DoubleState>,
    server: tokio::task::JoinHandle<()>,
    /// The heartbeat loop, once [`ExecutorDouble::heartbeat_every`] started it.
    heartbeat: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl ExecutorDouble {
    pub async fn start(scheduler: &str, app: &str, behaviour: Behaviour) -> ExecutorDouble {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr: SocketAddr = listener.local_addr().unwrap();
        let state = Arc::new(DoubleState {
            app: app.into(),
            address: Mutex::new(format!("http://{addr}")),
            scheduler: Mutex::new(scheduler.into()),
            behaviour: Mutex::new(behaviour),
            received: Mutex::new(Vec::new()),
            known: Mutex::new(HashMap::new()),
            active: Mutex::new(HashSet::new()),
            bad_signatures: Mutex::new(0),
            busy: Mutex::new(0),
            requests: Mutex::new(Vec::new()),
            replay: ReplayGuard::new(MAX_SKEW_MS),
            http: reqwest::Client::new(),
        });
        let app_router = axum::Router::new()
            .route("/trigger", post(trigger))
            .route("/runs/known", post(runs_known))
            .route("/beat", post(beat))
            .route("/idle-beat", post(idle_beat))
            .route("/kill", post(kill))
            .route("/log", post(log))
            .layer(axum::middleware::from_fn_with_state(state.clone(), signed))
            .with_state(state.clone());
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app_router).await;
        });
        let double = ExecutorDouble {
            state,
            server,
            heartbeat: Mutex::new(None),
        };
        double.register().await;
        double
    }

    pub fn address(&self) -> String {
        self.state.address.lock().unwrap().clone()
    }

    pub fn set_behaviour(&self, b: Behaviour) {
        *self.state.behaviour.lock().unwrap() = b;
    }

    pub fn set_scheduler(&self, url: &str) {
        *self.state.scheduler.lock().unwrap() = url.into();
    }

    pub fn received(&self) -> Vec<Received> {
        self.state.received.lock().unwrap().clone()
    }

    /// How many triggers arrived (cheap: no copy).
    pub fn received_count(&self) -> usize {
        self.state.received.lock().unwrap().len()
    }

    /// Registers with the scheduler.
    pub async fn register(&self) {
        let (status, body) =
            signed_post(&self.state, PATH_REGISTER, &registration(&self.state)).await;
        assert_eq!(status, 200, "register: {body}");
    }

    /// Heartbeats every `every` from now on, as a real executor does, listing the runs it
    /// still has: a trigger the scheduler sent but the double never took (the request
    /// timed out before it was read) is then found lost and retried. Without it, such a
    /// run stays `dispatched` for as long as the executor lives.
    pub fn heartbeat_every(&self, every: Duration) {
        let state = self.state.clone();
        let beat = tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                // A refused or unanswered beat is sent again with the next one.
                signed_post(&state, PATH_HEARTBEAT, &registration(&state)).await;
            }
        });
        if let Some(old) = self.heartbeat.lock().unwrap().replace(beat) {
            old.abort();
        }
    }

    /// Stops answering (the process "dies"): the server task is aborted, and the heartbeat.
    pub fn kill(&self) {
        self.server.abort();
        if let Some(beat) = self.heartbeat.lock().unwrap().take() {
            beat.abort();
        }
    }
}

impl Drop for ExecutorDouble {
    fn drop(&mut self) {
        self.kill();
    }
}

/// What a registration or heartbeat of the double says.
fn registration(state: &DoubleState) -> Registration {
    Registration {
        app: state.app.clone(),
        address: state.address.lock().unwrap().clone(),
        capacity: 100,
        running: 0,
        active_runs: state.active.lock().unwrap().iter().copied().collect(),
    }
}

async fn signed_post<T: serde::Serialize>(
    state: &DoubleState,
    path: &str,
    body: &T,
) -> (u16, String) {
    let body = serde_json::to_vec(body).unwrap();
    let key = app_key(&state.app);
    let signed = sign_now(key.as_bytes(), "POST", path, now_ms(), &body);
    let url = format!("{}{}", state.scheduler.lock().unwrap().clone(), path);
    let mut request = state.http.post(url).header(HEADER_APP, &state.app);
    for (name, value) in signed.pairs() {
        request = request.header(name, value);
    }
    match request
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
    {
        Ok(r) => {
            let s = r.status().as_u16();
            (s, r.text().await.unwrap_or_default())
        }
        Err(e) => (0, e.to_string()),
    }
}

/// `Some(401 answer)` if the request is not signed with the secret.
fn rejected(state: &DoubleState, uri: &Uri, headers: &HeaderMap, body: &[u8]) -> Option<Response> {
    let h = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    // Signed for this executor: its address, then the path.
    let target = format!("{}{}", state.address.lock().unwrap(), uri.path());
    let result = verify_once(
        &state.replay,
        app_key(&state.app).as_bytes(),
        "POST",
        &target,
        &rota_proto::Received::from_headers(h),
        body,
        now_ms(),
    );
    let error = result.err()?;
    *state.bad_signatures.lock().unwrap() += 1;
    Some(
        (
            StatusCode::UNAUTHORIZED,
            axum::Json(json!({"error": error.to_string()})),
        )
            .into_response(),
    )
}

/// Every call from the scheduler must be signed with the secret: checked once, here.
async fn signed(
    State(state): State<Arc<DoubleState>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let (parts, body) = request.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, usize::MAX).await else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    if let Some(r) = rejected(&state, &parts.uri, &parts.headers, &bytes) {
        return r;
    }
    next.run(axum::extract::Request::from_parts(
        parts,
        axum::body::Body::from(bytes),
    ))
    .await
}

async fn trigger(State(state): State<Arc<DoubleState>>, body: Bytes) -> Response {
    let behaviour = *state.behaviour.lock().unwrap();
    if behaviour == Behaviour::Refuse {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            axum::Json(json!({"error": "refusing"})),
        )
            .into_response();
    }
    if behaviour == Behaviour::UnansweredOnce {
        *state.behaviour.lock().unwrap() = Behaviour::Succeed;
        state.requests.lock().unwrap().push((0, None));
        // The node times out first, and this future is dropped with its connection.
        tokio::time::sleep(Duration::from_secs(60)).await;
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    }
    let batch: TriggerBatch = match serde_json::from_slice(&body) {
        Ok(b) => b,
        Err(e) => {
            return (
                StatusCode::BAD_REQUEST,
                axum::Json(json!({"error": e.to_string()})),
            )
                .into_response();
        }
    };
    let now_us = now_us();
    let now = now_us / 1000;
    let mut acks = Vec::new();
    let mut accepted = Vec::new();
    let carried = batch.triggers.len();
    let room = {
        let mut known = state.known.lock().unwrap();
        let mut received = state.received.lock().unwrap();
        let mut busy = state.busy.lock().unwrap();
        for t in batch.triggers {
            // Like the real executor: past the sender's lease nothing is taken.
            if batch.not_after.is_some_and(|limit| now > limit) {
                acks.push(TriggerAck {
                    run_id: t.run_id,
                    outcome: TriggerOutcome::Expired,
                });
                continue;
            }
            if let Behaviour::Slots(slots) = behaviour
                && *busy >= slots
            {
                acks.push(TriggerAck {
                    run_id: t.run_id,
                    outcome: TriggerOutcome::Full,
                });
                continue;
            }
            let key = (t.task_id, t.attempt, t.shard_index);
            received.push(Received {
                trigger: t.clone(),
                received_at: now,
                received_at_us: now_us,
                not_after: batch.not_after,
                duplicate: known.contains_key(&key),
            });
            if known.contains_key(&key) {
                acks.push(TriggerAck {
                    run_id: t.run_id,
                    outcome: TriggerOutcome::Duplicate,
                });
                continue;
            }
            if let Behaviour::Slots(_) = behaviour {
                *busy += 1;
            }
            known.insert(key, t.run_id);
            state.active.lock().unwrap().insert(t.run_id);
            acks.push(TriggerAck {
                run_id: t.run_id,
                outcome: TriggerOutcome::Accepted,
            });
            accepted.push(t);
        }
        match behaviour {
            Behaviour::Slots(slots) => Some(u32::try_from(slots - *busy).unwrap()),
            _ => None,
        }
    };
    state.requests.lock().unwrap().push((carried, room));
    if behaviour != Behaviour::Hang && !accepted.is_empty() {
        let state = state.clone();
        tokio::spawn(async move {
            let latest = accepted.iter().map(|t| t.scheduled_at).max().unwrap_or(0);
            let wait = latest - now_ms();
            if wait > 0 {
                tokio::time::sleep(Duration::from_millis(wait as u64)).await;
            }
            let address = state.address.lock().unwrap().clone();
            let started = now_ms();
            if let Behaviour::Takes(ms) = behaviour {
                tokio::time::sleep(Duration::from_millis(ms)).await;
            }
            let at = now_ms();
            let reports: Vec<RunReport> = accepted
                .iter()
                .map(|t| RunReport {
                    run_id: t.run_id,
                    job_id: t.job_id,
                    task_id: t.task_id,
                    attempt: t.attempt,
                    shard_index: t.shard_index,
                    shard_total: t.shard_total,
                    executor: address.clone(),
                    scheduled_at: t.scheduled_at,
                    dispatched_at: t.dispatched_at,
                    started_at: Some(started.max(t.scheduled_at)),
                    finished_at: Some(at.max(t.scheduled_at)),
                    status: if behaviour == Behaviour::Fail {
                        ReportStatus::Failed
                    } else {
                        ReportStatus::Succeeded
                    },
                    exit_code: Some(if behaviour == Behaviour::Fail { 1 } else { 0 }),
                    message: (behaviour == Behaviour::Fail).then(|| "exit status 1".to_owned()),
                    output: (behaviour == Behaviour::Relay)
                        .then(|| t.params.clone().unwrap_or_else(|| t.input.clone())),
                    traceparent: None,
                })
                .collect();
            // Retry like a real executor (which spools) until the scheduler acknowledges:
            // up to five minutes, for schedulers slowed down by the chaos tests.
            for _ in 0..6_000 {
                let (status, _) = signed_post(
                    &state,
                    PATH_CALLBACK,
                    &CallbackBatch {
                        reports: reports.clone(),
                    },
                )
                .await;
                if status == 200 {
                    let mut active = state.active.lock().unwrap();
                    for r in &reports {
                        active.remove(&r.run_id);
                    }
                    drop(active);
                    if let Behaviour::Slots(_) = behaviour {
                        *state.busy.lock().unwrap() -= reports.len();
                    }
                    return;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        });
    }
    axum::Json(TriggerBatchAck { acks, room }).into_response()
}

async fn runs_known(
    State(state): State<Arc<DoubleState>>,
    Json(req): Json<RunsKnownRequest>,
) -> Response {
    let known = state.known.lock().unwrap();
    let out = req
        .runs
        .iter()
        .filter_map(|a| {
            known
                .get(&(a.task_id, a.attempt, 0))
                .map(|&run_id| KnownRun {
                    task_id: a.task_id,
                    attempt: a.attempt,
                    run_id,
                    shard_index: 0,
                })
        })
        .collect();
    axum::Json(RunsKnownAck { known: out }).into_response()
}

async fn beat() -> Response {
    axum::Json(BeatAck {
        running: 0,
        capacity: 100,
    })
    .into_response()
}

async fn idle_beat(
    State(state): State<Arc<DoubleState>>,
    Json(req): Json<IdleBeatRequest>,
) -> Response {
    // A hanging double is still running every job it was given.
    let hanging = *state.behaviour.lock().unwrap() == Behaviour::Hang;
    let runs_it = state
        .received
        .lock()
        .unwrap()
        .iter()
        .any(|r| r.trigger.job_id == req.job_id);
    axum::Json(IdleBeatAck {
        idle: !(hanging && runs_it),
    })
    .into_response()
}

async fn kill() -> Response {
    axum::Json(KillAck {
        killed: false,
        message: "the double runs nothing".into(),
    })
    .into_response()
}

async fn log(Json(req): Json<LogRequest>) -> Response {
    let lines = if req.from_line <= 1 {
        vec![format!("run {} says hello", req.run_id)]
    } else {
        vec![]
    };
    let next_line = req.from_line + lines.len() as u64;
    axum::Json(LogPage {
        lines,
        next_line,
        complete: true,
    })
    .into_response()
}

/// A scheduler node running in this process on `127.0.0.1:0`.
pub struct TestServer {
    pub url: String,
    pub api: Api,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    handle: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
}

impl TestServer {
    pub async fn start(
        database_url: &str,
        tweak: impl FnOnce(&mut rota_scheduler::Config),
    ) -> TestServer {
        Self::start_on("127.0.0.1:0", database_url, tweak).await
    }

    /// A node listening on `addr` (port 0: one of its choosing), e.g. a test network's host
    /// side, or the address of a node being restarted.
    pub async fn start_on(
        addr: &str,
        database_url: &str,
        tweak: impl FnOnce(&mut rota_scheduler::Config),
    ) -> TestServer {
        let listener = TcpListener::bind(addr).await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let mut config = rota_scheduler::Config::new(database_url, Secret::new(SECRET));
        config.api_token = Some(TOKEN.into());
        config.advertise_url = url.clone();
        config.node_name = url.clone();
        config.egress =
            rota_net::egress::Policy::new(&[TEST_EGRESS_ALLOW.to_owned()], &[]).unwrap();
        tweak(&mut config);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let handle = tokio::spawn(rota_scheduler::run(config, listener, async move {
            let _ = stopped.await;
        }));
        let api = Api::new(url.clone());
        let probe = api.clone();
        eventually(
            Duration::from_secs(20),
            "the scheduler to answer /healthz",
            || {
                let probe = probe.clone();
                async move { (probe.call("GET", "/healthz", None).await.0 == 200).then_some(()) }
            },
        )
        .await;
        TestServer {
            url,
            api,
            stop: Some(stop),
            handle: Some(handle),
        }
    }

    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(h) = self.handle.take() {
            h.await.unwrap().unwrap();
        }
    }
}

/// A fresh SQLite database URL in a temporary directory (kept alive by the returned guard).
/// An RFC 3339 time from the API, in epoch ms.
pub fn epoch_ms(v: &Value) -> i64 {
    chrono::DateTime::parse_from_rfc3339(v.as_str().expect("an RFC 3339 time"))
        .expect("an RFC 3339 time")
        .timestamp_millis()
}

pub fn sqlite_url() -> (String, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    (
        format!("sqlite:{}", dir.path().join("rota.db").display()),
        dir,
    )
}

/// A child process killed when dropped, so a failing test leaves nothing running (an
/// orphan holding the test's stderr would keep CI waiting). One that writes a log shows
/// the log's tail when a failing test drops it. The log is read through a handle opened
/// at the start: the test's temporary directory, which holds it, may be gone by then.
pub struct KillOnDrop(
    pub std::process::Child,
    Option<(std::path::PathBuf, std::fs::File)>,
);

/// How much of a process's log a failing test shows: its last lines, of its last bytes.
const LOG_TAIL_LINES: usize = 80;
const LOG_TAIL_BYTES: u64 = 64 * 1024;

impl KillOnDrop {
    pub fn new(child: std::process::Child) -> Self {
        KillOnDrop(child, None)
    }

    /// A process writing its log to `log`.
    pub fn logged(child: std::process::Child, log: &std::path::Path) -> Self {
        let reader = std::fs::File::open(log).ok();
        KillOnDrop(child, reader.map(|f| (log.to_owned(), f)))
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
        if !std::thread::panicking() {
            return;
        }
        if let Some((path, file)) = self.1.as_mut() {
            use std::io::{Read, Seek, SeekFrom};
            let len = file.metadata().map(|m| m.len()).unwrap_or(0);
            let mut bytes = Vec::new();
            let read = file
                .seek(SeekFrom::Start(len.saturating_sub(LOG_TAIL_BYTES)))
                .and_then(|_| file.read_to_end(&mut bytes));
            if let Err(e) = read {
                eprintln!("--- {} could not be read: {e}", path.display());
                return;
            }
            let text = String::from_utf8_lossy(&bytes);
            let lines: Vec<&str> = text.lines().collect();
            let tail = &lines[lines.len().saturating_sub(LOG_TAIL_LINES)..];
            eprintln!(
                "--- the last {} lines of {} ---\n{}",
                tail.len(),
                path.display(),
                tail.join("\n")
            );
        }
    }
}

/// A port nobody listens on right now (for processes that take `--listen`).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The explicit, test-only egress allowance every node these tests start is given: their
/// receivers (webhook sinks, alarm hooks, the order service plugins call) listen on
/// 127.0.0.1, which the policy denies by default. The node's own ports and its database
/// stay denied whatever it opens; the egress tests (`rota/tests/integration/egress.rs`) start nodes
/// without it, or with an exception of their own, by passing `ROTA_EGRESS_ALLOW` in `env`.
pub const TEST_EGRESS_ALLOW: &str = "127.0.0.1";

/// `rota standalone` (the real binary) on port 0 with its own data directory.
pub struct Standalone {
    pub child: KillOnDrop,
    pub api: Api,
}

impl Standalone {
    pub fn start(data_dir: &std::path::Path) -> Standalone {
        Standalone::start_with_env(data_dir, &[])
    }

    /// [`Standalone::start`] with more environment variables.
    pub fn start_with_env(data_dir: &std::path::Path, env: &[(&str, &str)]) -> Standalone {
        let mut child = Command::new(env!("CARGO_BIN_EXE_rota"))
            .args(["standalone", "--data-dir"])
            .arg(data_dir)
            .args(["--listen", "127.0.0.1:0"])
            .env("ROTA_API_TOKEN", TOKEN)
            .env("ROTA_LOG", "warn")
            .env("ROTA_EGRESS_ALLOW", TEST_EGRESS_ALLOW)
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("starting rota standalone");
        let stdout = child.stdout.take().unwrap();
        let mut reader = BufReader::new(stdout);
        let mut first = String::new();
        reader.read_line(&mut first).unwrap();
        // Keep draining what it prints after the first line.
        std::thread::spawn(move || std::io::copy(&mut reader, &mut std::io::sink()));
        let url = first
            .split_whitespace()
            .find(|w| w.starts_with("http://"))
            .unwrap_or_else(|| panic!("no URL in the first line: {first}"))
            .trim_end_matches(',')
            .to_owned();
        Standalone {
            child: KillOnDrop::new(child),
            api: Api::new(url),
        }
    }
}

/// Waits until the embedded executor has registered.
pub async fn wait_ready(api: &Api) {
    eventually(
        Duration::from_secs(30),
        "the embedded executor to register",
        || async {
            let (status, v) = api.call("GET", "/api/v1/executors", None).await;
            (status == 200 && !v["items"].as_array().unwrap().is_empty()).then_some(())
        },
    )
    .await;
}

/// Waits until `n` executors are registered.
pub async fn wait_executors(api: &Api, n: usize) {
    eventually(
        Duration::from_secs(30),
        "the executors to register",
        || async { (executor_count(api).await == n).then_some(()) },
    )
    .await;
}

/// Starts `rota server` (node `node_name`) on `db` at 127.0.0.1:`port`, logging to `log`.
pub fn spawn_server(db: &str, port: u16, log: &std::path::Path, node_name: &str) -> KillOnDrop {
    spawn_server_env(db, port, log, node_name, &[])
}

/// [`spawn_server`] with extra environment variables (settings).
pub fn spawn_server_env(
    db: &str,
    port: u16,
    log: &std::path::Path,
    node_name: &str,
    env: &[(&str, &str)],
) -> KillOnDrop {
    spawn_server_at(None, db, &format!("127.0.0.1:{port}"), log, node_name, env)
}

/// [`spawn_server_env`] listening on `listen`, inside network namespace `netns` when given.
pub fn spawn_server_at(
    netns: Option<&str>,
    db: &str,
    listen: &str,
    log: &std::path::Path,
    node_name: &str,
    env: &[(&str, &str)],
) -> KillOnDrop {
    let log_path = log;
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap();
    let child = rota_command(netns)
        .args([
            "server",
            "--database-url",
            db,
            "--listen",
            listen,
            "--node-name",
            node_name,
        ])
        .env("ROTA_EXECUTOR_SECRET", std::str::from_utf8(SECRET).unwrap())
        .env("ROTA_API_TOKEN", TOKEN)
        .env("ROTA_LOG", "info")
        .env("ROTA_EGRESS_ALLOW", TEST_EGRESS_ALLOW)
        .envs(env.iter().copied())
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .spawn()
        .expect("starting rota server");
    KillOnDrop::logged(child, log_path)
}

/// What the console's `POST /login` answered: its status, its session cookie (if it signed in), its
/// page.
pub struct SignedIn {
    pub status: reqwest::StatusCode,
    pub cookie: Option<String>,
    pub page: String,
}

pub async fn console_sign_in(base: &str, user: &str, password: &str) -> SignedIn {
    let resp = no_redirects()
        .post(format!("{base}/login"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(
            url::form_urlencoded::Serializer::new(String::new())
                .append_pair("user", user)
                .append_pair("password", password)
                .finish(),
        )
        .send()
        .await
        .unwrap();
    let status = resp.status();
    let cookie = resp
        .headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|v| v.starts_with("rota_session="))
        .map(|c| c.split(';').next().unwrap().to_owned());
    SignedIn {
        status,
        cookie,
        page: resp.text().await.unwrap(),
    }
}

pub fn no_redirects() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// Waits until a server answers `/healthz`.
pub async fn wait_healthy(api: &Api) {
    eventually(
        Duration::from_secs(30),
        "rota server to answer /healthz",
        || async {
            // Through the API's own client (one that trusts a test CA, say); refused
            // connections are the server not listening yet.
            let ok = api
                .http
                .get(format!("{}/healthz", api.base))
                .send()
                .await
                .map(|r| r.status().is_success());
            ok.unwrap_or(false).then_some(())
        },
    )
    .await;
}

/// Live executors the API lists.
pub async fn executor_count(api: &Api) -> usize {
    api.ok("GET", "/api/v1/executors", None).await["items"]
        .as_array()
        .unwrap()
        .len()
}

/// Attempts with more than one run row (there must be none: one run per attempt).
pub async fn attempts_with_several_runs(pool: &sqlx::MySqlPool) -> i64 {
    sqlx::query_scalar(
        "SELECT COUNT(*) FROM (SELECT task_id FROM runs GROUP BY task_id, attempt HAVING COUNT(*) > 1) d",
    )
    .fetch_one(pool)
    .await
    .unwrap()
}

/// How many times each (task, attempt) reached these executor doubles.
pub fn sends_per_attempt(executors: &[&ExecutorDouble]) -> HashMap<(i64, i32), usize> {
    let mut sends = HashMap::new();
    for e in executors {
        for r in e.received() {
            *sends
                .entry((r.trigger.task_id, r.trigger.attempt))
                .or_default() += 1;
        }
    }
    sends
}

/// A small order service on 127.0.0.1 for the host-capability tests: `GET /orders/{id}`
/// answers `{"paid": …}` (orders in `paid` are paid), `POST /orders/{id}/close` records the
/// close and its `Authorization` header, `GET /big` answers 2 MiB.
pub struct OrderService {
    pub url: String,
    pub paid: Vec<i64>,
    state: Arc<Mutex<OrderLog>>,
}

#[derive(Default)]
pub struct OrderLog {
    /// (order id, Authorization header) of every close.
    pub closed: Vec<(i64, Option<String>)>,
    /// Every request's method and path, in order.
    pub requests: Vec<String>,
}

impl OrderService {
    pub async fn start(paid: &[i64]) -> OrderService {
        use axum::extract::Path;
        use axum::routing::get;
        let state = Arc::new(Mutex::new(OrderLog::default()));
        let paid_list = paid.to_vec();
        let app = axum::Router::new()
            .route(
                "/orders/{id}",
                get({
                    let state = state.clone();
                    move |Path(id): Path<i64>| async move {
                        state
                            .lock()
                            .unwrap()
                            .requests
                            .push(format!("GET /orders/{id}"));
                        axum::Json(json!({"order_id": id, "paid": paid_list.contains(&id)}))
                    }
                }),
            )
            .route(
                "/orders/{id}/close",
                post({
                    let state = state.clone();
                    move |Path(id): Path<i64>, headers: HeaderMap| async move {
                        let auth = headers
                            .get("authorization")
                            .and_then(|v| v.to_str().ok())
                            .map(str::to_owned);
                        let mut s = state.lock().unwrap();
                        s.requests.push(format!("POST /orders/{id}/close"));
                        s.closed.push((id, auth));
                        axum::Json(json!({"closed": id}))
                    }
                }),
            )
            .route("/big", get(|| async { vec![b'x'; 2 << 20] }));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        OrderService {
            url,
            paid: paid.to_vec(),
            state,
        }
    }

    pub fn log(&self) -> std::sync::MutexGuard<'_, OrderLog> {
        self.state.lock().unwrap()
    }
}

/// A run's log lines, through the API.
/// Task `task`'s runs, by attempt then shard.
pub async fn task_runs(api: &Api, task: i64) -> Vec<Value> {
    let mut runs = api
        .ok("GET", &format!("/api/v1/runs?task={task}"), None)
        .await["items"]
        .as_array()
        .unwrap()
        .clone();
    runs.sort_by_key(|r| (r["attempt"].as_i64(), r["shard_index"].as_i64()));
    runs
}

pub async fn run_log(api: &Api, run_id: i64) -> Vec<String> {
    api.ok("GET", &format!("/api/v1/runs/{run_id}/log"), None)
        .await["lines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_str().unwrap().to_owned())
        .collect()
}

/// Waits until task `id` reaches `status`; returns the task. Panics after a minute with
/// the task and its runs.
pub async fn task_reaches(api: &Api, id: i64, status: &str) -> Value {
    task_reaches_within(api, id, status, Duration::from_secs(60)).await
}

/// [`task_reaches`], waiting up to `wait` (a first run that compiles a Python or
/// JavaScript component on a busy test machine takes minutes in a debug build).
pub async fn task_reaches_within(api: &Api, id: i64, status: &str, wait: Duration) -> Value {
    let deadline = Instant::now() + wait;
    loop {
        let t = api.ok("GET", &format!("/api/v1/tasks/{id}"), None).await;
        if t["status"] == status {
            return t;
        }
        if Instant::now() > deadline {
            let runs = api
                .ok("GET", &format!("/api/v1/runs?task={id}"), None)
                .await;
            let secs = wait.as_secs();
            panic!("task {id} is not {status} after {secs} s: {t}\nruns: {runs}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The `rota` binary, run inside network namespace `netns` when given (`ip netns exec`
/// execs it: the child's pid is rota's own, for signals).
fn rota_command(netns: Option<&str>) -> Command {
    match netns {
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns, env!("CARGO_BIN_EXE_rota")]);
            c
        }
        None => Command::new(env!("CARGO_BIN_EXE_rota")),
    }
}

/// Makes `cmd` (a `rota` binary, or one run inside a namespace) a `rota executor` of
/// `app`: signing with the app's key from the test secret, reporting to `scheduler`,
/// listening on `listen`, keeping its data in `data_dir`, the egress policy opened for the
/// tests' loopback, warnings logged, stdout dropped. Every test and bench starts its
/// executors through here and adds what it needs (TLS flags, a capacity, its log file).
pub fn executor_setup<'c>(
    cmd: &'c mut Command,
    app: &str,
    scheduler: &str,
    listen: &str,
    data_dir: &std::path::Path,
) -> &'c mut Command {
    cmd.args(["executor", "--scheduler", scheduler, "--app", app])
        .args(["--listen", listen])
        .arg("--data-dir")
        .arg(data_dir)
        .env("ROTA_EXECUTOR_SECRET", app_key_text(app))
        .env("ROTA_EGRESS_ALLOW", TEST_EGRESS_ALLOW)
        .env("ROTA_LOG", "warn")
        .stdout(Stdio::null())
}

/// A real `rota executor` for app `default`, signing with the test secret, listening on
/// `listen`; inside network namespace `netns` when given. Its log goes to `log` at the
/// given level (`Some((path, "debug"))`), or nowhere.
pub fn spawn_executor(
    netns: Option<&str>,
    scheduler: &str,
    listen: &str,
    data_dir: &std::path::Path,
    log: Option<(&std::path::Path, &str)>,
) -> KillOnDrop {
    spawn_executor_env(netns, scheduler, listen, data_dir, log, &[])
}

/// [`spawn_executor`] with extra environment variables.
pub fn spawn_executor_env(
    netns: Option<&str>,
    scheduler: &str,
    listen: &str,
    data_dir: &std::path::Path,
    log: Option<(&std::path::Path, &str)>,
    env: &[(&str, &str)],
) -> KillOnDrop {
    let mut cmd = rota_command(netns);
    executor_setup(&mut cmd, "default", scheduler, listen, data_dir)
        .env("ROTA_LOG", log.map_or("warn", |(_, level)| level))
        .envs(env.iter().copied());
    match log {
        Some((path, _)) => cmd.stderr(std::fs::File::create(path).unwrap()),
        None => cmd.stderr(Stdio::null()),
    };
    let child = cmd.spawn().expect("starting rota executor");
    match log {
        Some((path, _)) => KillOnDrop::logged(child, path),
        None => KillOnDrop::new(child),
    }
}

/// A database several nodes share: a fresh MariaDB/MySQL database of its own when
/// `ROTA_TEST_MYSQL_URL` is set (dropped at the end), else one SQLite file.
pub struct SharedDb {
    pub url: String,
    pub mysql: Option<rota_testkit::MysqlDb>,
    _dir: Option<tempfile::TempDir>,
}

impl SharedDb {
    pub async fn new() -> SharedDb {
        match rota_testkit::mysql_base_url() {
            Some(base) => {
                let db = rota_testkit::MysqlDb::create_on(&base, "rota_cl").await;
                SharedDb {
                    url: db.url.clone(),
                    mysql: Some(db),
                    _dir: None,
                }
            }
            None => {
                let (url, dir) = sqlite_url();
                SharedDb {
                    url,
                    mysql: None,
                    _dir: Some(dir),
                }
            }
        }
    }

    pub async fn drop_db(self) {
        if let Some(db) = self.mysql {
            db.drop_db().await;
        }
    }
}

/// How many tasks have database status `status` (`ready`, `claimed`, …: states the API
/// folds into `pending`) in the SQLite database of a standalone node at `data_dir`, read
/// beside the running node.
pub async fn tasks_in_status(data_dir: &std::path::Path, status: &str) -> i64 {
    let url = format!("sqlite:{}", data_dir.join("rota.db").display());
    let db = sqlx::SqlitePool::connect(&url)
        .await
        .expect("the node's SQLite database");
    let n = sqlx::query_scalar("SELECT COUNT(*) FROM tasks WHERE status = ?")
        .bind(status)
        .fetch_one(&db)
        .await
        .expect("counting tasks");
    db.close().await;
    n
}

/// Waits until `n` tasks of the standalone node at `data_dir` have database status `status`.
pub async fn wait_tasks_in_status(data_dir: &std::path::Path, status: &str, n: i64) {
    eventually(
        Duration::from_secs(20),
        &format!("{n} task(s) {status}"),
        || async { (tasks_in_status(data_dir, status).await == n).then_some(()) },
    )
    .await;
}

/// A tmpfs of its own (needs root), unmounted when dropped: a disk that fills up.
pub struct SmallDisk {
    dir: tempfile::TempDir,
}

impl SmallDisk {
    pub fn mount(mib: u32) -> Option<SmallDisk> {
        let dir = tempfile::tempdir().unwrap();
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={mib}m"), "tmpfs"])
            .arg(dir.path())
            .status()
            .is_ok_and(|s| s.success());
        mounted.then_some(SmallDisk { dir })
    }

    pub fn path(&self) -> &std::path::Path {
        self.dir.path()
    }

    pub fn grow(&self, mib: u32) {
        let ok = Command::new("mount")
            .args(["-o", &format!("remount,size={mib}m")])
            .arg(self.dir.path())
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "growing the tmpfs");
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

/// Nodes n1, n2 and n3 on `url`, logging into `dir`, each healthy.
pub async fn three_nodes(
    url: &str,
    dir: &std::path::Path,
    env: &[(&str, &str)],
) -> (Vec<KillOnDrop>, Vec<Api>) {
    let mut nodes = Vec::new();
    let mut apis = Vec::new();
    for name in chaos::NODES {
        let port = free_port();
        let log = dir.join(format!("{name}.log"));
        nodes.push(spawn_server_env(url, port, &log, name, env));
        let api = Api::new(format!("http://127.0.0.1:{port}"));
        wait_healthy(&api).await;
        apis.push(api);
    }
    (nodes, apis)
}

/// Three nodes on a MariaDB database of their own, for the chaos of one of them dying: a
/// take-over 5 s after ([`chaos::DEAD_AFTER_MS`]), and executor doubles, which register
/// once and never heartbeat, never declared dead.
pub struct ThreeNodes {
    pub db: SharedDb,
    /// The nodes' logs.
    pub dir: tempfile::TempDir,
    pub nodes: Vec<KillOnDrop>,
    pub apis: Vec<Api>,
}

impl ThreeNodes {
    /// `None` (reported missing, a failure under `CI=true`) without MariaDB.
    pub async fn start() -> Option<ThreeNodes> {
        if rota_testkit::mysql_base_url().is_none() {
            rota_testkit::missing("ROTA_TEST_MYSQL_URL is not set: three nodes need MariaDB");
            return None;
        }
        let db = SharedDb::new().await;
        let dir = tempfile::tempdir().unwrap();
        let (nodes, apis) = three_nodes(
            &db.url,
            dir.path(),
            &[
                ("ROTA_NODE_DEAD_AFTER_MS", &chaos::DEAD_AFTER_MS.to_string()),
                ("ROTA_EXECUTOR_DEAD_AFTER_MS", "3600000"),
            ],
        )
        .await;
        Some(ThreeNodes {
            db,
            dir,
            nodes,
            apis,
        })
    }
}
