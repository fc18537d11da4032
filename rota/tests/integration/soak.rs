//! The fault soak (issue 33): three `rota server` nodes and two `rota executor`s on a
//! MariaDB of the test's own, under steady load, while a nemesis picks — at random, from a
//! printed seed — one fault at a time: SIGKILL or SIGSTOP a node or an executor, restart
//! MariaDB, fill an executor's disk to the last byte and free it, step a node's wall clock
//! by ±2 s (libfaketime, the monotonic clock untouched), or partition the third node from
//! everything (it lives in a network namespace of the test's own; its link goes down for
//! 2–15 s, past the 5 s after which the others take its claims over, or not). At the end a checker
//! reads the whole history from the database: every acknowledged task succeeded, each
//! attempt has one run, no run started before its due time by the true clock (the
//! executors keep the machine's clock), no first attempt is due before its creator asked
//! (by the true clock, whichever node created it), nothing is stuck, no request was
//! answered with a 500. Refused requests (a node down: no connection; the database away:
//! 503) are counted, not acknowledged, and so not owed.
//!
//! `scripts/test` runs it for 60 s; `scripts/soak` for 30 minutes (`ROTA_SOAK_SECONDS`).
//! `ROTA_SOAK_SEED` replays a run's choice of faults (the timing of a real machine does
//! not replay). The summary goes to stderr and, as one JSON line, to `ROTA_SOAK_SUMMARY`.
//!
//! Needs root (tmpfs mounts, a network namespace), MariaDB's `mariadb-install-db` and `mariadbd`, and
//! libfaketime; under `CI=true` a missing prerequisite fails.

use crate::support;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use support::mariadb::PrivateMariaDb;
use support::netns::{TestNet, is_root};
use support::*;

const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";
/// How long a node may go without a heartbeat before the others take its claims over.
const DEAD_AFTER_MS: i64 = 5_000;
/// A run may start this much before its due time and still count as on time: the
/// executor's offset from its scheduler is measured to within half a loopback round trip.
const EARLY_SLACK_MS: i64 = 50;

/// A `rota server` node the nemesis can kill, stop and restart, whose wall clock it steps
/// through a libfaketime file; in network namespace `netns` when given.
struct Node {
    name: String,
    listen: String,
    netns: Option<String>,
    log: PathBuf,
    clock: PathBuf,
    db: String,
    process: Option<KillOnDrop>,
}

impl Node {
    fn api(&self) -> Api {
        Api::new(format!("http://{}", self.listen))
    }

    fn start(&mut self) {
        let clock = self.clock.display().to_string();
        self.process = Some(spawn_server_at(
            self.netns.as_deref(),
            &self.db,
            &self.listen,
            &self.log,
            &self.name,
            &[
                ("ROTA_NODE_DEAD_AFTER_MS", &DEAD_AFTER_MS.to_string()),
                ("LD_PRELOAD", LIBFAKETIME),
                ("FAKETIME_TIMESTAMP_FILE", &clock),
                ("FAKETIME_CACHE_DURATION", "1"),
                ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
            ],
        ));
    }

    fn kill(&mut self) {
        if let Some(mut p) = self.process.take() {
            let _ = p.0.kill();
            let _ = p.0.wait();
        }
    }

    fn set_clock(&self, offset: &str) {
        std::fs::write(&self.clock, format!("{offset}\n")).unwrap();
    }
}

/// A `rota executor` whose data directory is on a small disk of its own.
struct Executor {
    listen: String,
    schedulers: String,
    disk: SmallDisk,
    log: PathBuf,
    process: Option<KillOnDrop>,
}

impl Executor {
    fn data(&self) -> PathBuf {
        self.disk.path().join("data")
    }

    fn start(&mut self) {
        self.process = Some(spawn_executor(
            None,
            &self.schedulers,
            &self.listen,
            &self.data(),
            Some((&self.log, "warn")),
        ));
    }

    fn kill(&mut self) {
        if let Some(mut p) = self.process.take() {
            let _ = p.0.kill();
            let _ = p.0.wait();
        }
    }

    fn filler(&self) -> PathBuf {
        self.disk.path().join("filler")
    }

    /// Fills the disk to the last byte.
    fn fill(&self) {
        // dd stops, refused, at the last byte.
        let _ = std::process::Command::new("dd")
            .args(["if=/dev/zero", "bs=1M", "status=none"])
            .arg(format!("of={}", self.filler().display()))
            .stderr(std::process::Stdio::null())
            .status();
    }

