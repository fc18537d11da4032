//! What the benchmarks share: their settings from the environment, and their own
//! connection to the database under test (counts, lateness and the server's statement
//! counters, read beside the scheduler's pool).
#![allow(dead_code)]

/// Runs a bench's body on a runtime of two worker threads (this box's cores; the nodes
/// under test are other processes).
pub fn block_on<F: std::future::Future>(body: F) -> F::Output {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("the bench's tokio runtime")
        .block_on(body)
}

/// The case a bench runs: the first argument that is not a flag (`cargo bench` appends
/// `--bench`), else `ROTA_BENCH_CASE`, else `default`.
pub fn case(default: &str) -> String {
    std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .or_else(|| std::env::var("ROTA_BENCH_CASE").ok())
        .unwrap_or_else(|| default.into())
}

/// The database's processes, for their CPU: `ROTA_BENCH_MARIADB_PID` (Galera: every
/// member's pid, comma-separated); none when it is not set.
pub fn mariadb_pids() -> Vec<u32> {
    std::env::var("ROTA_BENCH_MARIADB_PID")
        .unwrap_or_default()
        .split(',')
        .filter_map(|p| p.trim().parse().ok())
        .collect()
}

/// A number from the environment (`_` allowed as a separator), or `default`.
pub fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.replace('_', "").parse().ok())
        .unwrap_or(default)
}

use std::collections::BTreeMap;

use serde_json::Value;

/// A connection of the bench's own, beside the scheduler's pool.
pub enum Db {
    My(sqlx::MySqlPool),
    Lite(sqlx::SqlitePool),
}

impl Db {
    pub async fn connect(url: &str) -> Db {
        if url.starts_with("mysql:") {
            Db::My(
                sqlx::mysql::MySqlPoolOptions::new()
                    .max_connections(1)
                    .connect(url)
                    .await
                    .expect("bench connection to MySQL"),
            )
        } else {
            Db::Lite(
                sqlx::sqlite::SqlitePoolOptions::new()
                    .max_connections(1)
                    .connect(url)
                    .await
                    .expect("bench connection to SQLite"),
            )
        }
    }

    /// Tasks of `job_id` in `status` (`None`: all of them).
    pub async fn count_tasks(&self, job_id: i64, status: Option<&str>) -> i64 {
        const ALL: &str = "SELECT COUNT(*) FROM tasks WHERE job_id = ?";
        const BY_STATUS: &str = "SELECT COUNT(*) FROM tasks WHERE job_id = ? AND status = ?";
        match (self, status) {
            (Db::My(p), None) => sqlx::query_scalar(ALL).bind(job_id).fetch_one(p).await,
            (Db::My(p), Some(s)) => {
                sqlx::query_scalar(BY_STATUS)
                    .bind(job_id)
                    .bind(s)
                    .fetch_one(p)
                    .await
            }
            (Db::Lite(p), None) => sqlx::query_scalar(ALL).bind(job_id).fetch_one(p).await,
            (Db::Lite(p), Some(s)) => {
                sqlx::query_scalar(BY_STATUS)
                    .bind(job_id)
                    .bind(s)
                    .fetch_one(p)
                    .await
            }
        }
        .expect("counting tasks")
    }

    /// Whether any task of the job is still to finish (pending, throttled, claimed or
    /// running). A range read of the status index that stops at the first row: polling it
    /// costs the database next to nothing, unlike counting the finished ones (13 ms at
    /// 100,000 rows, ten times a second, taken from the system under test).
    pub async fn any_unfinished(&self, job_id: i64) -> bool {
        const MY: &str = "SELECT EXISTS(SELECT 1 FROM tasks FORCE INDEX (ix_tasks_due) \
             WHERE status IN ('pending', 'throttled', 'claimed', 'waiting', 'ready', 'running') AND job_id = ?)";
        const LITE: &str = "SELECT EXISTS(SELECT 1 FROM tasks INDEXED BY ix_tasks_due \
             WHERE status IN ('pending', 'throttled', 'claimed', 'waiting', 'ready', 'running') AND job_id = ?)";
        let found: i64 = match self {
            Db::My(p) => sqlx::query_scalar(MY).bind(job_id).fetch_one(p).await,
            Db::Lite(p) => sqlx::query_scalar(LITE).bind(job_id).fetch_one(p).await,
        }
        .expect("looking for unfinished tasks");
        found != 0
    }

    /// The runs of `job_id`: (first start ms, last start ms, runs, runs started before due).
    pub async fn run_starts(&self, job_id: i64, since: i64) -> (i64, i64, i64, i64) {
        const SQL: &str = "SELECT MIN(started_at), MAX(started_at), COUNT(*), \
             COUNT(CASE WHEN started_at < scheduled_at THEN 1 END) FROM runs \
             WHERE job_id = ? AND scheduled_at >= ?";
        let row: (Option<i64>, Option<i64>, i64, i64) = match self {
            Db::My(p) => {
                sqlx::query_as(SQL)
                    .bind(job_id)
                    .bind(since)
                    .fetch_one(p)
                    .await
            }
            Db::Lite(p) => {
                sqlx::query_as(SQL)
                    .bind(job_id)
                    .bind(since)
                    .fetch_one(p)
                    .await
            }
        }
        .expect("reading the runs");
        (row.0.unwrap_or(0), row.1.unwrap_or(0), row.2, row.3)
    }

