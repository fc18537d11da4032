//! Rota's promises on the paths users walk (SPEC §4): a restart with work due, an app
//! whose executors are all down, `max_concurrency` (its tasks over the bound throttled).
//! Real processes or a real node over real HTTP; the cluster cases (job changes seen by every node, nodes booting together)
//! are in `cluster.rs`.

use crate::support;

use std::time::Duration;

use serde_json::{Value, json};
use support::*;

/// Does nothing: the restart test is about when runs start, not what they do.
const NOOP: &str = r#"(module (memory (export "memory") 1) (func (export "_start")))"#;

/// Every task of `job` in one list (up to 1,000), as `(id, status, attempts)`.
async fn tasks_of(api: &Api, job: &str) -> Vec<(i64, String, i64)> {
    let page = api
        .ok("GET", &format!("/api/v1/tasks?job={job}&limit=1000"), None)
        .await;
    page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["id"].as_i64().unwrap(),
                t["status"].as_str().unwrap().to_owned(),
                t["attempts"].as_i64().unwrap(),
            )
        })
        .collect()
}

/// The runs of `job` (up to 1,000).
async fn runs_of(api: &Api, job: &str) -> Vec<Value> {
    let page = api
        .ok("GET", &format!("/api/v1/runs?job={job}&limit=1000"), None)
        .await;
    page["items"].as_array().unwrap().clone()
}

/// Waits until every task of `job` has left `pending`/`running`, and returns them.
async fn settled(api: &Api, job: &str, n: usize, within: Duration) -> Vec<(i64, String, i64)> {
    eventually(within, "every task to finish", || async {
        let tasks = tasks_of(api, job).await;
        (tasks.len() == n
            && tasks
                .iter()
                .all(|(_, s, _)| !["pending", "throttled", "running"].contains(&s.as_str())))
        .then_some(tasks)
    })
    .await
}

/// Issue 13, case 1: `rota standalone` is SIGKILLed 2 s after accepting 1,000 tasks due
/// 3–8 s ahead and restarted on the same data directory. The restarted node fires them
/// before its embedded executor has registered again; they wait for it instead of failing
/// (on `main` before the fix, 400 of them ended `dead`: "no live executor").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_with_due_tasks_runs_every_one_of_them_once() {
    let dir = tempfile::tempdir().unwrap();
    let mut node = Standalone::start(dir.path());
    let api = node.api.clone();
    wait_ready(&api).await;
    api.upload("noop", NOOP).await;
    api.ok(
        "POST",
        "/api/v1/jobs",
        Some(json!({"name": "close-order", "app": "default", "plugin": "noop", "schedule": {"kind": "none"}})),
    )
    .await;
    let tasks: Vec<Value> = (0..1_000)
        .map(|i| json!({"job": "close-order", "delay_ms": 3_000 + i * 5}))
        .collect();
    let ids = api.add_tasks(tasks).await;
    assert_eq!(ids.len(), 1_000);
    // The user's scenario: the process dies 2 s later, before any of them is due.
    tokio::time::sleep(Duration::from_secs(2)).await;
    node.child.0.kill().unwrap();
    node.child.0.wait().unwrap();

    let node = Standalone::start(dir.path());
    let api = node.api.clone();
    let tasks = settled(&api, "close-order", 1_000, Duration::from_secs(90)).await;
    let not_succeeded: Vec<_> = tasks.iter().filter(|(_, s, _)| s != "succeeded").collect();
    assert!(
        not_succeeded.is_empty(),
        "{} of 1,000 did not succeed: {:?}",
        not_succeeded.len(),
        &not_succeeded[..not_succeeded.len().min(5)]
    );
    assert!(
        tasks.iter().all(|(_, _, attempts)| *attempts == 1),
        "waiting for the executor is not an attempt"
    );
    let runs = runs_of(&api, "close-order").await;
    assert_eq!(runs.len(), 1_000, "one run per task");
    assert!(runs.iter().all(|r| r["status"] == "succeeded"));
}

/// Issue 13, case 1 on `rota server` with a remote executor: every executor of the app is
/// down — first still registered but unreachable, then reaped from the registry — while
/// tasks come due. None of them is an attempt; they all go out once an executor of the
/// app registers again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fires_wait_while_every_executor_is_down_and_go_out_when_one_returns() {
    let (db, _dir) = sqlite_url();
    let server = TestServer::start(&db, |c| {
        c.heartbeat_interval_ms = 500;
        c.executor_dead_after_ms = 2_000;
    })
    .await;
    let api = &server.api;
    api.upload_plugin("noop").await;
    api.ok(
        "POST",
        "/api/v1/jobs",
        Some(json!({"name": "close-order", "app": "default", "plugin": "noop", "schedule": {"kind": "none"}})),
    )
    .await;
    let gone = ExecutorDouble::start(&server.url, "default", Behaviour::Succeed).await;
    gone.kill();
    let tasks: Vec<Value> = (0..50)
        .map(|i| json!({"job": "close-order", "delay_ms": 200 + i * 20}))
        .collect();
    api.add_tasks(tasks).await;
    // Down past the dead-after time: the executor leaves the registry meanwhile.
    eventually(
        Duration::from_secs(20),
        "the dead executor to leave the registry",
        || async { (executor_count(api).await == 0).then_some(()) },
    )
    .await;
    let waiting = tasks_of(api, "close-order").await;
    assert!(
        waiting.iter().all(|(_, s, a)| s == "pending" && *a == 0),
        "due tasks wait, unattempted: {waiting:?}"
    );
    assert!(runs_of(api, "close-order").await.is_empty(), "no run yet");

    let back = ExecutorDouble::start(&server.url, "default", Behaviour::Succeed).await;
    let tasks = settled(api, "close-order", 50, Duration::from_secs(20)).await;
    assert!(
        tasks.iter().all(|(_, s, a)| s == "succeeded" && *a == 1),
        "{tasks:?}"
    );
    assert_eq!(
        back.received_count(),
        50,
        "each sent once, to the executor that came back"
    );
    let runs = runs_of(api, "close-order").await;
    assert_eq!(runs.len(), 50);
    server.stop().await;
}

