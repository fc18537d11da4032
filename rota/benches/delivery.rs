//! Delivery beyond wasm (SPEC §8), measured as users run it: real `rota server` processes
//! on MariaDB (or SQLite), with the consumers and the webhook receiver in this process,
//! talking HTTP like a service would. The CPU of every process is read from
//! `/proc/<pid>/stat`.
//!
//! Cases (first argument, or `ROTA_BENCH_CASE`):
//!
//! - `pull` — `ROTA_BENCH_TASKS` (200,000) tasks of a pull job, due now, are made ready by
//!   the node's scan, wheel and dispatch (timed on its own: ready/s); then
//!   `ROTA_BENCH_CONSUMERS` (4) consumers each pull batches of `ROTA_BENCH_BATCH` (100) and
//!   ack each batch in one `POST /api/v1/jobs/{job}/ack`, until none is left. Figures:
//!   tasks/s pulled and acked, CPU µs per task of the node(s) and the database.
//! - `pickup` — long polls waiting (`wait_ms` 30 s, 4 consumers) while tasks are created at
//!   `ROTA_BENCH_RATE` (500/s) for `ROTA_BENCH_SECONDS` (30), each due 1–3 s after its
//!   creation; with two or more nodes (`ROTA_BENCH_NODES`), tasks are created through the
//!   first node (whose wheel fires them) and pulled through the last. Pickup = the moment
//!   the pull answered − the task's due time: p50, p99, p99.9, max.
//! - `webhook` — `ROTA_BENCH_TASKS` (100,000) tasks of an `http` job due at one instant,
//!   created beyond the scan window, POSTed to a receiver in this process (answers 200):
//!   deliveries/s from the first to the last, the lateness of each delivery (received −
//!   due) p50/p99, and CPU µs per delivery of the node and the database.
//!
//! - `floor` — what the database alone costs a reference durable queue at `ROTA_BENCH_RATE`
//!   for `ROTA_BENCH_SECONDS`, to set against `pickup`'s database figure: per 10 ms tick (as
//!   `pickup` creates), the tick's tasks created in one transaction, leased in a second (the
//!   tasks' update, their runs' insert) and acked in a third (the tasks' locked read, the
//!   runs' and the tasks' update), from one connection, on Rota's own tables and indexes,
//!   with nothing of Rota in the way. MariaDB only. Figures: its CPU µs and statements per
//!   task.
//!
//! Settings: `ROTA_BIN` (target/release/rota), `ROTA_BENCH_MYSQL_URL` (a private MariaDB:
//! `scripts/bench/mariadb-instance.sh`; SQLite without it), `ROTA_BENCH_MARIADB_PID`.

#[path = "../tests/integration/support/mod.rs"]
mod support;

#[path = "common/mod.rs"]
mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{
    Db, bench_database, cpu_seconds, diff, env_or, percentile, post_batch, rfc3339, rota_bin,
    start_nodes,
};
use serde_json::{Value, json};
use support::*;

fn main() {
    let case = common::case("pull");
    common::block_on(async {
        let bed = Bed::start().await;
        match case.as_str() {
            "pull" => pull(&bed).await,
            "pickup" => pickup(&bed).await,
            "webhook" => webhook(&bed).await,
            "floor" => floor(&bed).await,
            other => {
                eprintln!("unknown case `{other}`: pull | pickup | webhook | floor");
                std::process::exit(2);
            }
        }
    });
}

/// The database and the scheduler nodes (no executor: nothing here runs a plugin).
struct Bed {
    db: Db,
    db_name: &'static str,
    mariadb_pid: Option<u32>,
    nodes: Vec<(KillOnDrop, Api)>,
    http: reqwest::Client,
    _dirs: Vec<tempfile::TempDir>,
}

