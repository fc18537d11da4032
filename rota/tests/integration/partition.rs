//! An executor cut off by a network partition: a real `rota executor` in a network namespace
//! of the test's own, joined to the host by a veth pair. Mid-run the link goes down; the
//! scheduler hears nothing more from it, marks its run `lost` and retries it on the other
//! executor. When the link comes back, the cut-off executor's late report of that run does
//! not undo the `lost`.
//!
//! Needs root (to create the namespace); skipped with a message otherwise. CI runs as root.

use crate::support;

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::json;
use support::netns::{TestNet, is_root};
use support::*;

/// Loops until its 3 s timeout.
const SPIN: &str = r#"(module (memory (export "memory") 1) (func (export "_start") (loop br 0)))"#;

/// Batch files waiting in an executor's report spool.
fn spooled(data_dir: &Path) -> usize {
    std::fs::read_dir(data_dir.join("spool"))
        .map(|d| {
            d.filter_map(Result::ok)
                .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
                .count()
        })
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_executors_run_is_lost_and_retried_on_the_other() {
    if !is_root() {
        rota_testkit::missing("not root: cannot create a network namespace");
        return;
    }
    let net = TestNet::create();
    let (db, _db_dir) = sqlite_url();
    let server = TestServer::start_on(&format!("{}:0", net.host_ip), &db, |c| {
        c.heartbeat_interval_ms = 500;
        c.executor_dead_after_ms = 2_000;
    })
    .await;
    let api = &server.api;
    let dir = tempfile::tempdir().unwrap();
    let (cut_off_data, other_data) = (dir.path().join("cut-off"), dir.path().join("other"));
    let cut_off_address = format!("{}:9191", net.inside_ip);
    let cut_off_log = dir.path().join("cut-off.log");
    let _cut_off = spawn_executor(
        Some(&net.name),
        &server.url,
        &cut_off_address,
        &cut_off_data,
        Some((&cut_off_log, "info")),
    );
    eventually(
        Duration::from_secs(30),
        "the executor in the namespace to register",
        || async { (executor_count(api).await == 1).then_some(()) },
    )
    .await;

    api.upload("spin", SPIN).await;
    api.ok(
        "POST",
        "/api/v1/jobs",
        Some(
            json!({"name": "long", "app": "default", "plugin": "spin", "schedule": {"kind": "none"},
                    "timeout_ms": 3000}),
        ),
    )
    .await;
    let task = api.ok("POST", "/api/v1/jobs/long/trigger", None).await["task_id"]
        .as_i64()
        .unwrap();
    let first = eventually(
        Duration::from_secs(30),
        "the run to start in the namespace",
        || async move {
            let run = task_runs(api, task).await.first().cloned()?;
            (run["status"] == "running").then_some(run)
        },
    )
    .await;
    assert!(
        first["executor"]
            .as_str()
            .unwrap()
            .contains(&cut_off_address),
        "{first}"
    );

    // A second executor on the host, then the partition.
    let other_address = format!("127.0.0.1:{}", free_port());
    let other_log = dir.path().join("other.log");
    let _other = spawn_executor(
        None,
        &server.url,
        &other_address,
        &other_data,
        Some((&other_log, "info")),
    );
    eventually(
        Duration::from_secs(30),
        "the second executor to register",
        || async { (executor_count(api).await == 2).then_some(()) },
    )
    .await;
    net.cut();
    let cut_at = Instant::now();

    // Lost once the executor is dead (2 s of silence), retried at once on the other one,
    // where it spins into its timeout.
    let deadline = Instant::now() + Duration::from_secs(60);
    let runs = loop {
        let runs = task_runs(api, task).await;
        if runs
            .iter()
            .any(|r| r["attempt"] == 2 && r["status"] == "timeout")
        {
            break runs;
        }
        assert!(
            Instant::now() < deadline,
            "the retry did not end on the other executor within 60 s: {runs:#?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let lost = runs.iter().find(|r| r["attempt"] == 1).unwrap();
    assert_eq!(lost["status"], "lost", "{lost}");
    assert!(
        lost["message"]
            .as_str()
            .unwrap_or_default()
            .contains("stopped heartbeating"),
        "{lost}"
    );
    let retry = runs.iter().find(|r| r["attempt"] == 2).unwrap();
    assert!(
        retry["executor"].as_str().unwrap().contains(&other_address),
        "retried on the host's executor: {retry}"
    );
    let retried_after = cut_at.elapsed();

    eventually(
        Duration::from_secs(15),
        "the cut-off executor to keep its report of attempt 1 in its spool",
        || async { (spooled(&cut_off_data) > 0).then_some(()) },
    )
    .await;

    // The link comes back. The cut-off executor ran the first attempt into its timeout
    // meanwhile and kept the report; it registers again and delivers it. The run stays lost.
    net.heal();
    eventually(
        Duration::from_secs(30),
        "the cut-off executor to register again",
        || async { (executor_count(api).await == 2).then_some(()) },
    )
    .await;
    eventually(
        Duration::from_secs(30),
        "the cut-off executor's held report to be delivered",
        || async { (spooled(&cut_off_data) == 0).then_some(()) },
    )
    .await;
    let runs = task_runs(api, task).await;
    assert_eq!(runs.len(), 2, "{runs:#?}");
    let lost = runs.iter().find(|r| r["attempt"] == 1).unwrap();
    assert_eq!(
        lost["status"], "lost",
        "a late report undid the lost: {lost}"
    );
    let task_now = api.ok("GET", &format!("/api/v1/tasks/{task}"), None).await;
    assert_eq!(task_now["attempts"], 2, "{task_now}");
    eprintln!(
        "partition: attempt 1 lost and attempt 2 ended on the other executor {:.1} s after the cut",
        retried_after.as_secs_f64()
    );
    server.stop().await;
}
