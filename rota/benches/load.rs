//! What users run, measured as they would: real `rota server` processes (1–3 nodes) on
//! MariaDB or SQLite, one real `rota executor` running a real plugin (`hello`: reads its
//! payload, prints its lines), and a load generator talking to the REST API. Everything
//! is a process of its own, so the CPU each one spends is read from `/proc/<pid>/stat`.
//!
//! Cases (first argument, or `ROTA_BENCH_CASE`):
//!
//! - `sweep` — tasks created continuously through `POST /api/v1/tasks/batch` (a batch every
//!   10 ms, delays uniform in 0–3 s, so most land inside the scan window) at each rate of
//!   `ROTA_BENCH_RATES` (2000,4000,6000,8000,10000) for `ROTA_BENCH_SECONDS` (60) each.
//!   Per step: lateness (the plugin's start − the task's due time, from the runs) p50, p99,
//!   p99.9, max; CPU per task of the executor, each scheduler and the database (MariaDB's
//!   pid from `ROTA_BENCH_MARIADB_PID`, else not shown); statements per 1,000 tasks
//!   (MariaDB's `Com_*`), with the share of creating them measured on its own first
//!   (the same rate, due an hour later, so nothing fires); runs left `running` after the
//!   drain. The highest rate whose p99 stays ≤ 20 ms is the figure to publish.
//! - `burst` — `ROTA_BENCH_TASKS` (100,000) tasks due at one instant, created beyond the
//!   scan window; fires/s from the first to the last run's start, until all succeeded, and
//!   CPU per run and statements per 1,000 fires over the burst alone.
//! - `handoff` — SPEC §11's "starts within 100 ms of a slot freeing": `ROTA_BENCH_HANDOFFS`
//!   (200, at least 2) tasks due at one instant on a job with `concurrency {limit: 1}` and
//!   no other limit (set by this case), so each run can start only once the one before it
//!   ended; the gaps from a run's end to the next one's start (both as the executor saw
//!   them), p50/p90/p99/max. A gap below zero would be two runs at once: the bench fails.
//!
//! Settings: `ROTA_BIN` (target/release/rota), `ROTA_BENCH_MYSQL_URL` (a private MariaDB:
//! `scripts/bench/mariadb-instance.sh`; SQLite in a temporary directory without it),
//! `ROTA_BENCH_NODES` (1), `ROTA_BENCH_PLUGIN` (plugins/target/hello.wasm; a `.wat` no-op
//! gives the floor, and the output says so), `ROTA_BENCH_CAPACITY` (executor capacity, 256),
//! `ROTA_BENCH_KEYS` (0: each payload names one of this many customers, `{"customer": n}`),
//! `ROTA_BENCH_LIMITS` (unset: none; `1`: the job has `concurrency {key: /customer, limit:
//! 8}` and `rate_limit {key: /customer, limit: 50, per_ms: 1000}` — SPEC §7's flow-control
//! figure is this against the same load without, both with the keys; `concurrency` or
//! `rate`: that one alone), `ROTA_BENCH_TRACES` (unset: none; `1`: every process exports
//! OpenTelemetry traces, sampling all, to a collector double in this process that counts
//! the spans it decodes — SPEC §12's overhead figure is this against the same load
//! without).
//! `scripts/bench/load.sh` runs the published set and writes the tables.

#[path = "../tests/integration/support/mod.rs"]
mod support;

#[path = "common/mod.rs"]
mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{
    Db, bench_database, cpu_seconds, diff, env_or, first_member, percentile, post_batch, rfc3339,
    rota_bin, start_nodes, statements,
};
use serde_json::{Value, json};
use support::*;

fn main() {
    let case = common::case("sweep");
    common::block_on(async {
        let bed = Bed::start().await;
        match case.as_str() {
            "sweep" => sweep(&bed).await,
            "burst" => burst(&bed).await,
            "handoff" => handoff(&bed).await,
            other => {
                eprintln!("unknown case `{other}`: sweep | burst | handoff");
                std::process::exit(2);
            }
        }
        bed.stop().await;
    });
}

// ----- the processes ------------------------------------------------------------------------

