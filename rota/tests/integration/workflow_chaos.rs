//! Workflows through failures (SPEC §10, "exactly once"): hundreds of instances with a map
//! and a join in flight when a node is SIGKILLed (three nodes on MariaDB) or an executor is
//! (one node on SQLite, real executors running a real wasm relay); and joins whose two
//! predecessors are acknowledged through two different nodes at the same moment. Every
//! instance must finish with the data it should have, every step (and every element of a
//! map) must have been created exactly once, and no attempt may reach an executor twice.

use crate::support;
use crate::workflows::RELAY;

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::*;

/// The tests here start three servers or two executors each: one at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// split → each (a map over split's `[1,2,3]`) → left and right → join (after both).
fn diamond_with_map() -> Value {
    json!({"name": "chaos", "app": "default", "steps": [
        {"name": "split", "job": "relay", "params": "[1,2,3]"},
        {"name": "each", "job": "relay", "after": ["split"], "map": true},
        {"name": "left", "job": "relay", "after": ["each"]},
        {"name": "right", "job": "relay", "after": ["each"]},
        {"name": "join", "job": "relay", "after": ["left", "right"]},
    ]})
}

/// Steps of one instance of [`diamond_with_map`]: three and the map's three elements.
const TASKS_PER_INSTANCE: i64 = 7;

/// The database the nodes share, read by the test.
enum Reader {
    My(sqlx::MySqlPool),
    Lite(sqlx::SqlitePool),
}

impl Reader {
    async fn connect(url: &str) -> Reader {
        if url.starts_with("mysql:") {
            Reader::My(sqlx::MySqlPool::connect(url).await.unwrap())
        } else {
            Reader::Lite(sqlx::SqlitePool::connect(url).await.unwrap())
        }
    }

    /// (instance, step, element)s that have more than one task (not counting retries of a
    /// failed instance: none here).
    async fn created_twice(&self) -> i64 {
        self.count(
            "SELECT COUNT(*) FROM (SELECT instance_id FROM workflow_tasks
             GROUP BY instance_id, step, item HAVING COUNT(*) > 1) d",
        )
        .await
    }

    async fn count(&self, sql: &'static str) -> i64 {
        match self {
            Reader::My(p) => sqlx::query_scalar(sql).fetch_one(p).await.unwrap(),
            Reader::Lite(p) => sqlx::query_scalar(sql).fetch_one(p).await.unwrap(),
        }
    }
}

/// Relay job (retried as a production job would be), the workflow, and `n` instances
/// started through `api`, each with input `{"n": i}`.
async fn start_instances(api: &Api, n: usize) {
    api.upload("relay", RELAY).await;
    api.ok(
        "POST",
        "/api/v1/jobs",
        Some(json!({"name": "relay", "app": "default", "plugin": "relay",
                    "schedule": {"kind": "none"}, "route": "round_robin", "max_attempts": 5,
                    "backoff": {"kind": "fixed", "delay_ms": 200}})),
    )
    .await;
    api.ok("POST", "/api/v1/workflows", Some(diamond_with_map()))
        .await;
    for i in 0..n {
        api.ok(
            "POST",
            "/api/v1/workflows/chaos/instances",
            Some(json!({"input": {"n": i}, "key": format!("chaos-{i}")})),
        )
        .await;
    }
}

