//! The example plugins of `plugins/` end to end, in `rota standalone`: the `close-order`
//! plugin driven by delayed tasks decides per order. The examples need Debian's wasm
//! toolchains (`plugins/install-toolchains.sh`, `plugins/build.sh`); CI builds them and sets
//! `ROTA_EXAMPLE_PLUGINS=plugins/target`. Without it this test says so and checks nothing.

mod support;

use std::path::PathBuf;
use std::time::Duration;

use serde_json::json;
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_order_decides_per_order_from_a_delayed_task() {
    let Some(dir) = std::env::var_os("ROTA_EXAMPLE_PLUGINS").map(PathBuf::from) else {
        eprintln!("ROTA_EXAMPLE_PLUGINS is not set: example plugins not built, test skipped");
        return;
    };
    // Relative to the workspace root (tests run in the package directory).
    let dir = if dir.is_relative() {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("..")
            .join(dir)
    } else {
        dir
    };
    let module =
        std::fs::read(dir.join("close-order.wasm")).expect("plugins/target/close-order.wasm");

    let data = tempfile::tempdir().unwrap();
    let node = Standalone::start(data.path());
    let api = node.api.clone();
    wait_ready(&api).await;

    api.upload("close-order", module).await;
    api.ok(
        "POST",
        "/api/v1/jobs",
        Some(json!({"name": "close-order", "app": "default", "plugin": "close-order", "schedule": {"kind": "none"}})),
    )
    .await;
    let mut expected = Vec::new();
    for (order, paid, line) in [
        (42, false, "order 42 is unpaid: closing it"),
        (43, true, "order 43 is paid: leaving it"),
    ] {
        let payload = json!({"order_id": order, "paid": paid}).to_string();
        let id = api
            .ok(
                "POST",
                "/api/v1/tasks",
                Some(json!({"job": "close-order", "delay_ms": 300, "payload": payload})),
            )
            .await["id"]
            .as_i64()
            .unwrap();
        expected.push((id, line));
    }
    let bad = api
        .ok(
            "POST",
            "/api/v1/tasks",
            Some(json!({"job": "close-order", "payload": "not json"})),
        )
        .await["id"]
        .as_i64()
        .unwrap();

    for (id, line) in expected {
        let run = eventually(Duration::from_secs(60), "the order task to succeed", || {
            let api = api.clone();
            async move {
                let t = api.ok("GET", &format!("/api/v1/tasks/{id}"), None).await;
                (t["status"] == "succeeded").then(|| t["last_run_id"].as_i64().unwrap())
            }
        })
        .await;
        let log = api
            .ok("GET", &format!("/api/v1/runs/{run}/log"), None)
            .await;
        let lines: Vec<String> = log["lines"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l.as_str().unwrap().to_owned())
            .collect();
        assert!(
            lines.iter().any(|l| l.contains(line)),
            "{line} in {lines:?}"
        );
    }
    eventually(
        Duration::from_secs(60),
        "the malformed order to fail for good",
        || {
            let api = api.clone();
            async move {
                let t = api.ok("GET", &format!("/api/v1/tasks/{bad}"), None).await;
                (t["status"] == "dead").then_some(())
            }
        },
    )
    .await;
    let runs = api
        .ok("GET", &format!("/api/v1/runs?task={bad}"), None)
        .await;
    assert_eq!(runs["items"][0]["exit_code"], 1);
}
