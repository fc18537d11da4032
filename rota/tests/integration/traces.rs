//! OpenTelemetry traces (SPEC §12) from the built binary to an OTLP/HTTP receiver started
//! here — a double of the collector, so that what is tested is the exporter: `rota
//! standalone` with `OTEL_EXPORTER_OTLP_ENDPOINT` sends the span of a task's create
//! request as a child of the caller's `traceparent` (same trace id, its span as parent),
//! and the span of the task created inside it, naming the task; a request without one
//! starts a trace of its own; sampled off, nothing is sent. A `rota server` and a `rota
//! executor` send one task's whole trace: each attempt's dispatch (server) under the
//! create, its run (executor) under the dispatch, the run's report (server) under the run,
//! and the module is told its run's span in `TRACEPARENT`; a webhook's request and a
//! pulled item carry the trace on.

use crate::support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use prost::Message;
use serde_json::json;
use support::*;

/// A span as received: ids in hex, its service and its attributes as text.
#[derive(Debug, Clone)]
struct Received {
    trace_id: String,
    span_id: String,
    parent: String,
    name: String,
    service: String,
    attributes: Vec<(String, String)>,
}

impl Received {
    fn attribute(&self, key: &str) -> Option<&str> {
        self.attributes
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

type Spans = Arc<Mutex<Vec<Received>>>;

fn text(v: &Option<opentelemetry_proto::tonic::common::v1::AnyValue>) -> String {
    match v.as_ref().and_then(|v| v.value.as_ref()) {
        Some(Any::StringValue(s)) => s.clone(),
        Some(Any::IntValue(i)) => i.to_string(),
        Some(Any::BoolValue(b)) => b.to_string(),
        other => format!("{other:?}"),
    }
}

async fn receive(State(spans): State<Spans>, body: Bytes) -> Vec<u8> {
    let request = ExportTraceServiceRequest::decode(body).expect("an OTLP protobuf body");
    let mut got = spans.lock().unwrap();
    for resource in request.resource_spans {
        let service = resource
            .resource
            .iter()
            .flat_map(|r| &r.attributes)
            .find(|a| a.key == "service.name")
            .map(|a| text(&a.value))
            .unwrap_or_default();
        for span in resource.scope_spans.into_iter().flat_map(|s| s.spans) {
            got.push(Received {
                trace_id: hex::encode(&span.trace_id),
                span_id: hex::encode(&span.span_id),
                parent: hex::encode(&span.parent_span_id),
                name: span.name,
                service: service.clone(),
                attributes: span
                    .attributes
                    .iter()
                    .map(|a| (a.key.clone(), text(&a.value)))
                    .collect(),
            });
        }
    }
    Vec::new()
}

/// The receiver's URL and what it got.
async fn collector() -> (String, Spans) {
    let spans = Spans::default();
    let app = axum::Router::new()
        .route("/v1/traces", axum::routing::post(receive))
        .with_state(spans.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, spans)
}

async fn create_task(api: &Api, traceparent: Option<&str>) -> i64 {
    let mut req = reqwest::Client::new()
        .post(format!("{}/api/v1/tasks", api.base))
        .bearer_auth(TOKEN)
        .json(&json!({"job": "traced", "payload": "hi"}));
    if let Some(tp) = traceparent {
        req = req.header("traceparent", tp);
    }
    let answer = req.send().await.unwrap();
    assert_eq!(answer.status(), 201);
    answer.json::<serde_json::Value>().await.unwrap()["id"]
        .as_i64()
        .unwrap()
}

/// `rota standalone` exporting to a collector of its own, with a job `traced`.
async fn traced_node(env: &[(&str, &str)]) -> (Standalone, Api, Spans, tempfile::TempDir) {
    let (endpoint, spans) = collector().await;
    let dir = tempfile::tempdir().unwrap();
    let mut all = vec![
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
        ("OTEL_BSP_SCHEDULE_DELAY", "100"),
    ];
    all.extend_from_slice(env);
    let node = Standalone::start_with_env(dir.path(), &all);
    let api = node.api.clone();
    wait_ready(&api).await;
    api.upload_plugin("noop").await;
    api.ok(
        "POST",
        "/api/v1/jobs",
        Some(json!({"name": "traced", "app": "default", "plugin": "noop", "schedule": {"kind": "none"}})),
    )
    .await;
    (node, api, spans, dir)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tasks_create_continues_the_callers_trace() {
    let (_node, api, spans, _dir) = traced_node(&[]).await;

    let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let caller = "00f067aa0ba902b7";
    let id = create_task(&api, Some(&format!("00-{trace}-{caller}-01"))).await;
    let (request, created) = eventually(Duration::from_secs(30), "the task's spans", || {
        let spans = spans.clone();
        async move {
            let got = spans.lock().unwrap().clone();
            let of_trace: Vec<_> = got.into_iter().filter(|s| s.trace_id == trace).collect();
            let request = of_trace.iter().find(|s| s.name == "POST /api/v1/tasks")?;
            let created = of_trace.iter().find(|s| s.name == "create task")?;
            Some((request.clone(), created.clone()))
        }
    })
    .await;
    assert_eq!(
        request.parent, caller,
        "the request continues the caller's span"
    );
    assert_eq!(request.service, "rota-standalone");
    assert_eq!(request.attribute("http.request.method"), Some("POST"));
    assert_eq!(
        created.parent, request.span_id,
        "the create is inside the request"
    );
    assert_eq!(
        created.attribute("rota.task.id"),
        Some(id.to_string().as_str())
    );
    assert_eq!(created.attribute("rota.job"), Some("traced"));

    // Without a caller's context, a trace of its own.
    let before = spans.lock().unwrap().len();
    let other = create_task(&api, None).await;
    let root = eventually(Duration::from_secs(30), "a new trace", || {
        let spans = spans.clone();
        async move {
            let got = spans.lock().unwrap().clone();
            got[before..]
                .iter()
                .find(|s| {
                    s.name == "create task"
                        && s.attribute("rota.task.id") == Some(other.to_string().as_str())
                })
                .cloned()
        }
    })
    .await;
    assert_ne!(root.trace_id, trace);
    let request = spans
        .lock()
        .unwrap()
        .iter()
        .find(|s| s.span_id == root.parent)
        .cloned()
        .expect("the request's span");
    assert!(request.parent.is_empty(), "{request:?}");
}

/// A plugin that writes its environment to stdout, a variable a line, then fails: every
/// attempt shows the trace it ran in, and the task is retried.
const ENV_THEN_FAIL: &str = r#"(module
  (import "wasi_snapshot_preview1" "environ_sizes_get" (func $sizes (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "environ_get" (func $get (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_write" (func $write (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
  (memory (export "memory") 1)
  (func (export "_start") (local $i i32) (local $end i32)
    (drop (call $sizes (i32.const 0) (i32.const 4)))
    (drop (call $get (i32.const 64) (i32.const 1024)))
    (local.set $i (i32.const 1024))
    (local.set $end (i32.add (i32.const 1024) (i32.load (i32.const 4))))
    (block $done (loop $next
      (br_if $done (i32.ge_u (local.get $i) (local.get $end)))
      (if (i32.eqz (i32.load8_u (local.get $i)))
        (then (i32.store8 (local.get $i) (i32.const 10))))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br $next)))
    (i32.store (i32.const 16) (i32.const 1024))
    (i32.store (i32.const 20) (i32.load (i32.const 4)))
    (drop (call $write (i32.const 1) (i32.const 16) (i32.const 1) (i32.const 24)))
    (call $exit (i32.const 1))))"#;

/// The spans of `trace` once `done` holds for them.
async fn spans_of(
    spans: &Spans,
    trace: &str,
    what: &str,
    done: impl Fn(&[Received]) -> bool,
) -> Vec<Received> {
    eventually(Duration::from_secs(60), what, || {
        let got: Vec<Received> = spans
            .lock()
            .unwrap()
            .iter()
            .filter(|s| s.trace_id == trace)
            .cloned()
            .collect();
        let ok = done(&got);
        async move { ok.then_some(got) }
    })
    .await
}

fn named<'a>(spans: &'a [Received], prefix: &str) -> Vec<&'a Received> {
    spans
        .iter()
        .filter(|s| s.name.starts_with(prefix))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tasks_trace_goes_through_dispatch_the_executors_run_its_report_and_the_retry() {
    let (endpoint, spans) = collector().await;
    let otel = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
        ("OTEL_BSP_SCHEDULE_DELAY", "100"),
    ];
    let (db, _db_dir) = sqlite_url();
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let _server = spawn_server_env(&db, port, &dir.path().join("server.log"), "traced", &otel);
    let api = Api::new(format!("http://127.0.0.1:{port}"));
    wait_healthy(&api).await;
    let listen = format!("127.0.0.1:{}", free_port());
    let _executor = spawn_executor_env(None, &api.base, &listen, dir.path(), None, &otel);
    wait_executors(&api, 1).await;
    api.upload("env-then-fail", ENV_THEN_FAIL).await;
    api.ok(
        "POST",
        "/api/v1/jobs",
        Some(
            json!({"name": "traced", "app": "default", "plugin": "env-then-fail",
                    "schedule": {"kind": "none"}, "max_attempts": 2,
                    "backoff": {"kind": "fixed", "delay_ms": 100}}),
        ),
    )
    .await;

    let trace = "5af7651916cd43dd8448eb211c80319c";
    let id = create_task(&api, Some(&format!("00-{trace}-b7ad6b7169203331-01"))).await;
    let got = spans_of(&spans, trace, "both attempts' spans", |got| {
        named(got, "report").len() >= 2 && named(got, "run ").len() >= 2
    })
    .await;
    let create = named(&got, "create task")[0];
    assert_eq!(
        create.attribute("rota.task.id"),
        Some(id.to_string().as_str())
    );
    let protocol: Vec<String> = spans
        .lock()
        .unwrap()
        .iter()
        .filter(|s| s.name.contains("/api/executor/"))
        .map(|s| s.name.clone())
        .collect();
    assert!(
        protocol.is_empty(),
        "the executor's calls are no spans of their own: {protocol:?}"
    );
    let mut runs = HashMap::new();
    for attempt in ["1", "2"] {
        let of = |prefix| {
            named(&got, prefix)
                .into_iter()
                .filter(|s| s.attribute("rota.attempt") == Some(attempt))
                .collect::<Vec<_>>()
        };
        let (dispatch, run, report) = (of("dispatch "), of("run "), of("report"));
        assert_eq!(
            (dispatch.len(), run.len(), report.len()),
            (1, 1, 1),
            "attempt {attempt}: one span each of its dispatch, run and report: {got:#?}"
        );
        let (dispatch, run, report) = (dispatch[0], run[0], report[0]);
        assert_eq!(
            dispatch.parent, create.span_id,
            "attempt {attempt}'s dispatch"
        );
        assert_eq!(dispatch.service, "rota-server");
        assert_eq!(
            dispatch.attribute("rota.task.id"),
            Some(id.to_string().as_str())
        );
        assert_eq!(run.parent, dispatch.span_id, "attempt {attempt}'s run");
        assert_eq!(run.service, "rota-executor");
        assert_eq!(run.attribute("rota.plugin"), Some("env-then-fail"));
        assert_eq!(run.attribute("rota.status"), Some("failed"));
        assert_eq!(report.parent, run.span_id, "attempt {attempt}'s report");
        assert_eq!(report.service, "rota-server");
        runs.insert(
            run.attribute("rota.run.id").unwrap().to_owned(),
            run.span_id.clone(),
        );
    }

    // Each attempt's module was told its own run's span.
    let listed = api
        .ok("GET", &format!("/api/v1/runs?task={id}"), None)
        .await;
    let listed = listed["items"].as_array().unwrap();
    assert_eq!(listed.len(), 2, "{listed:?}");
    for run in listed {
        let run_id = run["id"].as_i64().unwrap();
        let log = api
            .ok("GET", &format!("/api/v1/runs/{run_id}/log"), None)
            .await;
        let wanted = format!("TRACEPARENT=00-{trace}-{}-01", runs[&run_id.to_string()]);
        assert!(
            log["lines"]
                .as_array()
                .unwrap()
                .iter()
                .any(|l| l.as_str() == Some(&wanted)),
            "run {run_id} should have seen {wanted}: {log}"
        );
    }
}

/// A webhook's receiver: the `traceparent` of each request.
async fn hook(State(seen): State<Arc<Mutex<Vec<String>>>>, headers: axum::http::HeaderMap) {
    let tp = headers.get("traceparent").and_then(|v| v.to_str().ok());
    seen.lock().unwrap().push(tp.unwrap_or("none").to_owned());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhooks_and_pulled_items_carry_the_trace_on() {
    let (_node, api, spans, _dir) = traced_node(&[]).await;
    let seen = Arc::new(Mutex::new(Vec::new()));
    let receiver = axum::Router::new()
        .route("/hook", axum::routing::post(hook))
        .with_state(seen.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let origin = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, receiver).await });
    api.ok(
        "PATCH",
        "/api/v1/jobs/traced",
        Some(
            json!({"delivery": {"kind": "http", "url": format!("{origin}/hook")},
                    "http_allow": [origin]}),
        ),
    )
    .await;
    let trace = "6bf92f3577b34da6a3ce929d0e0e4736";
    create_task(&api, Some(&format!("00-{trace}-00f067aa0ba902b7-01"))).await;
    let got = spans_of(&spans, trace, "the delivery's span", |got| {
        !named(got, "dispatch ").is_empty()
    })
    .await;
    let dispatch = named(&got, "dispatch ")[0];
    assert_eq!(dispatch.parent, named(&got, "create task")[0].span_id);
    let header = eventually(Duration::from_secs(30), "the webhook", || {
        let first = seen.lock().unwrap().first().cloned();
        async move { first }
    })
    .await;
    assert_eq!(
        header,
        format!("00-{trace}-{}-01", dispatch.span_id),
        "the service continues the delivery's span"
    );

    api.ok(
        "POST",
        "/api/v1/jobs",
        Some(
            json!({"name": "pulled", "app": "default", "schedule": {"kind": "none"},
                    "delivery": {"kind": "pull"}}),
        ),
    )
    .await;
    let trace = "7cf92f3577b34da6a3ce929d0e0e4736";
    let mut req = reqwest::Client::new()
        .post(format!("{}/api/v1/tasks", api.base))
        .bearer_auth(TOKEN)
        .json(&json!({"job": "pulled", "payload": "hi"}));
    req = req.header("traceparent", format!("00-{trace}-00f067aa0ba902b7-01"));
    assert_eq!(req.send().await.unwrap().status(), 201);
    let pulled = api
        .ok(
            "POST",
            "/api/v1/jobs/pulled/pull",
            Some(json!({"wait_ms": 5000})),
        )
        .await;
    let item = &pulled["items"][0];
    let got = spans_of(&spans, trace, "the create's span", |got| {
        !named(got, "create task").is_empty()
    })
    .await;
    assert_eq!(
        item["traceparent"],
        format!("00-{trace}-{}-01", named(&got, "create task")[0].span_id),
        "the consumer continues the task's creation: {pulled}"
    );
}

/// Waits until task `id` has succeeded.
async fn succeeded(api: &Api, id: i64) {
    eventually(Duration::from_secs(30), "the task to run", || {
        let api = api.clone();
        async move {
            let t = api.ok("GET", &format!("/api/v1/tasks/{id}"), None).await;
            (t["status"] == "succeeded").then_some(())
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sampled_off_sends_nothing() {
    // Sampled off: the exporter is set up, and sends no span.
    let (node, api, spans, _dir) = traced_node(&[("OTEL_TRACES_SAMPLER", "always_off")]).await;
    let id = create_task(
        &api,
        Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
    )
    .await;
    // The run of that task ending shows the node did its work.
    succeeded(&api, id).await;
    drop(node);
    assert!(
        spans.lock().unwrap().is_empty(),
        "sampled off, yet spans went out"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_callers_unsampled_trace_is_followed_and_nothing_of_its_task_goes_out() {
    // The default sampler follows the caller: flags 00, and the task's create, dispatch,
    // run and report are all left out — none starts a trace of its own.
    let (_node, api, spans, _dir) = traced_node(&[]).await;
    let unsampled = "8df92f3577b34da6a3ce929d0e0e4736";
    let quiet = create_task(&api, Some(&format!("00-{unsampled}-00f067aa0ba902b7-00"))).await;
    succeeded(&api, quiet).await;
    // A sampled task after it: once its report is out, so would the first one's be.
    let sampled = "9ef92f3577b34da6a3ce929d0e0e4736";
    create_task(&api, Some(&format!("00-{sampled}-00f067aa0ba902b7-01"))).await;
    spans_of(&spans, sampled, "the sampled task's report", |got| {
        !named(got, "report").is_empty()
    })
    .await;
    let got = spans.lock().unwrap().clone();
    let leaked: Vec<&Received> = got
        .iter()
        .filter(|s| {
            s.trace_id == unsampled
                || s.attribute("rota.task.id") == Some(quiet.to_string().as_str())
        })
        .collect();
    assert!(
        leaked.is_empty(),
        "an unsampled task's spans went out: {leaked:#?}"
    );
}
