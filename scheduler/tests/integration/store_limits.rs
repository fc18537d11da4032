//! The store's half of flow control (SPEC §11), on SQLite and MySQL: a concurrency bound
//! per value of a key in the payloads, kept by the claims of every node; the tasks over it
//! throttled without spending an attempt, not read again until their bucket has room, then
//! claimed by priority and due time; cancelled like any unstarted task.

use std::collections::HashMap;

use serde_json::json;

use crate::store_contract::{NOW, TestDb, dispatched, lease, no_jobs, report, spec};
use rota_scheduler::limits::RateLimit;
use rota_scheduler::model::*;
use rota_scheduler::store::{Claimed, Store};

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
        traceparent: None,
        limit_key: None,
    }
}

/// The customer a claimed task is for (its payload's `/customer`), `-` when it has none.
fn customer(t: &DueTask) -> String {
    field_of(t, "customer")
}

/// A claimed task's payload's `field`, as JSON text; `-` when it has none.
fn field_of(t: &DueTask, field: &str) -> String {
    serde_json::from_str::<serde_json::Value>(t.payload.as_deref().unwrap_or(""))
        .ok()
        .and_then(|v| v.get(field).map(|c| c.to_string()))
        .unwrap_or_else(|| "-".into())
}

fn by_customer(tasks: &[DueTask]) -> HashMap<String, usize> {
    let mut out = HashMap::new();
    for t in tasks {
        *out.entry(customer(t)).or_default() += 1;
    }
    out
}

/// The leases of nodes A and B.
async fn two_nodes(store: &Store) -> (NodeLease, NodeLease) {
    let a = lease(store).await;
    let b = store
        .start_node("node-b", "http://127.0.0.1:8081", NOW)
        .await
        .unwrap();
    (a, b)
}

/// Stores `tasks` (at `NOW`); their ids.
async fn inserted(store: &Store, tasks: &[NewTask]) -> Vec<i64> {
    store
        .insert_tasks(tasks, NOW)
        .await
        .unwrap()
        .into_iter()
        .map(|(id, _)| id)
        .collect()
}

/// A scan by `lease` at `NOW`, its window 5 s.
async fn claim(store: &Store, lease: NodeLease) -> Claimed {
    store
        .claim_due(lease, NOW, NOW + 5_000, NOW + 5_000, 100, &mut no_jobs)
        .await
        .unwrap()
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
        let (a, b) = two_nodes(&store).await;
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
        let ids: Vec<i64> = inserted(&store, &tasks).await;

        let first = claim(&store, a).await;
        assert_eq!(
            by_customer(&first.tasks),
            HashMap::from([("\"acme\"".into(), 2), ("7".into(), 2), ("-".into(), 2)]),
            "two per bucket: {:?}",
            first.tasks
        );
        assert_eq!(first.throttled, vec![(job, 4)]);
        assert_eq!(first.slot_waits, vec![(job, true)], "tasks wait for slots");
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
        let other = claim(&store, b).await;
        assert!(other.tasks.is_empty() && other.throttled.is_empty());
        assert_eq!(
            other.slot_waits,
            vec![(job, true)],
            "full buckets, tasks waiting"
        );

        // An acme run ends: the other node claims the next acme task, the earliest due.
        let acme: Vec<&DueTask> = first
            .tasks
            .iter()
            .filter(|t| customer(t) == "\"acme\"")
            .collect();
        finish(&store, a, acme[0]).await;
        let next = claim(&store, b).await;
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
        assert!(claim(&store, a).await.tasks.is_empty());
        assert_eq!(
            store.get_task(urgent).await.unwrap().status,
            TaskStatus::Throttled
        );
        finish(&store, a, acme[1]).await;
        let next = claim(&store, a).await;
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
    a_scan_tells_whether_tasks_of_a_bounded_job_wait_for_a_slot,
    |store: Store| async move {
        // What makes the dispatch ask executors to report such a job's runs at once: a
        // freed slot is then seen in ms, not after the executor's report window.
        let a = lease(&store).await;
        let mut bounded = spec("reports");
        bounded.max_concurrency = Some(2);
        let job = store.insert_job(&bounded, None, NOW).await.unwrap().id;
        // A job with a rate limit alone has no slots to wait for.
        let mut rated = spec("partner");
        rated.rate_limit = Some(RateLimit {
            key: None,
            limit: 100,
            per_ms: 1_000,
        });
        let rated = store.insert_job(&rated, None, NOW).await.unwrap().id;
        inserted(
            &store,
            &[task(job, NOW, "{}", 0), task(rated, NOW, "{}", 0)],
        )
        .await;
        let first = claim(&store, a).await;
        assert_eq!(first.tasks.len(), 2);
        assert_eq!(
            first.slot_waits,
            vec![(job, false)],
            "one of two slots held, nothing waits; the rated job is not told of"
        );
        inserted(
            &store,
            &[task(job, NOW + 1, "{}", 0), task(job, NOW + 2, "{}", 0)],
        )
        .await;
        let second = claim(&store, a).await;
        assert_eq!(second.tasks.len(), 1);
        assert_eq!(
            second.slot_waits,
            vec![(job, true)],
            "the third is throttled"
        );
        let mine = |c: &Claimed| c.tasks.iter().find(|t| t.job_id == job).cloned().unwrap();
        finish(&store, a, &mine(&first)).await;
        let third = claim(&store, a).await;
        assert_eq!(third.tasks.len(), 1);
        assert_eq!(
            third.slot_waits,
            vec![(job, true)],
            "it waited when the scan began, and both slots are held again"
        );
        finish(&store, a, &mine(&second)).await;
        finish(&store, a, &mine(&third)).await;
        let fourth = claim(&store, a).await;
        assert_eq!(
            fourth.slot_waits,
            vec![(job, false)],
            "nothing waits any more"
        );
    }
);

