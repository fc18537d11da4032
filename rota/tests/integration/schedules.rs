//! When a job's tasks run, on the path users walk (SPEC §11), on a real node with real
//! HTTP to an executor, on SQLite and on MariaDB: a fixed-delay job whose plugin takes
//! longer than its delay (each fire starts at least the delay after the previous run
//! ended, so no two runs ever overlap), and a debounced key edited five times (one run,
//! with the last payload).

use crate::support;

use std::time::Duration;

use serde_json::{Value, json};
use support::*;

/// The delay, and how long each run takes (longer: a fixed rate would overlap).
const DELAY_MS: i64 = 300;
const RUN_MS: u64 = 450;
const RUNS: usize = 4;

/// A fresh MariaDB database; `None` (reported missing: a failure under `CI=true`)
/// without one.
async fn mariadb(prefix: &str) -> Option<rota_testkit::MysqlDb> {
    let Some(base) = rota_testkit::mysql_base_url() else {
        rota_testkit::missing("ROTA_TEST_MYSQL_URL is not set: the MariaDB case needs it");
        return None;
    };
    Some(rota_testkit::MysqlDb::create_on(&base, prefix).await)
}

async fn fixed_delay_spaces_runs_from_their_ends(db_url: &str) {
    let server = TestServer::start(db_url, |_| {}).await;
    let api = &server.api;
    api.upload_plugin("noop").await;
    let _executor = ExecutorDouble::start(&server.url, "default", Behaviour::Takes(RUN_MS)).await;
    let created = api
        .ok(
            "POST",
            "/api/v1/jobs",
            Some(
                json!({"name": "after-each", "app": "default", "plugin": "noop",
                        "schedule": {"kind": "fixed_delay", "every_ms": DELAY_MS}}),
            ),
        )
        .await;
    assert_eq!(
        created["schedule"],
        json!({"kind": "fixed_delay", "every_ms": DELAY_MS})
    );
    let finished = |r: &Value| r["status"] == "succeeded";
    let runs = eventually(Duration::from_secs(30), "runs of the job", || async {
        let page = api
            .ok("GET", "/api/v1/runs?job=after-each&limit=100", None)
            .await;
        let runs = page["items"].as_array().unwrap().clone();
        (runs.iter().filter(|r| finished(r)).count() >= RUNS).then_some(runs)
    })
    .await;
    api.ok(
        "PATCH",
        &format!("/api/v1/jobs/{}", created["id"]),
        Some(json!({"enabled": false})),
    )
    .await;
    let ms = |r: &Value, k: &str| epoch_ms(&r[k]);
    let mut done: Vec<(i64, i64)> = runs
        .iter()
        .filter(|r| finished(r))
        .map(|r| (ms(r, "started_at"), ms(r, "finished_at")))
        .collect();
    done.sort();
    for pair in done.windows(2) {
        let ((_, end), (next, _)) = (pair[0], pair[1]);
        assert!(
            next - end >= DELAY_MS,
            "a run started {} ms after the previous one ended (delay {DELAY_MS}): {done:?}",
            next - end
        );
    }
    // Each fire was a task of its own, run once.
    assert!(runs.iter().all(|r| r["attempt"] == 1), "{runs:?}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fixed_delay_job_never_overlaps_a_slow_plugin_on_sqlite() {
    let (db, _dir) = sqlite_url();
    fixed_delay_spaces_runs_from_their_ends(&db).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fixed_delay_job_never_overlaps_a_slow_plugin_on_mariadb() {
    let Some(db) = mariadb("rota_fd").await else {
        return;
    };
    fixed_delay_spaces_runs_from_their_ends(&db.url).await;
    db.drop_db().await;
}

async fn five_edits_run_once_with_the_last(db_url: &str) {
    let server = TestServer::start(db_url, |_| {}).await;
    let api = &server.api;
    api.upload_plugin("noop").await;
    let executor = ExecutorDouble::start(&server.url, "default", Behaviour::Succeed).await;
    api.ok(
        "POST",
        "/api/v1/jobs",
        Some(
            json!({"name": "reindex", "app": "default", "plugin": "noop",
                    "schedule": {"kind": "none"}, "debounce_ms": 10_000}),
        ),
    )
    .await;
    // Five edits of one document, each re-indexing it 1.5 s after itself.
    for v in 1..=5 {
        api.ok(
            "POST",
            "/api/v1/tasks",
            Some(
                json!({"job": "reindex", "key": "doc-42", "payload": format!("v{v}"),
                        "delay_ms": 1_500}),
            ),
        )
        .await;
    }
    let tasks = eventually(Duration::from_secs(30), "the re-index to run", || async {
        let page = api.ok("GET", "/api/v1/tasks?job=reindex", None).await;
        let tasks = page["items"].as_array().unwrap().clone();
        tasks
            .iter()
            .any(|t| t["status"] == "succeeded")
            .then_some(tasks)
    })
    .await;
    let ran: Vec<&Value> = tasks
        .iter()
        .filter(|t| t["status"] == "succeeded")
        .collect();
    assert_eq!(ran.len(), 1, "{tasks:?}");
    assert_eq!(ran[0]["payload"], "v5");
    let received: Vec<String> = executor
        .received()
        .iter()
        .map(|r| r.trigger.input.clone())
        .collect();
    assert_eq!(received, ["v5"], "one run, with the last payload");
    // Whatever was replaced on the way was cancelled, never run.
    assert!(
        tasks
            .iter()
            .all(|t| t["status"] == "succeeded" || t["status"] == "cancelled"),
        "{tasks:?}"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_edits_of_a_debounced_key_run_once_with_the_last_on_sqlite() {
    let (db, _dir) = sqlite_url();
    five_edits_run_once_with_the_last(&db).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_edits_of_a_debounced_key_run_once_with_the_last_on_mariadb() {
    let Some(db) = mariadb("rota_db").await else {
        return;
    };
    five_edits_run_once_with_the_last(&db.url).await;
    db.drop_db().await;
}
