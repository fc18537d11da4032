//! The store's half of flow control (SPEC §11), on SQLite and MySQL: a concurrency bound
//! per value of a key in the payloads, kept by the claims of every node; the tasks over it
//! throttled without spending an attempt, not read again until their bucket has room, then
//! claimed by priority and due time; cancelled like any unstarted task.

use std::collections::HashMap;

use serde_json::json;

use crate::store_contract::{NOW, TestDb, dispatched, lease, no_jobs, report, spec};
use rota_scheduler::model::*;
use rota_scheduler::store::Store;

/// A task of `job` due `due_at` whose payload is `payload`, at `priority`.
fn task(job: i64, due_at: Millis, payload: &str, priority: i32) -> NewTask {
    NewTask {
        job_id: job,
        kind: TaskKind::Delayed,
        key: None,
        payload: Some(payload.into()),
        params: None,
        due_at,
        max_attempts: None,
        backoff: None,
        priority,
    }
}

/// The customer a claimed task is for (its payload's `/customer`), `-` when it has none.
fn customer(t: &DueTask) -> String {
    serde_json::from_str::<serde_json::Value>(t.payload.as_deref().unwrap_or(""))
        .ok()
        .and_then(|v| v.get("customer").map(|c| c.to_string()))
        .unwrap_or_else(|| "-".into())
}

fn by_customer(tasks: &[DueTask]) -> HashMap<String, usize> {
    let mut out = HashMap::new();
    for t in tasks {
        *out.entry(customer(t)).or_default() += 1;
    }
    out
}

/// Runs `t` to success (dispatched under `lease`, then reported), freeing its slot.
async fn finish(store: &Store, lease: NodeLease, t: &DueTask) {
    let run = store.allocate_ids("run", 1).await.unwrap();
    store
        .record_dispatches(lease, &[dispatched(t, run)], NOW)
        .await
        .unwrap();
    let applied = store
        .apply_run_updates(&[report(t, run, RunStatus::Succeeded)], NOW, &mut |_| {
            TaskNext::Succeeded
        })
        .await
        .unwrap();
    assert!(
        applied.freed_limited,
        "a bounded job's slot freed wakes the scan"
    );
}

