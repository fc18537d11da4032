//! Flow control on the path users walk (SPEC §11): a job bounded per customer, its tasks
//! claimed by three nodes on one MariaDB, one node SIGKILLed mid-run. At no instant may
//! more of a customer's runs overlap than the bound, computed from the runs' own start and
//! end; the tasks over it wait as `throttled` and spend no attempt.

use crate::support;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_customers_bound_holds_across_three_nodes_through_a_kill() {
    let Some(ThreeNodes {
        db,
        dir,
        mut nodes,
        apis,
    }) = ThreeNodes::start().await
    else {
        return;
    };
    // Runs take 250 ms; both executors report to a node that stays up.
    let executors = [
        ExecutorDouble::start(&apis[0].base, "default", Behaviour::Takes(250)).await,
        ExecutorDouble::start(&apis[0].base, "default", Behaviour::Takes(250)).await,
    ];
    let api = &apis[0];
    api.upload_plugin("noop").await;
    let job = api
        .ok(
            "POST",
            "/api/v1/jobs",
            Some(
                json!({"name": "reports", "app": "default", "plugin": "noop",
                        "schedule": {"kind": "none"}, "route": "round_robin",
                        "concurrency": {"key": "/customer", "limit": LIMIT}}),
            ),
        )
        .await;
    let mut tasks: Vec<Value> = Vec::new();
    for i in 0..PER_CUSTOMER {
        for c in CUSTOMERS {
            tasks.push(json!({"job": "reports",
                "payload": json!({"customer": c, "report": i}).to_string()}));
        }
    }
    // Through each node in turn, n2 first: its scan claims the first slots.
    for (k, chunk) in tasks.chunks(tasks.len() / 3).enumerate() {
        apis[(k + 1) % 3].add_tasks(chunk.to_vec()).await;
    }
    let total = tasks.len() as i64;
    let pool = sqlx::MySqlPool::connect(&db.url).await.unwrap();
    let count = |sql: &'static str| {
        let pool = pool.clone();
        async move {
            sqlx::query_scalar::<_, i64>(sql)
                .fetch_one(&pool)
                .await
                .unwrap()
        }
    };
    // The first node seen holding slots dies (SIGKILL): its claims wait for a take-over,
    // their slots still counted, while the others run on. The executors report to another.
    let deadline = Instant::now() + Duration::from_secs(60);
    let holder = loop {
        let held: Vec<(String, i64)> = sqlx::query_as(
            "SELECT n.name, COUNT(*) FROM tasks t JOIN nodes n ON n.id = t.owner_node \
             WHERE t.status IN ('claimed', 'running') GROUP BY n.name ORDER BY n.name",
        )
        .fetch_all(&pool)
        .await
        .unwrap();
        if let Some((name, _)) = held.first() {
            break chaos::NODES.iter().position(|n| n == name).unwrap();
        }
        assert!(Instant::now() < deadline, "no node ever held a slot");
        tokio::time::sleep(Duration::from_millis(2)).await;
    };
    let survivor = &apis[(holder + 1) % 3];
    for e in &executors {
        e.set_scheduler(&survivor.base);
    }
    nodes[holder].0.kill().unwrap();
    nodes[holder].0.wait().unwrap();
    let throttled = count("SELECT COUNT(*) FROM tasks WHERE status = 'throttled'").await;
    assert!(
        throttled > 0,
        "tasks wait throttled while their bucket is full"
    );

    let deadline = Instant::now() + Duration::from_secs(120);
    while count("SELECT COUNT(*) FROM tasks WHERE status = 'succeeded'").await < total {
        assert!(
            Instant::now() < deadline,
            "not every task succeeded; see the node logs in {}",
            dir.path().display()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let rows: Vec<(Option<String>, Option<i64>, Option<i64>)> = sqlx::query_as(
        "SELECT t.payload, r.started_at, r.finished_at FROM runs r JOIN tasks t ON t.id = r.task_id \
         WHERE r.job_id = ?",
    )
    .bind(job["id"].as_i64().unwrap())
    .fetch_all(&pool)
    .await
    .unwrap();
    let runs: Vec<(String, i64, Option<i64>)> = rows
        .into_iter()
        .filter_map(|(payload, start, end)| {
            let p: Value = serde_json::from_str(payload.as_deref()?).ok()?;
            Some((p["customer"].as_str()?.to_owned(), start?, end))
        })
        .collect();
    assert!(runs.len() as i64 >= total, "{} runs", runs.len());
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
    // Waiting throttled spent no attempt: one run per task (none was lost: the executors
    // stayed up and n1 took every report).
    let extra = count(
        "SELECT COUNT(*) FROM (SELECT task_id FROM runs GROUP BY task_id HAVING COUNT(*) > 1) d",
    )
    .await;
    assert_eq!(extra, 0, "tasks with more than one run");
    pool.close().await;
    drop(nodes);
    db.drop_db().await;
}
