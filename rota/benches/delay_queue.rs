//! The delay queue at volume (issue 4's "Must show" benchmarks), end to end through an
//! in-process scheduler node and an executor double over real, signed HTTP on loopback.
//!
//! One binary, one sub-benchmark per run, chosen by the first argument or `ROTA_BENCH_CASE`:
//!
//! - `ingest` — tasks/s accepted through `POST /api/v1/tasks/batch`: `ROTA_BENCH_TASKS`
//!   (200,000) tasks in batches of `ROTA_BENCH_BATCH` (10,000) sent by `ROTA_BENCH_CLIENTS` (4)
//!   concurrent clients, due far in the future so nothing fires. Wall time from the first
//!   request to the last `201`; request bodies are serialized before the clock starts.
//!   `ROTA_BENCH_KEYS=1` gives every task an idempotency key (one more lookup per batch).
//! - `fire` — `ROTA_BENCH_TASKS` (100,000) tasks all due at one instant, created
//!   `ROTA_BENCH_LEAD_S` (10 + 1 per 20,000 tasks: 15 for 100,000) seconds ahead, beyond the
//!   5 s scan window and the time creating them takes, so they travel scan → wheel → ring →
//!   pool → trigger (after a one-task warm-up). Reports fires/s between the first and the last
//!   trigger received by the executor, and from the due instant to the last trigger, and the
//!   time from the due instant until every task is `succeeded` (polled with `COUNT(*)` every
//!   100 ms on a separate connection). On MySQL it also reads the server's `Com_*` counters
//!   (`SHOW GLOBAL STATUS`) before and after and prints statements per 1,000 fires, by kind:
//!   raw, minus this bench's own polling (counted exactly), and minus an idle period of the
//!   same length measured right after (`ROTA_BENCH_IDLE=0` skips it). Use a private server
//!   (scripts/bench/mariadb-instance.sh): the counters are server-wide.
//! - `lateness` — `ROTA_BENCH_RATE` (5,000) tasks/s due over `ROTA_BENCH_SECONDS` (10) s,
//!   created 8 s ahead; lateness = the run's reported start − its due time, in ms, read from
//!   the runs once every task has succeeded. Meant for a real executor (the runs' start is
//!   the plugin's start); `benches/lateness.rs` measures the scheduler alone, in µs, at the
//!   double.
//! - `all` (default) — `ingest` then `fire`.
//!
//! Triggers go to an in-process executor double (real signed HTTP, reports success at once)
//! unless `ROTA_BENCH_EXECUTOR_BIN=target/release/rota` names a `rota` binary: then a real
//! `rota executor` process (capacity `ROTA_BENCH_EXECUTOR_CAPACITY`, 256) runs a no-op wasm
//! plugin, and the fire rate is read from the runs' reported start times (ms).
//!
//! Lateness at a steady rate (p50/p99/p99.9/max) is `benches/lateness.rs`; it is not repeated
//! here. The 10-million-pending-tasks RSS and scan cost are `scripts/bench/ten-million.sh`.
//!
//! SQLite in a temporary directory by default; `ROTA_BENCH_MYSQL_URL=mysql://root@127.0.0.1:3307/rota_bench`
//! for MySQL/MariaDB. Examples:
//!
//! ```text
//! cargo bench -p rota --bench delay_queue -- ingest
//! ROTA_BENCH_MYSQL_URL=mysql://root@127.0.0.1:3307/rota_bench cargo bench -p rota --bench delay_queue -- fire
//! ```

#[path = "../tests/integration/support/mod.rs"]
mod support;

#[path = "common/mod.rs"]
mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::{Db, diff, env_or, rfc3339};
use serde_json::{Value, json};
use support::*;

fn env_flag(name: &str, default: bool) -> bool {
    match std::env::var(name) {
        Ok(v) => !matches!(v.as_str(), "" | "0" | "false" | "no"),
        Err(_) => default,
    }
}

fn main() {
    let case = common::case("all");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        match case.as_str() {
            "ingest" => ingest().await,
            "fire" => fire().await,
            "all" => {
                ingest().await;
                fire().await;
            }
            "lateness" => lateness().await,
            other => {
                eprintln!("unknown case `{other}`: ingest | fire | lateness | all");
                std::process::exit(2);
            }
        }
    });
}

// ----- the database under test ------------------------------------------------------------

struct Backend {
    url: String,
    name: &'static str,
    _dir: Option<tempfile::TempDir>,
}