contract!(
    a_bucket_stored_at_create_is_counted_and_a_stale_or_missing_one_is_read_from_the_payload,
    |store: Store| async move {
        let (a, b) = two_nodes(&store).await;
        let mut bounded = spec("reports");
        bounded.max_concurrency = Some(1);
        bounded.concurrency_key = Some("/customer".into());
        let job = store.insert_job(&bounded, None, NOW).await.unwrap().id;
        let keyed = |due: Millis, customer: &str, stored: Option<&str>| NewTask {
            limit_key: stored.map(str::to_owned),
            ..task(job, due, &json!({ "customer": customer }).to_string(), 0)
        };
        // As a node stores them (`Ports::store_tasks`): with their bucket. Then one whose
        // bucket was stored under the job's former key, and one stored without it.
        let tasks = [
            keyed(NOW, "acme", Some("acme")),
            keyed(NOW + 1, "acme", Some("former")),
            keyed(NOW + 2, "zeta", None),
            keyed(NOW + 3, "zeta", Some("zeta")),
        ];
        let ids: Vec<i64> = inserted(&store, &tasks).await;
        let first = claim(&store, a).await;
        let claimed: Vec<i64> = first.tasks.iter().map(|t| t.task_id).collect();
        assert_eq!(
            claimed,
            vec![ids[0], ids[2]],
            "one per customer, whatever bucket was stored"
        );
        let buckets = store.busiest_buckets(job, 10).await.unwrap();
        let mut seen: Vec<(Option<String>, i64, i64)> = buckets
            .iter()
            .map(|b| (b.key.clone(), b.holding, b.throttled))
            .collect();
        seen.sort();
        assert_eq!(
            seen,
            vec![(Some("acme".into()), 1, 1), (Some("zeta".into()), 1, 1)],
            "the stale bucket was written again as the payload's"
        );
        // The slots free in the buckets the claims counted them in.
        finish(&store, a, &first.tasks[0]).await;
        let next = claim(&store, b).await;
        assert_eq!(
            next.tasks.iter().map(|t| t.task_id).collect::<Vec<_>>(),
            vec![ids[1]]
        );
    }
);

contract!(
    a_bounded_jobs_tasks_are_claimed_one_scan_ahead_so_later_ones_hold_no_slot,
    |store: Store| async move {
        let a = lease(&store).await;
        let mut bounded = spec("reports");
        bounded.max_concurrency = Some(2);
        bounded.concurrency_key = Some("/customer".into());
        let bounded = store.insert_job(&bounded, None, NOW).await.unwrap().id;
        let mut rated = spec("calls");
        rated.rate_limit = Some(RateLimit {
            key: None,
            limit: 100,
            per_ms: 1_000,
        });
        let rated = store.insert_job(&rated, None, NOW).await.unwrap().id;
        let acme = r#"{"customer": "acme"}"#;
        store
            .insert_tasks(
                &[
                    task(bounded, NOW + 10, acme, 0),
                    task(bounded, NOW + 3_000, acme, 0),
                    task(bounded, NOW + 4_000, acme, 0),
                    task(rated, NOW + 4_000, "{}", 0),
                ],
                NOW,
            )
            .await
            .unwrap();
        let due = |c: &Claimed| -> Vec<(i64, Millis)> {
            let mut due: Vec<_> = c.tasks.iter().map(|t| (t.job_id, t.due_at)).collect();
            due.sort_unstable();
            due
        };

        // The scan's window reaches 5 s; the bounded job's tasks are claimed 1.5 s ahead
        // only, and those after are neither claimed nor throttled: they hold no slot yet.
        let first = store
            .claim_due(a, NOW, NOW + 5_000, NOW + 1_500, 100, &mut no_jobs)
            .await
            .unwrap();
        assert_eq!(due(&first), vec![(bounded, NOW + 10), (rated, NOW + 4_000)]);
        assert!(first.throttled.is_empty(), "{:?}", first.throttled);
        assert_eq!(
            first.bounded_next,
            Some(NOW + 3_000),
            "the scan is told when to come back for the next"
        );

        // Two seconds on, the next one is claimed beside the first, still holding its slot.
        let second = store
            .claim_due(a, NOW + 2_000, NOW + 7_000, NOW + 3_500, 100, &mut no_jobs)
            .await
            .unwrap();
        assert_eq!(due(&second), vec![(bounded, NOW + 3_000)]);
        assert_eq!(second.bounded_next, Some(NOW + 4_000));

        // A second later the bucket is full: the third waits, throttled, for a run to end.
        let third = store
            .claim_due(a, NOW + 3_000, NOW + 8_000, NOW + 4_500, 100, &mut no_jobs)
            .await
            .unwrap();
        assert!(third.tasks.is_empty());
        assert_eq!(third.throttled, vec![(bounded, 1)]);
        assert_eq!(third.bounded_next, None, "nothing later waits");
    }
);

