//! A node whose wall clock is off (SPEC §4 "Clocks"), through real `rota server` processes
//! on MariaDB: one node keeps the true time, the other runs under libfaketime with its
//! wall clock 2 s behind, or 30 s ahead (the monotonic clock untouched, as in life). The
//! skewed node measures its offset from the database at each heartbeat and corrects by
//! it: tasks created through it are due when their creator asked, by the true clock;
//! nothing is pulled before it is due; neither node takes the other over; and the skewed
//! node says what is wrong (`/readyz` stays 200 with a warning naming the offset,
//! `rota_clock_offset_seconds`).
//!
//! Needs MariaDB/MySQL and libfaketime (Debian `faketime`); under `CI=true` a missing
//! prerequisite fails.

mod support;

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
        let _b = spawn_server_env(
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
    }
    db.drop_db().await;
}