fn backend() -> Backend {
    match std::env::var("ROTA_BENCH_MYSQL_URL") {
        Ok(url) if !url.is_empty() => Backend {
            url,
            name: "MySQL",
            _dir: None,
        },
        _ => {
            let (url, dir) = sqlite_url();
            Backend {
                url,
                name: "SQLite",
                _dir: Some(dir),
            }
        }
    }
}

// ----- set-up shared by the cases ------------------------------------------------------------

struct Bed {
    server: TestServer,
    executor: Executor,
    job: String,
    job_id: i64,
    http: reqwest::Client,
}

/// Who runs the triggers: the in-process double (default), or a real `rota executor`
/// process running the no-op plugin (`ROTA_BENCH_EXECUTOR_BIN=target/release/rota`).
enum Executor {
    Double(ExecutorDouble),
    Real {
        child: std::process::Child,
        _data: tempfile::TempDir,
    },
}

impl Drop for Executor {
    fn drop(&mut self) {
        if let Executor::Real { child, .. } = self {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Starts `rota executor` from `bin` for `app` and waits until it is registered.
async fn real_executor(bin: &str, server: &TestServer, app: &str) -> Executor {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = tempfile::tempdir().unwrap();
    let capacity = env_or("ROTA_BENCH_EXECUTOR_CAPACITY", 256);
    let mut child = std::process::Command::new(bin);
    executor_setup(
        &mut child,
        app,
        &server.url,
        &format!("127.0.0.1:{port}"),
        dir.path(),
    )
    .args(["--capacity", &capacity.to_string()])
    .env(
        "ROTA_LOG",
        std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()),
    );
    let child = child
        .spawn()
        .unwrap_or_else(|e| panic!("starting {bin} executor: {e}"));
    let executor = Executor::Real { child, _data: dir };
    let needle = format!("127.0.0.1:{port}");
    let api = server.api.clone();
    eventually(
        Duration::from_secs(30),
        "the real executor to register",
        || {
            let (api, needle) = (api.clone(), needle.clone());
            async move {
                let (_, v) = api.call("GET", "/api/v1/executors", None).await;
                v.to_string().contains(&needle).then_some(())
            }
        },
    )
    .await;
    executor
}

async fn bed(db_url: &str) -> Bed {
    let server = TestServer::start(db_url, |c| {
        // The double registers once and never heartbeats; keep it alive for long runs.
        c.executor_dead_after_ms = 3_600_000;
    })
    .await;
    server.api.upload_plugin("noop").await;
    // An app of its own: a MySQL database shared by earlier runs still lists their (gone)
    // executors under their apps.
    let job = format!("dq-bench-{}", now_ms());
    let executor = match std::env::var("ROTA_BENCH_EXECUTOR_BIN") {
        Ok(bin) if !bin.is_empty() => real_executor(&bin, &server, &job).await,
        _ => Executor::Double(ExecutorDouble::start(&server.url, &job, Behaviour::Succeed).await),
    };
    let created = server
        .api
        .ok(
            "POST",
            "/api/v1/jobs",
            Some(json!({"name": job, "app": job, "plugin": "noop", "schedule": {"kind": "none"}})),
        )
        .await;
    let job_id = created["id"].as_i64().expect("the new job's id");
    Bed {
        server,
        executor,
        job,
        job_id,
        http: reqwest::Client::new(),
    }
}

/// Batch bodies, serialized ahead: `total` tasks of `job`, `batch` per request.
fn batch_bodies(
    job: &str,
    total: u64,
    batch: u64,
    keys: bool,
    run_at: impl Fn(u64) -> i64,
) -> Vec<bytes::Bytes> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < total {
        let n = (total - i).min(batch);
        let tasks: Vec<Value> = (i..i + n)
            .map(|k| {
                let mut t = json!({
                    "job": job,
                    "run_at": rfc3339(run_at(k)),
                    "payload": format!("{{\"order\":{k}}}"),
                });
                if keys {
                    t["key"] = json!(format!("order-{k}"));
                }
                t
            })
            .collect();
        out.push(
            serde_json::to_vec(&json!({ "tasks": tasks }))
                .unwrap()
                .into(),
        );
        i += n;
    }
    out
}

/// Sends `bodies` with `clients` concurrent clients; returns (first request → last 201).
async fn send_batches(
    http: &reqwest::Client,
    base: &str,
    bodies: Vec<bytes::Bytes>,
    clients: usize,
) -> Duration {
    let bodies = Arc::new(bodies);
    let next = Arc::new(AtomicUsize::new(0));
    let url = format!("{base}/api/v1/tasks/batch");
    let started = Instant::now();
    let mut workers = Vec::new();
    for _ in 0..clients.max(1) {
        let (bodies, next, http, url) = (bodies.clone(), next.clone(), http.clone(), url.clone());
        workers.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(body) = bodies.get(i) else { break };
                let resp = http
                    .post(&url)
                    .bearer_auth(TOKEN)
                    .header("content-type", "application/json")
                    .body(body.clone())
                    .send()
                    .await
                    .expect("batch request");
                let status = resp.status().as_u16();
                if status != 201 {
                    let text = resp.text().await.unwrap_or_default();
                    panic!("batch {i} answered {status}: {text}");
                }
                // Read the answer (the ids) as a client would.
                let _ = resp.bytes().await.expect("batch answer");
            }
        }));
    }
    for w in workers {
        w.await.expect("a batch client panicked");
    }
    started.elapsed()
}

