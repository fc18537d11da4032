//! Workflows as users run them (SPEC §7, "Workflows"): real `rota server` nodes on MariaDB
//! or SQLite, one real `rota executor` running a real wasm step (`relay`: reads its payload
//! and sets it, or its params, as its output — `executor/tests/fixtures/relay.wat`), and
//! instances started through the REST API, one request each.
//!
//! Cases (first argument, or `ROTA_BENCH_CASE`):
//!
//! - `handoff` — instances of a five-step diamond (`a` → `b`, `c`, `d` → `e`) started
//!   steadily for `ROTA_BENCH_SECONDS` (30) at `ROTA_BENCH_RATE` step transitions/s (1,000:
//!   200 instances/s, five step ends each). For every step after the first, its run's
//!   start (the plugin's) − the last of its predecessors' final reports as the node applied
//!   it (`workflow_steps.finished_at`, the commit that created this step's task: SPEC §7's
//!   measure), and − the last of their runs' ends (what a user sees, with the executor's
//!   report window), p50/p99/p99.9/max; CPU per transition of the nodes, the executor and
//!   the database; statements per transition.
//! - `diamonds` — `ROTA_BENCH_INSTANCES` (10,000) instances of the same diamond, started as
//!   fast as the API takes them (32 requests in flight); transitions/s from the first start
//!   to the last instance's end, CPU and statements per transition, and the check that every
//!   instance succeeded with each step run once.
//! - `map` — one instance of `split` (an array of `ROTA_BENCH_ELEMENTS`, 10,000) → `each`
//!   (a map: one run per element) → `total` (the reduce); from start to end, elements/s,
//!   CPU and statements per element, and the reduce's input checked whole and in order.
//!
//! Settings as `load.rs`: `ROTA_BIN`, `ROTA_BENCH_MYSQL_URL` (+ `ROTA_BENCH_MARIADB_PID`
//! for the database's CPU), `ROTA_BENCH_NODES` (1), `ROTA_BENCH_CAPACITY` (256);
//! `ROTA_BENCH_REPORT_WINDOW_MS` is the executor's `--report-window-ms` (its default unless
//! set).

#[path = "../tests/integration/support/mod.rs"]
mod support;

#[path = "common/mod.rs"]
mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::{
    Db, bench_database, cpu_seconds, diff, env_or, first_member, percentile, rota_bin, start_nodes,
    statements,
};
use serde_json::{Value, json};
use support::*;

const RELAY: &str = include_str!("../../executor/tests/fixtures/relay.wat");

fn main() {
    let case = common::case("handoff");
    common::block_on(async {
        let bed = Bed::start().await;
        match case.as_str() {
            "handoff" => handoff(&bed).await,
            "diamonds" => diamonds(&bed).await,
            "map" => map(&bed).await,
            other => {
                eprintln!("unknown case `{other}`: handoff | diamonds | map");
                std::process::exit(2);
            }
        }
    });
}

/// The database, the nodes, the executor, the relay job and the two workflows.
struct Bed {
    db: Db,
    db_name: &'static str,
    mariadb_pids: Vec<u32>,
    nodes: Vec<(KillOnDrop, Api)>,
    executor: KillOnDrop,
    _dirs: Vec<tempfile::TempDir>,
}