    fn free(&self) {
        let _ = std::fs::remove_file(self.filler());
    }
}

/// What the load did: each acknowledged task with the earliest due time its creator asked
/// for (the true clock before the request, plus its delay), and the refusals by status.
#[derive(Default)]
struct Load {
    acknowledged: Vec<(i64, i64)>,
    refused: BTreeMap<u16, usize>,
    server_errors: Vec<String>,
}

/// Stops a process (SIGSTOP) for `hold`, then lets it go on (SIGCONT).
async fn stall(process: &Option<KillOnDrop>, hold: Duration) {
    if let Some(p) = process {
        chaos::signal(p, "-STOP");
        tokio::time::sleep(hold).await;
        chaos::signal(p, "-CONT");
    }
}

fn seconds(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fault_soak_loses_nothing_runs_nothing_twice_or_early_and_leaves_nothing_stuck() {
    if !is_root() {
        rota_testkit::missing("not root: cannot mount a tmpfs or create a network namespace");
        return;
    }
    if !std::path::Path::new(LIBFAKETIME).exists() {
        rota_testkit::missing("libfaketime (Debian package faketime)");
        return;
    }
    let Some(mut mariadb) = PrivateMariaDb::install() else {
        rota_testkit::missing("mariadb-install-db or mariadbd is not installed");
        return;
    };
    let disks = [SmallDisk::mount(32), SmallDisk::mount(32)];
    let [Some(disk_a), Some(disk_b)] = disks else {
        rota_testkit::missing("mounting a tmpfs (needs root)");
        return;
    };
    let run_for = Duration::from_secs(seconds("ROTA_SOAK_SECONDS", 60));
    let seed = seconds("ROTA_SOAK_SEED", rand::rng().random());
    eprintln!("soak: seed {seed} (ROTA_SOAK_SEED={seed} replays the faults), {run_for:?}");
    let mut rng = StdRng::seed_from_u64(seed);

    // Everything listens on the host's end of the veth pair, which the partitioned node
    // reaches; that node listens on the namespace's end.
    let net = TestNet::create_in(214);
    mariadb.also_listen_on(&net.host_ip);
    mariadb.start().await;
    let db = mariadb.create_database("rota").await;
    let dir = tempfile::tempdir().unwrap();
    let mut nodes: Vec<Node> = ["s1", "s2", "s3"]
        .iter()
        .map(|name| {
            let cut_off = *name == "s3";
            let ip = if cut_off {
                &net.inside_ip
            } else {
                &net.host_ip
            };
            Node {
                name: (*name).to_owned(),
                listen: format!("{ip}:{}", free_port()),
                netns: cut_off.then(|| net.name.clone()),
                log: dir.path().join(format!("{name}.log")),
                clock: dir.path().join(format!("{name}.clock")),
                db: mariadb.url_via(&net.host_ip, "rota"),
                process: None,
            }
        })
        .collect();
    for node in &mut nodes {
        node.set_clock("+0");
        node.start();
        wait_healthy(&node.api()).await;
    }
    let apis: Vec<Api> = nodes.iter().map(Node::api).collect();
    let schedulers = apis
        .iter()
        .map(|a| a.base.clone())
        .collect::<Vec<_>>()
        .join(",");
    let mut executors: Vec<Executor> = [disk_a, disk_b]
        .into_iter()
        .enumerate()
        .map(|(i, disk)| Executor {
            listen: format!("{}:{}", net.host_ip, free_port()),
            schedulers: schedulers.clone(),
            disk,
            log: dir.path().join(format!("e{i}.log")),
            process: None,
        })
        .collect();
    for e in &mut executors {
        e.start();
    }
    wait_executors(&apis[0], 2).await;
    apis[0].upload_plugin("noop").await;
    apis[0]
        .ok(
            "POST",
            "/api/v1/jobs",
            Some(json!({"name": "soak", "app": "default", "plugin": "noop",
                        "route": "round_robin", "schedule": {"kind": "none"},
                        "max_attempts": 20, "timeout_ms": 30_000,
                        "backoff": {"kind": "fixed", "delay_ms": 500}})),
        )
        .await;

    // The load: five tasks every 100 ms, due 0.2–3 s later, through each node in turn.
    let load = Arc::new(Mutex::new(Load::default()));
    let started = Instant::now();
    let loader = {
        let load = load.clone();
        let apis = apis.clone();
        tokio::spawn(async move {
            let mut requests = tokio::task::JoinSet::new();
            let mut round = 0usize;
            while started.elapsed() < run_for {
                let api = apis[round % apis.len()].clone();
                let delays: Vec<i64> = (0..5)
                    .map(|i| 200 + (round as i64 % 7) * 400 + i * 10)
                    .collect();
                let tasks: Vec<Value> = delays
                    .iter()
                    .map(|d| json!({"job": "soak", "delay_ms": d}))
                    .collect();
                round += 1;
                let load = load.clone();
                requests.spawn(async move {
                    let sent_at = now_ms();
                    // A node killed or being restarted refuses the connection: status 0.
                    let sent = api
                        .http
                        .post(format!("{}/api/v1/tasks/batch", api.base))
                        .bearer_auth(TOKEN)
                        .json(&json!({"tasks": tasks}))
                        .send()
                        .await;
                    let (status, body) = match sent {
                        Ok(res) => (
                            res.status().as_u16(),
                            res.json::<Value>().await.unwrap_or(Value::Null),
                        ),
                        Err(_) => (0, json!({"error": "connection refused"})),
                    };
                    let mut load = load.lock().unwrap();
                    if (200..300).contains(&status) {
                        let ids = body["ids"].as_array().unwrap();
                        for (id, delay) in ids.iter().zip(&delays) {
                            load.acknowledged
                                .push((id.as_i64().unwrap(), sent_at + delay));
                        }
                    } else {
                        *load.refused.entry(status).or_default() += 1;
                        if status == 500 || !body["error"].is_string() {
                            load.server_errors.push(format!("{status} {body}"));
                        }
                    }
                });
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            while requests.join_next().await.is_some() {}
        })
    };

    // The nemesis: one fault at a time, 2–6 s apart.
    let mut faults: BTreeMap<&str, usize> = BTreeMap::new();
    while started.elapsed() < run_for {
        tokio::time::sleep(Duration::from_millis(rng.random_range(2_000..6_000))).await;
        let hold = Duration::from_millis(rng.random_range(1_000..5_000));
        let kind = match rng.random_range(0..8) {
            0 => {
                let n = rng.random_range(0..nodes.len());
                nodes[n].kill();
                tokio::time::sleep(hold).await;
                nodes[n].start();
                "SIGKILL a node, restart it"
            }
            1 => {
                stall(&nodes[rng.random_range(0..nodes.len())].process, hold).await;
                "SIGSTOP a node, SIGCONT it"
            }
            2 => {
                let e = rng.random_range(0..executors.len());
                executors[e].kill();
                tokio::time::sleep(hold).await;
                executors[e].start();
                "SIGKILL an executor, restart it"
            }
            3 => {
                let stopped = tokio::task::spawn_blocking(move || {
                    mariadb.stop();
                    mariadb
                });
                mariadb = stopped.await.unwrap();
                tokio::time::sleep(hold).await;
                mariadb.start().await;
                "restart MariaDB"
            }
            4 => {
                let e = rng.random_range(0..executors.len());
                executors[e].fill();
                tokio::time::sleep(hold * 2).await;
                executors[e].free();
                "fill an executor's disk, free it"
            }
            5 => {
                stall(
                    &executors[rng.random_range(0..executors.len())].process,
                    hold,
                )
                .await;
                "SIGSTOP an executor, SIGCONT it"
            }
            6 => {
                net.cut();
                tokio::time::sleep(Duration::from_millis(rng.random_range(2_000..15_000))).await;
                net.heal();
                "partition a node from everything, heal it"
            }
            _ => {
                let n = rng.random_range(0..nodes.len());
                let step = if rng.random_bool(0.5) { "+2s" } else { "-2s" };
                nodes[n].set_clock(step);
                tokio::time::sleep(hold * 3).await;
                nodes[n].set_clock("+0");
                "step a node's wall clock ±2 s"
            }
        };
        *faults.entry(kind).or_default() += 1;
    }
    loader.await.unwrap();
    let load_ended = Instant::now();

    // Let every acknowledged task finish, then read the whole history.
    let pool = sqlx::MySqlPool::connect(&db).await.unwrap();
    let (asked, refused, server_errors) = {
        let load = load.lock().unwrap();
        (
            load.acknowledged.clone(),
            load.refused.clone(),
            load.server_errors.clone(),
        )
    };
    let acknowledged: Vec<i64> = asked.iter().map(|(id, _)| *id).collect();
    let deadline = Instant::now() + Duration::from_secs(180);
    let statuses = loop {
        let rows: Vec<(i64, String)> = sqlx::query_as("SELECT id, status FROM tasks")
            .fetch_all(&pool)
            .await
            .unwrap();
        let by_id: HashMap<i64, String> = rows.into_iter().collect();
        let unfinished = acknowledged
            .iter()
            .filter(|id| by_id.get(id).is_none_or(|s| s != "succeeded"))
            .count();
        if unfinished == 0 || Instant::now() > deadline {
            break by_id;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let drained_s = load_ended.elapsed().as_secs_f64();
    let lost: Vec<i64> = acknowledged
        .iter()
        .copied()
        .filter(|id| !statuses.contains_key(id))
        .collect();
    let stuck: Vec<(i64, String)> = acknowledged
        .iter()
        .filter_map(|id| Some((*id, statuses.get(id)?.clone())))
        .filter(|(_, s)| s != "succeeded")
        .collect();
    let doubled = attempts_with_several_runs(&pool).await;
    let early: Vec<(i64, i32, i64, i64)> = sqlx::query_as(
        "SELECT task_id, attempt, scheduled_at, started_at FROM runs \
         WHERE started_at IS NOT NULL AND started_at < scheduled_at - ?",
    )
    .bind(EARLY_SLACK_MS)
    .fetch_all(&pool)
    .await
    .unwrap();
    // The first attempt of each task is due no earlier than its creator asked, by the
    // true clock — whichever node created it, its wall clock stepped or not.
    let first: HashMap<i64, i64> =
        sqlx::query_as::<_, (i64, i64)>("SELECT task_id, scheduled_at FROM runs WHERE attempt = 1")
            .fetch_all(&pool)
            .await
            .unwrap()
            .into_iter()
            .collect();
    let moved: Vec<(i64, i64, i64)> = asked
        .iter()
        .filter_map(|(id, earliest)| Some((*id, *earliest, *first.get(id)?)))
        .filter(|(_, earliest, due)| *due < earliest - EARLY_SLACK_MS)
        .collect();
    let (runs, retried): (i64, i64) =
        sqlx::query_as("SELECT COUNT(*), CAST(COALESCE(SUM(attempt > 1), 0) AS SIGNED) FROM runs")
            .fetch_one(&pool)
            .await
            .unwrap();
    let total_faults: usize = faults.values().sum();
    let summary = json!({
        "seed": seed,
        "seconds": run_for.as_secs(),
        "faults": faults,
        "faults_total": total_faults,
        "tasks_acknowledged": acknowledged.len(),
        "creates_refused_by_status": refused,
        "runs": runs,
        "runs_of_retries": retried,
        "drained_after_load_s": (drained_s * 10.0).round() / 10.0,
        "violations": {
            "lost": lost.len(),
            "stuck": stuck.len(),
            "attempts_with_several_runs": doubled,
            "started_early": early.len(),
            "due_before_asked": moved.len(),
            "server_errors": server_errors.len(),
        },
    });
    eprintln!("soak summary: {summary}");
    if let Ok(path) = std::env::var("ROTA_SOAK_SUMMARY") {
        std::fs::write(path, format!("{summary}\n")).unwrap();
    }
    if !(lost.is_empty()
        && stuck.is_empty()
        && doubled == 0
        && early.is_empty()
        && moved.is_empty()
        && server_errors.is_empty())
    {
        let keep = std::env::temp_dir().join(format!("rota-soak-{seed}"));
        let _ = std::fs::create_dir_all(&keep);
        for entry in std::fs::read_dir(dir.path()).unwrap().flatten() {
            let _ = std::fs::copy(entry.path(), keep.join(entry.file_name()));
        }
        panic!(
            "the soak found violations (seed {seed}; logs kept in {}): lost {:?}, stuck {:?}, \
             attempts with several runs {doubled}, started early {:?}, due before its creator \
             asked (task, earliest, due) {:?}, server errors {:?}",
            keep.display(),
            &lost[..lost.len().min(5)],
            &stuck[..stuck.len().min(5)],
            &early[..early.len().min(5)],
            &moved[..moved.len().min(5)],
            &server_errors[..server_errors.len().min(5)],
        );
    }
    assert!(total_faults > 0 && !acknowledged.is_empty(), "{summary}");
    pool.close().await;
    for e in &mut executors {
        e.kill();
    }
    for n in &mut nodes {
        n.kill();
    }
}
