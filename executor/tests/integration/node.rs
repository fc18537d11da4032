//! An executor node end to end over signed HTTP, against a minimal scheduler double
//! (register, heartbeat, deregister, callback, plugin download; every request's signature
//! checked).

use crate::common;

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::extract::{Path as UrlPath, Request, State};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use rota_executor::{ExecutorConfig, run};
use rota_proto::wire::{
    PATH_CALLBACK, PATH_DEREGISTER, PATH_HEARTBEAT, PATH_IDLE_BEAT, PATH_KILL, PATH_LOG,
    PATH_REGISTER, PATH_RUNS_KNOWN, PATH_TRIGGER, PATH_WARM,
};
use rota_proto::{
    BlockStrategy, CallbackAck, CallbackBatch, Deregistration, KillAck, KillRequest, LogPage,
    LogRequest, PluginRef, Registration, RegistrationAck, ReportStatus, RunReport, RunsKnownAck,
    RunsKnownRequest, Secret, TaskAttempt, Trigger, TriggerBatch, TriggerBatchAck, TriggerOutcome,
    WarmRequest,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

const SECRET: &[u8] = b"test secret";

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// What the scheduler double saw.
#[derive(Default)]
struct Double {
    plugins: Mutex<HashMap<String, Vec<u8>>>,
    registrations: Mutex<Vec<Registration>>,
    heartbeats: AtomicUsize,
    deregistrations: Mutex<Vec<Deregistration>>,
    reports: Mutex<Vec<RunReport>>,
    callback_calls: AtomicUsize,
    /// While set, callbacks answer 503 (a scheduler restarting).
    refuse_callbacks: AtomicBool,
    bad_signatures: AtomicUsize,
    plugin_downloads: AtomicUsize,
    /// While it holds `Some(sha)`, a download of that plugin waits until it is taken.
    held_download: std::sync::Mutex<Option<String>>,
    download_released: tokio::sync::Notify,
    replay: rota_proto::ReplayGuard,
}

impl Double {
    fn add_plugin(&self, wat: &str) -> PluginRef {
        let (wasm, sha256) = common::compiled(wat);
        self.plugins.lock().unwrap().insert(sha256.clone(), wasm);
        PluginRef {
            name: "fixture".into(),
            sha256,
        }
    }

    fn reports(&self) -> Vec<RunReport> {
        self.reports.lock().unwrap().clone()
    }

    /// The final report of a run, if one arrived.
    fn final_of(&self, run_id: i64) -> Option<RunReport> {
        self.reports()
            .into_iter()
            .find(|r| r.run_id == run_id && r.status.is_final())
    }
}

async fn check_signature(
    State(double): State<Arc<Double>>,
    request: Request,
    next: Next,
) -> Response {
    let (parts, body) = request.into_parts();
    let body = axum::body::to_bytes(body, 64 << 20).await.unwrap();
    let target = parts.uri.path_and_query().unwrap().as_str().to_owned();
    let header = |name: &str| parts.headers.get(name).and_then(|v| v.to_str().ok());
    let verified = rota_proto::verify_once(
        &double.replay,
        SECRET,
        parts.method.as_str(),
        &target,
        &rota_proto::Received::from_headers(header),
        &body,
        now_ms(),
    );
    // The executor names its app in every request.
    if verified.is_err() || header(rota_proto::HEADER_APP) != Some("default") {
        double.bad_signatures.fetch_add(1, Ordering::SeqCst);
        return StatusCode::UNAUTHORIZED.into_response();
    }
    next.run(Request::from_parts(parts, Body::from(body))).await
}

fn ack() -> Json<RegistrationAck> {
    Json(RegistrationAck {
        heartbeat_interval_ms: 200,
        plugins: Vec::new(),
        scheduler_time_ms: None,
        scheduler_received_ms: None,
        scheduler_time_us: None,
        scheduler_received_us: None,
    })
}

async fn start_double() -> (Arc<Double>, String) {
    let double = Arc::new(Double::default());
    let app = Router::new()
        .route(
            PATH_REGISTER,
            post(
                |State(d): State<Arc<Double>>, Json(r): Json<Registration>| async move {
                    d.registrations.lock().unwrap().push(r);
                    ack()
                },
            ),
        )
        .route(
            PATH_HEARTBEAT,
            post(
                |State(d): State<Arc<Double>>, Json(_): Json<Registration>| async move {
                    d.heartbeats.fetch_add(1, Ordering::SeqCst);
                    ack()
                },
            ),
        )
        .route(
            PATH_DEREGISTER,
            post(
                |State(d): State<Arc<Double>>, Json(r): Json<Deregistration>| async move {
                    d.deregistrations.lock().unwrap().push(r);
                    StatusCode::NO_CONTENT
                },
            ),
        )
        .route(
            PATH_CALLBACK,
            post(
                |State(d): State<Arc<Double>>, Json(batch): Json<CallbackBatch>| async move {
                    d.callback_calls.fetch_add(1, Ordering::SeqCst);
                    if d.refuse_callbacks.load(Ordering::SeqCst) {
                        return StatusCode::SERVICE_UNAVAILABLE.into_response();
                    }
                    let accepted = batch.reports.len() as u32;
                    d.reports.lock().unwrap().extend(batch.reports);
                    Json(CallbackAck { accepted }).into_response()
                },
            ),
        )
        .route(
            "/api/executor/v1/plugins/{sha256}",
            get(
                |State(d): State<Arc<Double>>, UrlPath(sha): UrlPath<String>| async move {
                    d.plugin_downloads.fetch_add(1, Ordering::SeqCst);
                    let released = d.download_released.notified();
                    let held = d.held_download.lock().unwrap().as_deref() == Some(sha.as_str());
                    if held {
                        released.await;
                    }
                    match d.plugins.lock().unwrap().get(&sha) {
                        Some(wasm) => wasm.clone().into_response(),
                        None => StatusCode::NOT_FOUND.into_response(),
                    }
                },
            ),
        )
        .layer(middleware::from_fn_with_state(
            double.clone(),
            check_signature,
        ))
        .with_state(double.clone());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (double, url)
}

struct Executor {
    url: String,
    stop: CancellationToken,
    task: JoinHandle<anyhow::Result<()>>,
    http: reqwest::Client,
}

async fn start_executor(
    scheduler: &str,
    data_dir: &Path,
    tweak: impl FnOnce(&mut ExecutorConfig),
) -> Executor {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr: SocketAddr = listener.local_addr().unwrap();
    let url = format!("http://{addr}");
    let mut config = ExecutorConfig::new(
        vec![scheduler.to_owned()],
        "default",
        url.clone(),
        Secret::new(SECRET),
        data_dir,
    );
    config.capacity = 4;
    config.queue = 100;
    config.memory_cap_mb = 64;
    config.drain_grace = Duration::from_secs(2);
    tweak(&mut config);
    let stop = CancellationToken::new();
    let shutdown = stop.clone();
    let task = tokio::spawn(run(
        config,
        listener,
        async move { shutdown.cancelled().await },
    ));
    Executor {
        url,
        stop,
        task,
        http: reqwest::Client::new(),
    }
}

impl Executor {
    async fn call_raw(
        &self,
        path: &str,
        body: Vec<u8>,
        secret: Option<&[u8]>,
    ) -> reqwest::Response {
        let mut request = self
            .http
            .post(format!("{}{path}", self.url))
            .header("content-type", "application/json");
        if let Some(secret) = secret {
            let signed = rota_proto::sign_now(secret, "POST", &self.target(path), now_ms(), &body);
            for (name, value) in signed.pairs() {
                request = request.header(name, value);
            }
        }
        request.body(body).send().await.unwrap()
    }

    /// What a scheduler signs for `path` on this executor: its address and the path.
    fn target(&self, path: &str) -> String {
        format!("{}{path}", self.url)
    }

    /// Signs a POST of `body` to `path` here with the test secret, as sent at `at`.
    fn sign(&self, path: &str, at: i64, body: &[u8]) -> rota_proto::SignedHeaders {
        rota_proto::sign_now(SECRET, "POST", &self.target(path), at, body)
    }

    /// POSTs `body` with exactly these signing headers.
    async fn call_with(
        &self,
        path: &str,
        body: Vec<u8>,
        signed: &rota_proto::SignedHeaders,
    ) -> reqwest::Response {
        let mut request = self
            .http
            .post(format!("{}{path}", self.url))
            .header("content-type", "application/json");
        for (name, value) in signed.pairs() {
            request = request.header(name, value);
        }
        request.body(body).send().await.unwrap()
    }

    async fn call<Req: Serialize, Resp: DeserializeOwned>(&self, path: &str, body: &Req) -> Resp {
        let response = self
            .call_raw(path, serde_json::to_vec(body).unwrap(), Some(SECRET))
            .await;
        assert_eq!(response.status(), StatusCode::OK, "{path}");
        response.json().await.unwrap()
    }

    async fn trigger(&self, triggers: Vec<Trigger>) -> Vec<TriggerOutcome> {
        self.trigger_until(triggers, None).await
    }

    async fn trigger_until(
        &self,
        triggers: Vec<Trigger>,
        not_after: Option<i64>,
    ) -> Vec<TriggerOutcome> {
        let batch = TriggerBatch {
            triggers,
            not_after,
        };
        let ack: TriggerBatchAck = self.call(PATH_TRIGGER, &batch).await;
        ack.acks.into_iter().map(|a| a.outcome).collect()
    }

    async fn shutdown(self) {
        self.stop.cancel();
        tokio::time::timeout(Duration::from_secs(20), self.task)
            .await
            .expect("executor stops")
            .unwrap()
            .unwrap();
    }
}

fn trigger(run_id: i64, plugin: &PluginRef) -> Trigger {
    Trigger {
        run_id,
        job_id: 7,
        job_name: "close-order".into(),
        task_id: run_id * 10,
        attempt: 1,
        scheduled_at: now_ms(),
        dispatched_at: None,
        plugin: plugin.clone(),
        input: String::new(),
        params: None,
        shard_index: 0,
        shard_total: 1,
        timeout_ms: 10_000,
        memory_mb: 16,
        block: BlockStrategy::Serial,
        exclusive: false,
        http_allow: Vec::new(),
        traceparent: None,
        report_within_ms: None,
    }
}

/// Waits for `condition`, polling, up to `within`.
async fn wait_until(within: Duration, what: &str, condition: impl Fn() -> bool) {
    let deadline = Instant::now() + within;
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signed_trigger_runs_and_reports() {
    let (double, scheduler) = start_double().await;
    let dir = tempfile::tempdir().unwrap();
    let executor = start_executor(&scheduler, dir.path(), |_| {}).await;
    wait_until(Duration::from_secs(5), "registration", || {
        !double.registrations.lock().unwrap().is_empty()
    })
    .await;
    let registration = double.registrations.lock().unwrap()[0].clone();
    assert_eq!(registration.app, "default");
    assert_eq!(registration.address, executor.url);
    assert_eq!(registration.capacity, 4);
    assert!(registration.active_runs.is_empty());

    let hello = double.add_plugin(&common::hello());
    let mut first = trigger(1, &hello);
    first.scheduled_at = now_ms() + 300;
    let outcomes = executor
        .trigger(vec![first.clone(), trigger(2, &hello)])
        .await;
    assert_eq!(
        outcomes,
        [TriggerOutcome::Accepted, TriggerOutcome::Accepted]
    );

    wait_until(Duration::from_secs(10), "both final reports", || {
        double.final_of(1).is_some() && double.final_of(2).is_some()
    })
    .await;
    let report = double.final_of(1).unwrap();
    assert_eq!(report.status, ReportStatus::Succeeded, "{report:?}");
    assert_eq!(report.exit_code, Some(0));
    assert_eq!(report.executor, executor.url);
    assert_eq!(report.task_id, 10);
    // Never before its time.
    let started_at = report.started_at.unwrap();
    assert!(
        started_at >= first.scheduled_at,
        "{started_at} < {}",
        first.scheduled_at
    );
    assert!(report.finished_at.unwrap() >= started_at);
    // The module was fetched and compiled once for both runs.
    assert_eq!(double.plugin_downloads.load(Ordering::SeqCst), 1);

    // The log is complete once the run has left the executor's books (just after its
    // report).
    let deadline = Instant::now() + Duration::from_secs(5);
    let page = loop {
        let page: LogPage = executor
            .call(
                PATH_LOG,
                &LogRequest {
                    run_id: 1,
                    from_line: 1,
                    max_lines: 100,
                },
            )
            .await;
        if page.complete || Instant::now() > deadline {
            break page;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert_eq!(page.lines, ["hello", "world", "to stderr"]);
    assert_eq!(page.next_line, 4);
    assert!(page.complete);

    // Heartbeats follow at the interval the scheduler asked for.
    wait_until(Duration::from_secs(5), "heartbeats", || {
        double.heartbeats.load(Ordering::SeqCst) >= 2
    })
    .await;

    // Known runs, for a restarted scheduler.
    let known: RunsKnownAck = executor
        .call(
            PATH_RUNS_KNOWN,
            &RunsKnownRequest {
                runs: vec![
                    TaskAttempt {
                        task_id: 10,
                        attempt: 1,
                    },
                    TaskAttempt {
                        task_id: 999,
                        attempt: 1,
                    },
                ],
            },
        )
        .await;
    assert_eq!(known.known.len(), 1);
    assert_eq!(known.known[0].run_id, 1);

    // A failing plugin reports why.
    let exit3 = double.add_plugin(&common::exit3());
    assert_eq!(
        executor.trigger(vec![trigger(3, &exit3)]).await,
        [TriggerOutcome::Accepted]
    );
    wait_until(Duration::from_secs(10), "the failed report", || {
        double.final_of(3).is_some()
    })
    .await;
    let report = double.final_of(3).unwrap();
    assert_eq!(report.status, ReportStatus::Failed);
    assert_eq!(report.exit_code, Some(3));
    assert_eq!(report.message.as_deref(), Some("exited with status 3"));

    // A plugin no scheduler has is rejected with the reason.
    let missing = PluginRef {
        name: "missing".into(),
        sha256: "ab".repeat(32),
    };
    let outcomes = executor.trigger(vec![trigger(4, &missing)]).await;
    let [TriggerOutcome::Rejected { reason }] = outcomes.as_slice() else {
        panic!("{outcomes:?}")
    };
    assert!(reason.contains("cannot fetch plugin"), "{reason}");

    executor.shutdown().await;
    assert_eq!(double.bad_signatures.load(Ordering::SeqCst), 0);
    let goodbye = double.deregistrations.lock().unwrap().clone();
    assert_eq!(goodbye.len(), 1);
    assert_eq!(goodbye[0].address, registration.address);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsigned_requests_are_refused() {
    let (double, scheduler) = start_double().await;
    let dir = tempfile::tempdir().unwrap();
    let executor = start_executor(&scheduler, dir.path(), |_| {}).await;
    let hello = double.add_plugin(&common::hello());
    let body = serde_json::to_vec(&TriggerBatch {
        triggers: vec![trigger(1, &hello)],
        not_after: None,
    })
    .unwrap();

    for (path, secret) in [
        (PATH_TRIGGER, None),
        (PATH_TRIGGER, Some(&b"wrong secret"[..])),
        (PATH_KILL, None),
        (PATH_LOG, None),
        ("/beat", None),
        (PATH_WARM, None),
        ("/no-such-endpoint", None),
    ] {
        let response = executor.call_raw(path, body.clone(), secret).await;
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED, "{path}");
        let error: serde_json::Value = response.json().await.unwrap();
        assert!(error["error"].as_str().unwrap().contains("sign"), "{error}");
    }
    // A signature for another body does not carry over.
    let signed = executor.sign(PATH_TRIGGER, now_ms(), b"{\"triggers\":[]}");
    let response = executor.call_with(PATH_TRIGGER, body, &signed).await;
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    // Nothing ran, nothing was fetched.
    assert_eq!(double.plugin_downloads.load(Ordering::SeqCst), 0);

    // Signed but malformed: a 400 in the protocol's error shape.
    let response = executor
        .call_raw(PATH_TRIGGER, b"{\"triggers\": 5}".to_vec(), Some(SECRET))
        .await;
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    let response = executor
        .call_raw(PATH_WARM, b"{\"plugins\": \"all\"}".to_vec(), Some(SECRET))
        .await;
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    let error: serde_json::Value = response.json().await.unwrap();
    assert!(
        error["error"].as_str().unwrap().contains("plugins"),
        "{error}"
    );
    executor.shutdown().await;
}

/// `GET /healthz` is the one route open without a signature (for Kubernetes' liveness
/// probe, packaging/kubernetes/executor.yaml): it answers 200 and nothing else, and the
/// opening is that method on that path alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_answers_without_a_signature_and_opens_nothing_else() {
    let (double, scheduler) = start_double().await;
    let dir = tempfile::tempdir().unwrap();
    let executor = start_executor(&scheduler, dir.path(), |_| {}).await;
    let get = |path: &str| executor.http.get(format!("{}{path}", executor.url)).send();

    let response = get("/healthz").await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body, serde_json::json!({"status": "ok"}));

    // Other paths still want a signature, whatever the method.
    for path in ["/healthz/x", "/beat", PATH_LOG, "/metrics", "/readyz"] {
        let response = get(path).await.unwrap();
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED, "GET {path}");
    }
    // /healthz takes no body and does nothing: a POST there is refused.
    let response = executor.call_raw("/healthz", b"{}".to_vec(), None).await;
    assert_eq!(response.status(), StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(double.plugin_downloads.load(Ordering::SeqCst), 0);
    executor.shutdown().await;
}

/// A list of plugins to compile that arrives while the executor compiles another is not
/// dropped: it is taken when the compile under way ends, with no further request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugins_to_warm_sent_during_a_compile_are_compiled_after_it() {
    let (double, scheduler) = start_double().await;
    let dir = tempfile::tempdir().unwrap();
    let executor = start_executor(&scheduler, dir.path(), |_| {}).await;
    let first = double.add_plugin(&common::hello());
    let second = double.add_plugin(&common::echo());
    *double.held_download.lock().unwrap() = Some(first.sha256.clone());
    let warm = |sha: &str| {
        serde_json::to_vec(&WarmRequest {
            plugins: vec![sha.to_owned()],
        })
        .unwrap()
    };

    let response = executor
        .call_raw(PATH_WARM, warm(&first.sha256), Some(SECRET))
        .await;
    assert!(response.status().is_success(), "{}", response.status());
    wait_until(
        Duration::from_secs(5),
        "the first plugin's download",
        || double.plugin_downloads.load(Ordering::SeqCst) == 1,
    )
    .await;
    // Sent while the first is still on its way.
    let response = executor
        .call_raw(PATH_WARM, warm(&second.sha256), Some(SECRET))
        .await;
    assert!(response.status().is_success(), "{}", response.status());
    assert_eq!(double.plugin_downloads.load(Ordering::SeqCst), 1);
    double.download_released.notify_waiters();
    wait_until(
        Duration::from_secs(10),
        "the second plugin's download",
        || double.plugin_downloads.load(Ordering::SeqCst) == 2,
    )
    .await;
    executor.shutdown().await;
}

/// A captured request is acted on once: the same bytes again are refused, as is a copy
/// sent after the replay window, a copy with any one byte of its body changed, and a
/// request signed for another executor.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replayed_late_or_altered_requests_are_refused() {
    let (_double, scheduler) = start_double().await;
    let dir = tempfile::tempdir().unwrap();
    let executor = start_executor(&scheduler, dir.path(), |_| {}).await;
    let body = br#"{"job_id":7}"#.to_vec();
    let error = |response: reqwest::Response| async move {
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
        let body: serde_json::Value = response.json().await.unwrap();
        body["error"].as_str().unwrap().to_owned()
    };

    let signed = executor.sign(PATH_IDLE_BEAT, now_ms(), &body);
    let first = executor
        .call_with(PATH_IDLE_BEAT, body.clone(), &signed)
        .await;
    assert_eq!(first.status(), StatusCode::OK);
    let again = executor
        .call_with(PATH_IDLE_BEAT, body.clone(), &signed)
        .await;
    assert!(error(again).await.contains("replayed"));

    // Signed properly, but a little over the window ago.
    let late = now_ms() - rota_proto::MAX_SKEW_MS - 1_000;
    let stale = executor.sign(PATH_IDLE_BEAT, late, &body);
    let response = executor
        .call_with(PATH_IDLE_BEAT, body.clone(), &stale)
        .await;
    assert!(error(response).await.contains("away from the server clock"));

    // Every byte of the body changed in turn, each under a fresh valid nonce and time.
    for i in 0..body.len() {
        let signed = executor.sign(PATH_IDLE_BEAT, now_ms(), &body);
        let mut altered = body.clone();
        altered[i] ^= 0x01;
        let response = executor.call_with(PATH_IDLE_BEAT, altered, &signed).await;
        assert!(error(response).await.contains("does not match"), "byte {i}");
    }
    // Signed for another executor of the app (its address): refused here.
    let elsewhere = rota_proto::sign_now(
        SECRET,
        "POST",
        &format!("http://127.0.0.1:1{PATH_IDLE_BEAT}"),
        now_ms(),
        &body,
    );
    let response = executor
        .call_with(PATH_IDLE_BEAT, body.clone(), &elsewhere)
        .await;
    assert!(error(response).await.contains("does not match"));
    // The untouched original with those headers still goes through: nothing was recorded
    // for the refused copies.
    let signed = executor.sign(PATH_IDLE_BEAT, now_ms(), &body);
    let response = executor
        .call_with(PATH_IDLE_BEAT, body.clone(), &signed)
        .await;
    assert_eq!(response.status(), StatusCode::OK);
    executor.shutdown().await;
}

