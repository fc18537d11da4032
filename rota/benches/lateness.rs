//! Fire lateness end to end: a scheduler node and an executor double over real HTTP on
//! loopback, tasks due at a steady rate (default 5,000/s for 10 s), lateness measured at the
//! executor as (trigger received − due time). The tasks are created ahead of time beyond the
//! scan window, so they travel the whole pipeline: scan claim → wheel → ring → pool →
//! one trigger request per executor per tick.
//!
//! `cargo bench -p rota --bench lateness` (SQLite in a temp dir); set
//! `ROTA_BENCH_MYSQL_URL=mysql://root@127.0.0.1:3306/rota_bench` to run on MySQL.
//! `ROTA_BENCH_RATE` and `ROTA_BENCH_SECONDS` change the load.

#[path = "../tests/support/mod.rs"]
mod support;

#[path = "common.rs"]
mod common;

use common::{percentile, rfc3339};

use std::time::Duration;

use serde_json::json;
use support::*;

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(bench());
}

async fn bench() {
    let rate = env_or("ROTA_BENCH_RATE", 5_000);
    let seconds = env_or("ROTA_BENCH_SECONDS", 10);
    let total = rate * seconds;
    let (db, _dir, backend) = match std::env::var("ROTA_BENCH_MYSQL_URL") {
        Ok(url) => (url, None, "MySQL"),
        Err(_) => {
            let (url, dir) = sqlite_url();
            (url, Some(dir), "SQLite")
        }
    };
    let server = TestServer::start(&db, |_| {}).await;
    let api = &server.api;
    api.upload_plugin("noop").await;
    let executor = ExecutorDouble::start(&server.url, "default", Behaviour::Succeed).await;
    let name = format!("bench-{}", now_ms());
    api.ok(
        "POST",
        "/api/v1/jobs",
        Some(
            json!({"name": name, "app": "default", "plugin": "noop", "schedule": {"kind": "none"}}),
        ),
    )
    .await;

    // Due times: `rate` per second starting 8 s from now (beyond the 5 s window).
    let start = now_ms() + 8_000;
    let step_us = 1_000_000 / rate as i64;
    let mut created = 0u64;
    while created < total {
        let n = (total - created).min(10_000);
        let tasks: Vec<_> = (created..created + n)
            .map(|i| {
                let due_ms = start + (i as i64 * step_us) / 1000;
                let run_at = rfc3339(due_ms);
                json!({"job": name, "run_at": run_at})
            })
            .collect();
        api.ok("POST", "/api/v1/tasks/batch", Some(json!({"tasks": tasks})))
            .await;
        created += n;
    }
    assert!(
        now_ms() < start - 1_000,
        "creating the tasks took too long for the schedule"
    );
    eprintln!("{total} tasks due at {rate}/s from +8 s; waiting …");

    let wait = Duration::from_secs(seconds + 60);
    eventually(wait, "every task to reach the executor", || async {
        (executor.received_count() as u64 >= total).then_some(())
    })
    .await;
    let received = executor.received();
    let mut late_us: Vec<i64> = received
        .iter()
        .map(|r| r.received_at_us - r.trigger.scheduled_at * 1000)
        .collect();
    late_us.sort_unstable();
    let early = late_us.iter().filter(|&&l| l < 0).count();
    let first = received.iter().map(|r| r.received_at_us).min().unwrap_or(0);
    let last = received.iter().map(|r| r.received_at_us).max().unwrap_or(0);
    let achieved = total as f64 / ((last - first).max(1) as f64 / 1e6);
    let ms = |us: i64| us as f64 / 1000.0;
    println!(
        "| backend | fires | target rate/s | achieved/s | p50 ms | p99 ms | p99.9 ms | max ms | early |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    println!(
        "| {backend} | {total} | {rate} | {achieved:.0} | {:.2} | {:.2} | {:.2} | {:.2} | {early} |",
        ms(percentile(&late_us, 0.50)),
        ms(percentile(&late_us, 0.99)),
        ms(percentile(&late_us, 0.999)),
        ms(*late_us.last().unwrap_or(&0)),
    );
    let dup = received.len() as u64 - total;
    println!("duplicates sent: {dup}");
    server.stop().await;
}