contract!(
    a_bound_without_a_key_is_one_bucket_for_the_whole_job_across_nodes,
    |store: Store| async move {
        let (a, b) = two_nodes(&store).await;
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
        let on_a = claim(&store, a).await;
        let on_b = claim(&store, b).await;
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
        let next = claim(&store, b).await;
        assert_eq!(of(&next.tasks, job), 1);
        assert_eq!(next.tasks[0].due_at, NOW + 3);
    }
);

/// A job `partner-calls` rate-limited to `limit` starts per `per_ms` for each `/partner`.
async fn partner_calls(store: &Store, limit: i64, per_ms: Millis) -> i64 {
    let mut limited = spec("partner-calls");
    limited.rate_limit = Some(RateLimit {
        key: Some("/partner".into()),
        limit,
        per_ms,
    });
    store.insert_job(&limited, None, NOW).await.unwrap().id
}

/// At most `limit` of `starts` in any window `[x, x + per_ms)`.
fn within_rate(starts: &[Millis], limit: usize, per_ms: Millis) -> bool {
    starts
        .iter()
        .all(|&x| starts.iter().filter(|&&s| s >= x && s < x + per_ms).count() <= limit)
}

contract!(
    a_task_due_now_is_not_held_behind_a_later_start_its_rate_limit_has_room_for,
    |store: Store| async move {
        let (a, b) = two_nodes(&store).await;
        let job = partner_calls(&store, 10, 1_000).await;
        let acme = r#"{"partner": "acme"}"#;
        store
            .insert_tasks(&[task(job, NOW + 250, acme, 0)], NOW)
            .await
            .unwrap();
        // A scan claims ahead the task due in 250 ms: acme's window holds a start then.
        let ahead = store
            .claim_due(a, NOW, NOW + 300, NOW + 300, 100, &mut no_jobs)
            .await
            .unwrap();
        assert_eq!(
            ahead.tasks.iter().map(|t| t.due_at).collect::<Vec<_>>(),
            vec![NOW + 250]
        );
        // A task due 60 ms from now, created after that: ten a second leave room for it
        // then, and it starts then, not after the start granted ahead.
        store
            .insert_tasks(&[task(job, NOW + 60, acme, 0)], NOW + 50)
            .await
            .unwrap();
        let now = store
            .claim_due(b, NOW + 50, NOW + 350, NOW + 350, 100, &mut no_jobs)
            .await
            .unwrap();
        assert_eq!(
            now.tasks.iter().map(|t| t.due_at).collect::<Vec<_>>(),
            vec![NOW + 60]
        );
        assert!(now.throttled.is_empty());
    }
);