/// A trigger that arrives after its sender's lease (a scheduler node that stalled between
/// checking its lease and sending) is answered `expired` and not taken at all: the same
/// attempt sent by the node that owns it now is accepted, and runs once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn triggers_past_the_senders_lease_are_not_taken() {
    let (double, scheduler) = start_double().await;
    let dir = tempfile::tempdir().unwrap();
    let executor = start_executor(&scheduler, dir.path(), |_| {}).await;
    let hello = double.add_plugin(&common::hello());
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;

    let stale = executor
        .trigger_until(vec![trigger(1, &hello), trigger(2, &hello)], Some(now - 1))
        .await;
    assert_eq!(stale, [TriggerOutcome::Expired, TriggerOutcome::Expired]);
    // The taker sends attempt 1 under its own run id and a live lease.
    let mut taken_over = trigger(1, &hello);
    taken_over.run_id = 101;
    let fresh = executor
        .trigger_until(vec![taken_over], Some(now + 60_000))
        .await;
    assert_eq!(fresh, [TriggerOutcome::Accepted]);
    wait_until(Duration::from_secs(10), "run 101", || {
        double.final_of(101).is_some()
    })
    .await;
    assert!(
        double.reports().iter().all(|r| r.run_id == 101),
        "only the taker's run reported: {:?}",
        double.reports()
    );
    executor.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicates_block_strategies_and_kill() {
    let (double, scheduler) = start_double().await;
    let dir = tempfile::tempdir().unwrap();
    let executor = start_executor(&scheduler, dir.path(), |_| {}).await;
    let hello = double.add_plugin(&common::hello());
    let forever = double.add_plugin(&common::forever());

    // The same (task, attempt, shard) twice in one batch, and again later under
    // another run id.
    let mut again = trigger(2, &hello);
    again.task_id = 10;
    let outcomes = executor
        .trigger(vec![trigger(1, &hello), again.clone()])
        .await;
    assert_eq!(
        outcomes,
        [TriggerOutcome::Accepted, TriggerOutcome::Duplicate]
    );
    wait_until(Duration::from_secs(10), "run 1", || {
        double.final_of(1).is_some()
    })
    .await;
    again.run_id = 3;
    assert_eq!(
        executor.trigger(vec![again]).await,
        [TriggerOutcome::Duplicate]
    );

    // Exclusive runs of one job: discard_later is busy while one runs.
    let mut spinning = trigger(10, &forever);
    spinning.job_id = 70;
    spinning.exclusive = true;
    let mut later = trigger(11, &hello);
    later.job_id = 70;
    later.exclusive = true;
    later.block = BlockStrategy::DiscardLater;
    let outcomes = executor.trigger(vec![spinning, later.clone()]).await;
    assert_eq!(outcomes, [TriggerOutcome::Accepted, TriggerOutcome::Busy]);
    // A delayed task of the same job is not blocked.
    let mut delayed = trigger(12, &hello);
    delayed.job_id = 70;
    assert_eq!(
        executor.trigger(vec![delayed]).await,
        [TriggerOutcome::Accepted]
    );
    wait_until(Duration::from_secs(10), "run 12", || {
        double.final_of(12).is_some()
    })
    .await;
    wait_until(Duration::from_secs(5), "run 10 running", || {
        double
            .reports()
            .iter()
            .any(|r| r.run_id == 10 && r.status == ReportStatus::Running)
    })
    .await;

    // cover_early kills the spinning run and runs the new one.
    later.run_id = 13;
    later.task_id = 130;
    later.block = BlockStrategy::CoverEarly;
    assert_eq!(
        executor.trigger(vec![later]).await,
        [TriggerOutcome::Accepted]
    );
    wait_until(Duration::from_secs(10), "runs 10 and 13", || {
        double.final_of(10).is_some() && double.final_of(13).is_some()
    })
    .await;
    assert_eq!(double.final_of(10).unwrap().status, ReportStatus::Killed);
    let covered = double.final_of(13).unwrap();
    assert_eq!(covered.status, ReportStatus::Succeeded);
    assert!(covered.started_at.unwrap() >= double.final_of(10).unwrap().finished_at.unwrap());

    // /kill stops a running plugin.
    let mut spinning = trigger(20, &forever);
    spinning.job_id = 71;
    assert_eq!(
        executor.trigger(vec![spinning]).await,
        [TriggerOutcome::Accepted]
    );
    wait_until(Duration::from_secs(5), "run 20 running", || {
        double
            .reports()
            .iter()
            .any(|r| r.run_id == 20 && r.status == ReportStatus::Running)
    })
    .await;
    let ack: KillAck = executor.call(PATH_KILL, &KillRequest { run_id: 20 }).await;
    assert!(ack.killed, "{ack:?}");
    let ack: KillAck = executor.call(PATH_KILL, &KillRequest { run_id: 20 }).await;
    assert!(!ack.killed, "{ack:?}");
    wait_until(Duration::from_secs(5), "run 20 killed", || {
        double.final_of(20).is_some()
    })
    .await;
    let report = double.final_of(20).unwrap();
    assert_eq!(report.status, ReportStatus::Killed);
    assert_eq!(report.message.as_deref(), Some("killed"));

    // A queued run is killed before it starts.
    let mut future = trigger(21, &hello);
    future.scheduled_at = now_ms() + 60_000;
    assert_eq!(
        executor.trigger(vec![future]).await,
        [TriggerOutcome::Accepted]
    );
    let ack: KillAck = executor.call(PATH_KILL, &KillRequest { run_id: 21 }).await;
    assert!(ack.killed, "{ack:?}");
    wait_until(Duration::from_secs(5), "run 21 killed", || {
        double.final_of(21).is_some()
    })
    .await;
    let report = double.final_of(21).unwrap();
    assert_eq!(report.status, ReportStatus::Killed);
    assert_eq!(report.started_at, None);
    executor.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reports_survive_a_scheduler_outage_exactly_once() {
    let (double, scheduler) = start_double().await;
    let dir = tempfile::tempdir().unwrap();
    let executor = start_executor(&scheduler, dir.path(), |_| {}).await;
    let hello = double.add_plugin(&common::hello());
    double.refuse_callbacks.store(true, Ordering::SeqCst);

    let ids: Vec<i64> = (1..=20).collect();
    for chunk in ids.chunks(5) {
        let triggers = chunk.iter().map(|&id| trigger(id, &hello)).collect();
        let outcomes = executor.trigger(triggers).await;
        assert!(
            outcomes.iter().all(|o| *o == TriggerOutcome::Accepted),
            "{outcomes:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Refused for a while: retried, then spooled to disk.
    wait_until(Duration::from_secs(10), "spooled reports", || {
        spool_files(dir.path()) > 0 && double.callback_calls.load(Ordering::SeqCst) >= 5
    })
    .await;
    assert!(double.reports().is_empty());

    double.refuse_callbacks.store(false, Ordering::SeqCst);
    wait_until(Duration::from_secs(15), "every final report", || {
        ids.iter().all(|&id| double.final_of(id).is_some())
    })
    .await;
    wait_until(Duration::from_secs(5), "an empty spool", || {
        spool_files(dir.path()) == 0
    })
    .await;

    let reports = double.reports();
    let distinct: HashSet<(i64, ReportStatus)> =
        reports.iter().map(|r| (r.run_id, r.status)).collect();
    for &id in &ids {
        let finals: Vec<_> = distinct
            .iter()
            .filter(|(run, status)| *run == id && status.is_final())
            .collect();
        assert_eq!(finals.len(), 1, "run {id}: {finals:?}");
        assert_eq!(finals[0].1, ReportStatus::Succeeded);
    }
    // Delivered once each: no batch was applied twice.
    let finals = reports.iter().filter(|r| r.status.is_final()).count();
    assert_eq!(finals, ids.len());
    executor.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spooled_reports_are_sent_after_an_executor_restart() {
    let (double, scheduler) = start_double().await;
    let dir = tempfile::tempdir().unwrap();
    let executor = start_executor(&scheduler, dir.path(), |_| {}).await;
    let hello = double.add_plugin(&common::hello());
    double.refuse_callbacks.store(true, Ordering::SeqCst);
    assert_eq!(
        executor
            .trigger(vec![trigger(1, &hello), trigger(2, &hello)])
            .await,
        [TriggerOutcome::Accepted, TriggerOutcome::Accepted]
    );
    wait_until(Duration::from_secs(10), "spooled reports", || {
        spool_files(dir.path()) > 0
    })
    .await;
    executor.shutdown().await;
    assert!(double.reports().is_empty());
    // The last registration still claims the spooled runs, so they are not lost.
    let last = double
        .registrations
        .lock()
        .unwrap()
        .last()
        .cloned()
        .unwrap();
    assert_eq!(last.active_runs, [1, 2]);

    double.refuse_callbacks.store(false, Ordering::SeqCst);
    let downloads = double.plugin_downloads.load(Ordering::SeqCst);
    let executor = start_executor(&scheduler, dir.path(), |_| {}).await;
    wait_until(Duration::from_secs(10), "replayed reports", || {
        double.final_of(1).is_some() && double.final_of(2).is_some()
    })
    .await;
    // The compiled plugin came from the disk cache: no new download.
    assert_eq!(
        executor.trigger(vec![trigger(3, &hello)]).await,
        [TriggerOutcome::Accepted]
    );
    wait_until(Duration::from_secs(10), "run 3", || {
        double.final_of(3).is_some()
    })
    .await;
    assert_eq!(double.plugin_downloads.load(Ordering::SeqCst), downloads);
    executor.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_drains_kills_and_hands_back() {
    let (double, scheduler) = start_double().await;
    let dir = tempfile::tempdir().unwrap();
    let executor = start_executor(&scheduler, dir.path(), |c| {
        c.drain_grace = Duration::from_millis(300);
    })
    .await;
    let forever = double.add_plugin(&common::forever());
    let hello = double.add_plugin(&common::hello());
    let mut queued = trigger(2, &hello);
    queued.scheduled_at = now_ms() + 60_000;
    assert_eq!(
        executor.trigger(vec![trigger(1, &forever), queued]).await,
        [TriggerOutcome::Accepted, TriggerOutcome::Accepted]
    );
    wait_until(Duration::from_secs(5), "run 1 running", || {
        double
            .reports()
            .iter()
            .any(|r| r.run_id == 1 && r.status == ReportStatus::Running)
    })
    .await;
    executor.shutdown().await;
    // The running run was killed after the grace; the queued one was handed back
    // without a report, and the last registration no longer claims it.
    assert_eq!(double.final_of(1).unwrap().status, ReportStatus::Killed);
    assert!(double.reports().iter().all(|r| r.run_id != 2));
    let last = double
        .registrations
        .lock()
        .unwrap()
        .last()
        .cloned()
        .unwrap();
    assert!(last.active_runs.is_empty(), "{last:?}");
    assert_eq!(double.deregistrations.lock().unwrap().len(), 1);
}

fn spool_files(data_dir: &Path) -> usize {
    std::fs::read_dir(data_dir.join("spool"))
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
                .count()
        })
        .unwrap_or(0)
}
