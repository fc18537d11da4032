//! The `rota` imports end to end, backed by a real scheduler (SQLite) and a real
//! `rota executor` process: a job's key-value state is its own, survives a scheduler
//! restart, and a secret set through the API reaches the run but no log, API answer or
//! console page.

use crate::fixtures;
use crate::support;

use std::time::Duration;

use serde_json::json;
use support::*;

/// Creates a task of `job` with `payload`, waits for it to succeed, returns its run's log.
async fn run_task(api: &Api, job: &str, payload: &str) -> Vec<String> {
    let id = api
        .ok(
            "POST",
            "/api/v1/tasks",
            Some(json!({"job": job, "payload": payload})),
        )
        .await["id"]
        .as_i64()
        .unwrap();
    let task = task_reaches(api, id, "succeeded").await;
    run_log(api, task["last_run_id"].as_i64().unwrap()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_value_state_is_per_job_and_survives_a_scheduler_restart() {
    let (db, _db_dir) = sqlite_url();
    let server = TestServer::start(&db, |c| c.heartbeat_interval_ms = 500).await;
    let address = server.url.trim_start_matches("http://").to_owned();
    let dir = tempfile::tempdir().unwrap();
    let _executor = spawn_executor(
        None,
        &server.url,
        &format!("127.0.0.1:{}", free_port()),
        &dir.path().join("e"),
        None,
    );
    eventually(
        Duration::from_secs(30),
        "the executor to register",
        || async { (executor_count(&server.api).await == 1).then_some(()) },
    )
    .await;
    server.api.upload("kv", fixtures::kv_plugin()).await;
    for job in ["a", "b"] {
        server
            .api
            .ok(
                "POST",
                "/api/v1/jobs",
                Some(json!({"name": job, "app": "default", "plugin": "kv", "schedule": {"kind": "none"}})),
            )
            .await;
    }
    // Each line pair: what `k` held before (-2: nothing), then the code of setting it.
    assert_eq!(run_task(&server.api, "a", "alpha").await, ["-2", "0"]);
    assert_eq!(
        run_task(&server.api, "b", "beta").await,
        ["-2", "0"],
        "b's state is its own"
    );
    assert_eq!(
        run_task(&server.api, "a", "again").await,
        ["5", "alpha", "0"]
    );

    // A new scheduler process on the same database and address: the state is still there.
    server.stop().await;
    let server = TestServer::start_on(&address, &db, |c| c.heartbeat_interval_ms = 500).await;
    assert_eq!(
        run_task(&server.api, "a", "later").await,
        ["5", "again", "0"]
    );
    assert_eq!(run_task(&server.api, "b", "x").await, ["4", "beta", "0"]);

    // Deleting a job deletes its state: a new job of that name starts empty.
    server.api.ok("DELETE", "/api/v1/jobs/b", None).await;
    server
        .api
        .ok(
            "POST",
            "/api/v1/jobs",
            Some(json!({"name": "b", "app": "default", "plugin": "kv", "schedule": {"kind": "none"}})),
        )
        .await;
    assert_eq!(run_task(&server.api, "b", "fresh").await, ["-2", "0"]);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_reaches_its_run_and_nothing_else() {
    const VALUE: &str = "pw-7d1c0ffee-secret";
    let (db, _db_dir) = sqlite_url();
    let server = TestServer::start(&db, |c| c.heartbeat_interval_ms = 500).await;
    let api = &server.api;
    let dir = tempfile::tempdir().unwrap();
    let executor_log = dir.path().join("e.log");
    let _executor = spawn_executor(
        None,
        &server.url,
        &format!("127.0.0.1:{}", free_port()),
        &dir.path().join("e"),
        Some((&executor_log, "debug")),
    );
    eventually(
        Duration::from_secs(30),
        "the executor to register",
        || async { (executor_count(api).await == 1).then_some(()) },
    )
    .await;

    // Bad names and values are refused with the reason.
    let (status, body) = api
        .call(
            "PUT",
            "/api/v1/apps/default/secrets/has%20space",
            Some(json!({"value": "x"})),
        )
        .await;
    assert_eq!(status, 422, "{body}");
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("may hold only letters"),
        "{body}"
    );
    let (status, body) = api
        .call(
            "PUT",
            "/api/v1/apps/default/secrets/BIG",
            Some(json!({"value": "v".repeat(70_000)})),
        )
        .await;
    assert_eq!(status, 413, "{body}");

    let stored = api
        .ok(
            "PUT",
            "/api/v1/apps/default/secrets/DB_PASSWORD",
            Some(json!({"value": VALUE})),
        )
        .await;
    assert_eq!(stored["name"], "DB_PASSWORD");
    api.upload(
        "reads-secret",
        fixtures::secret_plugin("DB_PASSWORD", false),
    )
    .await;
    api.ok(
        "POST",
        "/api/v1/jobs",
        Some(json!({"name": "uses-secret", "app": "default", "plugin": "reads-secret", "schedule": {"kind": "none"}})),
    )
    .await;
    // The run got it (its length), and nothing printed it.
    let lines = run_task(api, "uses-secret", "").await;
    assert_eq!(lines, [VALUE.len().to_string()]);

    // Not in any API answer, nor in the console's pages, nor in either node's logs.
    let mut answers = Vec::new();
    for path in [
        "/api/v1/apps/default/secrets",
        "/api/v1/jobs",
        "/api/v1/runs",
        "/api/v1/tasks",
    ] {
        answers.push(api.ok("GET", path, None).await.to_string());
    }
    answers.push(stored.to_string());
    assert!(answers.iter().all(|a| !a.contains(VALUE)), "{answers:?}");
    assert!(answers[0].contains("DB_PASSWORD"));
    let executor_log = std::fs::read_to_string(&executor_log).unwrap();
    assert!(!executor_log.is_empty(), "the executor logged at debug");
    assert!(
        !executor_log.contains(VALUE),
        "the executor's log holds the secret"
    );
    // At rest it is sealed: the database file does not hold it in clear.
    let db_file = db.trim_start_matches("sqlite:");
    for file in [db_file.to_owned(), format!("{db_file}-wal")] {
        if let Ok(bytes) = std::fs::read(&file) {
            assert!(
                !bytes.windows(VALUE.len()).any(|w| w == VALUE.as_bytes()),
                "{file} holds the secret in clear"
            );
        }
    }
    // Deleted, the run no longer finds it.
    let (status, _) = api
        .call("DELETE", "/api/v1/apps/default/secrets/DB_PASSWORD", None)
        .await;
    assert_eq!(status, 204);
    assert_eq!(run_task(api, "uses-secret", "").await, ["-2"]);
    server.stop().await;
}
