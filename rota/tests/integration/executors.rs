//! Two real `rota executor` processes: SIGKILL the one running a plugin; the run is marked
//! `lost` and retried on the other.

use crate::support;

use std::time::Duration;

use serde_json::json;
use support::*;

/// Loops forever: the run is in flight when its executor is killed.
const SPIN: &str = r#"(module (memory (export "memory") 1) (func (export "_start") (loop br 0)))"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_on_a_killed_executor_is_lost_and_retried_on_the_other() {
    let (db, _dir) = sqlite_url();
    // Executors heartbeat every 500 ms (the registration ack tells them) and are dead after 2 s.
    let server = TestServer::start(&db, |c| {
        c.heartbeat_interval_ms = 500;
        c.executor_dead_after_ms = 2_000;
    })
    .await;
    let api = &server.api;
    let data = tempfile::tempdir().unwrap();
    let ports = [free_port(), free_port()];
    let mut executors: Vec<KillOnDrop> = ports
        .iter()
        .enumerate()
        .map(|(i, &port)| {
            spawn_executor(
                None,
                &server.url,
                &format!("127.0.0.1:{port}"),
                &data.path().join(format!("e{i}")),
                None,
            )
        })
        .collect();
    eventually(
        Duration::from_secs(30),
        "both executors to register",
        || async { (executor_count(api).await == 2).then_some(()) },
    )
    .await;

    api.upload("spin", SPIN).await;
    api.ok(
        "POST",
        "/api/v1/jobs",
        Some(
            json!({"name": "long", "app": "default", "plugin": "spin", "schedule": {"kind": "none"},
                    "timeout_ms": 3000, "route": "first"}),
        ),
    )
    .await;
    let task = api.ok("POST", "/api/v1/jobs/long/trigger", None).await["task_id"]
        .as_i64()
        .unwrap();
    let first = eventually(Duration::from_secs(30), "the run to start", || async move {
        let runs = api
            .ok("GET", &format!("/api/v1/runs?task={task}"), None)
            .await;
        let run = runs["items"].as_array().unwrap().first().cloned()?;
        (run["status"] == "running").then_some(run)
    })
    .await;
    let victim_address = first["executor"].as_str().unwrap().to_owned();
    let victim = ports
        .iter()
        .position(|p| victim_address.ends_with(&format!(":{p}")))
        .unwrap();
    executors[victim].0.kill().unwrap();
    executors[victim].0.wait().unwrap();

    // Lost after the dead timeout, retried at once on the survivor, where it spins into its
    // 3 s timeout.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let runs = loop {
        let page = api
            .ok("GET", &format!("/api/v1/runs?task={task}"), None)
            .await;
        let items = page["items"].as_array().unwrap().clone();
        if items
            .iter()
            .any(|r| r["attempt"] == 2 && r["status"] == "timeout")
        {
            break items;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the retry did not end on the survivor within 60 s; runs: {items:#?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let lost = runs.iter().find(|r| r["attempt"] == 1).unwrap();
    assert_eq!(lost["status"], "lost");
    let retry = runs.iter().find(|r| r["attempt"] == 2).unwrap();
    assert_ne!(
        retry["executor"], lost["executor"],
        "retried on the other executor"
    );
    drop(executors);
    server.stop().await;
}