/// The database, the scheduler nodes, the executor, and the job the load goes to.
struct Bed {
    db: Db,
    db_name: &'static str,
    mariadb_pids: Vec<u32>,
    nodes: Vec<(KillOnDrop, Api)>,
    executor: KillOnDrop,
    job_id: i64,
    plugin: String,
    floor: bool,
    /// Customers the payloads name (0: one payload for all), and whether the job limits
    /// each.
    keys: u64,
    limits: bool,
    http: reqwest::Client,
    /// The collector the processes export their spans to (`ROTA_BENCH_TRACES`).
    traces: Option<Collector>,
    /// Every process's stderr (`n1.log`…, `executor.log`): read when a run stalls.
    log_dir: PathBuf,
    _dirs: Vec<tempfile::TempDir>,
}

impl Bed {
    async fn start() -> Bed {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
        let bin = rota_bin();
        let plugin_path = std::env::var("ROTA_BENCH_PLUGIN")
            .map(PathBuf::from)
            .unwrap_or_else(|_| root.join("plugins/target/hello.wasm"));
        let plugin = std::fs::read(&plugin_path).unwrap_or_else(|e| {
            panic!(
                "{}: {e} (plugins/build.sh builds hello.wasm)",
                plugin_path.display()
            )
        });
        let floor = plugin_path.extension().is_some_and(|e| e == "wat");
        let mut dirs = Vec::new();
        let (url, db_name) = bench_database(&mut dirs);
        let log_dir = tempfile::tempdir().unwrap();
        let traced = std::env::var("ROTA_BENCH_TRACES").is_ok_and(|v| v == "1");
        let traces = match traced {
            true => Some(Collector::start().await),
            false => None,
        };
        let otel: Vec<(&str, &str)> = traces
            .as_ref()
            .map(|c| vec![("OTEL_EXPORTER_OTLP_ENDPOINT", c.endpoint.as_str())])
            .unwrap_or_default();
        let nodes = start_nodes(&bin, &url, log_dir.path(), &otel).await;
        let schedulers: Vec<String> = nodes.iter().map(|(_, a)| a.base.clone()).collect();
        let exec_dir = tempfile::tempdir().unwrap();
        let exec_port = free_port();
        let mut executor = Command::new(&bin);
        executor_setup(
            &mut executor,
            "default",
            &schedulers.join(","),
            &format!("127.0.0.1:{exec_port}"),
            exec_dir.path(),
        )
        .args([
            "--capacity",
            &env_or("ROTA_BENCH_CAPACITY", 256).to_string(),
        ])
        .envs(otel.iter().copied())
        .stderr(std::fs::File::create(log_dir.path().join("executor.log")).unwrap());
        let executor = executor.spawn().expect("starting rota executor");
        let api = nodes[0].1.clone();
        wait_executors(&api, 1).await;
        api.upload("bench", plugin).await;
        let which = std::env::var("ROTA_BENCH_LIMITS").unwrap_or_default();
        let limits = !which.is_empty() && which != "0";
        let mut spec = json!({"name": "bench", "app": "default", "plugin": "bench",
                              "schedule": {"kind": "none"}, "route": "round_robin"});
        if which == "1" || which == "concurrency" {
            spec["concurrency"] = json!({"key": "/customer", "limit": 8});
        }
        if common::case("sweep") == "handoff" {
            spec["concurrency"] = json!({"limit": 1});
            spec.as_object_mut().unwrap().remove("rate_limit");
        }
        if which == "1" || which == "rate" {
            spec["rate_limit"] = json!({"key": "/customer", "limit": 50, "per_ms": 1_000});
        }
        let job = api.ok("POST", "/api/v1/jobs", Some(spec)).await;
        let job_id = job["id"].as_i64().unwrap();
        dirs.push(exec_dir);
        let log_path = log_dir.path().to_path_buf();
        dirs.push(log_dir);
        let bed = Bed {
            db: Db::connect(&first_member(&url)).await,
            db_name,
            mariadb_pids: common::mariadb_pids(),
            nodes,
            executor: KillOnDrop::new(executor),
            job_id,
            plugin: plugin_path
                .file_name()
                .unwrap()
                .to_string_lossy()
                .into_owned(),
            floor,
            keys: env_or("ROTA_BENCH_KEYS", 0),
            limits,
            http: reqwest::Client::new(),
            traces,
            log_dir: log_path,
            _dirs: dirs,
        };
        // Warm-up: the plugin fetched and compiled, connections open.
        let ids = bed
            .create(&[json!({"job": "bench", "payload": "warm-up"})], 0)
            .await;
        bed.drain(ids.len(), Duration::from_secs(60)).await;
        bed
    }

