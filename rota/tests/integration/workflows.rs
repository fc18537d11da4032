//! Workflows end to end (SPEC §10) in `rota standalone`: real executor, real wasm, outputs
//! set with `rota.output_set` and carried by run reports. A pipeline whose first step's
//! output (a JSON array) is mapped over, element by element, and reduced in order; a
//! failing step that skips what needed it and runs its compensation. The plugins are text
//! (`.wat`): no toolchain needed.

use crate::support;

use std::time::Duration;

use serde_json::{Value, json};
use support::*;

/// Sets its output to its first argument (the step's params, one word) if it has one,
/// else to its stdin (the step's payload): a step that relays what it was given.
pub(crate) const RELAY: &str = include_str!("../../../executor/tests/fixtures/relay.wat");

/// Exits with status 1.
const FAIL: &str = r#"(module
  (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
  (memory (export "memory") 1)
  (func (export "_start") (call $exit (i32.const 1))))"#;

async fn job(api: &Api, name: &str, plugin: &str) {
    api.ok(
        "POST",
        "/api/v1/jobs",
        Some(json!({"name": name, "app": "default", "plugin": plugin,
                    "schedule": {"kind": "none"}, "max_attempts": 1})),
    )
    .await;
}

/// Starts an instance of `workflow` and waits for it to end; the instance.
async fn run_to_end(api: &Api, workflow: &str, input: Value) -> Value {
    run_to_end_within(api, workflow, input, Duration::from_secs(120)).await
}

/// [`run_to_end`], waiting up to `within`.
pub(crate) async fn run_to_end_within(
    api: &Api,
    workflow: &str,
    input: Value,
    within: Duration,
) -> Value {
    let started = api
        .ok(
            "POST",
            &format!("/api/v1/workflows/{workflow}/instances"),
            Some(json!({"input": input})),
        )
        .await;
    let id = started["id"].as_i64().unwrap();
    eventually(within, "the instance to end", || {
        let api = api.clone();
        async move {
            let i = api
                .ok("GET", &format!("/api/v1/workflow-instances/{id}"), None)
                .await;
            (i["status"] != "running").then_some(i)
        }
    })
    .await
}

pub(crate) fn step<'a>(instance: &'a Value, name: &str) -> &'a Value {
    instance["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == name)
        .unwrap_or_else(|| panic!("no step {name} in {instance}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mapped_pipeline_passes_each_output_along_and_a_failure_runs_the_compensation() {
    let data = tempfile::tempdir().unwrap();
    let node = Standalone::start(data.path());
    let api = node.api.clone();
    wait_ready(&api).await;
    api.upload("relay", RELAY).await;
    api.upload("fail", FAIL).await;
    job(&api, "relay", "relay").await;
    job(&api, "boom", "fail").await;

    // list → each (a map over list's array) → total.
    api.ok(
        "POST",
        "/api/v1/workflows",
        Some(json!({"name": "pipeline", "app": "default", "steps": [
            {"name": "list", "job": "relay", "params": "[10,20,30]"},
            {"name": "each", "job": "relay", "after": ["list"], "map": true},
            {"name": "total", "job": "relay", "after": ["each"]},
        ]})),
    )
    .await;
    let input = json!({"order": 42});
    let done = run_to_end(&api, "pipeline", input.clone()).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    assert_eq!(step(&done, "list")["output"], json!([10, 20, 30]));
    let each = step(&done, "each");
    assert_eq!(
        each["items"],
        json!({"total": 3, "succeeded": 3, "failed": 0, "running": 0})
    );
    assert_eq!(
        each["runs"].as_array().unwrap().len(),
        3,
        "one run per element"
    );
    // Each element relayed its payload: the input, its item and index (not list's whole
    // array again) — and the reduce got them in order.
    let elements: Vec<Value> = (0..3)
        .map(|i| json!({"input": input, "steps": {}, "item": (i + 1) * 10, "index": i}))
        .collect();
    assert_eq!(each["output"], json!(elements));
    assert_eq!(
        done["output"],
        json!({"total": {"input": input, "steps": {"each": elements}}})
    );

    // charge fails: notify is skipped, refund (any_failed) runs, the instance failed.
    api.ok(
        "POST",
        "/api/v1/workflows",
        Some(json!({"name": "checkout", "app": "default", "steps": [
            {"name": "charge", "job": "boom"},
            {"name": "notify", "job": "relay", "after": ["charge"]},
            {"name": "refund", "job": "relay", "after": ["charge"], "when": "any_failed"},
        ]})),
    )
    .await;
    let failed = run_to_end(&api, "checkout", json!({"order": 7})).await;
    assert_eq!(failed["status"], "failed", "{failed}");
    assert_eq!(step(&failed, "charge")["status"], "failed");
    assert_eq!(step(&failed, "notify")["status"], "skipped");
    let refund = step(&failed, "refund");
    assert_eq!(refund["status"], "succeeded");
    assert_eq!(
        refund["output"],
        json!({"input": {"order": 7}, "steps": {"charge": null}})
    );
    let charge_run = step(&failed, "charge")["runs"][0].as_i64().unwrap();
    let run = api
        .ok("GET", &format!("/api/v1/runs/{charge_run}"), None)
        .await;
    assert_eq!(run["status"], "failed", "{run}");
}
