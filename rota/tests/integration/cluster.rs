//! Two `rota server` nodes on one database: SIGKILL the node that claimed a window of
//! delayed tasks, and the other takes its claims over — every task runs, each attempt is
//! sent exactly once (what reached the executor before the kill is not sent again).
//!
//! On MariaDB/MySQL when `ROTA_TEST_MYSQL_URL` is set (a database of its own), else on one
//! SQLite file shared by the two processes.

use crate::support;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde_json::json;
use support::*;

/// These tests start two or three servers each; run together they starve each other's
/// heartbeats on a small machine. One at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Two nodes on one database, an executor double registered with A, a job, and 60 tasks due
/// 0.5–3.5 s from now that A claimed as it accepted them.
struct Bed {
    db: SharedDb,
    dir: tempfile::TempDir,
    a: Api,
    b: Api,
    node_a: KillOnDrop,
    node_b: KillOnDrop,
    executor: ExecutorDouble,
    ids: Vec<i64>,
}

async fn bed() -> Bed {
    let db = SharedDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    let (port_a, port_b) = (free_port(), free_port());
    let a = Api::new(format!("http://127.0.0.1:{port_a}"));
    let b = Api::new(format!("http://127.0.0.1:{port_b}"));
    let node_a = spawn_server(&db.url, port_a, &dir.path().join("a.log"), "node-a");
    wait_healthy(&a).await;
    let node_b = spawn_server(&db.url, port_b, &dir.path().join("b.log"), "node-b");
    wait_healthy(&b).await;
    // The executor registers with A; the registry is in the database, so B knows it too.
    let executor = ExecutorDouble::start(&a.base, "default", Behaviour::Succeed).await;
    a.upload_plugin("noop").await;
    a.ok(
        "POST",
        "/api/v1/jobs",
        Some(json!({"name": "close-order", "app": "default", "plugin": "noop", "schedule": {"kind": "none"}})),
    )
    .await;
    // Whoever takes a node's claims over raises `node_taken_over` (the channel's target
    // need not answer: the alarm is in the history either way).
    a.ok(
        "PUT",
        "/api/v1/apps/default/secrets/alarmsec",
        Some(json!({"value": "k3y"})),
    )
    .await;
    let nowhere = format!("http://127.0.0.1:{}/alarms", free_port());
    a.ok(
        "POST",
        "/api/v1/alarm-channels",
        Some(json!({"name": "ops", "kind": "webhook", "url": nowhere, "secret": "alarmsec", "app": "default"})),
    )
    .await;
    a.ok(
        "POST",
        "/api/v1/alarm-rules",
        Some(json!({"name": "taken-over", "app": "default", "on": "node_taken_over", "channels": ["ops"]})),
    )
    .await;
    let tasks: Vec<_> = (0..60)
        .map(|i| json!({"job": "close-order", "delay_ms": 500 + i * 50}))
        .collect();
    let ids = a.add_tasks(tasks).await;
    Bed {
        db,
        dir,
        a,
        b,
        node_a,
        node_b,
        executor,
        ids,
    }
}

impl Bed {
    /// Every task succeeded, each sent to the executor once, with one run.
    async fn every_task_ran_once(&self) {
        for &id in &self.ids {
            eventually(Duration::from_secs(30), "every task to succeed", || {
                let b = self.b.clone();
                async move {
                    let t = b.ok("GET", &format!("/api/v1/tasks/{id}"), None).await;
                    (t["status"] == "succeeded").then_some(())
                }
            })
            .await;
        }
        let mut sends: HashMap<i64, usize> = HashMap::new();
        for r in self.executor.received() {
            *sends.entry(r.trigger.task_id).or_default() += 1;
        }
        for &id in &self.ids {
            assert_eq!(
                sends.get(&id),
                Some(&1),
                "task {id} was sent {:?} times",
                sends.get(&id)
            );
            let runs = self
                .b
                .ok("GET", &format!("/api/v1/runs?task={id}"), None)
                .await;
            assert_eq!(
                runs["items"].as_array().unwrap().len(),
                1,
                "task {id} has one run"
            );
        }
    }

