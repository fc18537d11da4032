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

/// An executor that stops answering is left out of round robin from the first request that
/// cannot reach it, though it is not dead yet (it would be after an hour here): of 20 tasks
/// due 100 ms apart, one attempt is spent on it, the rest run on the other executor.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_executor_is_left_out_of_the_route_before_it_is_dead() {
    let (db, _dir) = sqlite_url();
    let server = TestServer::start(&db, |c| c.executor_dead_after_ms = 3_600_000).await;
    let api = &server.api;
    let up = ExecutorDouble::start(&server.url, "default", Behaviour::Succeed).await;
    let gone = ExecutorDouble::start(&server.url, "default", Behaviour::Succeed).await;
    eventually(
        Duration::from_secs(30),
        "both executors to register",
        || async { (executor_count(api).await == 2).then_some(()) },
    )
    .await;
    gone.kill();
    api.upload_plugin("noop").await;
    api.ok(
        "POST",
        "/api/v1/jobs",
        Some(json!({"name": "rr", "app": "default", "plugin": "noop",
                    "schedule": {"kind": "none"}, "route": "round_robin", "max_attempts": 1})),
    )
    .await;
    let tasks: Vec<_> = (0..20)
        .map(|i| json!({"job": "rr", "delay_ms": 500 + i * 100}))
        .collect();
    let ids = api.add_tasks(tasks).await;
    let mut failed = Vec::new();
    for &id in &ids {
        let task = eventually(Duration::from_secs(30), "the task to end", || async move {
            let t = api.ok("GET", &format!("/api/v1/tasks/{id}"), None).await;
            (t["status"] == "succeeded" || t["status"] == "dead").then_some(t)
        })
        .await;
        if task["status"] == "dead" {
            failed.push(task);
        }
    }
    assert_eq!(failed.len(), 1, "one attempt reached for it: {failed:?}");
    assert_eq!(up.received_count(), 19);
    let metrics = api.metrics().await;
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("rota_executors_unreachable_total 1")),
        "{metrics}"
    );
}