impl Bed {
    async fn start() -> Bed {
        let mut dirs = Vec::new();
        let (url, db_name) = bench_database(&mut dirs);
        let log_dir = tempfile::tempdir().unwrap();
        // The webhook receiver listens on 127.0.0.1, which the egress policy denies.
        let nodes = start_nodes(
            &rota_bin(),
            &url,
            log_dir.path(),
            &[("ROTA_EGRESS_ALLOW", "127.0.0.1")],
        )
        .await;
        dirs.push(log_dir);
        Bed {
            db: Db::connect(&url).await,
            db_name,
            mariadb_pid: std::env::var("ROTA_BENCH_MARIADB_PID")
                .ok()
                .and_then(|p| p.trim().parse().ok()),
            nodes,
            http: reqwest::Client::builder()
                .pool_max_idle_per_host(64)
                .build()
                .unwrap(),
            _dirs: dirs,
        }
    }

    fn first(&self) -> &Api {
        &self.nodes[0].1
    }

    fn last(&self) -> &Api {
        &self.nodes[self.nodes.len() - 1].1
    }

    /// CPU seconds so far: the nodes together, the database, and this process (the
    /// consumers or the webhook receiver, which share the box with both).
    fn cpu(&self) -> Cpu {
        Cpu {
            nodes: self.nodes.iter().map(|(c, _)| cpu_seconds(c.0.id())).sum(),
            db: self.mariadb_pid.map(cpu_seconds),
            bench: cpu_seconds(std::process::id()),
        }
    }

    fn label(&self) -> String {
        format!(
            "{}, {} node{}",
            self.db_name,
            self.nodes.len(),
            if self.nodes.len() == 1 { "" } else { "s" }
        )
    }

    /// Creates `n` tasks of `job` in batches of 5,000, each due at `due(i)`.
    async fn create(&self, job: &str, n: usize, due: impl Fn(usize) -> i64) {
        for start in (0..n).step_by(5_000) {
            let tasks: Vec<Value> = (start..(start + 5_000).min(n))
                .map(|i| json!({"job": job, "run_at": rfc3339(due(i)), "payload": format!("{{\"order_id\":{i}}}")}))
                .collect();
            let body = serde_json::to_vec(&json!({"tasks": tasks})).unwrap();
            post_batch(&self.http, &self.first().base, TOKEN, body).await;
        }
    }

    /// `POST path` with `body` through `api`; the answer's JSON.
    async fn post(&self, api: &Api, path: &str, body: &Value) -> Value {
        let resp = self
            .http
            .post(format!("{}{path}", api.base))
            .bearer_auth(TOKEN)
            .json(body)
            .send()
            .await
            .expect("request");
        let status = resp.status();
        let v: Value = resp.json().await.unwrap_or(Value::Null);
        assert!(status.is_success(), "POST {path}: {status} {v}");
        v
    }
}

fn ms_of(v: &Value) -> i64 {
    chrono::DateTime::parse_from_rfc3339(v.as_str().expect("a time"))
        .expect("RFC 3339")
        .timestamp_millis()
}

/// CPU seconds of the processes on the box ([`Bed::cpu`]).
struct Cpu {
    nodes: f64,
    db: Option<f64>,
    bench: f64,
}

fn cpu_line(label: &str, before: Cpu, after: Cpu, n: usize) {
    let us = |s: f64| s * 1e6 / n.max(1) as f64;
    let db = match (before.db, after.db) {
        (Some(b), Some(a)) => format!(", database {:.0} µs", us(a - b)),
        _ => String::new(),
    };
    println!(
        "{label}: CPU per task: scheduler node(s) {:.0} µs{db}, this bench process (consumers or receiver) {:.0} µs",
        us(after.nodes - before.nodes),
        us(after.bench - before.bench)
    );
}

// ----- pull + ack ---------------------------------------------------------------------------

