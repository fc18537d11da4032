//! What the benchmarks share: their settings from the environment, and their own
//! connection to the database under test (counts, lateness and the server's statement
//! counters, read beside the scheduler's pool).
#![allow(dead_code)]

/// A number from the environment (`_` allowed as a separator), or `default`.
pub fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.replace('_', "").parse().ok())
        .unwrap_or(default)
}

use std::collections::BTreeMap;

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

    /// The runs of `job_id`: (first start ms, last start ms, runs, runs started before due).
    /// Whether any task of the job is still to finish (pending, claimed or running). A
    /// range read of the status index that stops at the first row: polling it costs the
    /// database next to nothing, unlike counting the finished ones (13 ms at 100,000 rows,
    /// ten times a second, taken from the system under test).
    pub async fn any_unfinished(&self, job_id: i64) -> bool {
        const MY: &str = "SELECT EXISTS(SELECT 1 FROM tasks FORCE INDEX (ix_tasks_due) \
             WHERE status IN ('pending', 'claimed', 'waiting', 'ready', 'running') AND job_id = ?)";
        const LITE: &str = "SELECT EXISTS(SELECT 1 FROM tasks INDEXED BY ix_tasks_due \
             WHERE status IN ('pending', 'claimed', 'waiting', 'ready', 'running') AND job_id = ?)";
        let found: i64 = match self {
            Db::My(p) => sqlx::query_scalar(MY).bind(job_id).fetch_one(p).await,
            Db::Lite(p) => sqlx::query_scalar(LITE).bind(job_id).fetch_one(p).await,
        }
        .expect("looking for unfinished tasks");
        found != 0
    }

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

    /// MySQL's server-wide statement counters (`Com_*`, `Questions`); empty on SQLite.
    pub async fn status(&self) -> BTreeMap<String, i64> {
        let Db::My(p) = self else {
            return BTreeMap::new();
        };
        let rows: Vec<(String, String)> = sqlx::query_as(
            "SHOW GLOBAL STATUS WHERE Variable_name LIKE 'Com\\_%' OR Variable_name = 'Questions'",
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
