//! XXL-JOB executors as a delivery (SPEC §13), against the real thing: an executor built on
//! the real `xxl-job-core` from Maven Central (`testkit/xxl-executor`, in each supported
//! version) registers with a `rota standalone` at its default admin path and runs jobs of
//! `xxl` delivery — succeeding, failing and retried, timing out, killed, sharded across
//! two executors — with each run's log read back from the executor through Rota's API.
//! Nothing here is a double: the executor's side is xxl-job-core's own code.

use crate::support;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use serde_json::{Value, json};
use support::*;

/// The app's XXL-JOB access token, as the executors have it in `xxl.job.accessToken`.
const TOKEN: &str = "xxl-token-7d1e";

/// How long a wait on a run's end (its callback) may take: xxl-job-core sends a callback
/// the node refused or never answered again only every 30 s (its retry thread), and a
/// node under load may refuse one whose dispatch it has not recorded yet. Two retries.
const CALLBACK_WAIT: Duration = Duration::from_secs(75);

/// The test executor built against xxl-job-core `version` (`testkit/xxl-executor/build.sh`,
/// once per version in this process); `None` when Java or Maven is missing (recorded).
fn executor_build(version: &'static str) -> Option<PathBuf> {
    static BUILT: OnceLock<Mutex<Vec<(&'static str, PathBuf)>>> = OnceLock::new();
    let built = BUILT.get_or_init(|| Mutex::new(Vec::new()));
    let mut built = built.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, run)) = built.iter().find(|(v, _)| *v == version) {
        return Some(run.clone());
    }
    for tool in ["java", "mvn"] {
        if Command::new(tool).arg("-version").output().is_err() {
            rota_testkit::missing(&format!(
                "`{tool}` is not installed (Java 11+ and Maven build the XXL-JOB test executor)"
            ));
            return None;
        }
    }
    let here = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../testkit/xxl-executor");
    let status = Command::new(here.join("build.sh"))
        .arg(version)
        .status()
        .expect("running testkit/xxl-executor/build.sh");
    assert!(
        status.success(),
        "building the XXL-JOB test executor with xxl-job-core {version} failed"
    );
    let run = here.join("target").join(version).join("run");
    built.push((version, run.clone()));
    Some(run)
}

/// A running XXL-JOB executor (killed on drop) and its address.
struct XxlExecutor {
    _child: KillOnDrop,
    address: String,
}

impl XxlExecutor {
    /// Starts the executor of `run` for app `app`, registering at `admin` with `token`.
    fn start(run: &PathBuf, admin: &str, app: &str, token: &str, logs: &std::path::Path) -> Self {
        let mut child = Command::new(run)
            .args(["--admin-addresses", admin, "--appname", app])
            .args([
                "--access-token",
                token,
                "--port",
                "0",
                "--log-level",
                "warn",
            ])
            .arg("--log-path")
            .arg(logs)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("starting the XXL-JOB test executor");
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut address = None;
        let mut line = String::new();
        while out.read_line(&mut line).unwrap_or(0) > 0 {
            if let Some(url) = line.trim().strip_prefix("READY ") {
                address = Some(url.trim_end_matches('/').to_owned());
                break;
            }
            line.clear();
        }
        std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
        XxlExecutor {
            _child: KillOnDrop::new(child),
            address: address.expect("the XXL-JOB test executor never said READY"),
        }
    }
}

/// Waits until `n` XXL-JOB executors of `app` are registered.
async fn wait_xxl_executors(api: &Api, app: &str, n: usize) {
    eventually(
        Duration::from_secs(60),
        "the XXL-JOB executors to register",
        || async {
            let v = api.ok("GET", "/api/v1/executors", None).await;
            let registered = v["items"]
                .as_array()
                .or(v.as_array())
                .into_iter()
                .flatten()
                .filter(|e| e["app"] == app && e["protocol"] == "xxl")
                .count();
            (registered >= n).then_some(())
        },
    )
    .await;
}

