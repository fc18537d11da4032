//! A node whose wall clock is off (SPEC §4 "Clocks"), through real `rota server` and
//! `rota executor` processes on MariaDB: one node keeps the true time, the other node and
//! the executor run under libfaketime with their wall clocks 2 s behind, or 30 s ahead
//! (the monotonic clock untouched, as in life). The skewed node measures its offset from
//! the database at each heartbeat and the executor its offset from its scheduler, and both
//! correct by it: tasks created through the skewed node are due when their creator asked,
//! by the true clock; nothing is pulled or started before it is due; neither node takes
//! the other over while both live, and when the skewed one dies the other takes over its
//! claims and runs them, none early; and the skew is told (`/readyz` stays 200 with a
//! warning naming the offset, `rota_clock_offset_seconds`, the node list, a `clock_skew`
//! alarm that resolves once the skewed node is gone).
//!
//! Needs MariaDB/MySQL and libfaketime (Debian `faketime`); under `CI=true` a missing
//! prerequisite fails.

use crate::support;

use std::time::Duration;

use serde_json::{Value, json};
use support::*;

const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

/// How early or late a due time may be against its creator's true clock: the offset's
/// measurement error (half a loopback round trip) and millisecond rounding, with room.
const SLACK_MS: i64 = 50;

fn millis(rfc3339: &Value) -> i64 {
    chrono::DateTime::parse_from_rfc3339(rfc3339.as_str().unwrap())
        .unwrap()
        .timestamp_millis()
}