/// Waits until `runs` runs have succeeded: the failure strikes mid-run, and the test checks
/// it did (instances still running after it).
async fn until_runs_succeeded(db: &Reader, runs: i64) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while db
        .count("SELECT COUNT(*) FROM runs WHERE status = 'succeeded'")
        .await
        < runs
    {
        assert!(Instant::now() < deadline, "{runs} runs never succeeded");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Instances still running when the failure struck: it must have come mid-run.
async fn still_running(db: &Reader) -> i64 {
    let running = db
        .count("SELECT COUNT(*) FROM workflow_instances WHERE status = 'running'")
        .await;
    assert!(running > 0, "the failure came after every instance ended");
    running
}

/// Every instance ends `succeeded` with the join's data; each step and map element was
/// created once. (An attempt has one run row by the schema's unique key; that it reached an
/// executor once is counted by the doubles of the node test.)
async fn check_outcome(api: &Api, db: &Reader, n: usize, logs: &std::path::Path) {
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let running = db
            .count("SELECT COUNT(*) FROM workflow_instances WHERE status = 'running'")
            .await;
        if running == 0 {
            break;
        }
        if Instant::now() > deadline {
            keep_logs(logs);
            panic!("{running} instances still running after 180 s");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let succeeded = db
        .count("SELECT COUNT(*) FROM workflow_instances WHERE status = 'succeeded'")
        .await;
    if succeeded != n as i64 {
        keep_logs(logs);
        let failed = api
            .ok(
                "GET",
                "/api/v1/workflow-instances?status=failed&limit=3",
                None,
            )
            .await;
        for item in failed["items"].as_array().unwrap() {
            let id = item["id"].as_i64().unwrap();
            let instance = api
                .ok("GET", &format!("/api/v1/workflow-instances/{id}"), None)
                .await;
            for step in instance["steps"].as_array().unwrap() {
                for run in step["runs"].as_array().unwrap() {
                    let run = api.ok("GET", &format!("/api/v1/runs/{run}"), None).await;
                    eprintln!("instance {id}, step {}: run {run}", step["name"]);
                }
            }
        }
    }
    assert_eq!(succeeded, n as i64, "every instance succeeded");
    let tasks = db.count("SELECT COUNT(*) FROM workflow_tasks").await;
    assert_eq!(
        tasks,
        n as i64 * TASKS_PER_INSTANCE,
        "one task per step and element"
    );
    assert_eq!(
        db.created_twice().await,
        0,
        "a step or an element was created twice"
    );
    // The data went along: a sample of instances, the join's view of both branches.
    let list = api
        .ok(
            "GET",
            "/api/v1/workflow-instances?workflow=chaos&limit=20",
            None,
        )
        .await;
    let items = list["items"].as_array().unwrap();
    assert!(!items.is_empty());
    for item in items {
        let id = item["id"].as_i64().unwrap();
        let instance = api
            .ok("GET", &format!("/api/v1/workflow-instances/{id}"), None)
            .await;
        let input = &instance["input"];
        let join = &instance["output"]["join"];
        assert_eq!(join["input"], *input, "{instance}");
        for branch in ["left", "right"] {
            let seen = &join["steps"][branch];
            assert_eq!(seen["input"], *input, "{instance}");
            let each = seen["steps"]["each"].as_array().expect("each's outputs");
            let items: Vec<&Value> = each.iter().map(|e| &e["item"]).collect();
            assert_eq!(items, [&json!(1), &json!(2), &json!(3)], "{instance}");
        }
    }
}

/// Copies the processes' logs where CI keeps them when a run fails.
fn keep_logs(dir: &std::path::Path) {
    let kept = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("rota-workflow-chaos");
    let _ = std::fs::create_dir_all(&kept);
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let _ = std::fs::copy(entry.path(), kept.join(entry.file_name()));
    }
    eprintln!("logs kept in {}", kept.display());
}

/// Three nodes on MariaDB, two executor doubles that relay (they count every trigger they
/// get), 500 instances; one node SIGKILLed once a third of the runs are done. Its claims
/// and in-flight hand-offs are taken over, and no attempt reaches an executor twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_killed_amid_500_instances_loses_no_step_and_runs_none_twice() {
    let _serial = SERIAL.lock().await;
    const N: usize = 500;
    let Some(ThreeNodes {
        db,
        dir,
        mut nodes,
        apis,
    }) = ThreeNodes::start().await
    else {
        return;
    };
    // Both report to the node that stays up.
    let executors = [
        ExecutorDouble::start(&apis[0].base, "default", Behaviour::Relay).await,
        ExecutorDouble::start(&apis[0].base, "default", Behaviour::Relay).await,
    ];
    start_instances(&apis[0], N).await;

    let reader = Reader::connect(&db.url).await;
    until_runs_succeeded(&reader, (N as i64 * TASKS_PER_INSTANCE) / 3).await;
    nodes[1].0.kill().unwrap();
    nodes[1].0.wait().unwrap();
    let running = still_running(&reader).await;

    check_outcome(&apis[0], &reader, N, dir.path()).await;
    let sends = sends_per_attempt(&[&executors[0], &executors[1]]);
    let twice: Vec<_> = sends.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "attempts sent more than once: {twice:?}");
    let runs = reader.count("SELECT COUNT(*) FROM runs").await;
    assert_eq!(
        sends.len() as i64,
        runs,
        "every run's attempt reached an executor once"
    );
    report(&reader, "n2 SIGKILLed", running).await;
    drop(nodes);
    db.drop_db().await;
}