    async fn stop(self) {
        for (child, _) in &self.nodes {
            let _ = Command::new("kill")
                .args(["-TERM", &child.0.id().to_string()])
                .status();
        }
        drop(self);
    }

    /// Creates tasks in one batch through node `node`; returns their ids.
    async fn create(&self, tasks: &[Value], node: usize) -> Vec<i64> {
        let api = &self.nodes[node % self.nodes.len()].1;
        let body = serde_json::to_vec(&json!({"tasks": tasks})).unwrap();
        post_batch(&self.http, &api.base, TOKEN, body).await
    }

    /// Waits until no task of the job is unfinished (at most `within`).
    async fn drain(&self, _n: usize, within: Duration) {
        let deadline = Instant::now() + within;
        while self.db.any_unfinished(self.job_id).await {
            assert!(
                Instant::now() < deadline,
                "tasks still unfinished after {within:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// CPU seconds so far of every process: executor, nodes, database.
    fn cpu(&self) -> Cpu {
        Cpu {
            executor: cpu_seconds(self.executor.0.id()),
            nodes: self
                .nodes
                .iter()
                .map(|(c, _)| cpu_seconds(c.0.id()))
                .collect(),
            database: (!self.mariadb_pids.is_empty())
                .then(|| self.mariadb_pids.iter().map(|&p| cpu_seconds(p)).sum()),
        }
    }

    fn label(&self) -> String {
        format!(
            "{}, {} node{}, `{}`{}{}{}",
            self.db_name,
            self.nodes.len(),
            if self.nodes.len() == 1 { "" } else { "s" },
            self.plugin,
            if self.floor { " (no-op: a floor)" } else { "" },
            match (self.keys, self.limits) {
                (0, _) => String::new(),
                (k, true) => format!(", {k} customers, each limited (8 at once, 50/s)"),
                (k, false) => format!(", {k} customers, no limits"),
            },
            match self.traces {
                Some(_) => ", traces exported (all sampled)",
                None => "",
            }
        )
    }
}

#[derive(Clone)]
struct Cpu {
    executor: f64,
    nodes: Vec<f64>,
    database: Option<f64>,
}

impl Cpu {
    /// Microseconds per task of each process since `before`.
    fn per_task(&self, before: &Cpu, tasks: usize) -> (f64, f64, Option<f64>) {
        let us = |d: f64| d * 1e6 / tasks.max(1) as f64;
        let nodes: f64 = self
            .nodes
            .iter()
            .zip(&before.nodes)
            .map(|(a, b)| a - b)
            .sum();
        (
            us(self.executor - before.executor),
            us(nodes),
            self.database.zip(before.database).map(|(a, b)| us(a - b)),
        )
    }
}

// ----- sustained load -----------------------------------------------------------------------

/// Creates `rate` tasks/s for `seconds`, a batch every 10 ms round-robin over the nodes, due
/// `delay()` ms after creation; returns how many it created. Each batch goes out on time
/// whatever the last one's answer is doing (at most 64 in flight).
async fn offer(bed: &Bed, rate: u64, seconds: u64, delay: impl Fn() -> u64) -> usize {
    let per_tick = (rate as f64 / 100.0).max(1.0);
    let ticks = seconds * 100;
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let in_flight = std::sync::Arc::new(tokio::sync::Semaphore::new(64));
    let mut sent = 0usize;
    let mut owed = 0.0f64;
    let mut requests = tokio::task::JoinSet::new();
    for i in 0..ticks {
        tick.tick().await;
        owed += per_tick;
        let n = owed.floor() as usize;
        owed -= n as f64;
        let tasks: Vec<Value> = (0..n)
            .map(|_| {
                let payload = match bed.keys {
                    0 => "{\"order_id\":42}".to_owned(),
                    k => format!("{{\"customer\":{}}}", rand::random::<u64>() % k),
                };
                json!({"job": "bench", "payload": payload, "delay_ms": delay()})
            })
            .collect();
        sent += n;
        let body = serde_json::to_vec(&json!({ "tasks": tasks })).unwrap();
        let api = bed.nodes[i as usize % bed.nodes.len()].1.clone();
        let http = bed.http.clone();
        let permit = in_flight.clone().acquire_owned().await.unwrap();
        requests.spawn(async move {
            post_batch(&http, &api.base, TOKEN, body).await;
            drop(permit);
        });
    }
    while let Some(r) = requests.join_next().await {
        r.unwrap();
    }
    sent
}

async fn sweep(bed: &Bed) {
    let rates: Vec<u64> = std::env::var("ROTA_BENCH_RATES")
        .unwrap_or_else(|_| "2000,4000,6000,8000,10000".into())
        .split(',')
        .filter_map(|r| r.trim().parse().ok())
        .collect();
    let seconds = env_or("ROTA_BENCH_SECONDS", 60);
    println!(
        "\n### Sustained sweep — {}, {} s a step, delays 0–3 s\n",
        bed.label(),
        seconds
    );
    println!(
        "| offered/s | achieved/s | p50 | p99 | p99.9 | max | early | executor µs/task | scheduler µs/task | database µs/task | statements /1,000 (all) | of which creating | database retries /1,000 | runs left running |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    let mut spans = Vec::new();
    for rate in rates {
        // What creating costs the database alone: the same rate, due in an hour.
        let s0 = bed.db.status().await;
        let created = offer(bed, rate, seconds.min(10), || 3_600_000).await;
        let creating = statements(&diff(&bed.db.status().await, &s0), created).0;
        bed.db.cancel_pending(bed.job_id).await;

        let since = now_ms();
        let spans0 = bed.traces.as_ref().map(Collector::received);
        common::BATCH_RETRIES.store(0, std::sync::atomic::Ordering::Relaxed);
        let (cpu0, s0, r0) = (
            bed.cpu(),
            bed.db.status().await,
            metric_sum(bed, "rota_db_retries_total").await,
        );
        let watch = Stall::watch(bed).await;
        let started = Instant::now();
        let created = offer(bed, rate, seconds, || rand::random::<u64>() % 3_000).await;
        let offered_for = started.elapsed();
        bed.drain(created, Duration::from_secs(120)).await;
        let (cpu1, s1) = (bed.cpu(), bed.db.status().await);
        let retries = retried(bed, r0, created).await;
        let late = bed.db.lateness_ms(bed.job_id, since).await;
        let early = late.iter().filter(|&&l| l < 0).count();
        let (exec, sched, database) = cpu1.per_task(&cpu0, created);
        let (all, kinds) = statements(&diff(&s1, &s0), created);
        let stuck = bed.db.unfinished_runs(bed.job_id).await;
        println!(
            "| {rate} | {:.0} | {} ms | {} ms | {} ms | {} ms | {early} | {exec:.0} | {sched:.0} | {} | {} | {} | {retries} | {stuck} |",
            created as f64 / offered_for.as_secs_f64(),
            percentile(&late, 0.5),
            percentile(&late, 0.99),
            percentile(&late, 0.999),
            late.last().copied().unwrap_or(0),
            database.map_or("–".into(), |d| format!("{d:.0}")),
            if s1.is_empty() {
                "–".into()
            } else {
                format!("{all:.1} ({kinds})")
            },
            if s1.is_empty() {
                "–".into()
            } else {
                format!("{creating:.1}")
            },
        );
        watch.explain(bed, late.last().copied().unwrap_or(0)).await;
        assert_eq!(stuck, 0, "runs left dispatched or running after the drain");
        if let (Some(c), Some(before)) = (&bed.traces, spans0) {
            // The last batches leave within the exporters' schedule delay (5 s).
            tokio::time::sleep(Duration::from_secs(6)).await;
            spans.push((rate, c.received() - before, created));
        }
    }
    for (rate, got, tasks) in spans {
        println!(
            "\n> {rate}/s: the collector received {got} spans, {:.2} per task",
            got as f64 / tasks.max(1) as f64
        );
    }
}

/// An OTLP/HTTP receiver (a double of the collector): decodes each export and counts its
/// spans, so a run shows what reached it.
struct Collector {
    endpoint: String,
    spans: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl Collector {
    async fn start() -> Collector {
        use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
        use prost::Message;
        let spans = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let count = spans.clone();
        let app = axum::Router::new().route(
            "/v1/traces",
            axum::routing::post(move |body: axum::body::Bytes| async move {
                let request = ExportTraceServiceRequest::decode(body).expect("an OTLP body");
                let n: usize = request
                    .resource_spans
                    .iter()
                    .flat_map(|r| &r.scope_spans)
                    .map(|s| s.spans.len())
                    .sum();
                count.fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
                Vec::<u8>::new()
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        Collector { endpoint, spans }
    }

    fn received(&self) -> u64 {
        self.spans.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// What a run that stalled (a fire over a second late) saw: fires held for want of a
/// confirmed lease, and the warnings every process logged during the run. The logs are
/// copied out of the temporary directory so that they outlive the bench.
struct Stall {
    held: f64,
    log_lengths: BTreeMap<PathBuf, u64>,
}

impl Stall {
    const THRESHOLD_MS: i64 = 1_000;

    async fn watch(bed: &Bed) -> Stall {
        Stall {
            held: metric_sum(bed, "rota_fires_held_total").await,
            log_lengths: logs(&bed.log_dir)
                .map(|p| (p.clone(), std::fs::metadata(&p).map_or(0, |m| m.len())))
                .collect(),
        }
    }

    async fn explain(&self, bed: &Bed, max_late_ms: i64) {
        if max_late_ms < Self::THRESHOLD_MS {
            return;
        }
        let held = metric_sum(bed, "rota_fires_held_total").await - self.held;
        println!(
            "\n> a fire was {max_late_ms} ms late; fires held for an unconfirmed lease: {held}"
        );
        for (path, from) in &self.log_lengths {
            let text = std::fs::read(path).unwrap_or_default();
            let new =
                String::from_utf8_lossy(&text[(*from as usize).min(text.len())..]).into_owned();
            let warnings: Vec<&str> = new
                .lines()
                .filter(|l| l.contains("WARN") || l.contains("ERROR"))
                .collect();
            let name = path.file_name().unwrap().to_string_lossy();
            println!("> {name}: {} warnings", warnings.len());
            for line in warnings.iter().take(10) {
                println!(">   {line}");
            }
        }
        let kept = std::env::temp_dir().join(format!("rota-bench-stall-{}", now_ms()));
        std::fs::create_dir_all(&kept).unwrap();
        for path in logs(&bed.log_dir) {
            let _ = std::fs::copy(&path, kept.join(path.file_name().unwrap()));
        }
        println!("> logs kept in {}\n", kept.display());
    }
}

fn logs(dir: &std::path::Path) -> impl Iterator<Item = PathBuf> {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
}

/// A counter summed over every node's `/metrics` (all label sets).
async fn metric_sum(bed: &Bed, name: &str) -> f64 {
    let mut sum = 0.0;
    for (_, api) in &bed.nodes {
        sum += api
            .metrics()
            .await
            .lines()
            .filter(|l| l.starts_with(name))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>();
    }
    sum
}

/// Database retries per 1,000 tasks since `before` (the nodes' own), and the batches the
/// load generator sent again after a 503 since it last asked.
async fn retried(bed: &Bed, before: f64, tasks: usize) -> String {
    let per_1000 =
        (metric_sum(bed, "rota_db_retries_total").await - before) * 1_000.0 / tasks.max(1) as f64;
    match common::BATCH_RETRIES.swap(0, std::sync::atomic::Ordering::Relaxed) {
        0 => format!("{per_1000:.1}"),
        resent => format!("{per_1000:.1} (+{resent} batches re-sent after a 503)"),
    }
}

// ----- a burst ------------------------------------------------------------------------------

async fn burst(bed: &Bed) {
    let n = env_or("ROTA_BENCH_TASKS", 100_000) as usize;
    // Beyond the scan window and the time creating them takes.
    let lead_ms = 10_000 + (n as i64 / 20_000) * 1_000;
    let due = now_ms() + lead_ms;
    let at = rfc3339(due);
    for chunk in (0..n).collect::<Vec<_>>().chunks(10_000) {
        let tasks: Vec<Value> = chunk
            .iter()
            .map(|_| json!({"job": "bench", "payload": "{\"order_id\":42}", "run_at": at}))
            .collect();
        bed.create(&tasks, 0).await;
    }
    assert!(now_ms() < due - 5_000, "creating the burst took too long");
    tokio::time::sleep(Duration::from_millis((due - now_ms() - 2_000).max(0) as u64)).await;
    let (cpu0, s0, r0) = (
        bed.cpu(),
        bed.db.status().await,
        metric_sum(bed, "rota_db_retries_total").await,
    );
    bed.drain(n, Duration::from_secs(300)).await;
    let done = now_ms();
    let (cpu1, s1) = (bed.cpu(), bed.db.status().await);
    let retries = retried(bed, r0, n).await;
    // The burst's runs only (not the warm-up run made when the bed started).
    let (first, last, runs, early) = bed.db.run_starts(bed.job_id, due).await;
    let (exec, sched, database) = cpu1.per_task(&cpu0, n);
    let (all, kinds) = statements(&diff(&s1, &s0), n);
    println!(
        "\n### Burst — {}, {n} tasks due at one instant\n",
        bed.label()
    );
    println!(
        "| runs | first → last run | runs/s | due → all succeeded | early | executor µs/run | scheduler µs/run | database µs/run | statements /1,000 fires | database retries /1,000 |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    println!(
        "| {runs} | {} ms | {:.0} | {} ms | {early} | {exec:.0} | {sched:.0} | {} | {} | {retries} |",
        last - first,
        (runs - 1) as f64 * 1000.0 / (last - first).max(1) as f64,
        done - due,
        database.map_or("–".into(), |d| format!("{d:.0}")),
        if s1.is_empty() {
            "–".into()
        } else {
            format!("{all:.1} ({kinds})")
        },
    );
}

async fn handoff(bed: &Bed) {
    let n = env_or("ROTA_BENCH_HANDOFFS", 200) as usize;
    assert!(
        n >= 2,
        "ROTA_BENCH_HANDOFFS: at least 2 tasks make a hand-over"
    );
    // Beyond the scan window, so all of them wait for their due time together.
    let due = now_ms() + 8_000;
    let at = rfc3339(due);
    let tasks: Vec<Value> = (0..n)
        .map(|_| json!({"job": "bench", "payload": "{\"order_id\":42}", "run_at": at}))
        .collect();
    for chunk in tasks.chunks(1_000) {
        bed.create(chunk, 0).await;
    }
    tokio::time::sleep(Duration::from_millis((due - now_ms()).max(0) as u64)).await;
    bed.drain(n, Duration::from_secs(600)).await;
    let spans = bed.db.run_spans(bed.job_id, due).await;
    assert_eq!(spans.len(), n, "every task ran once");
    let mut gaps: Vec<i64> = spans.windows(2).map(|w| w[1].0 - w[0].1).collect();
    gaps.sort_unstable();
    assert!(
        gaps[0] >= 0,
        "two runs of a job bound to one at a time overlapped by {} ms",
        -gaps[0]
    );
    let first = spans[0].0;
    let last = spans[n - 1].1;
    println!(
        "\n### Handoff — {}, {n} tasks due at one instant, `concurrency {{limit: 1}}`\n",
        bed.label()
    );
    println!("| runs | first start → last end | slot freed → next start p50 | p90 | p99 | max |");
    println!("|---|---|---|---|---|---|");
    println!(
        "| {n} | {} ms | {} ms | {} ms | {} ms | {} ms |",
        last - first,
        percentile(&gaps, 0.5),
        percentile(&gaps, 0.9),
        percentile(&gaps, 0.99),
        gaps[gaps.len() - 1],
    );
}
