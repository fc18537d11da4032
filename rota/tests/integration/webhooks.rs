//! HTTP delivery through the real binary (SPEC §8): a `rota standalone` POSTs each fire of
//! an `http` job to a receiver this test runs on 127.0.0.1, which checks the signature,
//! answers as told (2xx, 5xx, 503 with `Retry-After`), or is not there at all.

use crate::support;

use std::time::Duration;

use serde_json::json;
use support::sink::Sink;
use support::*;

/// A standalone node with an `http` job `orders` POSTing to `url` (allowed), signed with
/// the app's secret `whsec`.
async fn webhook_job(url: &str, max_attempts: i64) -> (Standalone, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let node = Standalone::start(dir.path());
    node.api
        .ok(
            "PUT",
            "/api/v1/apps/shop/secrets/whsec",
            Some(json!({"value": "s3cret"})),
        )
        .await;
    let origin = url.split("/hooks").next().unwrap();
    node.api
        .ok(
            "POST",
            "/api/v1/jobs",
            Some(json!({
                "name": "orders", "app": "shop", "schedule": {"kind": "none"},
                "delivery": {"kind": "http", "url": url, "timeout_ms": 2_000, "signing_secret": "whsec"},
                "http_allow": [origin], "max_attempts": max_attempts,
                "backoff": {"kind": "fixed", "delay_ms": 300},
            })),
        )
        .await;
    (node, dir)
}

#[tokio::test]
async fn a_fire_is_posted_signed_and_a_2xx_succeeds_it() {
    let (receiver, url) = Sink::default().start("/hooks/orders").await;
    let (node, _dir) = webhook_job(&url, 1).await;
    let api = &node.api;
    let ids = api
        .add_tasks(vec![
            json!({"job": "orders", "payload": "{\"order_id\":42}"}),
        ])
        .await;
    task_reaches(api, ids[0], "succeeded").await;

    let got = receiver.got();
    assert_eq!(got.len(), 1, "delivered once");
    let r = &got[0];
    assert_eq!(r.body, r#"{"order_id":42}"#);
    assert_eq!(r.header("content-type"), "application/json");
    assert_eq!(r.header("x-rota-task"), ids[0].to_string());
    assert_eq!(r.header("x-rota-attempt"), "1");
    let scheduled: i64 = r.header("x-rota-scheduled-at").parse().unwrap();
    assert!(
        scheduled <= r.at,
        "scheduled at {scheduled}, received at {}",
        r.at
    );
    // The receiver's check: HMAC-SHA256 of "timestamp.body" with the shared secret.
    r.assert_signed(b"s3cret");

    let runs = task_runs(api, ids[0]).await;
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0]["status"], "succeeded");
    assert_eq!(
        runs[0]["executor"],
        format!("webhook:{}", url.trim_end_matches("/hooks/orders"))
    );
}

#[tokio::test]
async fn a_refusal_is_a_failed_attempt_with_the_answer_and_retry_after_sets_the_delay() {
    let (receiver, url) = Sink::default().start("/hooks/orders").await;
    receiver.answer(500, vec![], "boom: the database is down");
    receiver.answer(503, vec![("retry-after", "2".into())], "busy");
    let (node, _dir) = webhook_job(&url, 3).await;
    let api = &node.api;
    let ids = api
        .add_tasks(vec![json!({"job": "orders", "payload": "close 7"})])
        .await;
    task_reaches(api, ids[0], "succeeded").await;

    let got = receiver.got();
    assert_eq!(got.len(), 3, "500, 503, then 200");
    assert_eq!(got[0].header("content-type"), "text/plain; charset=utf-8");
    assert_eq!(got[2].header("x-rota-attempt"), "3");
    // The backoff is 300 ms; the 503 asked for 2 s, and got it.
    let waited = got[2].at - got[1].at;
    assert!(
        waited >= 2_000,
        "the third attempt came {waited} ms after the 503"
    );
    let runs = task_runs(api, ids[0]).await;
    let statuses: Vec<&str> = runs.iter().map(|r| r["status"].as_str().unwrap()).collect();
    assert_eq!(statuses, ["failed", "failed", "succeeded"]);
    let first = runs[0]["message"].as_str().unwrap();
    assert!(
        first.contains("HTTP 500") && first.contains("boom: the database is down"),
        "{first}"
    );
    assert!(runs[1]["message"].as_str().unwrap().contains("HTTP 503"));
}