/// One node on SQLite, two real executors, 300 instances; one executor SIGKILLed once a
/// third of the runs are done. What it was running is lost and run again as a new attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_executor_killed_amid_300_instances_loses_no_step_and_runs_none_twice() {
    let _serial = SERIAL.lock().await;
    const N: usize = 300;
    let (url, _db_dir) = sqlite_url();
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let api = Api::new(format!("http://127.0.0.1:{port}"));
    let _node = spawn_server_env(
        &url,
        port,
        &dir.path().join("node.log"),
        "n1",
        &[("ROTA_EXECUTOR_DEAD_AFTER_MS", "3000")],
    );
    wait_healthy(&api).await;
    let mut executors: Vec<KillOnDrop> = (0..2)
        .map(|i| {
            let data = dir.path().join(format!("executor-{i}"));
            std::fs::create_dir_all(&data).unwrap();
            spawn_executor_env(
                None,
                &api.base,
                &format!("127.0.0.1:{}", free_port()),
                &data,
                Some((&dir.path().join(format!("executor-{i}.log")), "warn")),
                &[("ROTA_EXECUTOR_DEAD_AFTER_MS", "3000")],
            )
        })
        .collect();
    wait_executors(&api, 2).await;
    start_instances(&api, N).await;

    let reader = Reader::connect(&url).await;
    until_runs_succeeded(&reader, (N as i64 * TASKS_PER_INSTANCE) / 3).await;
    executors[1].0.kill().unwrap();
    executors[1].0.wait().unwrap();
    let running = still_running(&reader).await;

    check_outcome(&api, &reader, N, dir.path()).await;
    report(&reader, "an executor SIGKILLed", running).await;
}

/// What the failure did, for the test's output: how much was in flight, what was retried.
async fn report(db: &Reader, what: &str, running: i64) {
    let retried = db
        .count("SELECT COUNT(*) FROM runs WHERE attempt > 1")
        .await;
    let failed = db
        .count("SELECT COUNT(*) FROM runs WHERE status <> 'succeeded'")
        .await;
    eprintln!(
        "{what} with {running} instances running: {failed} runs did not succeed, \
         {retried} runs were retries; every instance succeeded, every step created once"
    );
}

/// Pulls `n` tasks of pull job `job` through `api`, waiting for them to fall due.
async fn pull_all(api: &Api, job: &str, n: usize) -> Vec<Value> {
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while got.len() < n {
        assert!(
            Instant::now() < deadline,
            "{job}: {} of {n} pulled",
            got.len()
        );
        let v = api
            .ok(
                "POST",
                &format!("/api/v1/jobs/{job}/pull"),
                Some(json!({"max": 1000, "wait_ms": 1000, "lease_ms": 120_000})),
            )
            .await;
        got.extend(v["items"].as_array().unwrap().iter().cloned());
    }
    got
}