contract!(
    a_rate_limit_grants_each_key_its_starts_per_window_on_every_node,
    |store: Store| async move {
        let (a, b) = two_nodes(&store).await;
        let job = partner_calls(&store, 2, 10_000).await;
        let mut tasks = Vec::new();
        for i in 0..5 {
            tasks.push(task(job, NOW + i, r#"{"partner": "acme"}"#, 0));
        }
        for i in 0..3 {
            tasks.push(task(job, NOW + 10 + i, r#"{"partner": "globex"}"#, 0));
        }
        tasks.push(task(job, NOW + 20, r#"{"other": 1}"#, 0));
        let ids: Vec<i64> = inserted(&store, &tasks).await;
        let partner = |t: &DueTask| field_of(t, "partner");

        // Two starts per partner in the first window, each at once; the rest deferred to
        // where they fit, throttled, no attempt spent.
        let first = claim(&store, a).await;
        let mut got: Vec<(String, Millis)> =
            first.tasks.iter().map(|t| (partner(t), t.due_at)).collect();
        got.sort();
        assert_eq!(
            got,
            vec![
                ("\"acme\"".into(), NOW),
                ("\"acme\"".into(), NOW + 1),
                ("\"globex\"".into(), NOW + 10),
                ("\"globex\"".into(), NOW + 11),
                ("-".into(), NOW + 20),
            ]
        );
        assert_eq!(first.throttled, vec![(job, 4)]);
        let waiting: Vec<Task> = {
            let mut out = Vec::new();
            for id in &ids {
                let t = store.get_task(*id).await.unwrap();
                if t.status == TaskStatus::Throttled {
                    assert_eq!(task_status(t.status, t.attempt), ("throttled", 0));
                    out.push(t);
                }
            }
            out
        };
        let mut deferred: Vec<Millis> = waiting.iter().map(|t| t.due_at).collect();
        deferred.sort();
        // acme: 10,000 after its first two (NOW, NOW + 1), then 10,000 after those;
        // globex: 10,000 after its first (NOW + 10).
        assert_eq!(
            deferred,
            vec![NOW + 10_000, NOW + 10_001, NOW + 10_010, NOW + 20_000]
        );

        // Node b, a second later: nothing fits yet, and the deferred are not claimed.
        let early = store
            .claim_due(b, NOW + 1_000, NOW + 6_000, NOW + 6_000, 100, &mut no_jobs)
            .await
            .unwrap();
        assert!(early.tasks.is_empty(), "{:?}", early.tasks);
        assert!(
            early.throttled.is_empty(),
            "the deferred are not counted again"
        );

        // A new acme task, urgent, waits behind the deferred ones (grants stay in order).
        store
            .insert_tasks(&[task(job, NOW + 1_000, r#"{"partner": "acme"}"#, 9)], NOW)
            .await
            .unwrap();
        let urgent = store
            .claim_due(b, NOW + 1_000, NOW + 6_000, NOW + 6_000, 100, &mut no_jobs)
            .await
            .unwrap();
        assert!(urgent.tasks.is_empty());
        assert_eq!(urgent.throttled, vec![(job, 1)]);

        // When their time comes, node b claims what fits by then: acme's next two (the
        // urgent one first) and globex's third; acme's last waits for the window after.
        let later = store
            .claim_due(
                b,
                NOW + 10_000,
                NOW + 15_000,
                NOW + 15_000,
                100,
                &mut no_jobs,
            )
            .await
            .unwrap();
        let mut got: Vec<(String, Millis, i32)> = later
            .tasks
            .iter()
            .map(|t| (partner(t), t.due_at, t.priority))
            .collect();
        got.sort();
        assert_eq!(
            got,
            vec![
                ("\"acme\"".into(), NOW + 10_000, 9),
                ("\"acme\"".into(), NOW + 10_001, 0),
                ("\"globex\"".into(), NOW + 10_010, 0),
            ]
        );
        let last = store
            .claim_due(
                a,
                NOW + 20_000,
                NOW + 25_000,
                NOW + 25_000,
                100,
                &mut no_jobs,
            )
            .await
            .unwrap();
        let mut acme: Vec<Millis> = first
            .tasks
            .iter()
            .chain(&later.tasks)
            .chain(&last.tasks)
            .filter(|t| partner(t) == "\"acme\"")
            .map(|t| t.due_at)
            .collect();
        acme.sort();
        assert_eq!(acme.len(), 6, "every acme task started once");
        assert!(within_rate(&acme, 2, 10_000), "{acme:?}");
        for t in first.tasks.iter().chain(&later.tasks).chain(&last.tasks) {
            assert_eq!(t.attempt, 1, "waiting spent no attempt");
        }
    }
);

contract!(
    a_job_with_a_bound_and_a_rate_limit_keeps_both,
    |store: Store| async move {
        let a = lease(&store).await;
        let mut both = spec("both");
        both.max_concurrency = Some(1);
        both.rate_limit = Some(RateLimit {
            key: None,
            limit: 1,
            per_ms: 1_000,
        });
        let job = store.insert_job(&both, None, NOW).await.unwrap().id;
        let tasks: Vec<NewTask> = (0..3).map(|i| task(job, NOW + i, "{}", 0)).collect();
        store.insert_tasks(&tasks, NOW).await.unwrap();
        let first = claim(&store, a).await;
        assert_eq!(first.tasks.len(), 1, "one slot");
        assert_eq!(first.tasks[0].due_at, NOW);
        // Its run ends at once: the slot is free, but the rate allows the next start only
        // a second after the first.
        finish(&store, a, &first.tasks[0]).await;
        let next = store
            .claim_due(a, NOW + 10, NOW + 5_010, NOW + 5_010, 100, &mut no_jobs)
            .await
            .unwrap();
        assert_eq!(next.tasks.len(), 1);
        assert_eq!(next.tasks[0].due_at, NOW + 1_000);
    }
);
