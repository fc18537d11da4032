//! Flow control on the path users walk (SPEC §11): a job bounded per customer, and one
//! rate-limited per partner, their tasks claimed by three nodes on one MariaDB, one node
//! SIGKILLed mid-run. At no instant may more of a customer's runs overlap than the bound,
//! computed from the runs' own start and end; no window may hold more of a partner's
//! starts than the rate; the tasks over either wait as `throttled` and spend no attempt.
//! And the same through a database restart while tasks wait for a slot.

use crate::support;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use sqlx::MySqlPool;

use serde_json::{Value, json};
use support::mariadb::PrivateMariaDb;
use support::*;

/// Customers, tasks per customer, and the bound per customer. A customer's tasks run one
/// at a time for longer than the take-over takes (5 s): the slots the killed node held come
/// back while the rest still run, and the bound is reached.
const CUSTOMERS: [&str; 3] = ["acme", "globex", "initech"];
const PER_CUSTOMER: usize = 30;
const LIMIT: usize = 2;

/// The most runs of each bucket that overlapped at any instant: `(bucket, start, end)`,
/// an unfinished run lasting for ever. A run that ends as another starts does not overlap.
fn most_at_once(runs: &[(String, i64, Option<i64>)]) -> HashMap<String, usize> {
    let mut edges: HashMap<&str, Vec<(i64, i32)>> = HashMap::new();
    for (bucket, start, end) in runs {
        let e = edges.entry(bucket).or_default();
        e.push((*start, 1));
        e.push((end.unwrap_or(i64::MAX), -1));
    }
    edges
        .into_iter()
        .map(|(bucket, mut e)| {
            e.sort();
            let (mut now, mut most) = (0i32, 0i32);
            for (_, step) in e {
                now += step;
                most = most.max(now);
            }
            (bucket.to_owned(), most as usize)
        })
        .collect()
}

/// Three nodes on one MariaDB, two executor doubles whose runs take a while reporting to
/// n1, and a job of the `noop` plugin.
struct Bed {
    db: SharedDb,
    dir: tempfile::TempDir,
    nodes: Vec<KillOnDrop>,
    apis: Vec<Api>,
    executors: [ExecutorDouble; 2],
    pool: MySqlPool,
    job_id: i64,
}

impl Bed {
    /// `None` without MariaDB. `job`: the job's fields beside its app, plugin and schedule.
    async fn start(run_ms: u64, mut job: Value) -> Option<Bed> {
        let ThreeNodes {
            db,
            dir,
            nodes,
            apis,
        } = ThreeNodes::start().await?;
        let executors = [
            ExecutorDouble::start(&apis[0].base, "default", Behaviour::Takes(run_ms)).await,
            ExecutorDouble::start(&apis[0].base, "default", Behaviour::Takes(run_ms)).await,
        ];
        apis[0].upload_plugin("noop").await;
        job["app"] = json!("default");
        job["plugin"] = json!("noop");
        job["schedule"] = json!({"kind": "none"});
        job["route"] = json!("round_robin");
        let job_id = apis[0].ok("POST", "/api/v1/jobs", Some(job)).await["id"]
            .as_i64()
            .unwrap();
        let pool = MySqlPool::connect(&db.url).await.unwrap();
        Some(Bed {
            db,
            dir,
            nodes,
            apis,
            executors,
            pool,
            job_id,
        })
    }

    /// Adds `tasks` through each node in turn, n2 first: its scan claims the first ones.
    async fn add(&self, tasks: &[Value]) {
        for (k, chunk) in tasks.chunks(tasks.len().div_ceil(3)).enumerate() {
            self.apis[(k + 1) % 3].add_tasks(chunk.to_vec()).await;
        }
    }

    async fn count(&self, sql: &'static str) -> i64 {
        sqlx::query_scalar::<_, i64>(sql)
            .fetch_one(&self.pool)
            .await
            .unwrap()
    }

