//! Upload to first run, per example plugin, in a real `rota standalone` (release build):
//! the upload (the scheduler validates the plugin: a component is compiled to check its
//! types), then the first run of a delayed task due at once (the executor fetches and
//! compiles the plugin once, then runs it), then a second task (compiled already).
//!
//! ```text
//! plugins/build.sh
//! cargo bench -p rota --bench components
//! ```
//!
//! The per-run cost of each component, without the scheduler around it, is the executor's
//! bench (`cargo bench -p rota-executor --bench runs`, "Components").

#[path = "../tests/integration/support/mod.rs"]
mod support;

#[path = "common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use serde_json::json;
use support::*;

fn main() {
    common::block_on(async {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../plugins/target");
        let data = tempfile::tempdir().unwrap();
        let node = Standalone::start(data.path());
        let api = node.api.clone();
        wait_ready(&api).await;
        println!("## Upload to first run (rota standalone, release build)\n");
        println!(
            "| plugin | bytes | upload (validation) | upload → first run succeeded | next task, due → succeeded |"
        );
        println!("|---|---:|---:|---:|---:|");
        for (file, what) in [
            ("hello.wasm", "`hello`, Rust, preview 1 module"),
            (
                "hello.component.wasm",
                "`hello`, Rust, `wasi:cli` command component",
            ),
            (
                "hello-c.component.wasm",
                "`hello-c`, C, `wasi:cli` command component",
            ),
            ("hello-py.wasm", "`hello-py`, Python handler"),
            ("hello-js.wasm", "`hello-js`, JavaScript handler"),
        ] {
            let Ok(bytes) = std::fs::read(format!("{dir}/{file}")) else {
                println!("| {what} | not built: run plugins/build.sh | | | |");
                continue;
            };
            let name = file.trim_end_matches(".wasm").replace('.', "-");
            let size = bytes.len();
            let started = Instant::now();
            api.upload(&name, bytes).await;
            let upload = started.elapsed();
            api.ok(
                "POST",
                "/api/v1/jobs",
                Some(json!({"name": name, "app": "default", "plugin": name,
                            "schedule": {"kind": "none"}})),
            )
            .await;
            let first = until_succeeded(&api, &name).await;
            let first = first + upload;
            let next = until_succeeded(&api, &name).await;
            println!(
                "| {what} | {size} | {:.2} s | {:.2} s | {} ms |",
                upload.as_secs_f64(),
                first.as_secs_f64(),
                next.as_millis()
            );
        }
    });
}

/// A task of `job` due at once, and how long until it has succeeded (polled every 25 ms).
async fn until_succeeded(api: &Api, job: &str) -> Duration {
    let started = Instant::now();
    let id = api
        .ok(
            "POST",
            "/api/v1/tasks",
            Some(json!({"job": job, "payload": "{\"order_id\": 42}"})),
        )
        .await["id"]
        .as_i64()
        .unwrap();
    task_reaches(api, id, "succeeded").await;
    started.elapsed()
}
