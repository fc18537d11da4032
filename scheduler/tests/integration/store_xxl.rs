//! The store's half of `xxl` delivery, on SQLite and MySQL: runs written before their
//! `/run` is sent, found again by a node recovering claims, and found overdue when their
//! executor never calls back.

use crate::store_contract::{NOW, TestDb, dispatched, lease, no_jobs, spec};
use rota_scheduler::model::*;
use rota_scheduler::store::Store;

const A: &str = "http://127.0.0.1:9101";
const B: &str = "http://127.0.0.1:9102";

contract!(
    a_run_recorded_before_its_send_follows_its_executor_until_answered,
    |store: Store| async move {
        let lease = lease(&store).await;
        let mut xxl = spec("close");
        xxl.plugin = String::new();
        xxl.delivery = Delivery::Xxl {
            handler: "closeOrders".into(),
        };
        xxl.timeout_ms = 1_000;
        let job = store.insert_job(&xxl, None, NOW).await.unwrap().id;
        store.upsert_xxl_executor("default", A, NOW).await.unwrap();
        store.upsert_xxl_executor("default", B, NOW).await.unwrap();
        let ids = store
            .insert_tasks(
                &[NewTask {
                    job_id: job,
                    kind: TaskKind::Delayed,
                    key: None,
                    payload: Some("42".into()),
                    params: None,
                    due_at: NOW,
                    max_attempts: None,
                    backoff: None,
                    priority: 0,
                    traceparent: None,
                    limit_key: None,
                }],
                NOW,
            )
            .await
            .unwrap();
        let claimed = store
            .claim_due(lease, NOW, NOW + 5_000, NOW + 5_000, 10, &mut no_jobs)
            .await
            .unwrap();
        assert_eq!(claimed.tasks.len(), 1);
        let task = &claimed.tasks[0];
        assert_eq!(task.task_id, ids[0].0);
        let run = store.allocate_ids("run", 1).await.unwrap();

        // Written before the send to A; sent again to B (A did not answer): B's.
        let mut to = dispatched(task, run);
        to.executor = A.into();
        store.prerecord_runs(&[to.clone()]).await.unwrap();
        to.executor = B.into();
        store.prerecord_runs(&[to.clone()]).await.unwrap();
        let recorded = store.get_run(run).await.unwrap();
        assert_eq!(recorded.status, RunStatus::Dispatched);
        assert_eq!(recorded.executor.as_deref(), Some(B));
        // A node recovering the claim finds it among B's unfinished runs, not A's.
        let at_b = store.unfinished_runs_at(&[B.into()]).await.unwrap();
        assert_eq!(at_b.iter().map(|r| r.id).collect::<Vec<_>>(), [run]);
        assert!(
            store
                .unfinished_runs_at(&[A.into()])
                .await
                .unwrap()
                .is_empty()
        );

        // Past the job's timeout and the grace, with no callback: overdue; not before.
        let grace = 120_000;
        assert!(
            store
                .overdue_xxl_runs(NOW + 100_000, grace)
                .await
                .unwrap()
                .is_empty()
        );
        let overdue = store
            .overdue_xxl_runs(NOW + 1_000 + grace + 1, grace)
            .await
            .unwrap();
        assert_eq!(overdue.iter().map(|r| r.id).collect::<Vec<_>>(), [run]);
        // Of Rota's own executors, none is: they list their runs at every heartbeat.
        store
            .upsert_executor("default", B, 8, 0, NOW)
            .await
            .unwrap();
        assert!(
            store
                .overdue_xxl_runs(NOW + 1_000 + grace + 1, grace)
                .await
                .unwrap()
                .is_empty()
        );
    }
);