impl Bed {
    async fn start() -> Bed {
        let bin = rota_bin();
        let mut dirs = Vec::new();
        let (url, db_name) = bench_database(&mut dirs);
        let log_dir = tempfile::tempdir().unwrap();
        let nodes = start_nodes(&bin, &url, log_dir.path(), &[]).await;
        let schedulers: Vec<String> = nodes.iter().map(|(_, a)| a.base.clone()).collect();
        let exec_dir = tempfile::tempdir().unwrap();
        let mut executor = Command::new(&bin);
        executor_setup(
            &mut executor,
            "default",
            &schedulers.join(","),
            &format!("127.0.0.1:{}", free_port()),
            exec_dir.path(),
        )
        .args([
            "--capacity",
            &env_or("ROTA_BENCH_CAPACITY", 256).to_string(),
        ]);
        if let Ok(window) = std::env::var("ROTA_BENCH_REPORT_WINDOW_MS") {
            executor.args(["--report-window-ms", &window]);
        }
        executor.stderr(std::fs::File::create(log_dir.path().join("executor.log")).unwrap());
        let executor = KillOnDrop::new(executor.spawn().expect("starting rota executor"));
        let api = nodes[0].1.clone();
        wait_executors(&api, 1).await;
        api.upload("relay", RELAY).await;
        api.ok(
            "POST",
            "/api/v1/jobs",
            Some(json!({"name": "relay", "app": "default", "plugin": "relay",
                        "schedule": {"kind": "none"}, "route": "round_robin"})),
        )
        .await;
        api.ok(
            "POST",
            "/api/v1/workflows",
            Some(json!({"name": "diamond", "app": "default", "steps": [
                {"name": "a", "job": "relay"},
                {"name": "b", "job": "relay", "after": ["a"]},
                {"name": "c", "job": "relay", "after": ["a"]},
                {"name": "d", "job": "relay", "after": ["a"]},
                {"name": "e", "job": "relay", "after": ["b", "c", "d"]},
            ]})),
        )
        .await;
        dirs.push(exec_dir);
        dirs.push(log_dir);
        let bed = Bed {
            db: Db::connect(&first_member(&url)).await,
            db_name,
            mariadb_pids: common::mariadb_pids(),
            nodes,
            executor,
            _dirs: dirs,
        };
        // Warm-up, through every node: the plugin fetched and compiled, each node's
        // connections open and statements prepared. (With only the first node warmed, the
        // others' first quarter second of a three-node run made 2 % of its hand-offs
        // 60-100 ms late: the run's whole p99.)
        let mut warm = Vec::new();
        for (i, (_, api)) in bed.nodes.iter().enumerate() {
            warm.push(
                start_on(
                    api,
                    "diamond",
                    json!({"warm": true}),
                    &format!("warm-up-{i}"),
                )
                .await,
            );
        }
        bed.wait_ended(&warm, Duration::from_secs(60)).await;
        bed
    }

    fn api(&self, i: usize) -> &Api {
        &self.nodes[i % self.nodes.len()].1
    }

    async fn start_instance(&self, workflow: &str, input: Value, key: &str) -> i64 {
        start_on(self.api(0), workflow, input, key).await
    }