contract!(
    a_concurrency_key_bounds_each_bucket_and_throttles_the_rest,
    |store: Store| async move {
        let a = lease(&store).await;
        let b = store
            .start_node("node-b", "http://127.0.0.1:8081", NOW)
            .await
            .unwrap();
        let mut bounded = spec("reports");
        bounded.max_concurrency = Some(2);
        bounded.concurrency_key = Some("/customer".into());
        let job = store.insert_job(&bounded, None, NOW).await.unwrap().id;
        let mut tasks = Vec::new();
        for i in 0..4 {
            tasks.push(task(job, NOW + i, r#"{"customer": "acme"}"#, 0));
        }
        for i in 0..3 {
            tasks.push(task(job, NOW + 10 + i, r#"{"customer": 7}"#, 0));
        }
        // No customer, or no JSON at all: one bucket of their own.
        tasks.push(task(job, NOW + 20, r#"{"other": 1}"#, 0));
        tasks.push(task(job, NOW + 21, "not json", 0));
        tasks.push(task(job, NOW + 22, r#"{}"#, 0));
        let ids: Vec<i64> = store
            .insert_tasks(&tasks, NOW)
            .await
            .unwrap()
            .into_iter()
            .map(|(id, _)| id)
            .collect();

        let first = store
            .claim_due(a, NOW, NOW + 5_000, 100, &mut no_jobs)
            .await
            .unwrap();
        assert_eq!(
            by_customer(&first.tasks),
            HashMap::from([("\"acme\"".into(), 2), ("7".into(), 2), ("-".into(), 2)]),
            "two per bucket: {:?}",
            first.tasks
        );
        assert_eq!(first.throttled, vec![(job, 4)]);
        for id in &ids {
            let t = store.get_task(*id).await.unwrap();
            if first.tasks.iter().any(|c| c.task_id == *id) {
                assert_eq!(t.status, TaskStatus::Claimed);
            } else {
                assert_eq!(t.status, TaskStatus::Throttled, "task {id}");
                assert_eq!(
                    task_status(t.status, t.attempt),
                    ("throttled", 0),
                    "no attempt spent"
                );
            }
        }
        // Another node finds every bucket full, and reads the throttled ones again only
        // to leave them.
        let other = store
            .claim_due(b, NOW, NOW + 5_000, 100, &mut no_jobs)
            .await
            .unwrap();
        assert!(other.tasks.is_empty() && other.throttled.is_empty());

        // An acme run ends: the other node claims the next acme task, the earliest due.
        let acme: Vec<&DueTask> = first
            .tasks
            .iter()
            .filter(|t| customer(t) == "\"acme\"")
            .collect();
        finish(&store, a, acme[0]).await;
        let next = store
            .claim_due(b, NOW, NOW + 5_000, 100, &mut no_jobs)
            .await
            .unwrap();
        assert_eq!(next.tasks.len(), 1);
        assert_eq!(customer(&next.tasks[0]), "\"acme\"");
        assert_eq!(next.tasks[0].due_at, NOW + 2);
        assert_eq!(next.tasks[0].attempt, 1);

        // A more urgent acme task jumps the throttled one left; a cancel takes a throttled
        // task out like any unstarted one.
        let urgent = store
            .insert_tasks(&[task(job, NOW + 30, r#"{"customer": "acme"}"#, 5)], NOW)
            .await
            .unwrap()[0]
            .0;
        assert!(
            store
                .claim_due(a, NOW, NOW + 5_000, 100, &mut no_jobs)
                .await
                .unwrap()
                .tasks
                .is_empty()
        );
        assert_eq!(
            store.get_task(urgent).await.unwrap().status,
            TaskStatus::Throttled
        );
        finish(&store, a, acme[1]).await;
        let next = store
            .claim_due(a, NOW, NOW + 5_000, 100, &mut no_jobs)
            .await
            .unwrap();
        assert_eq!(
            next.tasks.iter().map(|t| t.task_id).collect::<Vec<_>>(),
            vec![urgent]
        );
        let left = ids[3];
        assert_eq!(
            store.get_task(left).await.unwrap().status,
            TaskStatus::Throttled
        );
        store.cancel_task(left, NOW).await.unwrap();
        assert_eq!(
            store.get_task(left).await.unwrap().status,
            TaskStatus::Cancelled
        );
    }
);

contract!(
    a_bound_without_a_key_is_one_bucket_for_the_whole_job_across_nodes,
    |store: Store| async move {
        let a = lease(&store).await;
        let b = store
            .start_node("node-b", "http://127.0.0.1:8081", NOW)
            .await
            .unwrap();
        let mut bounded = spec("three-at-once");
        bounded.max_concurrency = Some(3);
        let job = store.insert_job(&bounded, None, NOW).await.unwrap().id;
        let free = store.insert_job(&spec("free"), None, NOW).await.unwrap().id;
        let mut tasks: Vec<NewTask> = (0..10)
            .map(|i| task(job, NOW + i, &json!({"customer": i}).to_string(), 0))
            .collect();
        tasks.extend((0..10).map(|i| task(free, NOW + i, "{}", 0)));
        store.insert_tasks(&tasks, NOW).await.unwrap();
        let of = |claimed: &[DueTask], j: i64| claimed.iter().filter(|t| t.job_id == j).count();
        let on_a = store
            .claim_due(a, NOW, NOW + 5_000, 100, &mut no_jobs)
            .await
            .unwrap();
        let on_b = store
            .claim_due(b, NOW, NOW + 5_000, 100, &mut no_jobs)
            .await
            .unwrap();
        assert_eq!(
            (of(&on_a.tasks, job), of(&on_b.tasks, job)),
            (3, 0),
            "three at once, whichever node"
        );
        assert_eq!(
            of(&on_a.tasks, free),
            10,
            "an unbounded job is claimed whole"
        );
        assert_eq!(on_a.throttled, vec![(job, 7)]);
        // One ends: the other node claims one more, the earliest due.
        let first = on_a
            .tasks
            .iter()
            .filter(|t| t.job_id == job)
            .min_by_key(|t| t.due_at)
            .unwrap();
        finish(&store, a, first).await;
        let next = store
            .claim_due(b, NOW, NOW + 5_000, 100, &mut no_jobs)
            .await
            .unwrap();
        assert_eq!(of(&next.tasks, job), 1);
        assert_eq!(next.tasks[0].due_at, NOW + 3);
    }
);