// ----- a. ingest -----------------------------------------------------------------------------

async fn ingest() {
    let backend = backend();
    let total = env_or("ROTA_BENCH_TASKS", 200_000);
    let batch = env_or("ROTA_BENCH_BATCH", 10_000).clamp(1, 10_000);
    let clients = env_or("ROTA_BENCH_CLIENTS", 4) as usize;
    let keys = env_flag("ROTA_BENCH_KEYS", false);
    let bed = bed(&backend.url).await;
    // Due 30 days ahead, one per millisecond: nothing fires during the run.
    let base = now_ms() + 30 * 86_400_000;
    let bodies = batch_bodies(&bed.job, total, batch, keys, |k| base + k as i64);
    eprintln!(
        "ingest: {total} tasks, {} requests of ≤ {batch}, {clients} clients, {} …",
        bodies.len(),
        backend.name
    );
    let took = send_batches(&bed.http, &bed.server.url, bodies, clients).await;
    let db = Db::connect(&backend.url).await;
    let stored = db.count_tasks(bed.job_id, None).await;
    assert_eq!(stored, total as i64, "tasks stored");
    let secs = took.as_secs_f64();
    println!("| backend | tasks | batch | clients | keys | seconds | tasks/s |");
    println!("|---|---:|---:|---:|---|---:|---:|");
    println!(
        "| {} | {total} | {batch} | {clients} | {} | {secs:.2} | {:.0} |",
        backend.name,
        if keys { "yes" } else { "no" },
        total as f64 / secs
    );
    drop(bed.executor);
    bed.server.stop().await;
}

// ----- b. + c. fire rate and statements per 1,000 fires -------------------------------------

/// Statement kinds that count (server-side `Com_*` names).
const KINDS: &[&str] = &[
    "Com_select",
    "Com_insert",
    "Com_insert_select",
    "Com_replace",
    "Com_update",
    "Com_update_multi",
    "Com_delete",
    "Com_delete_multi",
    "Com_begin",
    "Com_commit",
    "Com_rollback",
];

