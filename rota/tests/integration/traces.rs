//! OpenTelemetry traces (SPEC §12) from the built binary to an OTLP/HTTP receiver started
//! here — a double of the collector, so that what is tested is the exporter: `rota
//! standalone` with `OTEL_EXPORTER_OTLP_ENDPOINT` sends the span of a task's create
//! request as a child of the caller's `traceparent` (same trace id, its span as parent),
//! and the span of the task created inside it, naming the task; a request without one
//! starts a trace of its own; sampled off, nothing is sent.

use crate::support;

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
                .find(|s| s.attribute("rota.task.id") == Some(other.to_string().as_str()))
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
    eventually(Duration::from_secs(30), "the task to run", || {
        let api = api.clone();
        async move {
            let t = api.ok("GET", &format!("/api/v1/tasks/{id}"), None).await;
            (t["status"] == "succeeded").then_some(())
        }
    })
    .await;
    drop(node);
    assert!(
        spans.lock().unwrap().is_empty(),
        "sampled off, yet spans went out"
    );
}