    fn log(&self, node: &str) -> String {
        std::fs::read_to_string(self.dir.path().join(format!("{node}.log"))).unwrap_or_default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_nodes_claims_are_fired_once_by_the_other_node() {
    let _serial = SERIAL.lock().await;
    let mut bed = bed().await;
    // Some fire, then A dies with the rest of its window in its wheel.
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    bed.node_a.0.kill().unwrap();
    bed.node_a.0.wait().unwrap();
    let killed_at = now_us();
    let killed = Instant::now();
    // An executor knows every scheduler and reports to one that answers.
    bed.executor.set_scheduler(&bed.b.base);
    let before = bed.executor.received().len();
    assert!(
        before < bed.ids.len(),
        "the kill came before everything fired ({before} of 60)"
    );

    bed.every_task_ran_once().await;
    let all_done = killed.elapsed();
    let first_after = bed
        .executor
        .received()
        .iter()
        .map(|r| r.received_at_us)
        .filter(|&at| at > killed_at)
        .min()
        .expect("sends after the kill");
    let log_b = bed.log("b");
    assert!(
        log_b.contains("took over the claims"),
        "node B took over:\n{log_b}"
    );
    let alarm = eventually(Duration::from_secs(15), "a node_taken_over alarm", || {
        let b = bed.b.clone();
        async move {
            let h = b.ok("GET", "/api/v1/alarms?rule=taken-over", None).await;
            h["items"].as_array().and_then(|i| i.first().cloned())
        }
    })
    .await;
    assert_eq!(alarm["on"], "node_taken_over", "{alarm}");
    assert!(
        alarm["message"]
            .as_str()
            .is_some_and(|m| m.contains("node-b took over")),
        "{alarm}"
    );
    eprintln!(
        "sent before the kill: {before} of 60; first send by the survivor {:.2} s after the kill; all succeeded after {:.2} s",
        (first_after - killed_at) as f64 / 1e6,
        all_done.as_secs_f64()
    );
    drop(bed.node_b);
    bed.db.drop_db().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_node_that_wakes_after_a_take_over_fires_nothing() {
    let _serial = SERIAL.lock().await;
    let bed = bed().await;
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    let pid = bed.node_a.0.id().to_string();
    let signal = |sig: &str| {
        let ok = std::process::Command::new("kill")
            .args([sig, &pid])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "kill {sig} {pid}");
    };
    // A stalls (a long pause, a lost network) past the dead-after time: B takes over.
    signal("-STOP");
    bed.executor.set_scheduler(&bed.b.base);
    let sent_before = bed.executor.received().len();
    eventually(Duration::from_secs(15), "node B to take over", || async {
        bed.log("b").contains("took over the claims").then_some(())
    })
    .await;
    // A wakes with its wheel still full: it must find itself fenced and fire nothing.
    signal("-CONT");
    eventually(
        Duration::from_secs(10),
        "node A to learn it was fenced",
        || async { bed.log("a").contains("fenced").then_some(()) },
    )
    .await;
    // By now an unguarded A would have fired its wheel the moment it woke.
    bed.every_task_ran_once().await;
    // A rejoined with a new epoch and schedules again.
    assert!(bed.log("a").contains("rejoined"), "{}", bed.log("a"));
    let fresh = bed
        .a
        .ok(
            "POST",
            "/api/v1/tasks",
            Some(json!({"job": "close-order", "delay_ms": 300})),
        )
        .await["id"]
        .as_i64()
        .unwrap();
    eventually(
        Duration::from_secs(15),
        "a new task through A to succeed",
        || {
            let b = bed.b.clone();
            async move {
                let t = b.ok("GET", &format!("/api/v1/tasks/{fresh}"), None).await;
                (t["status"] == "succeeded").then_some(())
            }
        },
    )
    .await;
    eprintln!("sent before the stall: {sent_before} of 60");
    drop(bed.node_a);
    drop(bed.node_b);
    bed.db.drop_db().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_through_another_node_reaches_the_wheel_that_holds_the_task() {
    let _serial = SERIAL.lock().await;
    let bed = bed().await;
    // The last tasks are due ~3.5 s out, in A's wheel. Cancel two of them through B.
    let (first, second) = (bed.ids[58], bed.ids[59]);
    for id in [first, second] {
        let cancelled = bed
            .b
            .ok("DELETE", &format!("/api/v1/tasks/{id}"), None)
            .await;
        assert_eq!(cancelled["status"], "cancelled");
    }
    // Again: already cancelled is a 200 with the same task.
    let again = bed
        .b
        .ok("DELETE", &format!("/api/v1/tasks/{first}"), None)
        .await;
    assert_eq!(again["status"], "cancelled");
    // Every other task runs; the cancelled ones never reach the executor.
    for &id in &bed.ids[..58] {
        eventually(
            Duration::from_secs(30),
            "the other tasks to succeed",
            || {
                let b = bed.b.clone();
                async move {
                    let t = b.ok("GET", &format!("/api/v1/tasks/{id}"), None).await;
                    (t["status"] == "succeeded").then_some(())
                }
            },
        )
        .await;
    }
    // Past the cancelled tasks' due time (and a tick), a fire would have happened.
    let due = bed
        .b
        .ok("GET", &format!("/api/v1/tasks/{second}"), None)
        .await["due_at"]
        .as_str()
        .map(|t| {
            chrono::DateTime::parse_from_rfc3339(t)
                .unwrap()
                .timestamp_millis()
        })
        .unwrap();
    let wait = (due + 500 - now_ms()).max(0) as u64;
    tokio::time::sleep(Duration::from_millis(wait)).await;
    let sent: Vec<i64> = bed
        .executor
        .received()
        .iter()
        .map(|r| r.trigger.task_id)
        .collect();
    assert!(
        !sent.contains(&first) && !sent.contains(&second),
        "a cancelled task was sent"
    );
    assert_eq!(sent.len(), 58);
    drop(bed.node_a);
    drop(bed.node_b);
    bed.db.drop_db().await;
}

/// The chaos test of issue 6: three nodes on MariaDB, two executors, 20,000 tasks due over
/// 20 s; mid-run one node is SIGKILLed and another SIGSTOPped for 10 s. Every task must
/// succeed with exactly one run, each attempt sent once. MySQL/MariaDB only (it needs
/// `ROTA_TEST_MYSQL_URL`; CI sets it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_lose_nothing_and_send_nothing_twice_through_a_kill_and_a_stall() {
    let _serial = SERIAL.lock().await;
    if rota_testkit::mysql_base_url().is_none() {
        rota_testkit::missing("ROTA_TEST_MYSQL_URL is not set: the chaos test needs MariaDB");
        return;
    }
    let db = SharedDb::new().await;
    let run = chaos::Chaos {
        node_urls: [db.url.clone(), db.url.clone(), db.url.clone()],
        read_url: db.url.clone(),
        failed: &["n2", "n3"],
        logs: "rota-chaos-logs",
    };
    // Mid-run: n2 dies, n3 stalls for 10 s.
    run.run(async |nodes: &mut [KillOnDrop]| {
        nodes[1].0.kill().unwrap();
        nodes[1].0.wait().unwrap();
        chaos::signal(&nodes[2], "-STOP");
        tokio::time::sleep(Duration::from_secs(10)).await;
        chaos::signal(&nodes[2], "-CONT");
    })
    .await;
    db.drop_db().await;
}

/// The newest fire a double received, by its due time.
fn last_scheduled(executor: &ExecutorDouble, job: i64) -> Option<i64> {
    executor
        .received()
        .iter()
        .filter(|r| r.trigger.job_id == job)
        .map(|r| r.trigger.scheduled_at)
        .max()
}

/// Issue 13, case 2: once a change to a job is acknowledged — disable, a new schedule,
/// delete — no fire of its old schedule goes out later than 100 ms after the answer, even
/// one another node already claimed into its wheel; a new schedule is planned at once.
/// Node B claims an every-second job's fires 5 s ahead; the changes go through node A.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_change_through_one_node_stops_the_fires_another_node_claimed() {
    let _serial = SERIAL.lock().await;
    let db = SharedDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    let (port_a, port_b) = (free_port(), free_port());
    let a = Api::new(format!("http://127.0.0.1:{port_a}"));
    let b = Api::new(format!("http://127.0.0.1:{port_b}"));
    let _node_b = spawn_server(&db.url, port_b, &dir.path().join("b.log"), "node-b");
    wait_healthy(&b).await;
    let executor = ExecutorDouble::start(&b.base, "default", Behaviour::Succeed).await;
    b.upload_plugin("noop").await;
    let job = b
        .ok(
            "POST",
            "/api/v1/jobs",
            Some(json!({"name": "tick", "app": "default", "plugin": "noop",
                        "schedule": {"kind": "cron", "expr": "* * * * * ?"}})),
        )
        .await["id"]
        .as_i64()
        .unwrap();
    eventually(Duration::from_secs(10), "the job to fire on B", || async {
        last_scheduled(&executor, job).map(|_| ())
    })
    .await;
    // A starts only now: B's wheel holds the next 5 s of fires.
    let _node_a = spawn_server(&db.url, port_a, &dir.path().join("a.log"), "node-a");
    wait_healthy(&a).await;

    // Disable through A.
    a.ok(
        "PATCH",
        &format!("/api/v1/jobs/{job}"),
        Some(json!({"enabled": false})),
    )
    .await;
    let disabled_at = now_ms();
    tokio::time::sleep(Duration::from_secs(3)).await; // the fires B had claimed come due
    let last = last_scheduled(&executor, job).unwrap();
    assert!(
        last <= disabled_at + 100,
        "a fire due {} ms after the disable went out",
        last - disabled_at
    );

    // Enabled again: it fires again at once, on the same schedule (the void fires' keys
    // do not block the new plan's).
    a.ok(
        "PATCH",
        &format!("/api/v1/jobs/{job}"),
        Some(json!({"enabled": true})),
    )
    .await;
    let enabled_at = now_ms();
    eventually(Duration::from_secs(5), "the job to fire again", || async {
        last_scheduled(&executor, job)
            .filter(|&t| t > enabled_at)
            .map(|_| ())
    })
    .await;

    // A new schedule: every 10 s from here on; no fire of the every-second one after.
    let changed = a
        .ok(
            "PATCH",
            &format!("/api/v1/jobs/{job}"),
            Some(json!({"schedule": {"kind": "cron", "expr": "0/10 * * * * ?"}})),
        )
        .await;
    let changed_at = now_ms();
    let next = chrono::DateTime::parse_from_rfc3339(changed["next_fire_at"].as_str().unwrap())
        .unwrap()
        .timestamp_millis();
    assert_eq!(next % 10_000, 0, "planned on the new schedule at once");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let stray: Vec<i64> = executor
        .received()
        .iter()
        .filter(|r| r.trigger.job_id == job && r.trigger.scheduled_at > changed_at + 100)
        .map(|r| r.trigger.scheduled_at)
        .filter(|t| t % 10_000 != 0)
        .collect();
    assert!(
        stray.is_empty(),
        "fires of the old schedule after the change: {stray:?}"
    );

    // Deleted: nothing more at all.
    a.ok(
        "PATCH",
        &format!("/api/v1/jobs/{job}"),
        Some(json!({"schedule": {"kind": "cron", "expr": "* * * * * ?"}})),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let (status, _) = a
        .call("DELETE", &format!("/api/v1/jobs/{job}?force=true"), None)
        .await;
    assert_eq!(status, 204);
    let deleted_at = now_ms();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let last = last_scheduled(&executor, job).unwrap();
    assert!(
        last <= deleted_at + 100,
        "a fire due {} ms after the delete went out",
        last - deleted_at
    );
    db.drop_db().await;
}

/// Issue 13, case 3: nodes booting at the same moment on an empty database all come up
/// (one migrates, the others wait for it), and so do they on a schema one migration
/// behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_booting_together_all_come_up_on_an_empty_or_older_schema() {
    let _serial = SERIAL.lock().await;
    let db = SharedDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    let boot_three = |round: &str| {
        let mut nodes = Vec::new();
        let mut apis = Vec::new();
        for i in 1..=3 {
            let port = free_port();
            let log = dir.path().join(format!("{round}-n{i}.log"));
            nodes.push(spawn_server(&db.url, port, &log, &format!("n{i}")));
            apis.push(Api::new(format!("http://127.0.0.1:{port}")));
        }
        (nodes, apis)
    };
    for round in ["empty", "older"] {
        if round == "older" {
            roll_back_latest_migration(&db.url).await;
        }
        let (mut nodes, apis) = boot_three(round);
        for (i, api) in apis.iter().enumerate() {
            let log = dir.path().join(format!("{round}-n{}.log", i + 1));
            let up = tokio::time::timeout(Duration::from_secs(60), wait_healthy(api)).await;
            if up.is_err() || nodes[i].0.try_wait().unwrap().is_some() {
                panic!(
                    "{round}: node n{} did not come up:\n{}",
                    i + 1,
                    std::fs::read_to_string(&log).unwrap_or_default()
                );
            }
        }
        for node in &mut nodes {
            assert!(
                node.0.try_wait().unwrap().is_none(),
                "{round}: a node exited"
            );
        }
        // SIGTERM: a clean stop before the next round.
        for node in &nodes {
            let _ = std::process::Command::new("kill")
                .args(["-TERM", &node.0.id().to_string()])
                .status();
        }
        for node in &mut nodes {
            node.0.wait().unwrap();
        }
    }
    db.drop_db().await;
}

/// Puts the database back to the schema before the newest migration: everything up to
/// it, applied to a fresh copy, is what an older Rota left behind.
async fn roll_back_latest_migration(url: &str) {
    if url.starts_with("mysql:") {
        // One connection: `USE` is per connection.
        let pool = sqlx::mysql::MySqlPoolOptions::new()
            .max_connections(1)
            .connect(url)
            .await
            .unwrap();
        recreate(&pool, url).await;
        let migrator = sqlx::migrate!("../migrations/mysql");
        let latest = migrator.iter().map(|m| m.version).max().unwrap();
        migrator.run_to(latest - 1, &pool).await.unwrap();
        pool.close().await;
    } else {
        let path = url.trim_start_matches("sqlite:");
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{path}{suffix}"));
        }
        let pool = sqlx::SqlitePool::connect_with(
            sqlx::sqlite::SqliteConnectOptions::new()
                .filename(path)
                .create_if_missing(true),
        )
        .await
        .unwrap();
        let migrator = sqlx::migrate!("../migrations/sqlite");
        let latest = migrator.iter().map(|m| m.version).max().unwrap();
        migrator.run_to(latest - 1, &pool).await.unwrap();
        pool.close().await;
    }
}

/// Empties a MySQL database (drops and creates it again).
async fn recreate(pool: &sqlx::MySqlPool, url: &str) {
    let name = url.rsplit('/').next().unwrap();
    for sql in [
        format!("DROP DATABASE {name}"),
        format!("CREATE DATABASE {name}"),
        format!("USE {name}"),
    ] {
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .execute(pool)
            .await
            .unwrap();
    }
}