async fn fire() {
    let backend = backend();
    let total = env_or("ROTA_BENCH_TASKS", 100_000);
    // Far enough ahead that creating them ends before the scan window reaches them.
    let lead_ms = env_or("ROTA_BENCH_LEAD_S", 10 + total.div_ceil(20_000)) as i64 * 1000;
    let clients = env_or("ROTA_BENCH_CLIENTS", 4) as usize;
    let idle_baseline = env_flag("ROTA_BENCH_IDLE", true);
    let bed = bed(&backend.url).await;
    let db = Db::connect(&backend.url).await;
    let window_ms = 5_000; // the scan window (Config::window_ms)

    // Warm up first (a real executor compiles the plugin on its first run): one task of a
    // second job of the same app and plugin, run to completion before the measured burst.
    let warm = format!("{}-warm", bed.job);
    let warm_id = bed
        .server
        .api
        .ok(
            "POST",
            "/api/v1/jobs",
            Some(json!({"name": warm, "app": bed.job, "plugin": "noop", "schedule": {"kind": "none"}})),
        )
        .await["id"]
        .as_i64()
        .expect("the warm-up job's id");
    bed.server
        .api
        .ok(
            "POST",
            "/api/v1/tasks",
            Some(json!({"job": warm, "delay_ms": 0})),
        )
        .await;
    eventually(
        Duration::from_secs(60),
        "the warm-up task to succeed",
        || async { (db.count_tasks(warm_id, Some("succeeded")).await == 1).then_some(()) },
    )
    .await;

    let due = now_ms() + lead_ms;
    let bodies = batch_bodies(&bed.job, total, 10_000, false, |_| due);
    eprintln!(
        "fire: {total} tasks due at one instant, {lead_ms} ms ahead, {} …",
        backend.name
    );
    send_batches(&bed.http, &bed.server.url, bodies, clients).await;
    let created = now_ms();
    // Start counting before the scan can claim anything (it claims what is due within 5 s).
    let count_from = due - window_ms - 1_500;
    if created > count_from {
        eprintln!(
            "WARNING: creating the tasks ended {} ms after the counters should have started \
             (due − 6.5 s); some tasks may have been claimed at creation. Raise ROTA_BENCH_LEAD_S.",
            created - count_from
        );
    } else {
        tokio::time::sleep(Duration::from_millis((count_from - created) as u64)).await;
    }
    let before = db.status().await;
    let counted_from = Instant::now();
    let mut polls = 0i64;
    let deadline = Instant::now() + Duration::from_millis(lead_ms as u64 + 120_000 + total / 200);
    let done_at = loop {
        let unfinished = db.any_unfinished(bed.job_id).await;
        polls += 1;
        if !unfinished {
            break now_ms();
        }
        assert!(
            Instant::now() < deadline,
            "timed out: tasks still unfinished"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let succeeded = db.count_tasks(bed.job_id, Some("succeeded")).await;
    polls += 1;
    assert_eq!(succeeded, total as i64, "every task succeeded");
    // Let the dispatch recorder and late callbacks land before reading the counters.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after = db.status().await;
    let window = counted_from.elapsed();

    // First and last trigger: received by the double (µs), or for a real executor the runs'
    // reported start times (ms, the plugin's start).
    let (first, last, sent, early, seen) = match &bed.executor {
        Executor::Double(d) => {
            let mut received = d.received();
            received.retain(|r| r.trigger.job_id == bed.job_id); // not the warm-up
            (
                received.iter().map(|r| r.received_at_us).min().unwrap_or(0),
                received.iter().map(|r| r.received_at_us).max().unwrap_or(0),
                received.len() as i64,
                received
                    .iter()
                    .filter(|r| r.received_at_us < r.trigger.scheduled_at * 1000)
                    .count() as i64,
                "trigger",
            )
        }
        Executor::Real { .. } => {
            let (first, last, runs, early) = db.run_starts(bed.job_id, due).await;
            (first * 1000, last * 1000, runs, early, "run start")
        }
    };
    // Triggers arrive in batches (one request per executor per tick), so first→last can be
    // ~0 for a small run; due→last trigger is the rate at which the backlog went out.
    let spread_s = (last - first) as f64 / 1e6;
    let to_last_s = (last - due * 1000).max(1) as f64 / 1e6;
    let e2e_s = (done_at - due).max(1) as f64 / 1e3;
    let rate = |s: f64| {
        if s >= 0.001 {
            format!("{:.0}", total as f64 / s)
        } else {
            "—".to_owned()
        }
    };
    println!(
        "| backend | executor | tasks | due→first {seen} ms | first→last {seen} s | fires/s (first→last) | due→last {seen} s | fires/s (due→last) | due→all succeeded s | end-to-end tasks/s | sent twice | early |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    println!(
        "| {} | {} | {total} | {:.1} | {spread_s:.3} | {} | {to_last_s:.3} | {} | {e2e_s:.2} | {} | {} | {early} |",
        backend.name,
        match bed.executor {
            Executor::Double(_) => "double",
            Executor::Real { .. } => "rota executor",
        },
        (first - due * 1000) as f64 / 1e3,
        rate(spread_s),
        rate(to_last_s),
        rate(e2e_s),
        sent - total as i64,
    );

    if !after.is_empty() {
        let raw = diff(&after, &before);
        // The bench's own statements in the window: one SELECT per poll (the two SHOW STATUS
        // are Com_show_status, not counted).
        let mut own = BTreeMap::new();
        own.insert("Com_select".to_owned(), polls);
        let idle = if idle_baseline {
            let len = window.min(Duration::from_secs(60));
            eprintln!("measuring an idle period of {len:?} for the baseline …");
            let a = db.status().await;
            tokio::time::sleep(len).await;
            let b = db.status().await;
            let scale = window.as_secs_f64() / len.as_secs_f64();
            diff(&b, &a)
                .into_iter()
                .map(|(k, v)| (k, (v as f64 * scale).round() as i64))
                .collect()
        } else {
            BTreeMap::new()
        };
        let per_k = |v: i64| v as f64 * 1000.0 / total as f64;
        let get = |m: &BTreeMap<String, i64>, k: &str| m.get(k).copied().unwrap_or(0);
        println!();
        println!(
            "Statements during the fire run ({:.1} s window, {total} fires; bench's own polls: {polls} SELECTs{}):",
            window.as_secs_f64(),
            if idle_baseline {
                ", idle = same-length idle period after the run"
            } else {
                ""
            }
        );
        println!();
        println!("| statement | raw | bench's own | idle | net | net per 1,000 fires |");
        println!("|---|---:|---:|---:|---:|---:|");
        let (mut t_raw, mut t_own, mut t_idle, mut t_net) = (0, 0, 0, 0);
        for k in KINDS {
            let (r, o, i) = (get(&raw, k), get(&own, k), get(&idle, k));
            let net = r - o - i;
            t_raw += r;
            t_own += o;
            t_idle += i;
            t_net += net;
            if r != 0 || i != 0 {
                println!(
                    "| {} | {r} | {o} | {i} | {net} | {:.2} |",
                    k.trim_start_matches("Com_"),
                    per_k(net)
                );
            }
        }
        println!(
            "| **total** | {t_raw} | {t_own} | {t_idle} | {t_net} | **{:.2}** |",
            per_k(t_net)
        );
        let others: Vec<String> = raw
            .iter()
            .filter(|(k, v)| **v != 0 && !KINDS.contains(&k.as_str()))
            .map(|(k, v)| format!("{}={v}", k.trim_start_matches("Com_")))
            .collect();
        println!();
        println!(
            "Other counters (raw, not in the total): {}",
            others.join(", ")
        );
    }
    drop(bed.executor);
    bed.server.stop().await;
}

// ----- c. lateness through a real executor ----------------------------------------------------

async fn lateness() {
    let backend = backend();
    let rate = env_or("ROTA_BENCH_RATE", 5_000);
    let seconds = env_or("ROTA_BENCH_SECONDS", 10);
    let total = rate * seconds;
    let bed = bed(&backend.url).await;
    let db = Db::connect(&backend.url).await;
    // Warm the executor's plugin cache with one run of the measured job.
    bed.server
        .api
        .ok(
            "POST",
            "/api/v1/tasks",
            Some(json!({"job": bed.job, "delay_ms": 0})),
        )
        .await;
    eventually(Duration::from_secs(60), "the warm-up run", || async {
        (db.count_tasks(bed.job_id, Some("succeeded")).await == 1).then_some(())
    })
    .await;
    let start = now_ms() + 8_000;
    let step_us = 1_000_000 / rate as i64;
    let bodies = batch_bodies(&bed.job, total, 10_000, false, |k| {
        start + (k as i64 * step_us) / 1000
    });
    send_batches(&bed.http, &bed.server.url, bodies, 2).await;
    assert!(
        now_ms() < start - 1_000,
        "creating the tasks took too long for the schedule"
    );
    eprintln!(
        "lateness: {total} tasks due at {rate}/s from +8 s, {} …",
        backend.name
    );
    let deadline = Instant::now() + Duration::from_secs(seconds + 120);
    while db.any_unfinished(bed.job_id).await {
        assert!(
            Instant::now() < deadline,
            "timed out: tasks still unfinished"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Every task and the warm-up one.
    let succeeded = db.count_tasks(bed.job_id, Some("succeeded")).await;
    assert_eq!(succeeded, total as i64 + 1, "every task succeeded");
    let late = db.lateness_ms(bed.job_id, start).await;
    assert_eq!(late.len() as u64, total, "one started run per task");
    let pct = |p: f64| late[((late.len() - 1) as f64 * p).round() as usize];
    println!(
        "| backend | executor | runs | rate/s | p50 ms | p99 ms | p99.9 ms | max ms | early |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|");
    println!(
        "| {} | {} | {} | {rate} | {} | {} | {} | {} | {} |",
        backend.name,
        match bed.executor {
            Executor::Double(_) => "double",
            Executor::Real { .. } => "rota executor",
        },
        late.len(),
        pct(0.50),
        pct(0.99),
        pct(0.999),
        late.last().copied().unwrap_or(0),
        late.iter().filter(|&&l| l < 0).count(),
    );
    drop(bed.executor);
    bed.server.stop().await;
}