/// The instance's input `n` a pulled step carries in its payload.
fn input_n(item: &Value) -> u64 {
    let payload: Value = serde_json::from_str(item["payload"].as_str().unwrap()).unwrap();
    payload["input"]["n"].as_u64().unwrap()
}

async fn ack(api: &Api, item: &Value, output: Value) {
    let id = item["task"].as_i64().unwrap();
    api.ok(
        "POST",
        &format!("/api/v1/tasks/{id}/ack"),
        Some(json!({"lease": item["lease"], "output": output})),
    )
    .await;
}

/// A join's two predecessors are acknowledged at the same moment through two different
/// nodes, for 100 instances at once: each join is created exactly once (pulled from a third
/// node), with both predecessors' outputs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_join_whose_predecessors_finish_on_two_nodes_at_once_is_created_once() {
    let _serial = SERIAL.lock().await;
    const N: usize = 100;
    let db = SharedDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    let (nodes, apis) = three_nodes(&db.url, dir.path(), &[]).await;
    let api = &apis[0];
    for job in ["pa", "pb", "pc"] {
        api.ok(
            "POST",
            "/api/v1/jobs",
            Some(
                json!({"name": job, "app": "default", "schedule": {"kind": "none"},
                        "delivery": {"kind": "pull"}}),
            ),
        )
        .await;
    }
    api.ok(
        "POST",
        "/api/v1/workflows",
        Some(json!({"name": "meet", "app": "default", "steps": [
            {"name": "a", "job": "pa"},
            {"name": "b", "job": "pb"},
            {"name": "c", "job": "pc", "after": ["a", "b"]},
        ]})),
    )
    .await;
    for i in 0..N {
        api.ok(
            "POST",
            "/api/v1/workflows/meet/instances",
            Some(json!({"input": {"n": i}})),
        )
        .await;
    }
    let mut a: Vec<Value> = pull_all(&apis[0], "pa", N).await;
    let mut b: Vec<Value> = pull_all(&apis[1], "pb", N).await;
    a.sort_by_key(input_n);
    b.sort_by_key(input_n);

    // Each pair acknowledged together, a through n1 and b through n2; all pairs at once.
    let mut acks = tokio::task::JoinSet::new();
    for (x, y) in a.into_iter().zip(b) {
        assert_eq!(input_n(&x), input_n(&y));
        let (n1, n2) = (apis[0].clone(), apis[1].clone());
        acks.spawn(async move {
            let n = input_n(&x);
            tokio::join!(ack(&n1, &x, json!({"a": n})), ack(&n2, &y, json!({"b": n})));
        });
    }
    acks.join_all().await;

    let c = pull_all(&apis[2], "pc", N).await;
    let mut seen: Vec<u64> = c.iter().map(input_n).collect();
    seen.sort();
    assert_eq!(
        seen,
        (0..N as u64).collect::<Vec<_>>(),
        "one join per instance"
    );
    let more = apis[2]
        .ok(
            "POST",
            "/api/v1/jobs/pc/pull",
            Some(json!({"max": 1000, "wait_ms": 1000})),
        )
        .await;
    assert_eq!(more["items"], json!([]), "a join created twice");
    for item in &c {
        let n = input_n(item);
        let payload: Value = serde_json::from_str(item["payload"].as_str().unwrap()).unwrap();
        assert_eq!(
            payload["steps"],
            json!({"a": {"a": n}, "b": {"b": n}}),
            "the join sees both outputs"
        );
        ack(&apis[2], item, json!({"c": n})).await;
    }
    let reader = Reader::connect(&db.url).await;
    assert_eq!(reader.created_twice().await, 0, "a step was created twice");
    eventually(Duration::from_secs(30), "every instance to succeed", || {
        let reader = &reader;
        async move {
            (reader
                .count("SELECT COUNT(*) FROM workflow_instances WHERE status = 'succeeded'")
                .await
                == N as i64)
                .then_some(())
        }
    })
    .await;
    drop(nodes);
    db.drop_db().await;
}