/// …and a fire that waits longer than its job's `no_executor_timeout_ms` fails as an
/// attempt, with the reason (here: its one attempt, so the task is dead).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fire_without_an_executor_fails_after_its_jobs_timeout() {
    let (db, _dir) = sqlite_url();
    let server = TestServer::start(&db, |_| {}).await;
    let api = &server.api;
    api.upload_plugin("noop").await;
    let job = api
        .ok(
            "POST",
            "/api/v1/jobs",
            Some(
                json!({"name": "ghost-job", "app": "ghost", "plugin": "noop",
                        "schedule": {"kind": "none"}, "no_executor_timeout_ms": 1_500}),
            ),
        )
        .await;
    assert_eq!(job["no_executor_timeout_ms"], 1_500);
    let bad = api
        .call(
            "PATCH",
            "/api/v1/jobs/ghost-job",
            Some(json!({"no_executor_timeout_ms": 10})),
        )
        .await;
    assert_eq!(bad.0, 422, "{}", bad.1);
    assert!(
        bad.1["error"]
            .as_str()
            .unwrap()
            .contains("no_executor_timeout_ms")
    );
    let task = api
        .ok("POST", "/api/v1/tasks", Some(json!({"job": "ghost-job"})))
        .await["id"]
        .as_i64()
        .unwrap();
    let t = task_reaches(api, task, "dead").await;
    assert_eq!(t["attempts"], 1);
    let runs = runs_of(api, "ghost-job").await;
    assert_eq!(runs.len(), 1);
    let message = runs[0]["message"].as_str().unwrap();
    assert!(
        message.contains("no live executor in app `ghost`"),
        "{message}"
    );
    server.stop().await;
}

/// Issue 13, case 5: a job's `max_concurrency` bounds its runs at once across executors.
/// Thirty tasks all due now, two executors whose runs take 300 ms: at no instant do more
/// than three of the job's runs overlap, and all thirty succeed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_concurrency_bounds_a_jobs_runs_across_executors() {
    let (db, _dir) = sqlite_url();
    let server = TestServer::start(&db, |_| {}).await;
    let api = &server.api;
    api.upload_plugin("noop").await;
    let _a = ExecutorDouble::start(&server.url, "default", Behaviour::Takes(300)).await;
    let _b = ExecutorDouble::start(&server.url, "default", Behaviour::Takes(300)).await;
    api.ok(
        "POST",
        "/api/v1/jobs",
        Some(
            json!({"name": "limited", "app": "default", "plugin": "noop",
                    "schedule": {"kind": "none"}, "route": "round_robin", "max_concurrency": 3}),
        ),
    )
    .await;
    let tasks: Vec<Value> = (0..30).map(|_| json!({"job": "limited"})).collect();
    api.add_tasks(tasks).await;
    // Those over the bound wait throttled, no attempt spent (SPEC §11).
    eventually(Duration::from_secs(10), "a throttled task", || async {
        tasks_of(api, "limited")
            .await
            .iter()
            .any(|(_, s, attempts)| s == "throttled" && *attempts == 0)
            .then_some(())
    })
    .await;
    let tasks = settled(api, "limited", 30, Duration::from_secs(60)).await;
    assert!(tasks.iter().all(|(_, s, _)| s == "succeeded"), "{tasks:?}");
    let runs = runs_of(api, "limited").await;
    assert_eq!(runs.len(), 30);
    let ms = |r: &Value, k: &str| epoch_ms(&r[k]);
    let mut edges: Vec<(i64, i32)> = runs
        .iter()
        .flat_map(|r| [(ms(r, "started_at"), 1), (ms(r, "finished_at"), -1)])
        .collect();
    // Ends before starts at the same instant: a run that ends as another starts is not an
    // overlap.
    edges.sort();
    let (mut now, mut most) = (0, 0);
    for (_, step) in edges {
        now += step;
        most = most.max(now);
    }
    assert!(most <= 3, "{most} runs of the job overlapped");
    assert!(most >= 2, "the runs did run side by side ({most})");
    // The one scan that found all thirty throttled the 27 beyond the bound, once each.
    let counted: Vec<String> = api
        .metrics()
        .await
        .lines()
        .filter(|l| l.starts_with("rota_throttled_total{job=\"limited\"}"))
        .map(str::to_owned)
        .collect();
    assert_eq!(counted, ["rota_throttled_total{job=\"limited\"} 27"]);
    server.stop().await;
}