async fn pull(bed: &Bed) {
    let n = env_or("ROTA_BENCH_TASKS", 200_000) as usize;
    let consumers = env_or("ROTA_BENCH_CONSUMERS", 4) as usize;
    let batch = env_or("ROTA_BENCH_BATCH", 100);
    let job = bed
        .post(
            bed.first(),
            "/api/v1/jobs",
            &json!({"name": "queue", "app": "shop", "schedule": {"kind": "none"},
                    "delivery": {"kind": "pull"}}),
        )
        .await;
    let job_id = job["id"].as_i64().unwrap();
    let now = now_ms();
    let created = Instant::now();
    bed.create("queue", n, |_| now).await;
    let create_s = created.elapsed().as_secs_f64();
    // Wait until every task is ready (made so by the scan, the wheel and dispatch).
    while bed.db.count_tasks(job_id, Some("ready")).await < n as i64 {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let ready_s = created.elapsed().as_secs_f64();
    println!(
        "## pull + ack — {}, {n} tasks, {consumers} consumers, batches of {batch}",
        bed.label()
    );
    println!(
        "created in {create_s:.1} s; all ready {ready_s:.1} s after the first create ({:.0} tasks/s made ready)",
        n as f64 / ready_s
    );
    let cpu_before = bed.cpu();
    let statements_before = bed.db.status().await;
    let start = Instant::now();
    let done = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut handles = Vec::new();
    for c in 0..consumers {
        let api = bed.nodes[c % bed.nodes.len()].1.clone();
        let http = bed.http.clone();
        let done = done.clone();
        handles.push(tokio::spawn(async move {
            loop {
                let resp = http
                    .post(format!("{}/api/v1/jobs/queue/pull", api.base))
                    .bearer_auth(TOKEN)
                    .json(&json!({"max": batch, "consumer": format!("c{c}")}))
                    .send()
                    .await
                    .expect("pull");
                let v: Value = resp.json().await.expect("pull answer");
                let items = v["items"].as_array().cloned().unwrap_or_default();
                if items.is_empty() {
                    return;
                }
                let acks: Vec<Value> = items
                    .iter()
                    .map(|i| json!({"task": i["task"], "lease": i["lease"]}))
                    .collect();
                let resp = http
                    .post(format!("{}/api/v1/jobs/queue/ack", api.base))
                    .bearer_auth(TOKEN)
                    .json(&json!({"acks": acks}))
                    .send()
                    .await
                    .expect("ack");
                let v: Value = resp.json().await.expect("ack answer");
                let acked = v["results"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|r| r["status"] == "acked")
                    .count();
                done.fetch_add(acked, std::sync::atomic::Ordering::Relaxed);
            }
        }));
    }
    for h in handles {
        h.await.unwrap();
    }
    let secs = start.elapsed().as_secs_f64();
    let acked = done.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(acked, n, "every task pulled and acked once");
    assert_eq!(
        bed.db.count_tasks(job_id, Some("succeeded")).await,
        n as i64
    );
    println!(
        "**{:.0} tasks/s** pulled and acked ({acked} in {secs:.2} s)",
        acked as f64 / secs
    );
    cpu_line("pull + ack", cpu_before, bed.cpu(), acked);
    let d = diff(&bed.db.status().await, &statements_before);
    if !d.is_empty() {
        let per = |k: &str| d.get(k).copied().unwrap_or(0) as f64 * 1000.0 / acked as f64;
        println!(
            "statements per 1,000 tasks: select {:.1}, insert {:.1}, update {:.1}, commit {:.1}",
            per("Com_select"),
            per("Com_insert"),
            per("Com_update"),
            per("Com_commit")
        );
        println!(
            "rows per task: index reads next {:.1}, key {:.1}; rows read {:.1}, updated {:.1}, inserted {:.1}",
            per("Handler_read_next") / 1000.0,
            per("Handler_read_key") / 1000.0,
            per("Innodb_rows_read") / 1000.0,
            per("Innodb_rows_updated") / 1000.0,
            per("Innodb_rows_inserted") / 1000.0
        );
    }
}

// ----- the database's floor ------------------------------------------------------------------

async fn floor(bed: &Bed) {
    let Db::My(pool) = &bed.db else {
        println!("floor: MariaDB only (set ROTA_BENCH_MYSQL_URL)");
        return;
    };
    let rate = env_or("ROTA_BENCH_RATE", 500) as usize;
    let seconds = env_or("ROTA_BENCH_SECONDS", 30) as usize;
    let per_tick = (rate / 100).max(1);
    let total = rate * seconds;
    // Ids far above any the node hands out (and above a former run's, should one have left
    // rows behind); due in a thousand years, so no scan claims them between their create
    // and their lease. They are deleted at the end.
    let above: i64 = sqlx::query_scalar(
        "SELECT GREATEST(COALESCE((SELECT MAX(id) FROM tasks), 0), \
         COALESCE((SELECT MAX(id) FROM runs), 0)) + 1",
    )
    .fetch_one(pool)
    .await
    .unwrap();
    let first = above.max(1 << 50);
    let never = now_ms() + 1_000 * 365 * 86_400_000;
    let ids = |k: usize| (first + k as i64)..(first + (k + per_tick) as i64);
    let statements_before = bed.db.status().await;
    // The bench's pool may hold a single connection: taken after the status read above and
    // given back before the one below.
    let mut conn = pool.acquire().await.unwrap();
    let cpu_before = bed.cpu();
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    let mut k = 0;
    while k < total {
        tick.tick().await;
        let now = now_ms();
        let mut tx = sqlx::Connection::begin(&mut *conn).await.unwrap();
        let mut qb = sqlx::QueryBuilder::<sqlx::MySql>::new(
            "INSERT INTO tasks (id, job_id, kind, status, due_at, attempt, priority, created_at, updated_at) ",
        );
        qb.push_values(ids(k), |mut b, id| {
            b.push_bind(id)
                .push_bind(0_i64)
                .push_bind("delayed")
                .push_bind("pending")
                .push_bind(never)
                .push_bind(1_i32)
                .push_bind(0_i32)
                .push_bind(now)
                .push_bind(now);
        });
        qb.build().execute(&mut *tx).await.unwrap();
        tx.commit().await.unwrap();

        let mut tx = sqlx::Connection::begin(&mut *conn).await.unwrap();
        let mut qb = sqlx::QueryBuilder::<sqlx::MySql>::new(
            "UPDATE tasks SET status = 'running', lease_token = CONCAT(id, '.floor'), lease_expires_at = ",
        );
        qb.push_bind(now + 30_000)
            .push(", updated_at = ")
            .push_bind(now)
            .push(" WHERE status = 'pending' AND id IN ");
        in_list(&mut qb, ids(k));
        qb.build().execute(&mut *tx).await.unwrap();
        let mut qb = sqlx::QueryBuilder::<sqlx::MySql>::new(
            "INSERT INTO runs (id, job_id, task_id, attempt, shard_index, shard_total, executor, status, scheduled_at, dispatched_at, started_at) ",
        );
        qb.push_values(ids(k), |mut b, id| {
            b.push_bind(id)
                .push_bind(0_i64)
                .push_bind(id)
                .push_bind(1_i32)
                .push_bind(0_i32)
                .push_bind(1_i32)
                .push_bind("pull:floor")
                .push_bind("running")
                .push_bind(now)
                .push_bind(now)
                .push_bind(now);
        });
        qb.build().execute(&mut *tx).await.unwrap();
        tx.commit().await.unwrap();

        let mut tx = sqlx::Connection::begin(&mut *conn).await.unwrap();
        let mut qb = sqlx::QueryBuilder::<sqlx::MySql>::new(
            "SELECT id, lease_token FROM tasks WHERE id IN ",
        );
        in_list(&mut qb, ids(k));
        qb.push(" ORDER BY id FOR UPDATE");
        let locked: Vec<(i64, Option<String>)> =
            qb.build_query_as().fetch_all(&mut *tx).await.unwrap();
        assert_eq!(locked.len(), per_tick);
        let mut qb = sqlx::QueryBuilder::<sqlx::MySql>::new(
            "UPDATE runs SET status = 'succeeded', finished_at = ",
        );
        qb.push_bind(now).push(" WHERE id IN ");
        in_list(&mut qb, ids(k));
        qb.build().execute(&mut *tx).await.unwrap();
        let mut qb = sqlx::QueryBuilder::<sqlx::MySql>::new(
            "UPDATE tasks SET status = 'succeeded', lease_token = NULL, lease_expires_at = NULL, updated_at = ",
        );
        qb.push_bind(now).push(" WHERE id IN ");
        in_list(&mut qb, ids(k));
        qb.build().execute(&mut *tx).await.unwrap();
        tx.commit().await.unwrap();
        k += per_tick;
    }
    let cpu_after = bed.cpu();
    for table in ["tasks", "runs"] {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "DELETE FROM {table} WHERE id >= ?"
        )))
        .bind(first)
        .execute(&mut *conn)
        .await
        .unwrap();
    }
    drop(conn);
    println!(
        "## the database's floor — {}, {rate} tasks/s for {seconds} s in ticks of {per_tick}: \
         a create, a lease and an ack transaction per tick, one connection",
        bed.label()
    );
    if let (Some(b), Some(a)) = (cpu_before.db, cpu_after.db) {
        println!(
            "floor: database {:.0} µs CPU per task",
            (a - b) * 1e6 / total as f64
        );
    }
    statements_line(&diff(&bed.db.status().await, &statements_before), total);
}

