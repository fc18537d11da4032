//! Fire lateness end to end: a scheduler node and an executor double over real HTTP on
//! loopback, tasks due at a steady rate (default 5,000/s for 10 s), lateness measured at the
//! executor as (trigger received − due time). The tasks are created ahead of time beyond the
//! scan window, so they travel the whole pipeline: scan claim → wheel → ring → pool →
//! one trigger request per executor per tick.
//!
//! `cargo bench -p rota --bench lateness` (SQLite in a temp dir); set
//! `ROTA_BENCH_MYSQL_URL=mysql://root@127.0.0.1:3306/rota_bench` to run on MySQL.
//! `ROTA_BENCH_RATE` and `ROTA_BENCH_SECONDS` change the load. `ROTA_BENCH_FAIL=1` makes
//! every run fail (one attempt: the task is dead), and `ROTA_BENCH_DEAD_ALARM=1` adds
//! alarm rules on those failures (`run_failed`, `task_dead`: two events per run) with a
//! channel whose endpoint accepts connections and never answers: the figures of
//! `FAIL=1` with and without it show whether alarms and a dead channel slow dispatch.

#[path = "../tests/integration/support/mod.rs"]
mod support;

#[path = "common/mod.rs"]
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
    let fail = std::env::var("ROTA_BENCH_FAIL").is_ok_and(|v| v == "1");
    let behaviour = if fail {
        Behaviour::Fail
    } else {
        Behaviour::Succeed
    };
    let executor = ExecutorDouble::start(&server.url, "default", behaviour).await;
    let name = format!("bench-{}", now_ms());
    api.ok(
        "POST",
        "/api/v1/jobs",
        Some(
            json!({"name": name, "app": "default", "plugin": "noop", "schedule": {"kind": "none"}}),
        ),
    )
    .await;

    let dead_alarm = std::env::var("ROTA_BENCH_DEAD_ALARM").is_ok_and(|v| v == "1");
    let _hole = if dead_alarm {
        Some(dead_alarm_channel(api, &name).await)
    } else {
        None
    };

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
    // Where in the run the late fires were: per second of due time, those over 100 ms.
    let mut late_by_second = vec![0u32; seconds as usize + 1];
    for r in &received {
        let late_ms = r.received_at_us / 1000 - r.trigger.scheduled_at;
        let second = ((r.trigger.scheduled_at - start) / 1000).clamp(0, seconds as i64) as usize;
        if late_ms > 100 {
            late_by_second[second] += 1;
        }
    }
    println!("fires over 100 ms late, per second of the run: {late_by_second:?}");
    // Fires the node held because its heartbeat had not confirmed its lease in time.
    let metrics = Api::new(server.url.clone()).metrics().await;
    let held = metrics
        .lines()
        .find(|l| l.starts_with("rota_fires_held_total"))
        .unwrap_or("rota_fires_held_total 0");
    println!("{held}");
    // The heartbeat's round trip: the lease to fire lapses when beats stay over 1 s.
    let bucket = |le: &str| -> f64 {
        metrics
            .lines()
            .find(|l| l.starts_with(&format!("rota_heartbeat_seconds_bucket{{le=\"{le}\"}}")))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
            .unwrap_or(0.0)
    };
    let beats = bucket("+Inf");
    println!(
        "heartbeats: {beats}, over 0.25 s: {}, over 1 s: {}",
        beats - bucket("0.25"),
        beats - bucket("1")
    );
    let dup = received.len() as u64 - total;
    println!("duplicates sent: {dup}");
    if dead_alarm {
        let alarms = api.ok("GET", "/api/v1/alarms?limit=1000", None).await;
        let items = alarms["items"].as_array().cloned().unwrap_or_default();
        let events: i64 = items.iter().filter_map(|a| a["count"].as_i64()).sum();
        println!(
            "alarms on: {} alarm(s) folding {events} events so far, every send pending to the dead endpoint",
            items.len()
        );
    }
    server.stop().await;
}

/// A webhook alarm channel whose endpoint accepts connections and never answers (each send
/// waits out its timeout), and rules that raise an event for most runs of `job`. The
/// listener lives as long as the value.
async fn dead_alarm_channel(api: &Api, job: &str) -> tokio::task::JoinHandle<()> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/alarms", listener.local_addr().unwrap());
    let hole = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    api.ok(
        "POST",
        "/api/v1/alarm-channels",
        Some(json!({"name": "dead", "kind": "webhook", "url": url, "app": "default"})),
    )
    .await;
    for on in ["run_failed", "task_dead"] {
        api.ok(
            "POST",
            "/api/v1/alarm-rules",
            Some(json!({"name": on, "app": "default", "job": job, "on": on,
                        "channels": ["dead"], "throttle_ms": 0})),
        )
        .await;
    }
    eprintln!(
        "alarms on: each failed run and dead task raises an event; the channel never answers"
    );
    hole
}
