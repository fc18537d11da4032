//! `rota standalone` end to end: the real binary on port 0, a `.wat` plugin uploaded over the
//! API, a job triggered, the run executed by the embedded executor in the wasm sandbox, its
//! log read back through the API; and a restart that finds a run in flight.

use crate::support;

use std::time::Duration;

use serde_json::json;
use support::*;

/// Prints two lines and the payload it reads from stdin, then exits 0.
const HELLO: &str = r#"(module
  (import "wasi_snapshot_preview1" "fd_read" (func $read (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_write" (func $write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 100) "hello from the sandbox\nyour payload: ")
  (func (export "_start")
    ;; write the greeting
    (i32.store (i32.const 0) (i32.const 100))
    (i32.store (i32.const 4) (i32.const 37))
    (drop (call $write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))
    ;; read stdin into 200.. and echo it
    (i32.store (i32.const 16) (i32.const 200))
    (i32.store (i32.const 20) (i32.const 100))
    (drop (call $read (i32.const 0) (i32.const 16) (i32.const 1) (i32.const 24)))
    (i32.store (i32.const 20) (i32.load (i32.const 24)))
    (drop (call $write (i32.const 1) (i32.const 16) (i32.const 1) (i32.const 8)))))"#;

/// Loops forever: a run that is in flight whenever the process dies.
const SPIN: &str = r#"(module (memory (export "memory") 1) (func (export "_start") (loop br 0)))"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_runs_in_standalone_and_its_log_is_readable() {
    let dir = tempfile::tempdir().unwrap();
    let mut node = Standalone::start(dir.path());
    let api = node.api.clone();
    wait_ready(&api).await;
    api.upload("hello", HELLO).await;
    api.ok(
        "POST",
        "/api/v1/jobs",
        Some(json!({"name": "greet", "app": "default", "plugin": "hello", "schedule": {"kind": "none"}})),
    )
    .await;
    let task = api
        .ok(
            "POST",
            "/api/v1/jobs/greet/trigger",
            Some(json!({"params": "order-42"})),
        )
        .await["task_id"]
        .as_i64()
        .unwrap();
    let run_id = eventually(Duration::from_secs(60), "the run to succeed", || {
        let api = api.clone();
        async move {
            let t = api.ok("GET", &format!("/api/v1/tasks/{task}"), None).await;
            (t["status"] == "succeeded").then(|| t["last_run_id"].as_i64().unwrap())
        }
    })
    .await;
    let run = api.ok("GET", &format!("/api/v1/runs/{run_id}"), None).await;
    assert_eq!(run["status"], "succeeded");
    assert_eq!(run["exit_code"], 0);
    let log = api
        .ok(
            "GET",
            &format!("/api/v1/runs/{run_id}/log?from_line=1"),
            None,
        )
        .await;
    let lines: Vec<&str> = log["lines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_str().unwrap())
        .collect();
    assert_eq!(
        lines,
        vec!["hello from the sandbox", "your payload: order-42"]
    );
    assert_eq!(log["complete"], true);
    let rest = api
        .ok(
            "GET",
            &format!("/api/v1/runs/{run_id}/log?from_line=2"),
            None,
        )
        .await;
    assert_eq!(rest["lines"][0], "your payload: order-42");
    node.child.0.kill().unwrap();
    node.child.0.wait().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_in_flight_when_standalone_dies_is_lost_and_retried_at_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut node = Standalone::start(dir.path());
    let api = node.api.clone();
    wait_ready(&api).await;
    api.upload("spin", SPIN).await;
    api.ok(
        "POST",
        "/api/v1/jobs",
        Some(
            json!({"name": "long", "app": "default", "plugin": "spin", "schedule": {"kind": "none"},
                    "timeout_ms": 2000}),
        ),
    )
    .await;
    let task = api.ok("POST", "/api/v1/jobs/long/trigger", None).await["task_id"]
        .as_i64()
        .unwrap();
    eventually(Duration::from_secs(60), "the run to be running", || {
        let api = api.clone();
        async move {
            let t = api.ok("GET", &format!("/api/v1/tasks/{task}"), None).await;
            (t["status"] == "running").then_some(())
        }
    })
    .await;
    node.child.0.kill().unwrap();
    node.child.0.wait().unwrap();

    // At restart the in-flight run is lost at once (not after the 90 s heartbeat timeout) and
    // its task retried; the retry spins into its 2 s timeout.
    let mut node = Standalone::start(dir.path());
    let api = node.api.clone();
    let runs = eventually(Duration::from_secs(60), "a lost run and a retry", || {
        let api = api.clone();
        async move {
            let runs = api
                .ok("GET", &format!("/api/v1/runs?task={task}"), None)
                .await;
            let items = runs["items"].as_array().unwrap().clone();
            let lost = items.iter().any(|r| r["status"] == "lost");
            (lost && items.len() == 2).then_some(items)
        }
    })
    .await;
    assert!(
        runs.iter().any(|r| r["attempt"] == 2),
        "the retry is attempt 2: {runs:?}"
    );
    node.child.0.kill().unwrap();
    node.child.0.wait().unwrap();
}