/// The database's statements per task by kind, from a difference of its status counters
/// (nothing without MariaDB).
fn statements_line(d: &std::collections::BTreeMap<String, i64>, tasks: usize) {
    if d.is_empty() {
        return;
    }
    let per = |k: &str| d.get(k).copied().unwrap_or(0) as f64 / tasks.max(1) as f64;
    println!(
        "statements per task: select {:.1}, insert {:.1}, update {:.1}, commit {:.1}, rollback {:.1}",
        per("Com_select"),
        per("Com_insert"),
        per("Com_update"),
        per("Com_commit"),
        per("Com_rollback")
    );
}

/// `(a, b, …)` of `ids`.
fn in_list(qb: &mut sqlx::QueryBuilder<sqlx::MySql>, ids: std::ops::Range<i64>) {
    let mut list = qb.separated(", ");
    list.push_unseparated("(");
    for id in ids {
        list.push_bind(id);
    }
    list.push_unseparated(")");
}

// ----- long-poll pickup ---------------------------------------------------------------------

async fn pickup(bed: &Bed) {
    let rate = env_or("ROTA_BENCH_RATE", 500);
    let seconds = env_or("ROTA_BENCH_SECONDS", 30);
    let consumers = env_or("ROTA_BENCH_CONSUMERS", 4) as usize;
    bed.post(
        bed.first(),
        "/api/v1/jobs",
        &json!({"name": "queue", "app": "shop", "schedule": {"kind": "none"},
                "delivery": {"kind": "pull"}}),
    )
    .await;
    let total = (rate * seconds) as usize;
    let statements_before = bed.db.status().await;
    let cpu_before = bed.cpu();
    let pickups: Arc<Mutex<Vec<i64>>> = Arc::default();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut handles = Vec::new();
    for c in 0..consumers {
        let (api, http) = (bed.last().clone(), bed.http.clone());
        let (pickups, stop) = (pickups.clone(), stop.clone());
        handles.push(tokio::spawn(async move {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let resp = http
                    .post(format!("{}/api/v1/jobs/queue/pull", api.base))
                    .bearer_auth(TOKEN)
                    .json(&json!({"max": 100, "wait_ms": 2_000, "consumer": format!("c{c}")}))
                    .send()
                    .await
                    .expect("pull");
                let answered = now_ms();
                let v: Value = resp.json().await.expect("pull answer");
                let items = v["items"].as_array().cloned().unwrap_or_default();
                if items.is_empty() {
                    continue;
                }
                pickups
                    .lock()
                    .unwrap()
                    .extend(items.iter().map(|i| answered - ms_of(&i["due_at"])));
                let acks: Vec<Value> = items
                    .iter()
                    .map(|i| json!({"task": i["task"], "lease": i["lease"]}))
                    .collect();
                http.post(format!("{}/api/v1/jobs/queue/ack", api.base))
                    .bearer_auth(TOKEN)
                    .json(&json!({"acks": acks}))
                    .send()
                    .await
                    .expect("ack");
            }
        }));
    }
    // A batch every 10 ms, each task due 1–3 s after it is created.
    let per_tick = (rate / 100).max(1) as usize;
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    let mut k = 0usize;
    while k < total {
        tick.tick().await;
        let now = now_ms();
        let tasks: Vec<Value> = (0..per_tick)
            .map(|j| {
                let due = now + 1_000 + ((k + j) as i64 * 7919) % 2_000;
                json!({"job": "queue", "run_at": rfc3339(due)})
            })
            .collect();
        k += tasks.len();
        let body = serde_json::to_vec(&json!({"tasks": tasks})).unwrap();
        let (http, base) = (bed.http.clone(), bed.first().base.clone());
        tokio::spawn(async move { post_batch(&http, &base, TOKEN, body).await });
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while pickups.lock().unwrap().len() < total && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for h in handles {
        h.await.unwrap();
    }
    let mut late = pickups.lock().unwrap().clone();
    late.sort_unstable();
    println!(
        "## long-poll pickup — {}, {rate} tasks/s for {seconds} s, {consumers} consumers waiting on node {} (tasks fired by node 1's wheel)",
        bed.label(),
        bed.nodes.len()
    );
    println!(
        "picked up {} of {total}; pickup after due: p50 {} ms, **p99 {} ms**, p99.9 {} ms, max {} ms",
        late.len(),
        percentile(&late, 0.50),
        percentile(&late, 0.99),
        percentile(&late, 0.999),
        late.last().copied().unwrap_or(0)
    );
    // The whole run: creating the tasks, making them ready, the pulls (those that found
    // nothing too) and the acks.
    cpu_line("pickup run", cpu_before, bed.cpu(), late.len());
    statements_line(
        &diff(&bed.db.status().await, &statements_before),
        late.len(),
    );
}

