//! A machine's bad day, through the real binary (SPEC §4 "Resources"): `rota standalone`
//! with its data directory on a small file system that fills up. Creates are refused with
//! 507 and the cause in words, `/readyz` turns 503 with the reason, nothing acknowledged is
//! lost and nothing refused is stored; once the file system grows, the node resumes by
//! itself — no restart — and `/readyz` is 200 again.
//!
//! Needs root (it mounts a tmpfs); under `CI=true` a missing prerequisite fails.

use crate::support;

use std::path::PathBuf;
use std::time::Duration;

use serde_json::json;
use support::*;

async fn readyz(api: &Api) -> (u16, serde_json::Value) {
    let res = reqwest::get(format!("{}/readyz", api.base)).await.unwrap();
    (res.status().as_u16(), res.json().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_refuses_with_507_loses_nothing_and_the_node_resumes_by_itself() {
    let Some(disk) = SmallDisk::mount(24) else {
        rota_testkit::missing("mounting a tmpfs (needs root)");
        return;
    };
    let data: PathBuf = disk.path().join("data");
    let node = Standalone::start(&data);
    let api = &node.api;
    wait_ready(api).await;
    assert_eq!(readyz(api).await.0, 200);
    api.ok(
        "POST",
        "/api/v1/jobs",
        Some(
            json!({"name": "q", "app": "default", "schedule": {"kind": "none"},
                    "delivery": {"kind": "pull"}}),
        ),
    )
    .await;

    // Fill the disk with tasks due in an hour: every 201 is a task that must survive.
    let payload = "x".repeat(16 * 1024);
    let mut acknowledged = 0;
    let refusal = loop {
        assert!(
            acknowledged < 5_000,
            "24 MiB should be full long before this"
        );
        let (status, body) = api
            .call(
                "POST",
                "/api/v1/tasks",
                Some(
                    json!({"job": "q", "delay_ms": 3_600_000, "payload": payload,
                            "key": format!("t{acknowledged}")}),
                ),
            )
            .await;
        match status {
            201 => acknowledged += 1,
            _ => break (status, body),
        }
    };
    assert_eq!(refusal.0, 507, "{}", refusal.1);
    let error = refusal.1["error"].as_str().unwrap();
    assert!(
        error.starts_with("the database's disk is full; it was not stored"),
        "{error}"
    );
    // Still full: refused again, the same way (the connection did not wedge on it).
    let (status, _) = api
        .call(
            "POST",
            "/api/v1/tasks",
            Some(json!({"job": "q", "payload": "small"})),
        )
        .await;
    assert!(status == 507 || status == 201, "{status}");
    if status == 201 {
        acknowledged += 1;
    }
    let (_, unready) = eventually(Duration::from_secs(20), "/readyz to say 503", || async {
        let (status, body) = readyz(api).await;
        (status == 503).then_some((status, body))
    })
    .await;
    let reason = unready["reason"].as_str().unwrap();
    assert!(
        reason.contains("heartbeat has not been written") && reason.ends_with("disk is full"),
        "{reason}"
    );

    // More room: the node resumes without a restart.
    disk.grow(96);
    eventually(Duration::from_secs(20), "/readyz to say 200", || async {
        (readyz(api).await.0 == 200).then_some(())
    })
    .await;
    let (status, body) = api
        .call(
            "POST",
            "/api/v1/tasks",
            Some(json!({"job": "q", "payload": "after", "key": "after"})),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let pulled = api
        .ok(
            "POST",
            "/api/v1/jobs/q/pull",
            Some(json!({"max": 10, "wait_ms": 10_000, "lease_ms": 60_000})),
        )
        .await;
    let items = pulled["items"].as_array().unwrap();
    assert_eq!(items.len(), 1, "{pulled}");
    assert_eq!(items[0]["payload"], "after");

    // Every acknowledged task is there, once; nothing refused was stored.
    let kept = tasks_in_status(&data, "pending").await;
    assert_eq!(kept, acknowledged, "acknowledged tasks, all pending");
    drop(node);
}
