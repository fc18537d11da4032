//! A MariaDB restart under load. The test installs a MariaDB of its own (`mariadb-install-db`
//! into a temporary directory, its own port), runs two `rota server` nodes and an executor
//! double on it, and keeps creating delayed tasks through both nodes while it stops the
//! database (SIGTERM to its pid) for 5 s and starts it again. A create the outage catches is
//! refused with a 503 that says why (never a bare 500), `/readyz` turns 503 with the reason
//! and back to 200 by itself; the nodes reconnect, and every task whose creation was
//! acknowledged succeeds, each attempt with one run and sent once.
//!
//! Needs `mariadb-install-db` and `mariadbd` (CI installs `mariadb-server`); skipped with a
//! message where they are missing.

use crate::support;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde_json::json;
use support::mariadb::PrivateMariaDb;
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_reconnect_after_a_mariadb_restart_and_lose_nothing_acknowledged() {
    let Some((mut mariadb, url)) = PrivateMariaDb::serving("rota").await else {
        return;
    };

    let logs = tempfile::tempdir().unwrap();
    let mut nodes = Vec::new();
    let mut apis = Vec::new();
    for name in ["r1", "r2"] {
        let port = free_port();
        let api = Api::new(format!("http://127.0.0.1:{port}"));
        nodes.push(spawn_server_env(
            &url,
            port,
            &logs.path().join(format!("{name}.log")),
            name,
            // The executor double registers once and never heartbeats.
            &[("ROTA_EXECUTOR_DEAD_AFTER_MS", "3600000")],
        ));
        wait_healthy(&api).await;
        apis.push(api);
    }
    let executor = ExecutorDouble::start(&apis[0].base, "default", Behaviour::Succeed).await;
    apis[0].upload_plugin("noop").await;
    apis[0]
        .ok(
            "POST",
            "/api/v1/jobs",
            Some(
                json!({"name": "restart", "app": "default", "plugin": "noop",
                        "schedule": {"kind": "none"}, "max_attempts": 5,
                        "backoff": {"kind": "fixed", "delay_ms": 500}}),
            ),
        )
        .await;

    // Load: a batch of 20 tasks every 100 ms, due 0.3–2.3 s later, through both nodes in
    // turn, each request on its own (a request waits for the database while it is down).
    // The database stops 4 s in, for 5 s; the load goes on 5 s after it is back.
    let started = Instant::now();
    let (stop_at, down_for, end_at) = (
        Duration::from_secs(4),
        Duration::from_secs(5),
        Duration::from_secs(14),
    );
    let restarted = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let outage = {
        let restarted = restarted.clone();
        tokio::spawn(async move {
            tokio::time::sleep(stop_at).await;
            let mut mariadb = tokio::task::spawn_blocking(move || {
                mariadb.stop();
                mariadb
            })
            .await
            .unwrap();
            let stopped_at = started.elapsed();
            tokio::time::sleep(down_for).await;
            mariadb.start().await;
            restarted.store(true, std::sync::atomic::Ordering::SeqCst);
            eprintln!(
                "MariaDB stopped {:.1} s in, answering again {:.1} s in",
                stopped_at.as_secs_f64(),
                started.elapsed().as_secs_f64()
            );
            mariadb
        })
    };
    // A load balancer's probe of r1 all along: what `/readyz` answered, in order.
    let probe = {
        let base = apis[0].base.clone();
        tokio::spawn(async move {
            let mut seen: Vec<(u16, String)> = Vec::new();
            while started.elapsed() < end_at {
                if let Ok(res) = reqwest::get(format!("{base}/readyz")).await {
                    let status = res.status().as_u16();
                    let body = res.text().await.unwrap_or_default();
                    if seen.last().is_none_or(|(s, _)| *s != status) {
                        seen.push((status, body));
                    }
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            seen
        })
    };
    let mut requests = tokio::task::JoinSet::new();
    let mut round = 0usize;
    while started.elapsed() < end_at {
        let tasks: Vec<_> = (0..20)
            .map(|i| json!({"job": "restart", "delay_ms": 300 + i * 100}))
            .collect();
        let api = apis[round % 2].clone();
        round += 1;
        let after_restart = restarted.load(std::sync::atomic::Ordering::SeqCst);
        requests.spawn(async move {
            let (status, body) = api
                .call("POST", "/api/v1/tasks/batch", Some(json!({"tasks": tasks})))
                .await;
            (after_restart, status, body)
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let _mariadb = outage.await.unwrap();
    let mut acknowledged: Vec<i64> = Vec::new();
    let mut acknowledged_after_restart = 0usize;
    let mut refused: HashMap<u16, usize> = HashMap::new();
    while let Some(done) = requests.join_next().await {
        let (after_restart, status, body) = done.unwrap();
        if (200..300).contains(&status) {
            let ids: Vec<i64> = body["ids"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_i64().unwrap())
                .collect();
            if after_restart {
                acknowledged_after_restart += ids.len();
            }
            acknowledged.extend(ids);
        } else {
            assert!(
                status == 503 && body["error"].is_string(),
                "a create the outage refused says why with a 503, never a bare 500: {status} {body}"
            );
            *refused.entry(status).or_default() += 1;
        }
    }
    // A request caught by the outage waits for the database (up to the pool's acquire
    // timeout) and then either succeeds or is refused with a 503; both are fine, as long as
    // what was acknowledged runs.
    assert!(
        acknowledged_after_restart > 0,
        "no create succeeded after the restart: the nodes did not reconnect"
    );

    // The probe saw the node unready while the database was away, with the reason, and
    // ready again once it was back — without a restart.
    let probed = probe.await.unwrap();
    eprintln!("/readyz of r1 over the outage: {probed:?}");
    let statuses: Vec<u16> = probed.iter().map(|(s, _)| *s).collect();
    assert_eq!(statuses.first(), Some(&200), "{probed:?}");
    assert!(statuses.contains(&503), "never unready: {probed:?}");
    let unready = &probed.iter().find(|(s, _)| *s == 503).unwrap().1;
    assert!(unready.contains("database"), "the reason: {unready}");
    eventually(Duration::from_secs(30), "r1 ready again", || async {
        let res = reqwest::get(format!("{}/readyz", apis[0].base))
            .await
            .ok()?;
        (res.status() == 200).then_some(())
    })
    .await;

    // Every acknowledged task succeeds.
    let pool = sqlx::MySqlPool::connect(&url).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let statuses: Vec<(i64, String)> = sqlx::query_as("SELECT id, status FROM tasks")
            .fetch_all(&pool)
            .await
            .unwrap();
        let by_id: HashMap<i64, String> = statuses.into_iter().collect();
        let missing = acknowledged
            .iter()
            .filter(|id| !by_id.contains_key(id))
            .count();
        assert_eq!(missing, 0, "acknowledged tasks missing from the database");
        let unfinished: Vec<(i64, &String)> = acknowledged
            .iter()
            .map(|id| (*id, &by_id[id]))
            .filter(|(_, s)| s.as_str() != "succeeded")
            .collect();
        if unfinished.is_empty() {
            break;
        }
        if Instant::now() > deadline {
            let log = |n: &str| {
                std::fs::read_to_string(logs.path().join(format!("{n}.log"))).unwrap_or_default()
            };
            panic!(
                "{} acknowledged tasks have not succeeded 90 s after the load, e.g. {:?}\n--- r1:\n{}\n--- r2:\n{}",
                unfinished.len(),
                &unfinished[..unfinished.len().min(5)],
                log("r1"),
                log("r2")
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(
        attempts_with_several_runs(&pool).await,
        0,
        "attempts with more than one run"
    );
    let sends = sends_per_attempt(&[&executor]);
    let twice: Vec<_> = sends.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "sent more than once: {twice:?}");
    for api in &apis {
        assert_eq!(api.call("GET", "/healthz", None).await.0, 200);
    }
    eprintln!(
        "MariaDB restart: {} tasks acknowledged ({acknowledged_after_restart} after the restart), \
         refused by status {refused:?}; all succeeded, none sent twice",
        acknowledged.len()
    );
    pool.close().await;
    drop(nodes);
}