// ----- webhooks -----------------------------------------------------------------------------

async fn webhook(bed: &Bed) {
    let n = env_or("ROTA_BENCH_TASKS", 100_000) as usize;
    let received: Arc<Mutex<Vec<(i64, i64)>>> = Arc::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let origin = format!("http://{}", listener.local_addr().unwrap());
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post({
            let received = received.clone();
            move |headers: axum::http::HeaderMap, _body: String| {
                let received = received.clone();
                async move {
                    let due: i64 = headers
                        .get("x-rota-scheduled-at")
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| v.parse().ok())
                        .unwrap_or(0);
                    received.lock().unwrap().push((now_ms(), due));
                    "ok"
                }
            }
        }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await });
    let job = bed
        .post(
            bed.first(),
            "/api/v1/jobs",
            &json!({"name": "hook", "app": "shop", "schedule": {"kind": "none"},
                    "http_allow": [origin.clone()],
                    "delivery": {"kind": "http", "url": format!("{origin}/hook")}}),
        )
        .await;
    let job_id = job["id"].as_i64().unwrap();
    // Due at one instant, beyond the scan window: created first, then fired together.
    let due = now_ms() + 15_000 + n as i64 / 20;
    bed.create("hook", n, |_| due).await;
    let wait = (due - now_ms()).max(0) as u64;
    tokio::time::sleep(Duration::from_millis(wait.saturating_sub(1_000))).await;
    let cpu_before = bed.cpu();
    let deadline = Instant::now() + Duration::from_secs(600);
    while received.lock().unwrap().len() < n && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The attempts end (in the database) after the answers: CPU counts until they did.
    while bed.db.count_tasks(job_id, Some("succeeded")).await < n as i64
        && Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let cpu_after = bed.cpu();
    let got = received.lock().unwrap().clone();
    let first = got.iter().map(|(at, _)| *at).min().unwrap_or(0);
    let last = got.iter().map(|(at, _)| *at).max().unwrap_or(0);
    let mut late: Vec<i64> = got.iter().map(|(at, due)| at - due).collect();
    late.sort_unstable();
    println!(
        "## webhook deliveries — {}, {n} tasks due at one instant, a receiver in the bench answering 200",
        bed.label()
    );
    println!(
        "delivered {} of {n}; **{:.0} deliveries/s** (first to last, {:.2} s); received − due: p50 {} ms, p99 {} ms, max {} ms",
        got.len(),
        got.len() as f64 / ((last - first).max(1) as f64 / 1000.0),
        (last - first) as f64 / 1000.0,
        percentile(&late, 0.50),
        percentile(&late, 0.99),
        late.last().copied().unwrap_or(0)
    );
    cpu_line("webhook", cpu_before, cpu_after, got.len());
}