    /// Kills (SIGKILL) the first node seen holding tasks in `statuses` (an SQL list): its
    /// claims wait for a take-over while the others run on. The executors report to
    /// another node from then on.
    async fn kill_first_holder(&mut self, statuses: &str) {
        let deadline = Instant::now() + Duration::from_secs(60);
        let sql = format!(
            "SELECT n.name, COUNT(*) FROM tasks t JOIN nodes n ON n.id = t.owner_node \
             WHERE t.status IN {statuses} GROUP BY n.name ORDER BY n.name"
        );
        let holder = loop {
            let held: Vec<(String, i64)> = sqlx::query_as(sqlx::AssertSqlSafe(sql.clone()))
                .fetch_all(&self.pool)
                .await
                .unwrap();
            if let Some((name, _)) = held.first() {
                break chaos::NODES.iter().position(|n| n == name).unwrap();
            }
            assert!(Instant::now() < deadline, "no node ever held a task");
            tokio::time::sleep(Duration::from_millis(2)).await;
        };
        let survivor = &self.apis[(holder + 1) % 3];
        for e in &self.executors {
            e.set_scheduler(&survivor.base);
        }
        self.nodes[holder].0.kill().unwrap();
        self.nodes[holder].0.wait().unwrap();
    }

    /// Waits until `total` tasks succeeded.
    async fn wait_succeeded(&self, total: usize) {
        let deadline = Instant::now() + Duration::from_secs(120);
        while self
            .count("SELECT COUNT(*) FROM tasks WHERE status = 'succeeded'")
            .await
            < total as i64
        {
            assert!(
                Instant::now() < deadline,
                "not every task succeeded; see the node logs in {}",
                self.dir.path().display()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waiting throttled spent no attempt: one run per task (none was lost: the
    /// executors stayed up and a live node took every report).
    async fn assert_one_run_per_task(&self) {
        let extra = self
            .count(
                "SELECT COUNT(*) FROM (SELECT task_id FROM runs GROUP BY task_id \
                 HAVING COUNT(*) > 1) d",
            )
            .await;
        assert_eq!(extra, 0, "tasks with more than one run");
    }

    async fn stop(self) {
        self.pool.close().await;
        drop(self.nodes);
        self.db.drop_db().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_customers_bound_holds_across_three_nodes_through_a_kill() {
    // Runs take 250 ms.
    let Some(mut bed) = Bed::start(
        250,
        json!({"name": "reports", "concurrency": {"key": "/customer", "limit": LIMIT}}),
    )
    .await
    else {
        return;
    };
    let mut tasks: Vec<Value> = Vec::new();
    for i in 0..PER_CUSTOMER {
        for c in CUSTOMERS {
            tasks.push(json!({"job": "reports",
                "payload": json!({"customer": c, "report": i}).to_string()}));
        }
    }
    bed.add(&tasks).await;
    // The first node seen holding slots dies: its slots are still counted meanwhile.
    bed.kill_first_holder("('claimed', 'running')").await;
    let throttled = bed
        .count("SELECT COUNT(*) FROM tasks WHERE status = 'throttled'")
        .await;
    assert!(
        throttled > 0,
        "tasks wait throttled while their bucket is full"
    );
    bed.wait_succeeded(tasks.len()).await;
    let rows: Vec<(Option<String>, Option<i64>, Option<i64>)> = sqlx::query_as(
        "SELECT t.payload, r.started_at, r.finished_at FROM runs r JOIN tasks t ON t.id = r.task_id \
         WHERE r.job_id = ?",
    )
    .bind(bed.job_id)
    .fetch_all(&bed.pool)
    .await
    .unwrap();
    let runs: Vec<(String, i64, Option<i64>)> = rows
        .into_iter()
        .filter_map(|(payload, start, end)| {
            let p: Value = serde_json::from_str(payload.as_deref()?).ok()?;
            Some((p["customer"].as_str()?.to_owned(), start?, end))
        })
        .collect();
    assert!(runs.len() >= tasks.len(), "{} runs", runs.len());
    let most = most_at_once(&runs);
    for c in CUSTOMERS {
        assert!(
            most[c] <= LIMIT,
            "{} of {c}'s runs overlapped (bound {LIMIT}): {most:?}",
            most[c]
        );
    }
    assert!(
        most.values().any(|&m| m == LIMIT),
        "the bound was reached: {most:?}"
    );
    bed.assert_one_run_per_task().await;
    bed.stop().await;
}

/// The most of `starts` in one window `[x, x + per_ms)`.
fn most_in_a_window(starts: &[i64], per_ms: i64) -> usize {
    starts
        .iter()
        .map(|&x| starts.iter().filter(|&&s| s >= x && s < x + per_ms).count())
        .max()
        .unwrap_or(0)
}

/// Partners, calls per partner, and the rate: at most RATE starts per partner in any
/// window of PER_MS.
const PARTNERS: [&str; 3] = ["acme", "globex", "initech"];
const PER_PARTNER: usize = 12;
const RATE: usize = 3;
const PER_MS: i64 = 1_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partners_rate_holds_across_three_nodes_through_a_kill() {
    let Some(mut bed) = Bed::start(
        20,
        json!({"name": "partner-calls",
               "rate_limit": {"key": "/partner", "limit": RATE, "per_ms": PER_MS}}),
    )
    .await
    else {
        return;
    };
    let mut tasks: Vec<Value> = Vec::new();
    for i in 0..PER_PARTNER {
        for p in PARTNERS {
            tasks.push(json!({"job": "partner-calls",
                "payload": json!({"partner": p, "call": i}).to_string()}));
        }
    }
    bed.add(&tasks).await;
    // The first node seen holding claims dies with them: a survivor takes them over, due
    // when they were granted, and grants the rest from the windows in the database.
    bed.kill_first_holder("('claimed')").await;
    bed.wait_succeeded(tasks.len()).await;
    let rows: Vec<(Option<String>, i64, Option<i64>)> = sqlx::query_as(
        "SELECT t.payload, r.scheduled_at, r.dispatched_at FROM runs r \
         JOIN tasks t ON t.id = r.task_id WHERE r.job_id = ?",
    )
    .bind(bed.job_id)
    .fetch_all(&bed.pool)
    .await
    .unwrap();
    let mut starts: HashMap<String, Vec<i64>> = HashMap::new();
    for (payload, scheduled, dispatched) in rows {
        let p: Value = serde_json::from_str(payload.as_deref().unwrap()).unwrap();
        let dispatched = dispatched.expect("every run was dispatched");
        assert!(
            dispatched >= scheduled,
            "a run went out {} ms before the start it was granted",
            scheduled - dispatched
        );
        starts
            .entry(p["partner"].as_str().unwrap().to_owned())
            .or_default()
            .push(scheduled);
    }
    for p in PARTNERS {
        let s = &starts[p];
        assert_eq!(s.len(), PER_PARTNER, "{p}: one run per call");
        let most = most_in_a_window(s, PER_MS);
        assert!(
            most <= RATE,
            "{most} of {p}'s starts in one window of {PER_MS} ms (limit {RATE}): {s:?}"
        );
        assert_eq!(most, RATE, "the limit was reached for {p}");
    }
    // The waiting ones were deferred to where they fit, and spent no attempt. Counted from
    // the first task's creation: the tasks come in three requests to three nodes, which on a
    // loaded machine are seconds apart, so a later request's tasks may fit a later window
    // without waiting (a CI run on 2026-12-07 saw 21 of 27 "deferred" from their own
    // creation).
    let deferred = bed
        .count(
            "SELECT COUNT(*) FROM tasks WHERE due_at >= \
             (SELECT MIN(created_at) FROM tasks) + 1000",
        )
        .await as usize;
    assert!(
        deferred >= PARTNERS.len() * (PER_PARTNER - RATE),
        "{deferred} tasks deferred"
    );
    bed.assert_one_run_per_task().await;
    bed.stop().await;
}

/// SPEC §11 on a bad day: the database goes away for 5 s while customers' tasks wait
/// `throttled` for their one slot, and comes back (a MariaDB of the test's own, stopped
/// with SIGTERM). Nothing runs beyond a bound while the node cannot see the slots, the
/// waiting tasks start again by themselves once it can, and each succeeds with one run:
/// waiting, even through an outage, spends no attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn throttled_tasks_wait_out_a_database_restart_and_the_bound_holds() {
    let Some((mut mariadb, url)) = PrivateMariaDb::serving("rota").await else {
        return;
    };
    let logs = tempfile::tempdir().unwrap();
    let port = free_port();
    let api = Api::new(format!("http://127.0.0.1:{port}"));
    let _node = spawn_server_env(
        &url,
        port,
        &logs.path().join("r1.log"),
        "r1",
        // The executor double registers once and never heartbeats.
        &[("ROTA_EXECUTOR_DEAD_AFTER_MS", "3600000")],
    );
    wait_healthy(&api).await;
    let _executor = ExecutorDouble::start(&api.base, "default", Behaviour::Takes(300)).await;
    api.upload_plugin("noop").await;
    api.ok(
        "POST",
        "/api/v1/jobs",
        Some(
            json!({"name": "reports", "app": "default", "plugin": "noop",
                    "schedule": {"kind": "none"},
                    "concurrency": {"key": "/customer", "limit": 1}}),
        ),
    )
    .await;
    let customers = ["acme", "globex"];
    let tasks: Vec<Value> = (0..8)
        .flat_map(|i| {
            customers.map(|c| {
                json!({"job": "reports",
                       "payload": json!({"customer": c, "report": i}).to_string()})
            })
        })
        .collect();
    let total = tasks.len();
    api.add_tasks(tasks).await;

    // The database stops once tasks wait for a slot, with runs under way.
    let pool = sqlx::MySqlPool::connect(&url).await.unwrap();
    let count = |sql: &'static str| {
        let pool = pool.clone();
        async move {
            sqlx::query_scalar::<_, i64>(sql)
                .fetch_one(&pool)
                .await
                .unwrap()
        }
    };
    let waiting = eventually(
        Duration::from_secs(30),
        "tasks waiting for a slot",
        || async {
            let n = count("SELECT COUNT(*) FROM tasks WHERE status = 'throttled'").await;
            (n > 0).then_some(n)
        },
    )
    .await;
    pool.close().await;
    let mut mariadb = tokio::task::spawn_blocking(move || {
        mariadb.stop();
        mariadb
    })
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await;
    mariadb.start().await;

    let pool = sqlx::MySqlPool::connect(&url).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let done =
            sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM tasks WHERE status = 'succeeded'")
                .fetch_one(&pool)
                .await
                .unwrap();
        if done == total as i64 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{done} of {total} tasks succeeded 90 s after the restart; the node's log:\n{}",
            std::fs::read_to_string(logs.path().join("r1.log")).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let spent = sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM tasks WHERE attempt <> 1")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(spent, 0, "waiting spent no attempt");
    let rows: Vec<(Option<String>, Option<i64>, Option<i64>)> = sqlx::query_as(
        "SELECT t.payload, r.started_at, r.finished_at FROM runs r JOIN tasks t ON t.id = r.task_id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(rows.len(), total, "one run per task: {rows:?}");
    let runs: Vec<(String, i64, Option<i64>)> = rows
        .into_iter()
        .map(|(payload, start, end)| {
            let p: Value = serde_json::from_str(payload.as_deref().unwrap()).unwrap();
            let start = start.expect("every run started");
            (p["customer"].as_str().unwrap().to_owned(), start, end)
        })
        .collect();
    let most = most_at_once(&runs);
    for c in customers {
        assert_eq!(
            most[c], 1,
            "{c}'s runs overlapped through the outage (bound 1): {most:?}"
        );
    }
    eprintln!(
        "database restart with {waiting} tasks throttled: all {total} succeeded, one run each, \
         at most one of a customer's at a time"
    );
    pool.close().await;
}
