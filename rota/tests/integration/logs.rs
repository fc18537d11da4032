//! Run logs as users read them, through the scheduler's API from a real `rota executor`
//! process: line by line while the run is going, whole once it ended, still there after
//! the executor was SIGKILLed and started again — and no file per run on its disk.

use crate::support;

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use support::*;

/// Prints `line 1`, sleeps 2 s (`poll_oneoff` on the monotonic clock), prints `line 2`.
const SLOW_TWO_LINES: &str = r#"(module
  (import "wasi_snapshot_preview1" "fd_write" (func $write (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "poll_oneoff" (func $poll (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 100) "line 1\0aline 2\0a")
  (func $line (param $at i32)
    (i32.store (i32.const 0) (local.get $at))
    (i32.store (i32.const 4) (i32.const 7))
    (drop (call $write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8))))
  (func (export "_start")
    (call $line (i32.const 100))
    (i64.store (i32.const 1024) (i64.const 0))
    (i32.store8 (i32.const 1032) (i32.const 0))
    (i32.store (i32.const 1040) (i32.const 1))
    (i64.store (i32.const 1048) (i64.const 2000000000))
    (i64.store (i32.const 1056) (i64.const 0))
    (i32.store16 (i32.const 1064) (i32.const 0))
    (drop (call $poll (i32.const 1024) (i32.const 2048) (i32.const 1) (i32.const 3000)))
    (call $line (i32.const 107))))"#;

/// Prints its payload and a line of its own (what a real plugin's log looks like).
const ECHO: &str = r#"(module
  (import "wasi_snapshot_preview1" "fd_read" (func $read (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_write" (func $write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 100) "done\0a")
  (func (export "_start")
    (i32.store (i32.const 16) (i32.const 200))
    (i32.store (i32.const 20) (i32.const 100))
    (drop (call $read (i32.const 0) (i32.const 16) (i32.const 1) (i32.const 24)))
    (i32.store (i32.const 20) (i32.load (i32.const 24)))
    (drop (call $write (i32.const 1) (i32.const 16) (i32.const 1) (i32.const 8)))
    (i32.store (i32.const 0) (i32.const 100))
    (i32.store (i32.const 4) (i32.const 5))
    (drop (call $write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))))"#;

/// Prints a 60-byte line 200 times: 12 KiB, more than a page of disk.
const CHATTY: &str = r#"(module
  (import "wasi_snapshot_preview1" "fd_write" (func $write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 100) "chatty plugin line ........................................\0a")
  (func (export "_start")
    (local $i i32)
    (i32.store (i32.const 0) (i32.const 100))
    (i32.store (i32.const 4) (i32.const 60))
    (loop $again
      (drop (call $write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $again (i32.lt_u (local.get $i) (i32.const 200))))))"#;

async fn log_page(api: &Api, run: i64) -> Value {
    api.ok("GET", &format!("/api/v1/runs/{run}/log?from_line=1"), None)
        .await
}

async fn job(api: &Api, name: &str, plugin: &str) {
    api.ok(
        "POST",
        "/api/v1/jobs",
        Some(
            json!({"name": name, "app": "default", "plugin": plugin, "schedule": {"kind": "none"}}),
        ),
    )
    .await;
}

/// Every file under `dir`, recursively.
fn files_under(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else {
                out.push(path);
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runs_log_is_read_while_it_runs_and_after_the_executor_is_killed() {
    let (db, _dir) = sqlite_url();
    let server = TestServer::start(&db, |_| {}).await;
    let api = &server.api;
    let data = tempfile::tempdir().unwrap();
    let listen = format!("127.0.0.1:{}", free_port());
    let mut executor = spawn_executor(None, &server.url, &listen, data.path(), None);
    wait_executors(api, 1).await;
    api.upload("slow", SLOW_TWO_LINES).await;
    api.upload("echo", ECHO).await;
    job(api, "slow", "slow").await;
    job(api, "echo", "echo").await;

    let slow = api.ok("POST", "/api/v1/jobs/slow/trigger", None).await["task_id"]
        .as_i64()
        .unwrap();
    // While it sleeps: its first line, and not complete.
    let run = eventually(Duration::from_secs(20), "the first line, live", || async {
        let t = api.ok("GET", &format!("/api/v1/tasks/{slow}"), None).await;
        let run = t["last_run_id"].as_i64()?;
        let page = log_page(api, run).await;
        (page["lines"] == json!(["line 1"])).then_some((run, page))
    })
    .await;
    assert_eq!(run.1["complete"], false, "{}", run.1);
    assert_eq!(run.1["next_line"], 2);
    let run = run.0;
    task_reaches(api, slow, "succeeded").await;
    let page = log_page(api, run).await;
    assert_eq!(page["lines"], json!(["line 1", "line 2"]));
    assert_eq!(page["complete"], true);

    // A quick run, reported; then the executor is killed and started again.
    let quick = api
        .ok(
            "POST",
            "/api/v1/tasks",
            Some(json!({"job": "echo", "payload": "order 42\n"})),
        )
        .await["id"]
        .as_i64()
        .unwrap();
    let quick_run = task_reaches(api, quick, "succeeded").await["last_run_id"]
        .as_i64()
        .unwrap();
    executor.0.kill().unwrap();
    executor.0.wait().unwrap();
    let _executor = spawn_executor(None, &server.url, &listen, data.path(), None);
    for (run, lines) in [
        (run, json!(["line 1", "line 2"])),
        (quick_run, json!(["order 42", "done"])),
    ] {
        let page = eventually(
            Duration::from_secs(30),
            "the log, from the restarted executor",
            || async {
                let (status, page) = api
                    .call("GET", &format!("/api/v1/runs/{run}/log?from_line=1"), None)
                    .await;
                (status == 200).then_some(page)
            },
        )
        .await;
        assert_eq!(page["lines"], lines, "run {run}");
        assert_eq!(page["complete"], true);
    }
    server.stop().await;
}

/// 10,000 runs leave a handful of files in the executor's data directory, not one each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_runs_create_no_file_each() {
    let (db, _dir) = sqlite_url();
    let server = TestServer::start(&db, |_| {}).await;
    let api = &server.api;
    let data = tempfile::tempdir().unwrap();
    let listen = format!("127.0.0.1:{}", free_port());
    let _executor = spawn_executor(None, &server.url, &listen, data.path(), None);
    wait_executors(api, 1).await;
    api.upload("echo", ECHO).await;
    job(api, "echo", "echo").await;
    let before = files_under(data.path()).len();
    for batch in 0..10 {
        let tasks: Vec<Value> = (0..1_000)
            .map(|i| json!({"job": "echo", "payload": format!("order {}", batch * 1_000 + i)}))
            .collect();
        api.add_tasks(tasks).await;
    }
    eventually(
        Duration::from_secs(300),
        "10,000 runs to succeed",
        || async {
            let page = api
                .ok(
                    "GET",
                    "/api/v1/tasks?job=echo&status=succeeded&limit=1",
                    None,
                )
                .await;
            let (_, counts) = api
                .call("GET", "/api/v1/tasks?job=echo&status=pending&limit=1", None)
                .await;
            let (_, running) = api
                .call("GET", "/api/v1/tasks?job=echo&status=running&limit=1", None)
                .await;
            (!page["items"].as_array().unwrap().is_empty()
                && counts["items"].as_array().is_some_and(|a| a.is_empty())
                && running["items"].as_array().is_some_and(|a| a.is_empty()))
            .then_some(())
        },
    )
    .await;
    for state in ["dead", "failed"] {
        let page = api
            .ok(
                "GET",
                &format!("/api/v1/tasks?job=echo&status={state}&limit=1"),
                None,
            )
            .await;
        assert!(
            page["items"].as_array().unwrap().is_empty(),
            "a task is {state}"
        );
    }
    let files = files_under(data.path());
    assert!(
        files.len() <= before + 20,
        "{} files after 10,000 runs (before: {before}): {:?}",
        files.len(),
        &files[..files.len().min(30)]
    );
    server.stop().await;
}

/// The executor's disk fills: a run's lines cannot be written, and its log does not read
/// as an empty, complete log — it ends with a note of how many lines were dropped and
/// why, and the run's message says the same. Once there is room again, logs are written
/// by themselves. Needs root (a tmpfs); under `CI=true` a missing prerequisite fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_on_the_executor_drops_lines_and_says_so() {
    let Some(disk) = SmallDisk::mount(16) else {
        rota_testkit::missing("mounting a tmpfs (needs root)");
        return;
    };
    let (db, _dir) = sqlite_url();
    let server = TestServer::start(&db, |_| {}).await;
    let api = &server.api;
    let data = disk.path().join("executor");
    let listen = format!("127.0.0.1:{}", free_port());
    let _executor = spawn_executor(None, &server.url, &listen, &data, None);
    wait_executors(api, 1).await;
    api.upload("echo", ECHO).await;
    job(api, "echo", "echo").await;
    let run_of = |payload: String| async move {
        let ids = api
            .add_tasks(vec![json!({"job": "echo", "payload": payload})])
            .await;
        let task = task_reaches(api, ids[0], "succeeded").await;
        task["last_run_id"].as_i64().unwrap()
    };
    // Compiled and cached, its log segment created, while there is room.
    let first = run_of("order 1\n".into()).await;
    assert_eq!(
        log_page(api, first).await["lines"],
        json!(["order 1", "done"])
    );

    // Fill the disk to the last byte.
    let filler = disk.path().join("filler");
    let filled = std::process::Command::new("dd")
        .args(["if=/dev/zero", "bs=1M", "status=none"])
        .arg(format!("of={}", filler.display()))
        .status()
        .unwrap();
    assert!(!filled.success(), "dd stops when the disk is full");
    // More than the page the segment's last record left room in (tmpfs allocates pages).
    api.upload("chatty", CHATTY).await;
    job(api, "chatty", "chatty").await;
    let ids = api.add_tasks(vec![json!({"job": "chatty"})]).await;
    let lost = task_reaches(api, ids[0], "succeeded").await["last_run_id"]
        .as_i64()
        .unwrap();
    let page = log_page(api, lost).await;
    let note = "[rota] 200 lines of this run's log were dropped: writing them failed: No space \
                left on device (os error 28)";
    assert_eq!(page["lines"], json!([note]), "{page}");
    assert_eq!(page["complete"], true, "{page}");
    let run = api.ok("GET", &format!("/api/v1/runs/{lost}"), None).await;
    let message = run["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("200 lines of this run's log were dropped") && message.contains("space"),
        "the run's message says so: {run}"
    );

    // Room again: the next run's log is whole, and the earlier ones are as they were.
    std::fs::remove_file(&filler).unwrap();
    let after = run_of("order 3\n".into()).await;
    assert_eq!(
        log_page(api, after).await["lines"],
        json!(["order 3", "done"])
    );
    assert_eq!(
        log_page(api, first).await["lines"],
        json!(["order 1", "done"])
    );
    assert_eq!(log_page(api, lost).await["lines"], json!([note]));
    server.stop().await;
}
