//! Crash safety of the scan's claim: SIGKILL a `rota server` right after it claimed due
//! work, restart it on the same database, and check that every claimed fire is dispatched
//! exactly once — none lost (XXL-JOB loses up to 5 s of fires here), none sent twice.

use crate::support;

use std::collections::HashMap;
use std::time::Duration;

use serde_json::json;
use support::*;

async fn count_claimed(db: &str) -> i64 {
    let pool = sqlx::SqlitePool::connect(db).await.unwrap();
    let n: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM tasks WHERE status = 'claimed'")
        .fetch_one(&pool)
        .await
        .unwrap();
    pool.close().await;
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_server_dispatches_every_claimed_fire_exactly_once_after_restart() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite:{}", dir.path().join("rota.db").display());
    let log = dir.path().join("server.log");
    let port = free_port();
    let api = Api::new(format!("http://127.0.0.1:{port}"));

    let mut server = spawn_server(&db, port, &log, "rota-1");
    wait_healthy(&api).await;
    let executor = ExecutorDouble::start(&api.base, "default", Behaviour::Succeed).await;
    api.upload_plugin("noop").await;
    api.ok(
        "POST",
        "/api/v1/jobs",
        Some(json!({"name": "close-order", "app": "default", "plugin": "noop", "schedule": {"kind": "none"}})),
    )
    .await;
    // 60 tasks due over the next 0.6–3.6 s: all inside the window, so all claimed at once.
    let tasks: Vec<_> = (0..60)
        .map(|i| json!({"job": "close-order", "delay_ms": 600 + i * 50}))
        .collect();
    let ids = api.add_tasks(tasks).await;
    assert_eq!(ids.len(), 60);
    let claimed = count_claimed(&db).await;
    assert!(claimed > 0, "the tasks are claimed before the kill");

    // Let a few fire (some recorded, some perhaps sent but not yet recorded), then SIGKILL.
    tokio::time::sleep(Duration::from_millis(900)).await;
    server.0.kill().unwrap();
    server.0.wait().unwrap();
    let before_restart = executor.received().len();

    let server = spawn_server(&db, port, &log, "rota-1");
    wait_healthy(&api).await;
    for &id in &ids {
        eventually(
            Duration::from_secs(30),
            "every task to succeed after the restart",
            || {
                let api = api.clone();
                async move {
                    let t = api.ok("GET", &format!("/api/v1/tasks/{id}"), None).await;
                    (t["status"] == "succeeded").then_some(())
                }
            },
        )
        .await;
    }

    // Exactly once: each task reached the executor once and has one run.
    let mut sends: HashMap<i64, usize> = HashMap::new();
    for r in executor.received() {
        *sends.entry(r.trigger.task_id).or_default() += 1;
    }
    for &id in &ids {
        assert_eq!(
            sends.get(&id),
            Some(&1),
            "task {id} was sent {:?} times",
            sends.get(&id)
        );
        let runs = api
            .ok("GET", &format!("/api/v1/runs?task={id}"), None)
            .await;
        assert_eq!(
            runs["items"].as_array().unwrap().len(),
            1,
            "task {id} has one run"
        );
    }
    let log_text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        before_restart < ids.len(),
        "the kill came before everything fired ({before_restart} of {} sent)",
        ids.len()
    );
    assert!(
        log_text.contains("recovering claims"),
        "the restart recovered the claims:\n{log_text}"
    );
    for line in log_text.lines().filter(|l| l.contains("recovered claims")) {
        eprintln!("{line}");
    }
    eprintln!("sent before the kill: {before_restart} of {}", ids.len());
    drop(server);
}