#[tokio::test]
async fn a_target_that_is_down_fails_until_dead_and_a_re_drive_delivers_it() {
    // A port nobody listens on yet: the receiver comes up after the task died.
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}/hooks/orders");
    let (node, _dir) = webhook_job(&url, 2).await;
    let api = &node.api;
    let ids = api
        .add_tasks(vec![json!({"job": "orders", "payload": "x"})])
        .await;
    task_reaches(api, ids[0], "dead").await;
    let runs_dead = task_runs(api, ids[0]).await;
    assert_eq!(runs_dead.len(), 2);
    for r in &runs_dead {
        let m = r["message"].as_str().unwrap();
        assert!(m.contains("could not deliver"), "{m}");
    }

    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .unwrap();
    let receiver = Sink::default();
    receiver.serve("/hooks/orders", listener);
    api.ok("POST", &format!("/api/v1/tasks/{}/retry", ids[0]), None)
        .await;
    let task = task_reaches(api, ids[0], "succeeded").await;
    assert_eq!(task["attempts"], 3);
    let got = receiver.got();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].header("x-rota-attempt"), "3");
}

#[tokio::test]
async fn a_missing_signing_secret_sends_nothing_and_says_so() {
    let (receiver, url) = Sink::default().start("/hooks/orders").await;
    let (node, _dir) = webhook_job(&url, 1).await;
    let api = &node.api;
    api.ok("DELETE", "/api/v1/apps/shop/secrets/whsec", None)
        .await;
    let ids = api.add_tasks(vec![json!({"job": "orders"})]).await;
    task_reaches(api, ids[0], "dead").await;
    assert!(receiver.got().is_empty(), "an unsigned delivery went out");
    let runs = task_runs(api, ids[0]).await;
    let m = runs[0]["message"].as_str().unwrap();
    assert!(m.contains("whsec") && m.contains("does not exist"), "{m}");
}

#[tokio::test]
async fn deliveries_of_a_job_stay_within_its_concurrency() {
    let (receiver, url) = Sink::slow(Duration::from_millis(150))
        .start("/hooks/orders")
        .await;
    let (node, _dir) = webhook_job(&url, 1).await;
    let api = &node.api;
    api.ok(
        "PATCH",
        "/api/v1/jobs/orders",
        Some(json!({"max_concurrency": 2})),
    )
    .await;
    let ids = api
        .add_tasks(
            (0..8)
                .map(|i| json!({"job": "orders", "payload": format!("{i}")}))
                .collect(),
        )
        .await;
    for id in &ids {
        task_reaches(api, *id, "succeeded").await;
    }
    assert_eq!(receiver.got().len(), 8);
    let most = receiver.most_at_once();
    assert!(
        (1..=2).contains(&most),
        "{most} deliveries of a job with max_concurrency 2 were in flight at once"
    );
}

#[tokio::test]
async fn a_disabled_http_job_posts_nothing_until_it_is_enabled() {
    let (receiver, url) = Sink::default().start("/hooks/orders").await;
    let (node, dir) = webhook_job(&url, 1).await;
    let api = &node.api;
    api.ok(
        "PATCH",
        "/api/v1/jobs/orders",
        Some(json!({"enabled": false})),
    )
    .await;
    let ids = api
        .add_tasks(vec![json!({"job": "orders", "payload": "held"})])
        .await;
    // Due at once: out of the wheel and held, not sent.
    wait_tasks_in_status(dir.path(), "ready", 1).await;
    assert!(
        receiver.got().is_empty(),
        "a disabled job's task was POSTed"
    );
    let task = api
        .ok("GET", &format!("/api/v1/tasks/{}", ids[0]), None)
        .await;
    assert_eq!(task["status"], "pending", "{task}");
    api.ok(
        "PATCH",
        "/api/v1/jobs/orders",
        Some(json!({"enabled": true})),
    )
    .await;
    task_reaches(api, ids[0], "succeeded").await;
    let got = receiver.got();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].body, "held");
}