    /// Each run of `job_id` due from `since` (ms) that ended: its start and its end, ms, by
    /// start.
    pub async fn run_spans(&self, job_id: i64, since: i64) -> Vec<(i64, i64)> {
        const SQL: &str = "SELECT started_at, finished_at FROM runs WHERE job_id = ? \
             AND scheduled_at >= ? AND started_at IS NOT NULL AND finished_at IS NOT NULL \
             ORDER BY started_at, id";
        match self {
            Db::My(p) => {
                sqlx::query_as(SQL)
                    .bind(job_id)
                    .bind(since)
                    .fetch_all(p)
                    .await
            }
            Db::Lite(p) => {
                sqlx::query_as(SQL)
                    .bind(job_id)
                    .bind(since)
                    .fetch_all(p)
                    .await
            }
        }
        .expect("reading the runs' spans")
    }

    /// Each run of `job_id` due from `since` (ms): its start − its due time, ms, sorted.
    pub async fn lateness_ms(&self, job_id: i64, since: i64) -> Vec<i64> {
        const SQL: &str = "SELECT started_at - scheduled_at FROM runs \
             WHERE job_id = ? AND scheduled_at >= ? AND started_at IS NOT NULL ORDER BY 1";
        match self {
            Db::My(p) => {
                sqlx::query_scalar(SQL)
                    .bind(job_id)
                    .bind(since)
                    .fetch_all(p)
                    .await
            }
            Db::Lite(p) => {
                sqlx::query_scalar(SQL)
                    .bind(job_id)
                    .bind(since)
                    .fetch_all(p)
                    .await
            }
        }
        .expect("reading the runs' lateness")
    }

    /// MySQL's server-wide statement and row counters (`Com_*`, `Questions`, `Handler_*`,
    /// `Innodb_rows_*`); empty on SQLite.
    pub async fn status(&self) -> BTreeMap<String, i64> {
        let Db::My(p) = self else {
            return BTreeMap::new();
        };
        let rows: Vec<(String, String)> = sqlx::query_as(
            "SHOW GLOBAL STATUS WHERE Variable_name LIKE 'Com\\_%' OR Variable_name = 'Questions' \
             OR Variable_name LIKE 'Handler\\_%' OR Variable_name LIKE 'Innodb\\_rows\\_%'",
        )
        .fetch_all(p)
        .await
        .expect("SHOW GLOBAL STATUS");
        rows.into_iter()
            .filter_map(|(k, v)| Some((k, v.parse().ok()?)))
            .collect()
    }
}

pub fn diff(
    after: &BTreeMap<String, i64>,
    before: &BTreeMap<String, i64>,
) -> BTreeMap<String, i64> {
    after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0)))
        .collect()
}

impl Db {
    /// Cancels the job's pending tasks (a calibration step's, due far ahead).
    pub async fn cancel_pending(&self, job_id: i64) {
        const SQL: &str = "UPDATE tasks SET status = 'cancelled' \
             WHERE job_id = ? AND status IN ('pending', 'claimed')";
        match self {
            Db::My(p) => sqlx::query(SQL).bind(job_id).execute(p).await.map(drop),
            Db::Lite(p) => sqlx::query(SQL).bind(job_id).execute(p).await.map(drop),
        }
        .expect("cancelling pending tasks");
    }

    /// Runs of the job still `dispatched` or `running`.
    pub async fn unfinished_runs(&self, job_id: i64) -> i64 {
        const SQL: &str =
            "SELECT COUNT(*) FROM runs WHERE job_id = ? AND status IN ('dispatched', 'running')";
        match self {
            Db::My(p) => sqlx::query_scalar(SQL).bind(job_id).fetch_one(p).await,
            Db::Lite(p) => sqlx::query_scalar(SQL).bind(job_id).fetch_one(p).await,
        }
        .expect("counting unfinished runs")
    }
}

/// Statements per 1,000 of `tasks` in a `Com_*` difference: the total and the main kinds.
pub fn statements(d: &BTreeMap<String, i64>, tasks: usize) -> (f64, String) {
    let per = |n: i64| n as f64 * 1000.0 / tasks.max(1) as f64;
    let total: i64 = [
        "Com_select",
        "Com_insert",
        "Com_update",
        "Com_delete",
        "Com_commit",
    ]
    .iter()
    .map(|k| d.get(*k).copied().unwrap_or(0))
    .sum();
    let kinds = ["select", "insert", "update", "delete", "commit"]
        .iter()
        .map(|k| {
            format!(
                "{k} {:.1}",
                per(d.get(&format!("Com_{k}")).copied().unwrap_or(0))
            )
        })
        .collect::<Vec<_>>()
        .join(", ");
    (per(total), kinds)
}

