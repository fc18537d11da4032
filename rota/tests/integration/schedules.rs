//! Schedules on the path users walk (SPEC §11): a fixed-delay job whose plugin takes
//! longer than its delay, on a real node with real HTTP to an executor, on SQLite and on
//! MariaDB. Each fire starts at least the delay after the previous run ended, so no two
//! runs ever overlap, whatever the plugin takes.

use crate::support;

use std::time::Duration;

use serde_json::{Value, json};
use support::*;

/// The delay, and how long each run takes (longer: a fixed rate would overlap).
const DELAY_MS: i64 = 300;
const RUN_MS: u64 = 450;
const RUNS: usize = 4;

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
    let Some(base) = rota_testkit::mysql_base_url() else {
        rota_testkit::missing("ROTA_TEST_MYSQL_URL is not set: the MariaDB case needs it");
        return;
    };
    let db = rota_testkit::MysqlDb::create_on(&base, "rota_fd").await;
    fixed_delay_spaces_runs_from_their_ends(&db.url).await;
    db.drop_db().await;
}