    /// Waits until none of `ids` runs; panics past `within`.
    async fn wait_ended(&self, ids: &[i64], within: Duration) {
        let deadline = Instant::now() + within;
        let first = ids.iter().min().copied().unwrap_or(0);
        loop {
            let running = self.db.instances_running_since(first).await;
            if running == 0 {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{running} instances still run after {within:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// CPU seconds so far: the nodes, the executor, the database (if its pid is known).
    fn cpu(&self) -> [f64; 3] {
        [
            self.nodes.iter().map(|(c, _)| cpu_seconds(c.0.id())).sum(),
            cpu_seconds(self.executor.0.id()),
            self.mariadb_pids.iter().map(|&p| cpu_seconds(p)).sum(),
        ]
    }

    /// "nodes µs | executor µs | database µs" per `n` since `before`.
    fn cpu_per(&self, before: [f64; 3], n: usize) -> String {
        let now = self.cpu();
        let us = |i: usize| (now[i] - before[i]) * 1e6 / n.max(1) as f64;
        let database = if self.mariadb_pids.is_empty() {
            "–".to_owned()
        } else {
            format!("{:.0}", us(2))
        };
        format!("{:.0} | {:.0} | {database}", us(0), us(1))
    }

    /// Statements per `n` since `before` (MariaDB's `Com_*`), "–" on SQLite.
    async fn statements_per(
        &self,
        before: &std::collections::BTreeMap<String, i64>,
        n: usize,
    ) -> String {
        let now = self.db.status().await;
        if now.is_empty() {
            return "–".into();
        }
        format!("{:.1}", statements(&diff(&now, before), n).0 / 1000.0)
    }

    fn label(&self) -> String {
        let n = self.nodes.len();
        format!(
            "{}, {n} node{}, a real executor running `relay.wat`",
            self.db_name,
            if n == 1 { "" } else { "s" }
        )
    }
}

impl Db {
    async fn instances_running_since(&self, first: i64) -> i64 {
        const SQL: &str =
            "SELECT COUNT(*) FROM workflow_instances WHERE id >= ? AND status = 'running'";
        match self {
            Db::My(p) => sqlx::query_scalar(SQL).bind(first).fetch_one(p).await,
            Db::Lite(p) => sqlx::query_scalar(SQL).bind(first).fetch_one(p).await,
        }
        .expect("counting running instances")
    }

    async fn instances_by_status_since(&self, first: i64) -> Vec<(String, i64)> {
        const SQL: &str =
            "SELECT status, COUNT(*) FROM workflow_instances WHERE id >= ? GROUP BY status";
        match self {
            Db::My(p) => sqlx::query_as(SQL).bind(first).fetch_all(p).await,
            Db::Lite(p) => sqlx::query_as(SQL).bind(first).fetch_all(p).await,
        }
        .expect("counting instances")
    }

    /// Per step of the instances from `first` on: (instance, step, when the node applied
    /// the report that ended it, its succeeded run's start and end), in ms.
    async fn step_times(&self, first: i64) -> Vec<(i64, i32, i64, i64, i64)> {
        const SQL: &str = "SELECT wt.instance_id, wt.step, ws.finished_at, r.started_at, r.finished_at \
             FROM workflow_tasks wt \
             JOIN workflow_steps ws ON ws.instance_id = wt.instance_id AND ws.step = wt.step \
             JOIN runs r ON r.task_id = wt.task_id AND r.status = 'succeeded' \
             WHERE wt.instance_id >= ?";
        match self {
            Db::My(p) => sqlx::query_as(SQL).bind(first).fetch_all(p).await,
            Db::Lite(p) => sqlx::query_as(SQL).bind(first).fetch_all(p).await,
        }
        .expect("reading step times")
    }

    /// Runs of the step tasks of the instances from `first` on, and the tasks among them
    /// with more than one run (retried: none should need it).
    async fn runs_since(&self, first: i64) -> (i64, i64) {
        const RUNS: &str = "SELECT COUNT(*) FROM runs r \
             JOIN workflow_tasks wt ON wt.task_id = r.task_id WHERE wt.instance_id >= ?";
        const MORE: &str = "SELECT COUNT(*) FROM (SELECT r.task_id FROM runs r \
             JOIN workflow_tasks wt ON wt.task_id = r.task_id WHERE wt.instance_id >= ? \
             GROUP BY r.task_id HAVING COUNT(*) > 1) d";
        let mut counts = [0; 2];
        for (count, sql) in counts.iter_mut().zip([RUNS, MORE]) {
            *count = match self {
                Db::My(p) => sqlx::query_scalar(sql).bind(first).fetch_one(p).await,
                Db::Lite(p) => sqlx::query_scalar(sql).bind(first).fetch_one(p).await,
            }
            .expect("counting runs");
        }
        (counts[0], counts[1])
    }
}

/// Starts an instance of `workflow` through `api`; its id. A 503 (the database could not
/// take it) is retried, as a client would, with the same key.
async fn start_on(api: &Api, workflow: &str, input: Value, key: &str) -> i64 {
    let body = json!({"input": input, "key": key});
    let path = format!("/api/v1/workflows/{workflow}/instances");
    for _ in 0..100 {
        let (status, answer) = api.call("POST", &path, Some(body.clone())).await;
        match status {
            200 | 201 => return answer["id"].as_i64().unwrap(),
            503 => {
                common::BATCH_RETRIES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            _ => panic!("POST {path} answered {status}: {answer}"),
        }
    }
    panic!("POST {path}: 503 a hundred times");
}

/// The diamond's predecessors, by step index.
const PREDECESSORS: [&[i32]; 5] = [&[], &[0], &[0], &[0], &[1, 2, 3]];

/// An instance's (report applied, run started, run finished) of each step of the diamond.
type StepTimes = [Option<(i64, i64, i64)>; 5];

/// For every step after the first, of the diamonds from `first` on (ms, sorted): its run's
/// start − the last of its predecessors' reports applied (SPEC §7's measure), and − the
/// last of their runs' ends (what a user sees, the executor's report window included).
async fn latencies(bed: &Bed, first: i64) -> (Vec<i64>, Vec<i64>) {
    use std::collections::HashMap;
    let rows = bed.db.step_times(first).await;
    let mut by_instance: HashMap<i64, StepTimes> = HashMap::new();
    for (instance, step, applied, started, finished) in rows {
        by_instance.entry(instance).or_default()[step as usize] =
            Some((applied, started, finished));
    }
    let (mut after_report, mut after_end) = (Vec::new(), Vec::new());
    for steps in by_instance.values() {
        for (s, before) in PREDECESSORS.iter().enumerate().skip(1) {
            let Some((_, started, _)) = steps[s] else {
                continue;
            };
            let last = |pick: fn(&(i64, i64, i64)) -> i64| -> Option<i64> {
                before
                    .iter()
                    .map(|&p| steps[p as usize].as_ref().map(pick))
                    .collect::<Option<Vec<i64>>>()?
                    .into_iter()
                    .max()
            };
            if let (Some(report), Some(end)) = (last(|t| t.0), last(|t| t.2)) {
                after_report.push(started - report);
                after_end.push(started - end);
            }
        }
    }
    after_report.sort_unstable();
    after_end.sort_unstable();
    (after_report, after_end)
}

fn quantiles(sorted: &[i64]) -> String {
    format!(
        "{} | {} | {} | {}",
        percentile(sorted, 0.5),
        percentile(sorted, 0.99),
        percentile(sorted, 0.999),
        sorted.last().copied().unwrap_or(0)
    )
}

/// Starts `n` diamonds with at most `in_flight` requests at once, spread evenly over `over`
/// (all at once when zero); their ids.
async fn start_diamonds(bed: &Bed, n: usize, in_flight: usize, over: Duration) -> Vec<i64> {
    let started = Instant::now();
    let per_instance = over.as_secs_f64() / n.max(1) as f64;
    let slots = std::sync::Arc::new(tokio::sync::Semaphore::new(in_flight));
    let mut requests = tokio::task::JoinSet::new();
    for i in 0..n {
        let due = Duration::from_secs_f64(per_instance * i as f64);
        if let Some(wait) = due.checked_sub(started.elapsed()) {
            tokio::time::sleep(wait).await;
        }
        let slot = slots.clone().acquire_owned().await.unwrap();
        let api = bed.api(i).clone();
        requests.spawn(async move {
            let id = start_on(&api, "diamond", json!({"n": i}), &format!("d-{i}")).await;
            drop(slot);
            id
        });
    }
    requests.join_all().await
}

async fn handoff(bed: &Bed) {
    let rate = env_or("ROTA_BENCH_RATE", 1_000);
    let seconds = env_or("ROTA_BENCH_SECONDS", 30);
    let n = (rate * seconds / 5) as usize;
    let (cpu, s0) = (bed.cpu(), bed.db.status().await);
    let t0 = Instant::now();
    let ids = start_diamonds(bed, n, 64, Duration::from_secs(seconds)).await;
    let offered = t0.elapsed();
    bed.wait_ended(&ids, Duration::from_secs(300)).await;
    let transitions = n * 5;
    let cpu = bed.cpu_per(cpu, transitions);
    let per = bed.statements_per(&s0, transitions).await;
    let first = ids.iter().min().copied().unwrap_or(0);
    let (after_report, after_end) = latencies(bed, first).await;
    println!(
        "\n### Step hand-off — {}, diamonds at {rate} transitions/s for {seconds} s\n",
        bed.label()
    );
    println!(
        "Step start − its last predecessor's report applied (SPEC §7), then − that predecessor's run end (the executor's report window included), ms.\n"
    );
    println!(
        "| transitions/s offered | achieved | after report p50 | p99 | p99.9 | max | after run end p50 | p99 | p99.9 | max | nodes µs/transition | executor µs | database µs | statements /transition |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    println!(
        "| {rate} | {:.0} | {} | {} | {cpu} | {per} |",
        transitions as f64 / offered.as_secs_f64(),
        quantiles(&after_report),
        quantiles(&after_end),
    );
    report_outcome(bed, first, n).await;
    report_pipeline(bed).await;
}

/// Where the time went, from the nodes' own histograms (means over the whole run): the
/// scan that claims due-now step tasks, the wheel's fire after the due time, the dispatch
/// request, a completion batch.
async fn report_pipeline(bed: &Bed) {
    let mut text = String::new();
    for (_, api) in &bed.nodes {
        text.push_str(&api.metrics().await);
    }
    let sum = |name: &str| -> f64 {
        text.lines()
            .filter(|l| l.starts_with(name) && !l.contains('{'))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    let mean_ms = |name: &str| {
        let count = sum(&format!("{name}_count"));
        // The share above 100 ms, from the histogram's bucket.
        let under: f64 = text
            .lines()
            .filter(|l| l.starts_with(&format!("{name}_bucket{{le=\"0.1\"}}")))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum();
        format!(
            "{:.1} ms over {count} ({:.1} % > 100 ms)",
            sum(&format!("{name}_sum")) * 1000.0 / count.max(1.0),
            (count - under) * 100.0 / count.max(1.0)
        )
    };
    println!(
        "> node means: scan {}, fire after due {}, dispatch request {}, hand-off (run end → next tasks committed) {}, heartbeat {}, a report batch's apply {}; fires held for the lease: {}; database retries: {}",
        mean_ms("rota_scan_seconds"),
        mean_ms("rota_fire_lateness_seconds"),
        mean_ms("rota_dispatch_seconds"),
        mean_ms("rota_workflow_handoff_seconds"),
        mean_ms("rota_heartbeat_seconds"),
        mean_ms("rota_report_apply_seconds"),
        sum("rota_fires_held_total"),
        text.lines()
            .filter(|l| l.starts_with("rota_db_retries_total"))
            .map(|l| l.to_owned())
            .collect::<Vec<_>>()
            .join(", "),
    );
}

async fn diamonds(bed: &Bed) {
    let n = env_or("ROTA_BENCH_INSTANCES", 10_000) as usize;
    let (cpu, s0) = (bed.cpu(), bed.db.status().await);
    let t0 = Instant::now();
    let ids = start_diamonds(bed, n, 32, Duration::ZERO).await;
    let all_started = t0.elapsed();
    bed.wait_ended(&ids, Duration::from_secs(600)).await;
    let took = t0.elapsed();
    let transitions = n * 5;
    let cpu = bed.cpu_per(cpu, transitions);
    let per = bed.statements_per(&s0, transitions).await;
    println!("\n### {n} diamonds at once — {}\n", bed.label());
    println!(
        "| instances | all started after | all ended after | transitions/s | nodes µs/transition | executor µs | database µs | statements /transition |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    println!(
        "| {n} | {:.1} s | {:.1} s | {:.0} | {cpu} | {per} |",
        all_started.as_secs_f64(),
        took.as_secs_f64(),
        transitions as f64 / took.as_secs_f64(),
    );
    report_outcome(bed, ids.iter().min().copied().unwrap_or(0), n).await;
}

/// Every instance succeeded (nothing lost); each step task has one run (none run again).
async fn report_outcome(bed: &Bed, first: i64, n: usize) {
    let statuses = bed.db.instances_by_status_since(first).await;
    let succeeded = statuses
        .iter()
        .find(|(s, _)| s == "succeeded")
        .map_or(0, |(_, c)| *c);
    let (runs, more) = bed.db.runs_since(first).await;
    let resent = common::BATCH_RETRIES.swap(0, std::sync::atomic::Ordering::Relaxed);
    println!(
        "\n> instances by status: {statuses:?}; {runs} step runs; {more} step tasks with more than one run; {resent} starts sent again after a 503"
    );
    assert_eq!(succeeded, n as i64, "every instance succeeded");
    assert_eq!(more, 0, "every step task ran once");
}

async fn map(bed: &Bed) {
    let elements = env_or("ROTA_BENCH_ELEMENTS", 10_000);
    let array: Vec<u64> = (0..elements).collect();
    let api = bed.api(0);
    api.ok(
        "POST",
        "/api/v1/workflows",
        Some(json!({"name": "fan", "app": "default", "steps": [
            {"name": "split", "job": "relay", "params": serde_json::to_string(&array).unwrap()},
            {"name": "each", "job": "relay", "after": ["split"], "map": true, "params": "1"},
            {"name": "total", "job": "relay", "after": ["each"]},
        ]})),
    )
    .await;
    let (cpu, s0) = (bed.cpu(), bed.db.status().await);
    let t0 = Instant::now();
    let id = bed.start_instance("fan", json!({}), "fan").await;
    bed.wait_ended(&[id], Duration::from_secs(900)).await;
    let took = t0.elapsed();
    let n = elements as usize;
    let cpu = bed.cpu_per(cpu, n);
    let per = bed.statements_per(&s0, n).await;
    let instance = api
        .ok("GET", &format!("/api/v1/workflow-instances/{id}"), None)
        .await;
    println!("\n### A map of {elements} elements — {}\n", bed.label());
    println!(
        "| elements | start to end | elements/s | nodes µs/element | executor µs | database µs | statements /element |"
    );
    println!("|---|---|---|---|---|---|---|");
    println!(
        "| {elements} | {:.1} s | {:.0} | {cpu} | {per} |",
        took.as_secs_f64(),
        elements as f64 / took.as_secs_f64(),
    );
    assert_eq!(instance["status"], "succeeded", "{}", instance["status"]);
    // The reduce got every element's output, in order: `1` each.
    let reduced = &instance["output"]["total"]["steps"]["each"];
    assert_eq!(
        reduced.as_array().map(Vec::len),
        Some(n),
        "the reduce's input"
    );
    assert!(reduced.as_array().unwrap().iter().all(|v| v == &json!(1)));
}