/// Batches [`post_batch`] sent again after a 503.
pub static BATCH_RETRIES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Creates a batch of tasks (`body`: `{"tasks": […]}`) through the node at `base`; their ids.
/// A 503 (the database could not take it now: a Galera conflict that outlasted the node's
/// own retries, say) is sent again after a pause, as a client should; the retries are
/// counted in [`BATCH_RETRIES`].
pub async fn post_batch(
    http: &reqwest::Client,
    base: &str,
    token: &str,
    body: Vec<u8>,
) -> Vec<i64> {
    let (status, v) = loop {
        let resp = http
            .post(format!("{base}/api/v1/tasks/batch"))
            .bearer_auth(token)
            .header("content-type", "application/json")
            .body(body.clone())
            .send()
            .await
            .expect("creating tasks");
        let status = resp.status();
        let v: Value = resp.json().await.unwrap_or(Value::Null);
        if status != reqwest::StatusCode::SERVICE_UNAVAILABLE {
            break (status, v);
        }
        BATCH_RETRIES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    assert!(status.is_success(), "batch: {status} {v}");
    v["ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i.as_i64().unwrap())
        .collect()
}

/// utime + stime of process `pid`, in seconds.
pub fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The command name may hold spaces; the fields after it are fixed.
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // Fields 14 and 15 of the whole line are the 12th and 13th after the name.
    (ticks(11) + ticks(12)) / clock_ticks()
}

fn clock_ticks() -> f64 {
    static TICKS: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
            .unwrap_or(100.0)
    })
}

/// The `p` quantile (0–1) of sorted values.
pub fn percentile(sorted: &[i64], p: f64) -> i64 {
    if sorted.is_empty() {
        return 0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// Epoch milliseconds as the API's RFC 3339 time.
pub fn rfc3339(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .expect("a valid time")
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

// ----- the nodes under test, started the same way by every bench that needs them --------

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::support::{Api, KillOnDrop, SECRET, TOKEN, free_port, sqlite_url, wait_healthy};

/// The `rota` binary under test: `ROTA_BIN` (compare.sh switches it), else this
/// workspace's release build.
pub fn rota_bin() -> PathBuf {
    let bin = std::env::var("ROTA_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|_| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/release/rota")
        });
    assert!(
        bin.exists(),
        "no rota binary at {} (cargo build --release -p rota)",
        bin.display()
    );
    bin
}

/// The database under test and its label: `ROTA_BENCH_MYSQL_URL` (several hosts: a
/// Galera cluster), else a fresh SQLite file kept in `dirs`.
pub fn bench_database(dirs: &mut Vec<tempfile::TempDir>) -> (String, &'static str) {
    match std::env::var("ROTA_BENCH_MYSQL_URL") {
        Ok(url) if url.contains(',') => (url, "Galera, 3 members"),
        Ok(url) if !url.is_empty() => (url, "MariaDB"),
        _ => {
            let (url, dir) = sqlite_url();
            dirs.push(dir);
            (url, "SQLite")
        }
    }
}

/// Starts `ROTA_BENCH_NODES` (at least one) scheduler nodes `n1`, `n2`, … on `url` —
/// node i on member i of a multi-host URL — each logging to `log_dir`, with `env` added;
/// each answers `/healthz` before this returns.
pub async fn start_nodes(
    bin: &Path,
    url: &str,
    log_dir: &Path,
    env: &[(&str, &str)],
) -> Vec<(KillOnDrop, Api)> {
    let mut nodes = Vec::new();
    for i in 1..=env_or("ROTA_BENCH_NODES", 1).max(1) {
        let port = free_port();
        let child = Command::new(bin)
            .args(["server", "--database-url", &rotated(url, (i - 1) as usize)])
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .args(["--node-name", &format!("n{i}")])
            .env("ROTA_EXECUTOR_SECRET", std::str::from_utf8(SECRET).unwrap())
            .env("ROTA_API_TOKEN", TOKEN)
            .env("ROTA_LOG", "warn")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log_dir.join(format!("n{i}.log"))).unwrap())
            .spawn()
            .expect("starting rota server");
        let api = Api::new(format!("http://127.0.0.1:{port}"));
        wait_healthy(&api).await;
        nodes.push((KillOnDrop::new(child), api));
    }
    nodes
}

/// A multi-host URL (`mysql://u@h1,h2,h3/db`) with its host list rotated by `by`, so that
/// node `by` starts on member `by`; any other URL as it is.
pub fn rotated(url: &str, by: usize) -> String {
    let Some((head, rest)) = url.split_once('@') else {
        return url.to_owned();
    };
    let (hosts, tail) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let mut hosts: Vec<&str> = hosts.split(',').collect();
    let n = hosts.len();
    hosts.rotate_left(by % n);
    format!("{head}@{}{tail}", hosts.join(","))
}

/// The first member of a multi-host URL, as a URL of its own (the bench reads from it).
pub fn first_member(url: &str) -> String {
    let Some((head, rest)) = url.split_once('@') else {
        return url.to_owned();
    };
    let (hosts, tail) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    format!("{head}@{}{tail}", hosts.split(',').next().unwrap_or(hosts))
}