/// The succeeded run of task `id`, waited for up to [`CALLBACK_WAIT`]; on a timeout the
/// panic shows the task and its runs as the node has them (where it stopped).
async fn ends_succeeded(api: &Api, id: i64, what: &str) -> Value {
    let deadline = std::time::Instant::now() + CALLBACK_WAIT;
    loop {
        let runs = api
            .ok("GET", &format!("/api/v1/runs?task={id}"), None)
            .await;
        if let Some(run) = runs["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["status"] == "succeeded")
        {
            return run.clone();
        }
        if std::time::Instant::now() > deadline {
            let task = api.ok("GET", &format!("/api/v1/tasks/{id}"), None).await;
            panic!(
                "timed out after {CALLBACK_WAIT:?} waiting for {what}: task {task}, runs {runs}"
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Creates job `name` of app `app` running `handler` on its XXL-JOB executors.
async fn xxl_job(api: &Api, name: &str, app: &str, handler: &str, extra: Value) {
    let mut spec = json!({
        "name": name, "app": app, "schedule": {"kind": "none"},
        "delivery": {"kind": "xxl", "handler": handler},
    });
    for (k, v) in extra.as_object().unwrap() {
        spec[k] = v.clone();
    }
    api.ok("POST", "/api/v1/jobs", Some(spec)).await;
}

/// One task of `job` with `payload`; its id.
async fn one_task(api: &Api, job: &str, payload: &str) -> i64 {
    api.add_tasks(vec![json!({"job": job, "payload": payload})])
        .await[0]
}

async fn executors_run_rotas_jobs_unchanged(version: &'static str) {
    let Some(run) = executor_build(version) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let node = Standalone::start(dir.path());
    let api = &node.api;
    let admin = format!("{}/xxl-job-admin", api.base);

    // Without the app's token set, an executor is refused (and so is a wrong token).
    let refused = reqwest::Client::new()
        .post(format!("{admin}/api/registry"))
        .header("XXL-JOB-ACCESS-TOKEN", "guess")
        .json(
            &json!({"registryGroup": "EXECUTOR", "registryKey": "orders",
                      "registryValue": "http://127.0.0.1:1/"}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(
        refused.status(),
        200,
        "xxl-job-admin answers 200 and says no in the body"
    );
    let refused: Value = refused.json().await.unwrap();
    assert_eq!(refused["code"], 500, "{refused}");
    assert!(
        refused["msg"]
            .as_str()
            .unwrap()
            .contains("xxl-access-token"),
        "{refused}"
    );
    api.ok(
        "PUT",
        "/api/v1/apps/orders/secrets/xxl-access-token",
        Some(json!({"value": TOKEN})),
    )
    .await;

    let logs = tempfile::tempdir().unwrap();
    let first = XxlExecutor::start(&run, &admin, "orders", TOKEN, &logs.path().join("a"));
    wait_xxl_executors(api, "orders", 1).await;

    // A run succeeds with the handler's message, and its log is read from the executor.
    xxl_job(api, "greet", "orders", "echo_log", json!({})).await;
    xxl_job(api, "hello", "orders", "hello", json!({})).await;
    let hello = one_task(api, "hello", "world").await;
    task_reaches(api, hello, "succeeded").await;
    let runs = task_runs(api, hello).await;
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0]["status"], "succeeded");
    assert_eq!(runs[0]["message"], "hello world", "{runs:?}");
    assert_eq!(runs[0]["executor"], first.address);
    let greet = one_task(api, "greet", "").await;
    task_reaches(api, greet, "succeeded").await;
    let greet_run = task_runs(api, greet).await[0]["id"].as_i64().unwrap();
    let lines = run_log(api, greet_run).await.join("\n");
    for line in ["line 1", "line 2", "line 3"] {
        assert!(
            lines.contains(line),
            "the run's log from the executor: {lines}"
        );
    }

    // A failure is an attempt like any other: retried per the job's policy, then failed.
    xxl_job(
        api,
        "fails",
        "orders",
        "fail",
        json!({"max_attempts": 2, "backoff": {"kind": "fixed", "delay_ms": 200}}),
    )
    .await;
    let fails = one_task(api, "fails", "order 9").await;
    task_reaches(api, fails, "dead").await;
    let runs = task_runs(api, fails).await;
    assert_eq!(runs.len(), 2, "{runs:?}");
    for r in &runs {
        assert_eq!(r["status"], "failed", "{r}");
        assert!(
            r["message"]
                .as_str()
                .unwrap()
                .contains("failed on purpose: order 9"),
            "{r}"
        );
    }

    // The job's timeout is the executor's `executorTimeout`: past it the run times out.
    xxl_job(api, "slow", "orders", "slow", json!({"timeout_ms": 1_000})).await;
    let slow = one_task(api, "slow", "late").await;
    task_reaches(api, slow, "dead").await;
    assert_eq!(task_runs(api, slow).await[0]["status"], "timeout");

    // A kill through Rota stops the run on the executor, which calls back `killed`.
    xxl_job(
        api,
        "stuck",
        "orders",
        "slow",
        json!({"timeout_ms": 600_000}),
    )
    .await;
    let stuck = one_task(api, "stuck", "forever").await;
    let run_id = eventually(Duration::from_secs(30), "the slow run to start", || async {
        task_runs(api, stuck)
            .await
            .first()
            .and_then(|r| r["id"].as_i64())
    })
    .await;
    // Its log says it started before it is killed: the handler is running, not queued.
    eventually(Duration::from_secs(30), "the slow run's log", || async {
        let log = run_log(api, run_id).await.join("\n");
        log.contains("slow started forever").then_some(())
    })
    .await;
    api.ok("POST", &format!("/api/v1/runs/{run_id}/kill"), None)
        .await;
    let killed = eventually(CALLBACK_WAIT, "the killed run", || async {
        let r = api.ok("GET", &format!("/api/v1/runs/{run_id}"), None).await;
        (r["status"] != "dispatched" && r["status"] != "running").then_some(r)
    })
    .await;
    assert_eq!(killed["status"], "killed", "{killed}");

    // Sharding broadcast: one run per executor, each told its index and the total.
    let second = XxlExecutor::start(&run, &admin, "orders", TOKEN, &logs.path().join("b"));
    wait_xxl_executors(api, "orders", 2).await;
    xxl_job(
        api,
        "shards",
        "orders",
        "shard",
        json!({"route": "sharding_broadcast"}),
    )
    .await;
    let shards = one_task(api, "shards", "all").await;
    task_reaches(api, shards, "succeeded").await;
    let runs = task_runs(api, shards).await;
    let messages: Vec<&str> = runs
        .iter()
        .map(|r| r["message"].as_str().unwrap())
        .collect();
    assert_eq!(messages, ["shard 0/2 all", "shard 1/2 all"], "{runs:?}");
    let mut executors: Vec<&str> = runs
        .iter()
        .map(|r| r["executor"].as_str().unwrap())
        .collect();
    executors.sort_unstable();
    let mut expected = [first.address.as_str(), second.address.as_str()];
    expected.sort_unstable();
    assert_eq!(executors, expected);
}

#[tokio::test]
async fn an_xxl_job_core_2_5_executor_runs_rotas_jobs_unchanged() {
    executors_run_rotas_jobs_unchanged("2.5.0").await;
}

#[tokio::test]
async fn an_xxl_job_core_3_3_executor_runs_rotas_jobs_unchanged() {
    executors_run_rotas_jobs_unchanged("3.3.2").await;
}

/// A console session on the node at `base` as `admin` with `password`: its cookie.
async fn console_cookie(base: &str, password: &str) -> String {
    let signed = console_sign_in(base, "admin", password).await;
    signed
        .cookie
        .unwrap_or_else(|| panic!("no session cookie: {}", signed.status))
}

/// Two `rota server` nodes on MariaDB and two XXL-JOB executors that know both (the first
/// before the second, as `xxl.job.admin.addresses` lists them): cron, a manual trigger,
/// delayed tasks, a retried failure, sharding over both executors, a timeout, a kill, the
/// run log in the console — then the first node, where every registration and callback
/// goes, is SIGKILLed while runs are in flight: each of them still ends, once.
async fn on_two_nodes_every_run_ends_once_through_a_node_kill(version: &'static str) {
    let Some(run) = executor_build(version) else {
        return;
    };
    let Some(db) = rota_testkit::MysqlDb::create("rota_xxlc").await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let password = "console-pass-7";
    let env = [("ROTA_ADMIN_PASSWORD", password)];
    let (p1, p2) = (free_port(), free_port());
    let mut n1 = spawn_server_env(&db.url, p1, &dir.path().join("n1.log"), "n1", &env);
    let a1 = Api::new(format!("http://127.0.0.1:{p1}"));
    wait_healthy(&a1).await;
    let _n2 = spawn_server_env(&db.url, p2, &dir.path().join("n2.log"), "n2", &env);
    let a2 = Api::new(format!("http://127.0.0.1:{p2}"));
    wait_healthy(&a2).await;
    a1.ok(
        "PUT",
        "/api/v1/apps/orders/secrets/xxl-access-token",
        Some(json!({"value": TOKEN})),
    )
    .await;
    let admins = format!("{}/xxl-job-admin,{}/xxl-job-admin", a1.base, a2.base);
    let logs = tempfile::tempdir().unwrap();
    let _e1 = XxlExecutor::start(&run, &admins, "orders", TOKEN, &logs.path().join("a"));
    let _e2 = XxlExecutor::start(&run, &admins, "orders", TOKEN, &logs.path().join("b"));
    wait_xxl_executors(&a2, "orders", 2).await;

    // Cron every second, a manual trigger, delayed tasks.
    xxl_job(
        &a1,
        "tick",
        "orders",
        "hello",
        json!({"schedule": {"kind": "cron", "expr": "* * * * * ?"}, "params": "tick"}),
    )
    .await;
    xxl_job(&a1, "hello", "orders", "hello", json!({})).await;
    // Triggered right after the executors registered (with n1 only): n2, whose registry may
    // not have caught up, can claim one of the fires and park it until a node wakes it.
    let manual = a1
        .ok(
            "POST",
            "/api/v1/jobs/hello/trigger",
            Some(json!({"params": "by hand"})),
        )
        .await["task_id"]
        .as_i64()
        .unwrap();
    let delayed: Vec<Value> = (0..10)
        .map(|i| json!({"job": "hello", "payload": format!("d{i}"), "delay_ms": i * 200}))
        .collect();
    for id in a2.add_tasks(delayed).await {
        let t = task_reaches(&a2, id, "succeeded").await;
        assert_eq!(t["attempts"], 1, "{t}");
    }
    let manual = ends_succeeded(&a1, manual, "the manual fire").await;
    assert_eq!(manual["message"], "hello by hand", "{manual}");
    assert!(manual["executor"].is_string());
    eventually(CALLBACK_WAIT, "cron fires", || async {
        let runs = a2.ok("GET", "/api/v1/runs?limit=200", None).await;
        let ticks = runs["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["message"] == "hello tick" && r["status"] == "succeeded")
            .count();
        (ticks >= 3).then_some(())
    })
    .await;

    // A retried failure, sharding across both executors, a timeout, a kill.
    xxl_job(
        &a1,
        "fails",
        "orders",
        "fail",
        json!({"max_attempts": 2, "backoff": {"kind": "fixed", "delay_ms": 200}}),
    )
    .await;
    let fails = one_task(&a1, "fails", "x").await;
    task_reaches(&a1, fails, "dead").await;
    assert_eq!(task_runs(&a1, fails).await.len(), 2);
    xxl_job(
        &a1,
        "shards",
        "orders",
        "shard",
        json!({"route": "sharding_broadcast"}),
    )
    .await;
    let shards = one_task(&a1, "shards", "all").await;
    task_reaches(&a1, shards, "succeeded").await;
    let messages: Vec<String> = task_runs(&a1, shards)
        .await
        .iter()
        .map(|r| r["message"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(messages, ["shard 0/2 all", "shard 1/2 all"]);
    xxl_job(&a1, "late", "orders", "slow", json!({"timeout_ms": 1_000})).await;
    let late = one_task(&a1, "late", "t").await;
    task_reaches(&a1, late, "dead").await;
    assert_eq!(task_runs(&a1, late).await[0]["status"], "timeout");
    xxl_job(
        &a1,
        "stuck",
        "orders",
        "slow",
        json!({"timeout_ms": 600_000}),
    )
    .await;
    let stuck = one_task(&a1, "stuck", "forever").await;
    let stuck_run = eventually(Duration::from_secs(30), "the stuck run's log", || async {
        let id = task_runs(&a1, stuck).await.first()?["id"].as_i64()?;
        let (status, log) = a1
            .call("GET", &format!("/api/v1/runs/{id}/log"), None)
            .await;
        (status == 200 && log.to_string().contains("slow started forever")).then_some(id)
    })
    .await;
    a2.ok("POST", &format!("/api/v1/runs/{stuck_run}/kill"), None)
        .await;
    task_reaches(&a1, stuck, "cancelled").await;
    assert_eq!(task_runs(&a1, stuck).await[0]["status"], "killed");

    // The run log in the console, read from the executor.
    xxl_job(&a1, "greet", "orders", "echo_log", json!({})).await;
    let greet = one_task(&a1, "greet", "").await;
    task_reaches(&a1, greet, "succeeded").await;
    let greet_run = task_runs(&a1, greet).await[0]["id"].as_i64().unwrap();
    let cookie = console_cookie(&a2.base, password).await;
    let console = |path: String| {
        let cookie = cookie.clone();
        let base = a2.base.clone();
        async move {
            reqwest::Client::new()
                .get(format!("{base}/console{path}"))
                .header("cookie", cookie)
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap()
        }
    };
    let page = console(format!("/runs/{greet_run}")).await;
    assert!(
        page.contains(&format!("/console/runs/{greet_run}/log")),
        "{page}"
    );
    let log = console(format!("/runs/{greet_run}/log")).await;
    assert!(
        log.contains("line 2"),
        "the console's run log, from the executor: {log}"
    );

    // Runs in flight (each sleeps into its 2 s timeout, one after another on an executor),
    // then the node every callback goes to is killed.
    xxl_job(&a1, "work", "orders", "slow", json!({"timeout_ms": 2_000})).await;
    let work: Vec<Value> = (0..8)
        .map(|i| json!({"job": "work", "payload": format!("w{i}")}))
        .collect();
    let work = a1.add_tasks(work).await;
    eventually(Duration::from_secs(30), "runs in flight", || async {
        let runs = a2.ok("GET", "/api/v1/runs?job=work&limit=50", None).await;
        (runs["items"].as_array().unwrap().len() >= 2).then_some(())
    })
    .await;
    support::chaos::signal(&n1, "-KILL");
    let _ = n1.0.wait();
    for id in &work {
        task_reaches_within(&a2, *id, "dead", Duration::from_secs(120)).await;
        let runs = task_runs(&a2, *id).await;
        assert_eq!(runs.len(), 1, "one run per task: {runs:?}");
        assert_eq!(runs[0]["status"], "timeout", "{runs:?}");
    }
    // Every (task, attempt, shard) ran once, the cron fires across the kill included.
    let pool = sqlx::MySqlPool::connect(&db.url).await.unwrap();
    let twice: Vec<(i64, i32, i32)> = sqlx::query_as(
        "SELECT task_id, attempt, shard_index FROM runs \
         GROUP BY task_id, attempt, shard_index HAVING COUNT(*) > 1",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert!(twice.is_empty(), "ran twice: {twice:?}");
    pool.close().await;
    db.drop_db().await;
}

#[tokio::test]
async fn xxl_job_core_2_5_executors_on_two_nodes_end_every_run_once_through_a_node_kill() {
    on_two_nodes_every_run_ends_once_through_a_node_kill("2.5.0").await;
}

#[tokio::test]
async fn xxl_job_core_3_3_executors_on_two_nodes_end_every_run_once_through_a_node_kill() {
    on_two_nodes_every_run_ends_once_through_a_node_kill("3.3.2").await;
}