/// The node's `rota_clock_offset_seconds`, once it has measured one beyond `at_least`.
async fn offset_seconds(api: &Api, at_least: f64) -> f64 {
    eventually(
        Duration::from_secs(20),
        "the offset to be measured",
        || async {
            let text = api.metrics().await;
            let value: f64 = text
                .lines()
                .find_map(|l| l.strip_prefix("rota_clock_offset_seconds "))?
                .trim()
                .parse()
                .ok()?;
            (value.abs() >= at_least).then_some(value)
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_whose_clock_is_off_fires_nothing_early_and_says_so() {
    let Some(db) = rota_testkit::MysqlDb::create("rota_ck").await else {
        return; // `create` reported what is missing
    };
    if !std::path::Path::new(LIBFAKETIME).exists() {
        rota_testkit::missing("libfaketime (Debian package faketime)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    for (round, (skew, offset)) in [("-2s", 2.0_f64), ("+30s", -30.0)].into_iter().enumerate() {
        let (port_a, port_b) = (free_port(), free_port());
        let log = |n: &str| dir.path().join(format!("{n}{round}.log"));
        let _a = spawn_server(&db.url, port_a, &log("a"), &format!("true-{round}"));
        let mut b_process = spawn_server_env(
            &db.url,
            port_b,
            &log("b"),
            &format!("skewed-{round}"),
            &[
                ("LD_PRELOAD", LIBFAKETIME),
                ("FAKETIME", skew),
                ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
            ],
        );
        let a = Api::new(format!("http://127.0.0.1:{port_a}"));
        let b = Api::new(format!("http://127.0.0.1:{port_b}"));
        wait_healthy(&a).await;
        wait_healthy(&b).await;

        // The skewed node knows how far off it is, and says so.
        let measured = offset_seconds(&b, offset.abs() / 2.0).await;
        assert!(
            (measured - offset).abs() < 0.5,
            "{skew}: measured {measured} s, expected about {offset} s"
        );
        let ready = eventually(Duration::from_secs(10), "/readyz's warning", || async {
            let res = reqwest::get(format!("{}/readyz", b.base)).await.ok()?;
            let body = res.json::<Value>().await.ok()?;
            body.get("warning").is_some().then_some(body)
        })
        .await;
        assert_eq!(ready["status"], "ready", "{skew}: still serving: {ready}");
        let warning = ready["warning"].as_str().unwrap();
        assert!(
            warning.contains("ms off the database's (more than max_clock_offset_ms, 500 ms)"),
            "{skew}: {warning}"
        );
        let true_ready = reqwest::get(format!("{}/readyz", a.base)).await.unwrap();
        assert_eq!(true_ready.status(), 200, "the true node is ready");
        let body: Value = true_ready.json().await.unwrap();
        assert_eq!(body, json!({"status": "ready"}), "and has no warning");

        // Tasks created through the skewed node are due when asked, by the true clock.
        let job = format!("q{round}");
        a.ok(
            "POST",
            "/api/v1/jobs",
            Some(
                json!({"name": job, "app": "default", "schedule": {"kind": "none"},
                        "delivery": {"kind": "pull"}}),
            ),
        )
        .await;
        let mut due = Vec::new();
        for _ in 0..10 {
            let before = now_ms();
            let task = b
                .ok(
                    "POST",
                    "/api/v1/tasks",
                    Some(json!({"job": job, "delay_ms": 1_000})),
                )
                .await;
            let after = now_ms();
            let due_at = millis(&task["due_at"]);
            assert!(
                due_at >= before + 1_000 - SLACK_MS && due_at <= after + 1_000 + SLACK_MS,
                "{skew}: due at {due_at}, asked between {before} and {after} + 1000 ms"
            );
            due.push(due_at);
        }
        // Nothing is handed out before it is due, whichever node's wheel fires it.
        let mut pulled = 0;
        while pulled < due.len() {
            let got = a
                .ok(
                    "POST",
                    &format!("/api/v1/jobs/{job}/pull"),
                    Some(json!({"max": 10, "wait_ms": 10_000, "lease_ms": 60_000})),
                )
                .await;
            let at = now_ms();
            let items = got["items"].as_array().unwrap();
            assert!(!items.is_empty(), "{skew}: the tasks never came");
            for item in items {
                let task = a
                    .ok("GET", &format!("/api/v1/tasks/{}", item["task"]), None)
                    .await;
                let due_at = millis(&task["due_at"]);
                assert!(
                    at >= due_at - SLACK_MS,
                    "{skew}: pulled at {at}, due {due_at}"
                );
            }
            pulled += items.len();
        }
        // Neither node took the other over: both heartbeats read as live in one time.
        for api in [&a, &b] {
            let text = api.metrics().await;
            assert!(
                !text.lines().any(|l| l.starts_with("rota_takeovers_total ")),
                "{skew}: a take-over happened"
            );
        }

        told_by_the_node_list_and_an_alarm(&a, round, offset).await;

        // An executor as skewed as the node runs wasm tasks no earlier than they are due,
        // and reports when they ran by the true clock.
        let exec_port = free_port();
        let executor = spawn_executor_env(
            None,
            &a.base,
            &format!("127.0.0.1:{exec_port}"),
            &dir.path().join(format!("exec{round}")),
            Some((&log("exec"), "info")),
            &[
                ("LD_PRELOAD", LIBFAKETIME),
                ("FAKETIME", skew),
                ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
            ],
        );
        wait_executors(&a, 1).await;
        let wasm = format!("w{round}");
        a.upload_plugin(&wasm).await;
        a.ok(
            "POST",
            "/api/v1/jobs",
            Some(json!({"name": wasm, "app": "default", "plugin": wasm,
                        "schedule": {"kind": "none"}})),
        )
        .await;
        for _ in 0..5 {
            let (id, due_at) = delayed(&b, &wasm, 1_500).await;
            task_reaches(&a, id, "succeeded").await;
            ran_in_time(&a, id, due_at, now_ms(), skew).await;
        }

        // The skewed node dies holding claims: the true node takes them over, and runs
        // them no earlier than they are due.
        let mut tasks = Vec::new();
        for _ in 0..20 {
            tasks.push(delayed(&b, &wasm, 3_000).await);
        }
        // Killed only once it holds claims, so that there is something to take over.
        let pool = sqlx::MySqlPool::connect(&db.url).await.unwrap();
        eventually(
            Duration::from_secs(10),
            "the skewed node to claim some of its tasks",
            || async {
                let held: i64 = sqlx::query_scalar(
                    "SELECT COUNT(*) FROM tasks t JOIN nodes n ON n.id = t.owner_node \
                     WHERE n.name = ? AND t.status = 'claimed'",
                )
                .bind(format!("skewed-{round}"))
                .fetch_one(&pool)
                .await
                .unwrap();
                (held > 0).then_some(())
            },
        )
        .await;
        pool.close().await;
        b_process.0.kill().unwrap();
        b_process.0.wait().unwrap();
        for (id, due_at) in tasks {
            task_reaches(&a, id, "succeeded").await;
            ran_in_time(&a, id, due_at, now_ms(), skew).await;
        }
        let takeovers = eventually(Duration::from_secs(20), "the take-over", || async {
            let text = a.metrics().await;
            text.lines()
                .find_map(|l| l.strip_prefix("rota_takeovers_total "))
                .map(str::to_owned)
        })
        .await;
        assert_ne!(takeovers.trim(), "0", "{skew}");
        // The skewed node is gone: the alarm resolves.
        eventually(
            Duration::from_secs(20),
            "the clock_skew alarm to resolve",
            || async {
                let h = a
                    .ok("GET", &format!("/api/v1/alarms?rule=skew{round}"), None)
                    .await;
                h["items"]
                    .as_array()?
                    .iter()
                    .any(|e| e["resolved"] == true)
                    .then_some(())
            },
        )
        .await;
        // A graceful stop deregisters it, so the next round counts only its own.
        let pid = executor.0.id().to_string();
        let stopped = std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap();
        assert!(stopped.success());
        wait_executors(&a, 0).await;
    }
    db.drop_db().await;
}

/// The node list shows the skewed node's offset and flags it, and a `clock_skew` rule
/// raises an alarm naming it.
async fn told_by_the_node_list_and_an_alarm(a: &Api, round: usize, offset: f64) {
    let nodes = a.ok("GET", "/api/v1/nodes", None).await;
    let node = |name: String| {
        nodes["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|n| n["name"] == name.as_str())
            .cloned()
            .unwrap_or_else(|| panic!("{name} is not in the node list: {nodes}"))
    };
    let skewed = node(format!("skewed-{round}"));
    assert_eq!(skewed["live"], true, "{skewed}");
    assert_eq!(skewed["clock_off"], true, "{skewed}");
    let ms = skewed["clock_offset_ms"].as_i64().unwrap();
    assert!(
        (ms as f64 - offset * 1000.0).abs() < 500.0,
        "offset {ms} ms, expected about {offset} s: {skewed}"
    );
    let true_node = node(format!("true-{round}"));
    assert_eq!(true_node["clock_off"], false, "{true_node}");

    a.ok(
        "POST",
        "/api/v1/alarm-channels",
        Some(
            json!({"name": format!("ops{round}"), "kind": "webhook", "app": "default",
                    "url": "http://127.0.0.1:9/alarms"}),
        ),
    )
    .await;
    a.ok(
        "POST",
        "/api/v1/alarm-rules",
        // No throttle: the resolve is not held back behind it.
        Some(
            json!({"name": format!("skew{round}"), "app": "default", "on": "clock_skew",
                    "channels": [format!("ops{round}")], "throttle_ms": 0}),
        ),
    )
    .await;
    let event = eventually(Duration::from_secs(20), "the clock_skew alarm", || async {
        let h = a
            .ok("GET", &format!("/api/v1/alarms?rule=skew{round}"), None)
            .await;
        h["items"].as_array()?.first().cloned()
    })
    .await;
    let message = event["message"].as_str().unwrap();
    assert_eq!(event["resolved"], false, "{event}");
    assert!(
        message.contains(&format!("`skewed-{round}` is ")),
        "the alarm names the node: {message}"
    );
}

/// Creates a task of `job` through `api`, `delay_ms` from now: its id and due time.
async fn delayed(api: &Api, job: &str, delay_ms: i64) -> (i64, i64) {
    let task = api
        .ok(
            "POST",
            "/api/v1/tasks",
            Some(json!({"job": job, "delay_ms": delay_ms})),
        )
        .await;
    (task["id"].as_i64().unwrap(), millis(&task["due_at"]))
}

/// Task `id`, due at `due_at` and seen finished at `seen` (true clock), started no
/// earlier than it was due and no later than it was seen finished, as its run reports.
async fn ran_in_time(a: &Api, id: i64, due_at: i64, seen: i64, skew: &str) {
    let runs = a.ok("GET", &format!("/api/v1/runs?task={id}"), None).await;
    let run = &runs["items"][0];
    let started = millis(&run["started_at"]);
    assert!(
        started >= due_at - SLACK_MS && started <= seen + SLACK_MS,
        "{skew}: task {id} due {due_at} started at {started}, seen done at {seen}: {run}"
    );
}
