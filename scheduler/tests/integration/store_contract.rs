//! The store contract: one suite, run on SQLite always and on MySQL/MariaDB when
//! `ROTA_TEST_MYSQL_URL` is set (CI sets it). Each MySQL test gets a database of its own.

use std::collections::HashMap;

use rota_proto::BlockStrategy;
use rota_scheduler::backoff::Backoff;
use rota_scheduler::model::*;
use rota_scheduler::route::Route;
use rota_scheduler::schedule::{Misfire, Schedule};
use rota_scheduler::store::{
    Completing, DueJob, Error, JobFires, JobRules, NewPlugin, PluginUser, RunStat, SecretMeta,
    Store,
};

/// A store on a fresh database, dropped with the value.
pub(crate) struct TestDb {
    pub(crate) store: Store,
    _dir: Option<tempfile::TempDir>,
    mysql: Option<rota_testkit::MysqlDb>,
}

impl TestDb {
    pub(crate) async fn sqlite() -> TestDb {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite:{}", dir.path().join("rota.db").display());
        TestDb {
            store: Store::connect(&url).await.unwrap(),
            _dir: Some(dir),
            mysql: None,
        }
    }

    /// `None` (a skip, or a failure under CI) when `ROTA_TEST_MYSQL_URL` is not set.
    pub(crate) async fn mysql() -> Option<TestDb> {
        let db = rota_testkit::MysqlDb::create("rota_t").await?;
        let store = Store::connect(&db.url).await.unwrap();
        Some(TestDb {
            store,
            _dir: None,
            mysql: Some(db),
        })
    }

    pub(crate) async fn drop_db(self) {
        self.store.close().await;
        if let Some(db) = self.mysql {
            db.drop_db().await;
        }
    }
}

/// Declares `$name` as two tests: on SQLite and on MySQL.
macro_rules! contract {
    ($name:ident, $body:expr) => {
        mod $name {
            use super::*;

            #[tokio::test]
            async fn sqlite() {
                let db = TestDb::sqlite().await;
                ($body)(db.store.clone()).await;
                db.drop_db().await;
            }

            #[tokio::test]
            async fn mysql() {
                let Some(db) = TestDb::mysql().await else {
                    return;
                };
                ($body)(db.store.clone()).await;
                db.drop_db().await;
            }
        }
    };
}

pub(crate) const NOW: Millis = 1_800_000_000_000;

pub(crate) fn spec(name: &str) -> JobSpec {
    JobSpec {
        name: name.into(),
        app: "default".into(),
        plugin: "hello".into(),
        schedule: Schedule::None,
        params: Some("--fast".into()),
        route: Route::RoundRobin,
        block: BlockStrategy::Serial,
        misfire: Misfire::DoNothing,
        timeout_ms: 300_000,
        max_attempts: 3,
        backoff: Backoff::Fixed { delay_ms: 1_000 },
        memory_mb: 64,
        max_concurrency: None,
        rate_limit: None,
        debounce_ms: None,
        concurrency_key: None,
        child_jobs: vec![],
        http_allow: vec![],
        enabled: true,
        no_executor_timeout_ms: None,
        delivery: Delivery::Wasm,
    }
}

/// A job whose tasks consumers pull.
fn pull_spec(name: &str) -> JobSpec {
    JobSpec {
        plugin: String::new(),
        delivery: Delivery::Pull,
        ..spec(name)
    }
}

/// Tasks of `job` with these priorities, all due, claimed by `lease` and then ready, as
/// dispatch leaves a pull job's fires. Their ids, in order.
async fn ready_tasks(store: &Store, lease: NodeLease, job: i64, priorities: &[i32]) -> Vec<i64> {
    let tasks: Vec<NewTask> = priorities
        .iter()
        .enumerate()
        .map(|(i, &priority)| NewTask {
            priority,
            traceparent: None,
            ..task(job, NOW - 10_000 + i as i64, None)
        })
        .collect();
    let (ids, _) = claimed_tasks(store, lease, &tasks).await;
    assert_eq!(
        store.mark_ready(lease, &ids, NOW).await.unwrap(),
        ids.len() as u64
    );
    ids
}

/// `tasks`, all due, claimed by `lease` (in its wheel): their ids in order, and the fires.
async fn claimed_tasks(
    store: &Store,
    lease: NodeLease,
    tasks: &[NewTask],
) -> (Vec<i64>, Vec<DueTask>) {
    let ids: Vec<i64> = store
        .insert_tasks(tasks, NOW)
        .await
        .unwrap()
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    let claimed = store
        .claim_due(lease, NOW, NOW + 5_000, NOW + 5_000, 100, &mut no_jobs)
        .await
        .unwrap();
    assert_eq!(claimed.tasks.len(), ids.len());
    (ids, claimed.tasks)
}

fn task(job_id: i64, due_at: Millis, key: Option<&str>) -> NewTask {
    NewTask {
        job_id,
        kind: TaskKind::Delayed,
        key: key.map(str::to_owned),
        payload: Some("{\"order\":42}".into()),
        params: None,
        due_at,
        max_attempts: None,
        backoff: None,
        priority: 0,
        traceparent: None,
        limit_key: None,
    }
}

pub(crate) fn no_jobs(_: &DueJob) -> JobFires {
    JobFires::default()
}

pub(crate) fn dispatched(t: &DueTask, run_id: i64) -> Dispatched {
    Dispatched {
        run_id,
        job_id: t.job_id,
        task_id: t.task_id,
        attempt: t.attempt,
        shard_index: 0,
        shard_total: 1,
        executor: "http://127.0.0.1:9999".into(),
        scheduled_at: t.due_at,
        dispatched_at: NOW,
    }
}

pub(crate) fn report(t: &DueTask, run_id: i64, status: RunStatus) -> RunUpdate {
    RunUpdate {
        run_id,
        job_id: t.job_id,
        task_id: t.task_id,
        attempt: t.attempt,
        shard_index: 0,
        shard_total: 1,
        executor: Some("http://127.0.0.1:9999".into()),
        scheduled_at: t.due_at,
        // Executors echo the trigger's send time.
        dispatched_at: Some(NOW),
        started_at: Some(t.due_at + 1),
        finished_at: status.is_final().then_some(t.due_at + 5),
        status,
        exit_code: Some(if status == RunStatus::Succeeded { 0 } else { 1 }),
        message: None,
        output: None,
    }
}

/// The retry policy used by these tests: fixed 1 s, with the task's attempt budget.
fn policy(a: &AttemptEnded) -> TaskNext {
    rota_scheduler::pipeline::complete::decide(a, NOW, &mut rand::rng())
}

pub(crate) async fn lease(store: &Store) -> NodeLease {
    lease_of(store).await
}

/// Node A's lease: a new epoch each call (a restart).
pub(crate) async fn lease_of(store: &Store) -> NodeLease {
    store
        .start_node("node-a", "http://127.0.0.1:8080", NOW)
        .await
        .unwrap()
}

contract!(
    a_component_bigger_than_one_row_allows_is_kept_in_parts,
    |store: Store| async move {
        // 9 MiB + 3 bytes: three parts of at most PART_BYTES, each under MySQL's default
        // 16 MiB packet; a Python component is 18 MB in one piece.
        let bytes: Vec<u8> = (0..(9 << 20) + 3).map(|i| (i % 251) as u8).collect();
        let imports = vec![
            "wasi:http/outgoing-handler@0.2.12".to_owned(),
            "rota:plugin/kv@0.1.0".to_owned(),
        ];
        let sha = "d".repeat(64);
        let new = NewPlugin {
            name: "close-order-py",
            sha256: &sha,
            bytes: &bytes,
            kind: "component",
            world: Some("rota:plugin/handler"),
            imports: &imports,
        };
        let (p, created) = store.insert_plugin(new, NOW).await.unwrap();
        assert!(created);
        assert_eq!(p.size, bytes.len() as i64);
        // The same bytes under another name are stored once.
        let (_, created) = store
            .insert_plugin(
                NewPlugin {
                    name: "copy",
                    ..new
                },
                NOW,
            )
            .await
            .unwrap();
        assert!(created);
        assert_eq!(store.plugin_module(&sha).await.unwrap(), bytes);
        let listed = store.latest_plugin("close-order-py").await.unwrap();
        assert_eq!(listed.kind, "component");
        assert_eq!(listed.world.as_deref(), Some("rota:plugin/handler"));
        assert_eq!(listed.imports, imports);
        let module = store
            .insert_plugin(NewPlugin::module("hello", &"e".repeat(64), b"\0asm"), NOW)
            .await
            .unwrap()
            .0;
        assert_eq!((module.kind.as_str(), module.world), ("module", None));
        assert!(module.imports.is_empty());
        // Deleting one name keeps the bytes the other still uses; deleting both drops them.
        store.delete_plugin("close-order-py").await.unwrap();
        assert_eq!(store.plugin_module(&sha).await.unwrap().len(), bytes.len());
        store.delete_plugin("copy").await.unwrap();
        assert!(matches!(
            store.plugin_module(&sha).await,
            Err(Error::NotFound(_))
        ));
    }
);

contract!(
    plugins_are_versioned_by_content,
    |store: Store| async move {
        let (p1, created) = store
            .insert_plugin(
                NewPlugin::module("hello", &"a".repeat(64), b"\0asm one"),
                NOW,
            )
            .await
            .unwrap();
        assert!(created);
        assert_eq!(p1.version, 1);
        let (again, created) = store
            .insert_plugin(
                NewPlugin::module("hello", &"a".repeat(64), b"\0asm one"),
                NOW,
            )
            .await
            .unwrap();
        assert!(!created, "the same bytes return the existing plugin");
        assert_eq!(again.id, p1.id);
        let (p2, created) = store
            .insert_plugin(
                NewPlugin::module("hello", &"b".repeat(64), b"\0asm two"),
                NOW,
            )
            .await
            .unwrap();
        assert!(created);
        assert_eq!(p2.version, 2);
        assert_eq!(store.latest_plugin("hello").await.unwrap().id, p2.id);
        assert_eq!(
            store.plugin_module(&"a".repeat(64)).await.unwrap(),
            b"\0asm one"
        );
        assert!(matches!(
            store.plugin_module(&"c".repeat(64)).await,
            Err(Error::NotFound(_))
        ));
        assert_eq!(store.list_plugins().await.unwrap().len(), 2);
    }
);

contract!(
    jobs_round_trip_and_names_are_unique,
    |store: Store| async move {
        let mut s = spec("close-order");
        s.schedule = Schedule::Cron {
            expr: "0/5 * * * * ?".into(),
            time_zone: Some("Asia/Shanghai".into()),
        };
        s.child_jobs = vec![7, 8];
        let job = store.insert_job(&s, Some(NOW + 5_000), NOW).await.unwrap();
        assert_eq!(job.spec, s);
        assert_eq!(job.next_fire_at, Some(NOW + 5_000));
        assert_eq!(
            store.get_job_by_name("close-order").await.unwrap().id,
            job.id
        );
        assert!(matches!(
            store.insert_job(&s, None, NOW).await,
            Err(Error::Conflict(_))
        ));

        let mut changed = s.clone();
        changed.enabled = false;
        changed.route = Route::ShardingBroadcast;
        let job2 = store
            .update_job(job.id, &changed, None, true, NOW + 1)
            .await
            .unwrap();
        assert_eq!(job2.spec, changed);
        assert_eq!(
            job2.generation,
            job.generation + 1,
            "a re-plan moves the generation on"
        );
        assert_eq!(job2.next_fire_at, None);
        assert_eq!(job2.updated_at, NOW + 1);

        for i in 0..5 {
            store
                .insert_job(&spec(&format!("job-{i}")), None, NOW)
                .await
                .unwrap();
        }
        let page1 = store.list_jobs(None, None, None, None, 4).await.unwrap();
        assert_eq!(page1.items.len(), 4);
        let page2 = store
            .list_jobs(None, None, None, page1.next, 4)
            .await
            .unwrap();
        assert_eq!(page2.items.len(), 2);
        assert_eq!(page2.next, None);
        let found = store
            .list_jobs(None, None, Some("job-3"), None, 50)
            .await
            .unwrap();
        assert_eq!(found.items.len(), 1);
        // LIKE metacharacters in a search are literal.
        assert!(
            store
                .list_jobs(None, None, Some("%"), None, 50)
                .await
                .unwrap()
                .items
                .is_empty()
        );
    }
);

contract!(
    deleting_a_job_with_pending_tasks_needs_force,
    |store: Store| async move {
        let job = store.insert_job(&spec("j"), None, NOW).await.unwrap();
        let ids = store
            .insert_tasks(&[task(job.id, NOW + 60_000, None)], NOW)
            .await
            .unwrap();
        assert!(matches!(
            store.delete_job(job.id, false, NOW).await,
            Err(Error::Conflict(_))
        ));
        let cancelled = store.delete_job(job.id, true, NOW).await.unwrap();
        assert_eq!(cancelled, vec![ids[0].0]);
        assert_eq!(
            store.get_task(ids[0].0).await.unwrap().status,
            TaskStatus::Cancelled
        );
        assert!(matches!(
            store.get_job(job.id).await,
            Err(Error::NotFound(_))
        ));
        assert!(matches!(
            store.delete_job(job.id, true, NOW).await,
            Err(Error::NotFound(_))
        ));
    }
);

contract!(
    task_keys_are_idempotent_and_batches_all_or_nothing,
    |store: Store| async move {
        let job = store.insert_job(&spec("j"), None, NOW).await.unwrap();
        let first = store
            .insert_tasks(&[task(job.id, NOW, Some("order-42"))], NOW)
            .await
            .unwrap();
        assert!(first[0].1);
        let again = store
            .insert_tasks(
                &[
                    task(job.id, NOW + 5, Some("order-42")),
                    task(job.id, NOW, Some("order-43")),
                ],
                NOW,
            )
            .await
            .unwrap();
        assert_eq!(again[0], (first[0].0, false));
        assert!(again[1].1);
        assert_eq!(
            store.get_task_by_key(job.id, "order-42").await.unwrap().id,
            first[0].0
        );

        // The same key twice in one batch violates the unique key: nothing of the batch stays.
        let before = store
            .list_tasks(&TaskFilter {
                limit: 1000,
                ..Default::default()
            })
            .await
            .unwrap()
            .items
            .len();
        let bad = store
            .insert_tasks(
                &[
                    task(job.id, NOW, Some("x")),
                    task(job.id, NOW, None),
                    task(job.id, NOW, Some("x")),
                ],
                NOW,
            )
            .await;
        assert!(bad.is_err());
        let after = store
            .list_tasks(&TaskFilter {
                limit: 1000,
                ..Default::default()
            })
            .await
            .unwrap()
            .items
            .len();
        assert_eq!(before, after);

        let t = store.get_task(first[0].0).await.unwrap();
        assert_eq!(t.status, TaskStatus::Pending);
        assert_eq!(t.payload.as_deref(), Some("{\"order\":42}"));
        assert_eq!(t.attempt, 1);
    }
);

contract!(the_scan_claims_the_window_once, |store: Store| async move {
    let lease = lease(&store).await;
    let job = store.insert_job(&spec("j"), None, NOW).await.unwrap();
    let ids = store
        .insert_tasks(
            &[
                task(job.id, NOW - 10_000, None),
                task(job.id, NOW + 3_000, None),
                task(job.id, NOW + 60_000, None),
            ],
            NOW,
        )
        .await
        .unwrap();
    let claimed = store
        .claim_due(lease, NOW, NOW + 5_000, NOW + 5_000, 100, &mut no_jobs)
        .await
        .unwrap();
    let mut got: Vec<i64> = claimed.tasks.iter().map(|t| t.task_id).collect();
    got.sort();
    assert_eq!(
        got,
        vec![ids[0].0, ids[1].0],
        "overdue and due-in-window, not beyond"
    );
    assert_eq!(
        store.get_task(ids[0].0).await.unwrap().status,
        TaskStatus::Claimed
    );
    let again = store
        .claim_due(lease, NOW, NOW + 5_000, NOW + 5_000, 100, &mut no_jobs)
        .await
        .unwrap();
    assert!(
        again.tasks.is_empty(),
        "a claimed task is not claimed twice"
    );

    // The batch limit holds.
    store
        .insert_tasks(&[task(job.id, NOW, None), task(job.id, NOW, None)], NOW)
        .await
        .unwrap();
    let one = store
        .claim_due(lease, NOW, NOW + 5_000, NOW + 5_000, 1, &mut no_jobs)
        .await
        .unwrap();
    assert_eq!(one.tasks.len(), 1);
});

contract!(
    recurring_fires_become_tasks_exactly_once,
    |store: Store| async move {
        let lease = lease(&store).await;
        let mut s = spec("every-second");
        s.schedule = Schedule::FixedRate { every_ms: 1_000 };
        let job = store.insert_job(&s, Some(NOW + 1_000), NOW).await.unwrap();
        let mut plan = planner(NOW);
        let claimed = store
            .claim_due(lease, NOW, NOW + 5_000, NOW + 5_000, 100, &mut plan)
            .await
            .unwrap();
        assert_eq!(claimed.cron_fires, 5);
        let dues: Vec<Millis> = claimed.tasks.iter().map(|t| t.due_at).collect();
        assert_eq!(dues, (1..=5).map(|i| NOW + i * 1_000).collect::<Vec<_>>());
        assert!(claimed.tasks.iter().all(|t| t.kind == TaskKind::Cron));
        assert_eq!(
            store.get_job(job.id).await.unwrap().next_fire_at,
            Some(NOW + 6_000)
        );

        // A second scan of the same window (say, another node racing) adds nothing.
        store
            .update_job(job.id, &s, Some(NOW + 1_000), false, NOW)
            .await
            .unwrap();
        let again = store
            .claim_due(lease, NOW, NOW + 5_000, NOW + 5_000, 100, &mut plan)
            .await
            .unwrap();
        assert!(
            again.tasks.is_empty(),
            "fire times already turned into tasks are not added twice"
        );
    }
);

contract!(
    a_debounced_task_takes_the_last_payload_and_waits_at_most_its_bound,
    |store: Store| async move {
        let job = store.insert_job(&spec("reindex"), None, NOW).await.unwrap();
        let mut first = task(job.id, NOW + 5_000, Some("doc-42"));
        first.payload = Some("v1".into());
        let id = store.insert_tasks(&[first], NOW).await.unwrap()[0].0;
        // Edits keep coming: each moves it to five seconds after itself, but never past
        // eight seconds after the first.
        for (at, payload, due) in [
            (NOW + 1_000, "v2", NOW + 6_000),
            (NOW + 2_500, "v3", NOW + 7_500),
            (NOW + 4_000, "v4", NOW + 8_000),
        ] {
            assert!(
                store
                    .debounce_task(id, Some(payload), at + 5_000, 8_000, at)
                    .await
                    .unwrap()
            );
            let t = store.get_task(id).await.unwrap();
            assert_eq!((t.payload.as_deref(), t.due_at), (Some(payload), due));
            assert_eq!(t.created_at, NOW, "the first create bounds the rest");
        }
        // Claimed by a node (in its wheel, about to fire): no longer debounced in place.
        let lease = lease(&store).await;
        let claimed = store
            .claim_due(
                lease,
                NOW + 4_000,
                NOW + 9_000,
                NOW + 9_000,
                100,
                &mut no_jobs,
            )
            .await
            .unwrap();
        assert_eq!(claimed.tasks[0].task_id, id);
        assert!(
            !store
                .debounce_task(id, Some("v5"), NOW + 9_500, 8_000, NOW + 4_500)
                .await
                .unwrap()
        );
        // Its key handed over, a new task of the job takes it.
        store.hand_key_over(id).await.unwrap();
        let mut next = task(job.id, NOW + 9_500, Some("doc-42"));
        next.payload = Some("v5".into());
        let (successor, created) = store.insert_tasks(&[next], NOW + 4_500).await.unwrap()[0];
        assert!(created && successor != id);
        store.set_created_at(successor, NOW).await.unwrap();
        assert_eq!(store.get_task(successor).await.unwrap().created_at, NOW);
    }
);

contract!(
    a_recurring_jobs_drift_is_read_from_its_last_fires,
    |store: Store| async move {
        let lease = lease(&store).await;
        let mut s = spec("every-second");
        s.schedule = Schedule::FixedRate { every_ms: 1_000 };
        let job = store.insert_job(&s, Some(NOW + 1_000), NOW).await.unwrap();
        let fires = scan_at(&store, lease, NOW).await.tasks;
        assert_eq!(fires.len(), 5);
        // Three start late, one never starts (dropped by its block strategy), one still
        // runs (not counted yet).
        let ends = [
            (Some(100), RunStatus::Succeeded),
            (Some(700), RunStatus::Succeeded),
            (Some(1_500), RunStatus::Succeeded),
            (None, RunStatus::Failed),
            (Some(2_000), RunStatus::Running),
        ];
        for (k, (fire, (late, status))) in fires.iter().zip(ends).enumerate() {
            let run = 80 + k as i64;
            store
                .record_dispatches(lease, &[dispatched(fire, run)], NOW)
                .await
                .unwrap();
            let mut u = report(fire, run, status);
            u.started_at = late.map(|ms| fire.due_at + ms);
            store
                .apply_run_updates(&[u], NOW, &mut |_| TaskNext::Dead)
                .await
                .unwrap();
        }
        let drift = store.schedule_drift(job.id, 20).await.unwrap();
        assert_eq!(
            drift,
            rota_scheduler::store::ScheduleDrift {
                fires: 4,
                most_ms: Some(1_500),
                last_ms: Some(1_500),
                skipped: 1,
            }
        );
        assert_eq!(store.schedule_drift(job.id, 2).await.unwrap().fires, 2);
    }
);

/// A scan by `lease` at `now`, planning recurring fires as the node does.
pub(crate) async fn scan_at(
    store: &Store,
    lease: NodeLease,
    now: Millis,
) -> rota_scheduler::store::Claimed {
    store
        .claim_due(lease, now, now + 5_000, now + 5_000, 100, &mut planner(now))
        .await
        .unwrap()
}

/// The scan's planner, at `now`, as the node plans.
fn planner(now: Millis) -> impl FnMut(&DueJob) -> JobFires {
    move |j: &DueJob| {
        let p = rota_scheduler::schedule::plan_fires(
            &j.schedule.compile().unwrap(),
            j.next_fire_at,
            now,
            now + 5_000,
            j.misfire,
            5_000,
            100,
        );
        JobFires {
            fires: p.fires,
            next_fire_at: p.next_fire_at,
        }
    }
}

contract!(
    a_fixed_delay_fires_again_only_after_its_fire_ended,
    |store: Store| async move {
        let lease = lease(&store).await;
        let mut s = spec("after-each");
        s.schedule = Schedule::FixedDelay { every_ms: 1_000 };
        let job = store.insert_job(&s, Some(NOW + 1_000), NOW).await.unwrap();
        let first = scan_at(&store, lease, NOW).await;
        assert_eq!(first.cron_fires, 1, "one fire, however wide the window");
        assert_eq!(first.tasks[0].due_at, NOW + 1_000);
        assert_eq!(store.get_job(job.id).await.unwrap().next_fire_at, None);
        // While it runs (however long), no scan plans another.
        let later = NOW + 60_000;
        let none = scan_at(&store, lease, later).await;
        assert_eq!(none.cron_fires, 0);

        // Its end, however late, sets the next fire.
        let fire = &first.tasks[0];
        store
            .record_dispatches(lease, &[dispatched(fire, 71)], later)
            .await
            .unwrap();
        let ended = later + 500;
        store
            .apply_run_updates(
                &[report(fire, 71, RunStatus::Succeeded)],
                ended,
                &mut |_| TaskNext::Succeeded,
            )
            .await
            .unwrap();
        assert_eq!(
            store.get_job(job.id).await.unwrap().next_fire_at,
            Some(ended + 1_000),
            "the next fire is the delay after the end"
        );

        // A fire cancelled before it ran sets the next one as its end would have.
        let second = scan_at(&store, lease, ended + 1_000).await;
        assert_eq!(second.cron_fires, 1);
        store
            .release_claims(lease, &[second.tasks[0].task_id])
            .await
            .unwrap();
        let cancelled_at = ended + 1_200;
        store
            .cancel_task(second.tasks[0].task_id, cancelled_at)
            .await
            .unwrap();
        assert_eq!(
            store.get_job(job.id).await.unwrap().next_fire_at,
            Some(cancelled_at + 1_000)
        );

        // A change of the job while a fire runs leaves the next to its end (one not yet
        // sent is dropped with the old schedule's).
        let third = scan_at(&store, lease, cancelled_at + 1_000).await;
        assert_eq!(third.cron_fires, 1);
        store
            .record_dispatches(
                lease,
                &[dispatched(&third.tasks[0], 72)],
                cancelled_at + 1_000,
            )
            .await
            .unwrap();
        s.timeout_ms = 9_000;
        store
            .update_job(
                job.id,
                &s,
                Some(cancelled_at + 2_000),
                true,
                cancelled_at + 1_500,
            )
            .await
            .unwrap();
        assert_eq!(store.get_job(job.id).await.unwrap().next_fire_at, None);
    }
);

contract!(
    claims_survive_a_restart_and_can_be_handed_back,
    |store: Store| async move {
        let first = lease(&store).await;
        let job = store.insert_job(&spec("j"), None, NOW).await.unwrap();
        store
            .insert_tasks(
                &[
                    task(job.id, NOW + 1_000, None),
                    task(job.id, NOW + 2_000, None),
                ],
                NOW,
            )
            .await
            .unwrap();
        let claimed = store
            .claim_due(first, NOW, NOW + 5_000, NOW + 5_000, 100, &mut no_jobs)
            .await
            .unwrap();
        assert_eq!(claimed.tasks.len(), 2);

        // The node restarts: a new epoch finds its old claims.
        let second = store
            .start_node("node-a", "http://127.0.0.1:8080", NOW + 10)
            .await
            .unwrap();
        assert_eq!(second.node_id, first.node_id);
        assert_eq!(second.epoch, first.epoch + 1);
        let old = store.claims_of(second).await.unwrap();
        assert_eq!(old.len(), 2);
        store.adopt_claims(second, &[old[0].task_id]).await.unwrap();
        assert_eq!(store.claims_of(second).await.unwrap().len(), 1);

        store
            .release_claims(second, &[old[0].task_id])
            .await
            .unwrap();
        assert_eq!(
            store.get_task(old[0].task_id).await.unwrap().status,
            TaskStatus::Pending
        );

        // Another node's name is another node.
        let other = store
            .start_node("node-b", "http://127.0.0.1:8081", NOW)
            .await
            .unwrap();
        assert_ne!(other.node_id, first.node_id);
        assert!(store.claims_of(other).await.unwrap().is_empty());
    }
);

contract!(
    tasks_due_in_the_window_can_be_created_claimed,
    |store: Store| async move {
        let lease = lease(&store).await;
        let job = store.insert_job(&spec("j"), None, NOW).await.unwrap();
        let tasks = [task(job.id, NOW, None), task(job.id, NOW + 60_000, None)];
        let ids = store
            .insert_tasks_claiming(&tasks, Some((lease, &[true, false])), NOW)
            .await
            .unwrap();
        let first = store.get_task(ids[0].0).await.unwrap();
        assert_eq!(first.status, TaskStatus::Claimed);
        assert_eq!(
            store
                .task_owner(ids[0].0)
                .await
                .unwrap()
                .map(|node| node.id),
            Some(lease.node_id)
        );
        assert_eq!(
            store.get_task(ids[1].0).await.unwrap().status,
            TaskStatus::Pending
        );
        // The scan does not claim it again; it finds the pending one when it is due.
        let scanned = store
            .claim_due(lease, NOW, NOW + 5_000, NOW + 5_000, 100, &mut no_jobs)
            .await
            .unwrap();
        assert!(scanned.tasks.is_empty());
        // A fenced lease claims nothing.
        let restarted = lease_of(&store).await;
        assert_ne!(restarted.epoch, lease.epoch);
        assert!(matches!(
            store
                .insert_tasks_claiming(&[task(job.id, NOW, None)], Some((lease, &[true])), NOW)
                .await,
            Err(Error::Fenced)
        ));
    }
);

contract!(
    reports_complete_runs_idempotently,
    |store: Store| async move {
        let lease = lease(&store).await;
        let job = store.insert_job(&spec("j"), None, NOW).await.unwrap();
        store
            .insert_tasks(&[task(job.id, NOW, None)], NOW)
            .await
            .unwrap();
        let t = store
            .claim_due(lease, NOW, NOW + 5_000, NOW + 5_000, 10, &mut no_jobs)
            .await
            .unwrap()
            .tasks
            .remove(0);
        let run_id = store.allocate_ids("run", 1).await.unwrap();
        store
            .record_dispatches(lease, &[dispatched(&t, run_id)], NOW)
            .await
            .unwrap();
        assert_eq!(
            store.get_task(t.task_id).await.unwrap().status,
            TaskStatus::Running
        );
        assert_eq!(
            store.get_run(run_id).await.unwrap().status,
            RunStatus::Dispatched
        );

        let applied = store
            .apply_run_updates(&[report(&t, run_id, RunStatus::Running)], NOW, &mut policy)
            .await
            .unwrap();
        assert_eq!(applied.written, 1);
        assert!(applied.tasks.is_empty(), "running ends nothing");
        let done = [report(&t, run_id, RunStatus::Succeeded)];
        let applied = store
            .apply_run_updates(&done, NOW, &mut policy)
            .await
            .unwrap();
        assert_eq!(applied.tasks, vec![(t.task_id, TaskNext::Succeeded)]);
        let again = store
            .apply_run_updates(&done, NOW, &mut policy)
            .await
            .unwrap();
        assert!(again.tasks.is_empty(), "a repeated report decides nothing");
        // A late, contradicting report for a finished run changes nothing either.
        let late = store
            .apply_run_updates(&[report(&t, run_id, RunStatus::Failed)], NOW, &mut policy)
            .await
            .unwrap();
        assert!(late.tasks.is_empty());

        let run = store.get_run(run_id).await.unwrap();
        assert_eq!(run.status, RunStatus::Succeeded);
        assert_eq!(run.dispatched_at, Some(NOW));
        assert_eq!(run.started_at, Some(t.due_at + 1));
        assert_eq!(run.exit_code, Some(0));
        let task = store.get_task(t.task_id).await.unwrap();
        assert_eq!(task.status, TaskStatus::Succeeded);
        assert_eq!(task.last_run_id, Some(run_id));
        let runs = store
            .list_runs(&RunFilter {
                task_id: Some(t.task_id),
                limit: 10,
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(runs.items.len(), 1);
    }
);

contract!(
    a_report_may_arrive_before_the_dispatch_record,
    |store: Store| async move {
        let lease = lease(&store).await;
        let job = store.insert_job(&spec("j"), None, NOW).await.unwrap();
        store
            .insert_tasks(&[task(job.id, NOW, None)], NOW)
            .await
            .unwrap();
        let t = store
            .claim_due(lease, NOW, NOW + 5_000, NOW + 5_000, 10, &mut no_jobs)
            .await
            .unwrap()
            .tasks
            .remove(0);
        let run_id = store.allocate_ids("run", 1).await.unwrap();
        store
            .apply_run_updates(
                &[report(&t, run_id, RunStatus::Succeeded)],
                NOW,
                &mut policy,
            )
            .await
            .unwrap();
        store
            .record_dispatches(lease, &[dispatched(&t, run_id)], NOW)
            .await
            .unwrap();
        assert_eq!(
            store.get_task(t.task_id).await.unwrap().status,
            TaskStatus::Succeeded,
            "not back to running"
        );
        let run = store.get_run(run_id).await.unwrap();
        assert_eq!(run.status, RunStatus::Succeeded);
        assert_eq!(run.dispatched_at, Some(NOW), "from the report");
    }
);

contract!(
    failures_retry_with_backoff_until_dead,
    |store: Store| async move {
        let lease = lease(&store).await;
        let job = store.insert_job(&spec("j"), None, NOW).await.unwrap(); // max 3 attempts, fixed 1 s
        store
            .insert_tasks(&[task(job.id, NOW, None)], NOW)
            .await
            .unwrap();
        let mut seen_runs = Vec::new();
        for attempt in 1..=3 {
            let claimed = store
                .claim_due(
                    lease,
                    NOW + 10_000 * attempt as i64,
                    NOW + 100_000,
                    NOW + 100_000,
                    10,
                    &mut no_jobs,
                )
                .await
                .unwrap();
            assert_eq!(claimed.tasks.len(), 1, "attempt {attempt} is claimable");
            let t = &claimed.tasks[0];
            assert_eq!(t.attempt, attempt);
            let run_id = store.allocate_ids("run", 1).await.unwrap();
            seen_runs.push(run_id);
            store
                .record_dispatches(lease, &[dispatched(t, run_id)], NOW)
                .await
                .unwrap();
            let applied = store
                .apply_run_updates(&[report(t, run_id, RunStatus::Failed)], NOW, &mut policy)
                .await
                .unwrap();
            let task = store.get_task(t.task_id).await.unwrap();
            if attempt < 3 {
                assert_eq!(
                    applied.tasks,
                    vec![(
                        t.task_id,
                        TaskNext::Retry {
                            due_at: NOW + 1_000,
                            lost: false
                        }
                    )]
                );
                assert_eq!(task.status, TaskStatus::Pending);
                assert_eq!(task.attempt, attempt + 1);
                assert_eq!(task.due_at, NOW + 1_000);
            } else {
                assert_eq!(applied.tasks, vec![(t.task_id, TaskNext::Dead)]);
                assert_eq!(task.status, TaskStatus::Dead);
            }
        }
        let runs = store
            .list_runs(&RunFilter {
                job_id: Some(job.id),
                limit: 10,
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(runs.items.len(), 3, "every attempt keeps its run");
    }
);

contract!(
    lost_runs_are_retried_and_children_fire_on_success,
    |store: Store| async move {
        let lease = lease(&store).await;
        let child = store.insert_job(&spec("child"), None, NOW).await.unwrap();
        let mut parent_spec = spec("parent");
        parent_spec.max_attempts = 1;
        parent_spec.child_jobs = vec![child.id];
        let parent = store.insert_job(&parent_spec, None, NOW).await.unwrap();
        store
            .insert_tasks(&[task(parent.id, NOW, None)], NOW)
            .await
            .unwrap();
        let t = store
            .claim_due(lease, NOW, NOW + 5_000, NOW + 5_000, 10, &mut no_jobs)
            .await
            .unwrap()
            .tasks
            .remove(0);
        let run1 = store.allocate_ids("run", 1).await.unwrap();
        store
            .record_dispatches(lease, &[dispatched(&t, run1)], NOW)
            .await
            .unwrap();
        let at = |app: &str| vec![(app.to_owned(), "http://127.0.0.1:9999".to_owned())];
        let lost = store.unfinished_runs_on(&at("default")).await.unwrap();
        assert_eq!(lost.len(), 1);
        // Another app's executor at the same address has no say over this run.
        assert!(
            store
                .unfinished_runs_on(&at("hr"))
                .await
                .unwrap()
                .is_empty()
        );
        let applied = store
            .apply_run_updates(&[report(&t, run1, RunStatus::Lost)], NOW, &mut policy)
            .await
            .unwrap();
        assert_eq!(
            applied.tasks,
            vec![(
                t.task_id,
                TaskNext::Retry {
                    due_at: NOW,
                    lost: true
                }
            )]
        );

        let t2 = store
            .claim_due(lease, NOW, NOW + 5_000, NOW + 5_000, 10, &mut no_jobs)
            .await
            .unwrap()
            .tasks
            .remove(0);
        assert_eq!(t2.attempt, 2);
        let run2 = store.allocate_ids("run", 1).await.unwrap();
        store
            .record_dispatches(lease, &[dispatched(&t2, run2)], NOW)
            .await
            .unwrap();
        let applied = store
            .apply_run_updates(&[report(&t2, run2, RunStatus::Succeeded)], NOW, &mut policy)
            .await
            .unwrap();
        assert_eq!(
            applied.tasks,
            vec![(t.task_id, TaskNext::Succeeded)],
            "a loss does not spend max_attempts"
        );
        assert_eq!(applied.children, 1);
        let children = store
            .list_tasks(&TaskFilter {
                job_id: Some(child.id),
                limit: 10,
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(children.items.len(), 1);
        assert_eq!(children.items[0].kind, TaskKind::Child);
    }
);

contract!(killed_runs_cancel_their_task, |store: Store| async move {
    let lease = lease(&store).await;
    let job = store.insert_job(&spec("j"), None, NOW).await.unwrap();
    store
        .insert_tasks(&[task(job.id, NOW, None)], NOW)
        .await
        .unwrap();
    let t = store
        .claim_due(lease, NOW, NOW + 5_000, NOW + 5_000, 10, &mut no_jobs)
        .await
        .unwrap()
        .tasks
        .remove(0);
    let run = store.allocate_ids("run", 1).await.unwrap();
    store
        .record_dispatches(lease, &[dispatched(&t, run)], NOW)
        .await
        .unwrap();
    store
        .apply_run_updates(&[report(&t, run, RunStatus::Killed)], NOW, &mut policy)
        .await
        .unwrap();
    assert_eq!(
        store.get_task(t.task_id).await.unwrap().status,
        TaskStatus::Cancelled
    );
});

contract!(
    the_rules_a_node_brings_decide_as_the_database_would_and_the_others_are_read,
    |store: Store| async move {
        let lease = lease(&store).await;
        // Three jobs alike: 3 attempts 7 s apart, a child job. The node brings the rules
        // of `brought` as its job cache has them, and other ones for `edited` (as if its
        // cache held a newer version: one attempt, a concurrency bound); `read`'s come
        // from the database.
        let child = store.insert_job(&spec("child"), None, NOW).await.unwrap();
        let alike = |name: &str| JobSpec {
            child_jobs: vec![child.id],
            backoff: Backoff::Fixed { delay_ms: 7_000 },
            ..spec(name)
        };
        let brought = store
            .insert_job(&alike("brought"), None, NOW)
            .await
            .unwrap();
        let read = store.insert_job(&alike("read"), None, NOW).await.unwrap();
        let edited = store.insert_job(&alike("edited"), None, NOW).await.unwrap();
        // A success and a failure of `brought` and `read`, a failure of `edited`.
        let jobs = [brought.id, brought.id, read.id, read.id, edited.id];
        let new: Vec<NewTask> = jobs.iter().map(|&j| task(j, NOW, None)).collect();
        store.insert_tasks(&new, NOW).await.unwrap();
        let mut claimed = store
            .claim_due(lease, NOW, NOW + 5_000, NOW + 5_000, 10, &mut no_jobs)
            .await
            .unwrap()
            .tasks;
        claimed.sort_by_key(|t| t.task_id);
        assert_eq!(claimed.len(), jobs.len());
        let first_run = store.allocate_ids("run", jobs.len() as i64).await.unwrap();
        let runs: Vec<(&DueTask, i64)> = claimed.iter().zip(first_run..).collect();
        let sent: Vec<Dispatched> = runs.iter().map(|(t, r)| dispatched(t, *r)).collect();
        store.record_dispatches(lease, &sent, NOW).await.unwrap();
        let ended = [
            RunStatus::Succeeded,
            RunStatus::Failed,
            RunStatus::Succeeded,
            RunStatus::Failed,
            RunStatus::Failed,
        ];
        let reports: Vec<RunUpdate> = runs
            .iter()
            .zip(ended)
            .map(|((t, r), status)| report(t, *r, status))
            .collect();
        let rules = HashMap::from([
            (brought.id, JobRules::of(&brought.spec)),
            (
                edited.id,
                JobRules {
                    max_attempts: Some(1),
                    bounded: true,
                    ..JobRules::of(&edited.spec)
                },
            ),
        ]);
        let mut budgets: HashMap<i64, i32> = HashMap::new();
        let applied = store
            .apply_run_updates_raising(
                &reports,
                NOW,
                Completing {
                    decide: &mut |a| {
                        budgets.insert(a.job_id, a.max_attempts);
                        policy(a)
                    },
                    raise: &|_, _, _| Vec::new(),
                    claim: None,
                    rules: &rules,
                },
            )
            .await
            .unwrap();
        assert_eq!(
            budgets,
            HashMap::from([(brought.id, 3), (read.id, 3), (edited.id, 1)]),
            "the brought rules for `brought` and `edited`, the database's for `read`"
        );
        assert!(
            applied.freed_limited,
            "a job brought as bounded frees a slot"
        );
        let state = |i: usize| {
            let store = store.clone();
            let id = claimed[i].task_id;
            async move {
                let t = store.get_task(id).await.unwrap();
                (t.status, t.due_at)
            }
        };
        let retried = (TaskStatus::Pending, NOW + 7_000);
        assert_eq!(state(1).await, retried, "`brought`: the job's backoff");
        assert_eq!(state(3).await, retried, "`read`: the job's backoff");
        assert_eq!(state(4).await.0, TaskStatus::Dead, "`edited`: one attempt");
        let children = store
            .list_tasks(&TaskFilter {
                job_id: Some(child.id),
                limit: 10,
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(
            children.items.len(),
            2,
            "each success made its child, brought or read"
        );
    }
);

contract!(cancel_only_before_dispatch, |store: Store| async move {
    let lease = lease(&store).await;
    let job = store.insert_job(&spec("j"), None, NOW).await.unwrap();
    let ids = store
        .insert_tasks(&[task(job.id, NOW, None), task(job.id, NOW + 1, None)], NOW)
        .await
        .unwrap();
    let (t, changed) = store.cancel_task(ids[0].0, NOW).await.unwrap();
    assert!(changed);
    assert_eq!(t.status, TaskStatus::Cancelled);
    let (_, changed) = store.cancel_task(ids[0].0, NOW).await.unwrap();
    assert!(!changed, "cancelling a cancelled task is idempotent");

    let claimed = store
        .claim_due(lease, NOW, NOW + 5_000, NOW + 5_000, 10, &mut no_jobs)
        .await
        .unwrap();
    assert_eq!(claimed.tasks.len(), 1, "a cancelled task is never claimed");
    let run = store.allocate_ids("run", 1).await.unwrap();
    store
        .record_dispatches(lease, &[dispatched(&claimed.tasks[0], run)], NOW)
        .await
        .unwrap();
    assert!(matches!(
        store.cancel_task(ids[1].0, NOW).await,
        Err(Error::Conflict(_))
    ));
    assert!(matches!(
        store.cancel_task(9_999_999, NOW).await,
        Err(Error::NotFound(_))
    ));
});

contract!(
    the_executor_registry_tracks_heartbeats,
    |store: Store| async move {
        store
            .upsert_executor("default", "http://127.0.0.1:9001", 8, 0, NOW)
            .await
            .unwrap();
        store
            .upsert_executor("default", "http://127.0.0.1:9002", 8, 0, NOW - 100_000)
            .await
            .unwrap();
        store
            .upsert_executor("other", "http://127.0.0.1:9003", 8, 0, NOW)
            .await
            .unwrap();
        let live = store
            .list_executors(Some("default"), NOW - 90_000)
            .await
            .unwrap();
        assert_eq!(
            live.iter().map(|e| e.address.as_str()).collect::<Vec<_>>(),
            vec!["http://127.0.0.1:9001"]
        );
        assert_eq!(
            store
                .list_executors(None, NOW - 90_000)
                .await
                .unwrap()
                .len(),
            2
        );
        // A heartbeat refreshes, keeps registered_at.
        store
            .upsert_executor("default", "http://127.0.0.1:9002", 8, 3, NOW)
            .await
            .unwrap();
        let e = store
            .list_executors(Some("default"), NOW - 90_000)
            .await
            .unwrap();
        assert_eq!(e.len(), 2);
        assert_eq!(e[1].registered_at, NOW - 100_000);
        assert_eq!(e[1].running, 3);
        let dead = store.dead_executors(NOW + 1).await.unwrap();
        assert_eq!(dead.len(), 3);
        assert!(
            store
                .remove_executor("default", "http://127.0.0.1:9001", None)
                .await
                .unwrap()
        );
        assert!(
            !store
                .remove_executor("default", "http://127.0.0.1:9001", None)
                .await
                .unwrap()
        );
        assert_eq!(store.list_apps().await.unwrap().len(), 2);
    }
);

contract!(id_blocks_never_overlap, |store: Store| async move {
    let a = store.allocate_ids("run", 10).await.unwrap();
    let b = store.allocate_ids("run", 10).await.unwrap();
    assert!(b >= a + 10);
    let c = store.allocate_ids("task", 1).await.unwrap();
    assert!(c >= 1);
});

contract!(
    retention_purges_finished_tasks_and_their_runs_only,
    |store: Store| async move {
        let lease = lease(&store).await;
        let job = store.insert_job(&spec("j"), None, NOW).await.unwrap();
        let ids = store
            .insert_tasks(
                &[
                    task(job.id, NOW - 50_000, Some("old")),
                    task(job.id, NOW - 40_000, None),
                    task(job.id, NOW, None),
                ],
                NOW,
            )
            .await
            .unwrap();
        // The first finishes, the second stays pending (old but unfinished), the third is recent.
        let claimed = store
            .claim_due(lease, NOW, NOW - 45_000, NOW - 45_000, 10, &mut no_jobs)
            .await
            .unwrap();
        let t = &claimed.tasks[0];
        let run = store.allocate_ids("run", 1).await.unwrap();
        store
            .record_dispatches(lease, &[dispatched(t, run)], NOW)
            .await
            .unwrap();
        store
            .apply_run_updates(&[report(t, run, RunStatus::Succeeded)], NOW, &mut policy)
            .await
            .unwrap();
        store.cancel_task(ids[2].0, NOW).await.unwrap();

        assert_eq!(store.purge_finished(NOW - 10_000, 100).await.unwrap(), 1);
        assert!(matches!(
            store.get_task(ids[0].0).await,
            Err(Error::NotFound(_))
        ));
        assert!(matches!(store.get_run(run).await, Err(Error::NotFound(_))));
        assert_eq!(
            store.get_task(ids[1].0).await.unwrap().status,
            TaskStatus::Pending,
            "unfinished tasks stay"
        );
        assert_eq!(
            store.get_task(ids[2].0).await.unwrap().status,
            TaskStatus::Cancelled,
            "recent ones stay"
        );
        assert_eq!(store.purge_finished(NOW - 10_000, 100).await.unwrap(), 0);
        // Its key is free again once the task is gone.
        assert!(
            store
                .insert_tasks(&[task(job.id, NOW, Some("old"))], NOW)
                .await
                .unwrap()[0]
                .1
        );
    }
);

contract!(
    directory_users_are_kept_as_their_groups_say,
    |store: Store| async move {
        let dn = "uid=dana,ou=people,dc=corp";
        // Created at the first sign-in, with no password of its own…
        let dana = store
            .upsert_directory_user(
                "dana",
                "ldap",
                dn,
                true,
                r#"["ops"]"#,
                "operator",
                "orders",
                NOW,
            )
            .await
            .unwrap();
        assert_eq!(
            (
                dana.source.as_str(),
                dana.subject.as_deref(),
                dana.role.as_str(),
                dana.apps.as_str()
            ),
            ("ldap", Some(dn), "operator", "orders")
        );
        assert_eq!(dana.password_hash, "");
        // …updated at the next, the same row.
        let again = store
            .upsert_directory_user(
                "dana",
                "ldap",
                dn,
                true,
                r#"["devs"]"#,
                "viewer",
                "*",
                NOW + 1,
            )
            .await
            .unwrap();
        assert_eq!(again.id, dana.id);
        assert_eq!((again.role.as_str(), again.apps.as_str()), ("viewer", "*"));
        assert_eq!(again.sso_groups.as_deref(), Some(r#"["devs"]"#));
        assert_eq!(again.created_at, NOW);
        // A local user of the same name is not taken over.
        store
            .insert_user("lou", "hash-l", "admin", "*", NOW)
            .await
            .unwrap();
        assert!(matches!(
            store
                .upsert_directory_user(
                    "lou",
                    "ldap",
                    "uid=lou,dc=corp",
                    true,
                    "[]",
                    "viewer",
                    "*",
                    NOW
                )
                .await,
            Err(Error::Conflict(_))
        ));
        let lou = store.user_by_name("lou").await.unwrap().unwrap();
        assert_eq!((lou.source.as_str(), lou.subject), ("local", None));
        // Found by its identity whatever the name given, and its access as last checked.
        let same = store
            .upsert_directory_user(
                "DANA",
                "ldap",
                dn,
                true,
                r#"["ops"]"#,
                "operator",
                "orders",
                NOW + 2,
            )
            .await
            .unwrap();
        assert_eq!((same.id, same.name.as_str()), (dana.id, "dana"));
        assert_eq!(same.checked_at, Some(NOW + 2));
        assert_eq!(
            store
                .directory_user("ldap", dn)
                .await
                .unwrap()
                .map(|u| u.id),
            Some(dana.id)
        );
        store
            .set_directory_access(dana.id, "viewer", "", NOW + 3)
            .await
            .unwrap();
        let checked = store.get_user(dana.id).await.unwrap();
        assert_eq!(
            (
                checked.role.as_str(),
                checked.apps.as_str(),
                checked.checked_at
            ),
            ("viewer", "", Some(NOW + 3))
        );
        // Its sessions end together.
        store
            .insert_session("d1", dana.id, NOW, NOW + 1_000)
            .await
            .unwrap();
        store
            .insert_session("d2", dana.id, NOW, NOW + 1_000)
            .await
            .unwrap();
        store
            .insert_session("l1", lou.id, NOW, NOW + 1_000)
            .await
            .unwrap();
        assert_eq!(store.end_sessions(dana.id).await.unwrap(), 2);
        assert!(store.session_user("d1", NOW).await.unwrap().is_none());
        assert!(store.session_user("l1", NOW).await.unwrap().is_some());
        // Its name given to someone new in the directory: the row is theirs now, and what
        // was issued to the one before (tokens, sessions) ends.
        store
            .insert_token(dana.id, "ci", "dana-token", NOW)
            .await
            .unwrap();
        store
            .insert_session("d3", dana.id, NOW, NOW + 1_000)
            .await
            .unwrap();
        let next = store
            .upsert_directory_user(
                "dana",
                "ldap",
                "uid=dana,ou=new,dc=corp",
                true,
                "[]",
                "viewer",
                "*",
                NOW + 4,
            )
            .await
            .unwrap();
        assert_eq!(next.id, dana.id);
        assert_eq!(next.subject.as_deref(), Some("uid=dana,ou=new,dc=corp"));
        assert!(store.token_user("dana-token").await.unwrap().is_none());
        assert!(store.session_user("d3", NOW).await.unwrap().is_none());
        // A provider's names do not move: someone else choosing a taken one is refused,
        // and the holder keeps its row.
        let pat = store
            .upsert_directory_user(
                "pat",
                "oidc",
                "https://id 1",
                false,
                "[]",
                "viewer",
                "*",
                NOW,
            )
            .await
            .unwrap();
        assert!(matches!(
            store
                .upsert_directory_user(
                    "pat",
                    "oidc",
                    "https://id 2",
                    false,
                    "[]",
                    "admin",
                    "*",
                    NOW
                )
                .await,
            Err(Error::Conflict(_))
        ));
        let kept = store.get_user(pat.id).await.unwrap();
        assert_eq!(
            (kept.subject.as_deref(), kept.role.as_str()),
            (Some("https://id 1"), "viewer")
        );
    }
);

contract!(users_tokens_and_sessions, |store: Store| async move {
    let admin = store
        .insert_user("admin", "hash-a", "admin", "*", NOW)
        .await
        .unwrap();
    let vera = store
        .insert_user("vera", "hash-v", "viewer", "shop,billing", NOW)
        .await
        .unwrap();
    assert!(matches!(
        store.insert_user("vera", "h", "viewer", "*", NOW).await,
        Err(Error::Conflict(_))
    ));
    let names: Vec<String> = store
        .list_users()
        .await
        .unwrap()
        .into_iter()
        .map(|u| u.name)
        .collect();
    assert_eq!(names, ["admin", "vera"]);
    let v = store.user_by_name("vera").await.unwrap().unwrap();
    assert_eq!(
        (v.role.as_str(), v.apps.as_str()),
        ("viewer", "shop,billing")
    );

    store
        .set_user_access(vera, "operator", "shop")
        .await
        .unwrap();
    let v = store.get_user(vera).await.unwrap();
    assert_eq!((v.role.as_str(), v.apps.as_str()), ("operator", "shop"));
    assert!(matches!(
        store.set_user_access(999, "viewer", "*").await,
        Err(Error::NotFound(_))
    ));

    // Tokens: found by hash while live, listed per user, revoked once.
    let t1 = store.insert_token(vera, "ci", "h1", NOW).await.unwrap();
    store.insert_token(admin, "ops", "h2", NOW).await.unwrap();
    let by_token = store.token_user("h1").await.unwrap().unwrap();
    assert_eq!(
        (
            by_token.id,
            by_token.name.as_str(),
            by_token.role.as_str(),
            by_token.apps.as_str()
        ),
        (vera, "vera", "operator", "shop")
    );
    assert_eq!(store.list_tokens(Some(vera)).await.unwrap().len(), 1);
    assert_eq!(store.list_tokens(None).await.unwrap().len(), 2);
    assert!(
        !store.revoke_token(t1, Some(admin), NOW).await.unwrap(),
        "not admin's token"
    );
    assert!(store.revoke_token(t1, Some(vera), NOW).await.unwrap());
    assert!(
        !store.revoke_token(t1, None, NOW).await.unwrap(),
        "already revoked"
    );
    assert!(store.token_user("h1").await.unwrap().is_none());

    // Sessions end with their user.
    store
        .insert_session("s1", vera, NOW, NOW + 1_000)
        .await
        .unwrap();
    assert_eq!(
        store.session_user("s1", NOW).await.unwrap().map(|u| u.name),
        Some("vera".into())
    );
    assert_eq!(
        store
            .session_user("s1", NOW + 1_000)
            .await
            .unwrap()
            .map(|u| u.id),
        None
    );
    store
        .insert_session("s2", vera, NOW, NOW + 1_000)
        .await
        .unwrap();
    store.delete_user(vera).await.unwrap();
    assert!(store.session_user("s2", NOW).await.unwrap().is_none());
    assert_eq!(store.list_tokens(None).await.unwrap().len(), 1);
});

contract!(
    finished_runs_are_counted_once_per_minute,
    |store: Store| async move {
        let lease = lease(&store).await;
        let job = store.insert_job(&spec("j"), None, NOW).await.unwrap();
        store
            .insert_tasks(&[task(job.id, NOW, None), task(job.id, NOW, None)], NOW)
            .await
            .unwrap();
        let claimed = store
            .claim_due(lease, NOW, NOW + 5_000, NOW + 5_000, 100, &mut no_jobs)
            .await
            .unwrap();
        let runs = store.allocate_ids("run", 2).await.unwrap();
        let (a, b) = (&claimed.tasks[0], &claimed.tasks[1]);
        store
            .record_dispatches(lease, &[dispatched(a, runs), dispatched(b, runs + 1)], NOW)
            .await
            .unwrap();
        let updates = [
            report(a, runs, RunStatus::Running),
            report(a, runs, RunStatus::Succeeded),
            report(b, runs + 1, RunStatus::Failed),
        ];
        store
            .apply_run_updates(&updates, NOW, &mut policy)
            .await
            .unwrap();
        // The same reports again (a retried callback) count nothing more.
        store
            .apply_run_updates(&updates, NOW, &mut policy)
            .await
            .unwrap();
        let minute = (NOW + 5) - (NOW + 5) % 60_000;
        let stats = store.run_stats(minute - 3_600_000, 60_000).await.unwrap();
        assert_eq!(
            stats,
            ["failed", "succeeded"].map(|status| RunStat {
                bucket: minute,
                status: status.to_owned(),
                runs: 1
            })
        );
        let per_day = store.run_stats(0, 86_400_000).await.unwrap();
        let day = minute - minute % 86_400_000;
        assert_eq!(per_day.iter().map(|r| r.runs).sum::<i64>(), 2);
        assert!(per_day.iter().all(|r| r.bucket == day));
        assert!(
            store
                .run_stats(minute + 60_000, 60_000)
                .await
                .unwrap()
                .is_empty()
        );
    }
);

contract!(lists_are_scoped_to_apps, |store: Store| async move {
    let mut hr_spec = spec("hr-job");
    hr_spec.app = "hr".into();
    let shop = store
        .insert_job(&spec("shop-job"), None, NOW)
        .await
        .unwrap();
    let hr = store.insert_job(&hr_spec, None, NOW).await.unwrap();
    store
        .insert_tasks(&[task(shop.id, NOW, None), task(hr.id, NOW, None)], NOW)
        .await
        .unwrap();
    let only = |apps: &[&str]| Some(apps.iter().map(|a| a.to_string()).collect::<Vec<_>>());
    let jobs = store
        .list_jobs(None, only(&["default"]).as_deref(), None, None, 50)
        .await
        .unwrap();
    assert_eq!(
        jobs.items.iter().map(|j| j.id).collect::<Vec<_>>(),
        [shop.id]
    );
    let none = store
        .list_jobs(None, Some(&[]), None, None, 50)
        .await
        .unwrap();
    assert!(none.items.is_empty(), "an empty scope shows nothing");
    let tasks = store
        .list_tasks(&TaskFilter {
            apps: only(&["hr"]),
            limit: 50,
            ..TaskFilter::default()
        })
        .await
        .unwrap();
    assert_eq!(tasks.items.len(), 1);
    assert_eq!(tasks.items[0].job_id, hr.id);
    let runs = store
        .list_runs(&RunFilter {
            apps: only(&["nobody"]),
            limit: 50,
            ..RunFilter::default()
        })
        .await
        .unwrap();
    assert!(runs.items.is_empty());
});

// What the signed executor protocol checks a request against: the app of each task a
// callback reports on, and whether a plugin hash is one the app's jobs use; and the
// dashboard's counts for a scoped user.
contract!(
    what_an_apps_executors_and_users_may_touch,
    |store: Store| async move {
        let lease = lease(&store).await;
        let mut hr_spec = spec("hr-job");
        hr_spec.app = "hr".into();
        hr_spec.plugin = "payroll".into();
        let shop = store
            .insert_job(&spec("shop-job"), None, NOW)
            .await
            .unwrap();
        let hr = store.insert_job(&hr_spec, None, NOW).await.unwrap();
        let ids = store
            .insert_tasks(&[task(shop.id, NOW, None), task(hr.id, NOW + 1, None)], NOW)
            .await
            .unwrap();
        let (shop_task, hr_task) = (ids[0].0, ids[1].0);
        let owners = store
            .report_owners(&[(77_777, hr_task), (66_666, shop_task), (88_888, 987_654)])
            .await
            .unwrap();
        assert_eq!(
            owners.tasks,
            HashMap::from([
                (shop_task, (shop.id, Some("default".to_owned()))),
                (hr_task, (hr.id, Some("hr".to_owned())))
            ])
        );
        assert!(owners.runs.is_empty(), "no run is recorded yet");

        for (name, sha) in [("hello", "a"), ("hello", "b"), ("payroll", "c")] {
            store
                .insert_plugin(
                    NewPlugin::module(name, &sha.repeat(64), sha.as_bytes()),
                    NOW,
                )
                .await
                .unwrap();
        }
        // Every version of a plugin the app's jobs name, and nothing else.
        for (app, sha, used) in [
            ("default", "a", true),
            ("default", "b", true),
            ("default", "c", false),
            ("hr", "c", true),
            ("hr", "a", false),
            ("nobody", "a", false),
        ] {
            let found = store.app_uses_plugin(app, &sha.repeat(64)).await.unwrap();
            assert_eq!(found, used, "{app} {sha}");
        }
        // What each app's executors compile ahead: the newest version of each bound plugin.
        for (app, want) in [
            ("default", vec!["b".repeat(64)]),
            ("hr", vec!["c".repeat(64)]),
            ("nobody", vec![]),
        ] {
            assert_eq!(
                store.plugins_bound_by(app, 64).await.unwrap(),
                want,
                "{app}"
            );
        }
        assert_eq!(
            store.apps_binding("hello").await.unwrap(),
            vec!["default".to_owned()]
        );
        assert_eq!(
            store.apps_binding("payroll").await.unwrap(),
            vec!["hr".to_owned()]
        );

        let all = store.console_counts(0, None).await.unwrap();
        assert_eq!((all.jobs, all.tasks_pending), (2, 2));
        let hr_only = ["hr".to_owned()];
        let scoped = store.console_counts(0, Some(&hr_only)).await.unwrap();
        assert_eq!((scoped.jobs, scoped.tasks_pending), (1, 1));
        let nothing = store.console_counts(0, Some(&[])).await.unwrap();
        assert_eq!((nothing.jobs, nothing.tasks_pending), (0, 0));

        // Once the shop's task has a recorded run, reports name its task for it.
        let claimed = store
            .claim_due(lease, NOW, NOW + 5_000, NOW + 5_000, 10, &mut no_jobs)
            .await
            .unwrap()
            .tasks;
        let shop_due = claimed.iter().find(|t| t.task_id == shop_task).unwrap();
        let shop_run = store.allocate_ids("run", 1).await.unwrap();
        store
            .record_dispatches(lease, &[dispatched(shop_due, shop_run)], NOW)
            .await
            .unwrap();
        let owners = store
            .report_owners(&[(shop_run, hr_task), (77_777, shop_task)])
            .await
            .unwrap();
        assert_eq!(
            owners.runs,
            HashMap::from([(
                shop_run,
                (shop_task, Some("http://127.0.0.1:9999".to_owned()))
            )])
        );
        assert_eq!(owners.tasks.len(), 2);
    }
);

contract!(plugins_in_use_are_not_deleted, |store: Store| async move {
    store
        .insert_plugin(NewPlugin::module("hello", &"a".repeat(64), b"\0asm"), NOW)
        .await
        .unwrap();
    store
        .insert_plugin(NewPlugin::module("hello", &"b".repeat(64), b"\0asm2"), NOW)
        .await
        .unwrap();
    store
        .insert_plugin(NewPlugin::module("spare", &"c".repeat(64), b"\0asm3"), NOW)
        .await
        .unwrap();
    let job = store.insert_job(&spec("greeter"), None, NOW).await.unwrap();
    assert_eq!(
        store.plugin_users().await.unwrap(),
        vec![PluginUser {
            plugin: "hello".to_owned(),
            job_id: job.id,
            job_name: "greeter".to_owned()
        }]
    );
    assert!(matches!(
        store.delete_plugin("hello").await,
        Err(Error::Conflict(m)) if m.contains("`greeter`")
    ));
    assert_eq!(store.delete_plugin("spare").await.unwrap(), 1);
    assert!(matches!(
        store.delete_plugin("spare").await,
        Err(Error::NotFound(_))
    ));
    store.delete_job(job.id, true, NOW).await.unwrap();
    assert_eq!(
        store.delete_plugin("hello").await.unwrap(),
        2,
        "every version"
    );
    assert!(store.list_plugins().await.unwrap().is_empty());
});

contract!(
    a_dead_nodes_claims_are_taken_over_and_it_is_fenced,
    |store: Store| async move {
        let a = store.start_node("a", "http://a", NOW).await.unwrap();
        let b = store.start_node("b", "http://b", NOW).await.unwrap();
        let job = store.insert_job(&spec("j"), None, NOW).await.unwrap();
        store
            .insert_tasks(
                &[
                    task(job.id, NOW + 1_000, None),
                    task(job.id, NOW + 2_000, None),
                ],
                NOW,
            )
            .await
            .unwrap();
        let claimed = store
            .claim_due(a, NOW, NOW + 5_000, NOW + 5_000, 100, &mut no_jobs)
            .await
            .unwrap();
        assert_eq!(claimed.tasks.len(), 2);

        // B beats on; A stopped at NOW. Not dead yet: nothing moves.
        store.heartbeat_node(b, NOW + 4_000).await.unwrap();
        let (nodes, moved) = store.take_over_dead(b, NOW - 1).await.unwrap();
        assert!(nodes.is_empty() && moved.is_empty());

        // Dead: B takes A's claims, once.
        let (nodes, moved) = store.take_over_dead(b, NOW + 3_000).await.unwrap();
        assert_eq!(nodes, ["a"]);
        let mut ids: Vec<i64> = moved.iter().map(|t| t.task_id).collect();
        ids.sort();
        let mut want: Vec<i64> = claimed.tasks.iter().map(|t| t.task_id).collect();
        want.sort();
        assert_eq!(ids, want);
        let (nodes, moved) = store.take_over_dead(b, NOW + 10_000).await.unwrap();
        assert!(nodes.is_empty() && moved.is_empty(), "taken over once");
        // B never takes itself over, however old its own heartbeat.
        assert!(
            store
                .take_over_dead(b, i64::MAX)
                .await
                .unwrap()
                .0
                .is_empty()
        );

        // A wakes: its heartbeat and its claims are refused.
        assert!(!store.heartbeat_node(a, NOW + 5_000).await.unwrap());
        // Nor can it take others over, or pull the moved claims back to itself.
        assert!(matches!(
            store.take_over_dead(a, i64::MAX).await,
            Err(Error::Fenced)
        ));
        assert!(matches!(
            store.adopt_claims(a, &ids).await,
            Err(Error::Fenced)
        ));
        for &id in &ids {
            let owner = store.task_owner(id).await.unwrap().map(|node| node.id);
            assert_eq!(owner, Some(b.node_id), "task {id} stays with B");
        }
        // Nor record a send it made while stalled: B asked the executors and records that.
        // (The claim is B's now: A writes nothing, and says the send belongs elsewhere.)
        assert_eq!(
            store
                .record_dispatches(a, &[dispatched(&claimed.tasks[0], 999)], NOW)
                .await
                .unwrap(),
            1
        );
        assert!(matches!(store.get_run(999).await, Err(Error::NotFound(_))));
        store
            .insert_tasks(&[task(job.id, NOW, None)], NOW)
            .await
            .unwrap();
        assert!(matches!(
            store
                .claim_due(a, NOW, NOW + 5_000, NOW + 5_000, 100, &mut no_jobs)
                .await,
            Err(Error::Fenced)
        ));
        // A restarted (a new epoch) is a member again.
        let a2 = store
            .start_node("a", "http://a", NOW + 6_000)
            .await
            .unwrap();
        assert!(store.heartbeat_node(a2, NOW + 6_500).await.unwrap());
        assert_eq!(
            store
                .claim_due(a2, NOW, NOW + 5_000, NOW + 5_000, 100, &mut no_jobs)
                .await
                .unwrap()
                .tasks
                .len(),
            1
        );
    }
);

contract!(
    key_value_state_and_secrets_round_trip_per_job_and_app,
    |store: Store| async move {
        let a = store.insert_job(&spec("a"), None, NOW).await.unwrap();
        let b = store.insert_job(&spec("b"), None, NOW).await.unwrap();
        assert_eq!(store.kv_get(a.id, "k").await.unwrap(), None);
        store.kv_set(a.id, "k", b"one", NOW).await.unwrap();
        store.kv_set(a.id, "k", b"two", NOW + 1).await.unwrap();
        store.kv_set(b.id, "k", &[0, 255, 7], NOW).await.unwrap();
        let big = vec![b'x'; 64 * 1024];
        store.kv_set(a.id, "big", &big, NOW).await.unwrap();
        assert_eq!(
            store.kv_get(a.id, "k").await.unwrap().as_deref(),
            Some(&b"two"[..])
        );
        assert_eq!(
            store.kv_get(b.id, "k").await.unwrap().as_deref(),
            Some(&[0, 255, 7][..]),
            "per job, bytes as they are"
        );
        assert_eq!(store.kv_get(a.id, "big").await.unwrap(), Some(big));
        assert!(store.kv_delete(a.id, "k").await.unwrap());
        assert!(!store.kv_delete(a.id, "k").await.unwrap());
        // A deleted job's state goes with it.
        store.delete_job(b.id, true, NOW).await.unwrap();
        assert_eq!(store.kv_get(b.id, "k").await.unwrap(), None);

        store
            .set_secret("shop", "TOKEN", b"sealed-1", NOW)
            .await
            .unwrap();
        store
            .set_secret("shop", "TOKEN", b"sealed-2", NOW + 5)
            .await
            .unwrap();
        store
            .set_secret("other", "TOKEN", b"sealed-3", NOW)
            .await
            .unwrap();
        assert_eq!(
            store.secret("shop", "TOKEN").await.unwrap().as_deref(),
            Some(&b"sealed-2"[..])
        );
        assert_eq!(
            store.list_secrets("shop").await.unwrap(),
            [SecretMeta {
                name: "TOKEN".to_owned(),
                created_at: NOW,
                updated_at: NOW + 5
            }]
        );
        assert!(store.delete_secret("shop", "TOKEN").await.unwrap());
        assert_eq!(store.secret("shop", "TOKEN").await.unwrap(), None);
        assert_eq!(
            store.secret("other", "TOKEN").await.unwrap().as_deref(),
            Some(&b"sealed-3"[..]),
            "per app"
        );
        assert!(!store.delete_secret("nope", "TOKEN").await.unwrap());
    }
);

contract!(
    run_statuses_only_move_forward_whatever_order_reports_arrive_in,
    |store: Store| async move {
        use rand::seq::SliceRandom;
        let lease = lease(&store).await;
        let job = store.insert_job(&spec("orders"), None, NOW).await.unwrap();
        let tasks: Vec<NewTask> = (0..200).map(|i| task(job.id, NOW + i, None)).collect();
        store.insert_tasks(&tasks, NOW).await.unwrap();
        let claimed = store
            .claim_due(lease, NOW, NOW + 5_000, NOW + 5_000, 1_000, &mut no_jobs)
            .await
            .unwrap()
            .tasks;
        assert_eq!(claimed.len(), 200);
        let first_run = store.allocate_ids("run", 400).await.unwrap();
        // Each run's `running` and final reports, each twice, all at once and in a random
        // order — as an executor's batches in flight side by side, or resent, reach the
        // scheduler — mostly before the dispatch record exists; then the dispatch records
        // (late, twice).
        for chunk in claimed.chunks(20).enumerate().collect::<Vec<_>>() {
            let (n, tasks) = chunk;
            let mut reports = Vec::new();
            for (i, t) in tasks.iter().enumerate() {
                let run = first_run + (n * 20 + i) as i64;
                for status in [RunStatus::Running, RunStatus::Succeeded] {
                    reports.push(report(t, run, status));
                    reports.push(report(t, run, status));
                }
            }
            reports.shuffle(&mut rand::rng());
            let applying = reports.into_iter().map(|u| {
                let store = store.clone();
                async move {
                    store
                        .apply_run_updates(&[u], NOW, &mut policy)
                        .await
                        .unwrap()
                }
            });
            futures_util::future::join_all(applying).await;
        }
        // The same attempts reported again under other run ids (a trigger delivered
        // twice, numbered twice): they add no run and move none back.
        let again: Vec<RunUpdate> = claimed
            .iter()
            .enumerate()
            .map(|(i, t)| report(t, first_run + 200 + i as i64, RunStatus::Running))
            .collect();
        for u in again.chunks(50) {
            store.apply_run_updates(u, NOW, &mut policy).await.unwrap();
        }
        let mut records: Vec<Dispatched> = claimed
            .iter()
            .enumerate()
            .flat_map(|(i, t)| {
                [
                    dispatched(t, first_run + i as i64),
                    dispatched(t, first_run + i as i64),
                ]
            })
            .collect();
        records.shuffle(&mut rand::rng());
        for chunk in records.chunks(50) {
            store.record_dispatches(lease, chunk, NOW).await.unwrap();
        }
        for (i, t) in claimed.iter().enumerate() {
            let run = store.get_run(first_run + i as i64).await.unwrap();
            assert_eq!(run.status, RunStatus::Succeeded, "run {}", run.id);
            assert!(run.finished_at.is_some() && run.dispatched_at.is_some());
            let task = store.get_task(t.task_id).await.unwrap();
            assert_eq!(task.status, TaskStatus::Succeeded, "task {}", task.id);
        }
    }
);

contract!(
    a_replan_voids_the_old_fires_and_plans_the_same_times_anew,
    |store: Store| async move {
        let lease = lease(&store).await;
        let mut s = spec("tick");
        s.schedule = Schedule::FixedRate { every_ms: 1_000 };
        let job = store.insert_job(&s, Some(NOW + 1_000), NOW).await.unwrap();
        let mut plan = |j: &DueJob| JobFires {
            fires: (1..=5).map(|i| j.next_fire_at + (i - 1) * 1_000).collect(),
            next_fire_at: Some(j.next_fire_at + 5_000),
        };
        let old = store
            .claim_due(lease, NOW, NOW + 5_000, NOW + 5_000, 100, &mut plan)
            .await
            .unwrap()
            .tasks;
        assert_eq!(old.len(), 5);
        assert!(old.iter().all(|t| t.generation == job.generation));
        // Disabled: the claimed fires are gone from the database.
        let mut off = s.clone();
        off.enabled = false;
        let job = store
            .update_job(job.id, &off, None, true, NOW)
            .await
            .unwrap();
        let left = store
            .list_tasks(&TaskFilter {
                job_id: Some(job.id),
                limit: 100,
                ..TaskFilter::default()
            })
            .await
            .unwrap();
        assert!(left.items.is_empty(), "{:?}", left.items);
        // Enabled again at the same instant: the same fire times are planned again, under
        // the new generation (the old keys do not block them).
        let job = store
            .update_job(job.id, &s, Some(NOW + 1_000), true, NOW)
            .await
            .unwrap();
        let new = store
            .claim_due(lease, NOW, NOW + 5_000, NOW + 5_000, 100, &mut plan)
            .await
            .unwrap()
            .tasks;
        assert_eq!(
            new.iter().map(|t| t.due_at).collect::<Vec<_>>(),
            old.iter().map(|t| t.due_at).collect::<Vec<_>>()
        );
        assert!(
            new.iter()
                .all(|t| t.generation == job.generation && t.generation == 2)
        );
        // A change that does not re-plan (params) keeps the fires and the generation.
        let mut params = s.clone();
        params.params = Some("--slow".into());
        let same = store
            .update_job(job.id, &params, Some(NOW + 6_000), false, NOW)
            .await
            .unwrap();
        assert_eq!(same.generation, 2);
        let kept = store
            .list_tasks(&TaskFilter {
                job_id: Some(job.id),
                limit: 100,
                ..TaskFilter::default()
            })
            .await
            .unwrap();
        assert_eq!(kept.items.len(), 5);
    }
);

contract!(
    fires_without_an_executor_wait_then_go_out_or_expire,
    |store: Store| async move {
        let lease = lease(&store).await;
        let mut s = spec("close-order");
        s.no_executor_timeout_ms = Some(60_000);
        let job = store.insert_job(&s, None, NOW).await.unwrap();
        let ids = store
            .insert_tasks(&[task(job.id, NOW, None), task(job.id, NOW, None)], NOW)
            .await
            .unwrap();
        let claimed = store
            .claim_due(lease, NOW, NOW + 5_000, NOW + 5_000, 100, &mut no_jobs)
            .await
            .unwrap()
            .tasks;
        assert_eq!(claimed.len(), 2);
        // Both found no executor: one since now, one since a minute and a bit ago.
        store
            .park_waiting(lease, &[(ids[0].0, NOW), (ids[1].0, NOW - 61_000)])
            .await
            .unwrap();
        let t = store.get_task(ids[0].0).await.unwrap();
        assert_eq!((t.status, t.attempt), (TaskStatus::Waiting, 1));
        assert_eq!(
            store.cancel_task(ids[0].0, NOW).await.unwrap().0.status,
            TaskStatus::Cancelled
        );
        // A waiting fire is not claimed by the scan…
        let none = store
            .claim_due(lease, NOW, NOW + 5_000, NOW + 5_000, 100, &mut no_jobs)
            .await
            .unwrap();
        assert!(none.tasks.is_empty());
        // …expires past its job's timeout (claimed, for the caller to fail it)…
        let expired = store.claim_expired_waiting(lease, NOW, 10).await.unwrap();
        assert_eq!(expired.len(), 1);
        assert_eq!(expired[0].0.task_id, ids[1].0);
        assert_eq!(
            (expired[0].1.as_str(), expired[0].2),
            ("default", NOW - 61_000)
        );
        // …or goes out once the app has an executor.
        store.release_claims(lease, &[ids[1].0]).await.unwrap();
        store
            .claim_due(lease, NOW, NOW + 5_000, NOW + 5_000, 100, &mut no_jobs)
            .await
            .unwrap();
        store.park_waiting(lease, &[(ids[1].0, NOW)]).await.unwrap();
        assert_eq!(store.wake_waiting(&["other".into()]).await.unwrap(), 0);
        assert_eq!(store.wake_waiting(&["default".into()]).await.unwrap(), 1);
        let again = store
            .claim_due(lease, NOW, NOW + 5_000, NOW + 5_000, 100, &mut no_jobs)
            .await
            .unwrap();
        assert_eq!(again.tasks.len(), 1);
    }
);

/// Several stores connecting at the same moment to one empty database: one migrates,
/// the others wait for it, all come up (sqlx's own lock did not hold on MariaDB:
/// "Duplicate entry '1' for key 'PRIMARY'").
async fn connect_at_once(url: &str) {
    let mut connecting = tokio::task::JoinSet::new();
    for _ in 0..4 {
        let url = url.to_owned();
        connecting.spawn(async move { Store::connect(&url).await });
    }
    while let Some(done) = connecting.join_next().await {
        let store = done
            .unwrap()
            .unwrap_or_else(|e| panic!("a store did not come up: {e}"));
        store.close().await;
    }
}

#[tokio::test]
async fn stores_connecting_at_once_to_an_empty_database_all_come_up_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    connect_at_once(&format!("sqlite:{}", dir.path().join("rota.db").display())).await;
}

#[tokio::test]
async fn stores_connecting_at_once_to_an_empty_database_all_come_up_mysql() {
    let Some(db) = rota_testkit::MysqlDb::create("rota_boot").await else {
        return;
    };
    connect_at_once(&db.url).await;
    db.drop_db().await;
}

contract!(
    pulls_lease_ready_tasks_once_by_priority_then_due,
    |store: Store| async move {
        let lease = lease(&store).await;
        let job = store
            .insert_job(&pull_spec("orders"), None, NOW)
            .await
            .unwrap();
        let ids = ready_tasks(&store, lease, job.id, &[0, 5, 0, 5]).await;
        let first = store
            .lease_ready(job.id, "a", &[100, 101], 30_000, NOW)
            .await
            .unwrap();
        let got: Vec<i64> = first.iter().map(|l| l.task_id).collect();
        assert_eq!(
            got,
            vec![ids[1], ids[3]],
            "priority 5 first, earlier due first"
        );
        assert_eq!(first[0].run_id, 100);
        assert_eq!(first[0].lease_expires_at, NOW + 30_000);
        assert!(first[0].lease.starts_with("100."), "{}", first[0].lease);
        let rest = store
            .lease_ready(job.id, "b", &[102, 103, 104], 30_000, NOW)
            .await
            .unwrap();
        let got: Vec<i64> = rest.iter().map(|l| l.task_id).collect();
        assert_eq!(got, vec![ids[0], ids[2]]);
        assert!(
            store
                .lease_ready(job.id, "c", &[105], 30_000, NOW)
                .await
                .unwrap()
                .is_empty(),
            "each ready task is leased once"
        );
        let task = store.get_task(ids[1]).await.unwrap();
        assert_eq!(task.status, TaskStatus::Running);
        let run = store.get_run(100).await.unwrap();
        assert_eq!(run.executor.as_deref(), Some("pull:a"));
        assert_eq!(run.status, RunStatus::Running);
        assert_eq!((run.task_id, run.attempt), (ids[1], 1));
    }
);

contract!(
    claimed_fires_are_leased_straight_to_waiting_pulls_and_given_back_unspent,
    |store: Store| async move {
        use rota_scheduler::store::{Handover, Leased, lease_token};
        let lease = lease(&store).await;
        let job = store
            .insert_job(&pull_spec("orders"), None, NOW)
            .await
            .unwrap();
        let (ids, fires) = claimed_tasks(
            &store,
            lease,
            &[
                task(job.id, NOW - 30, Some("order-1")),
                task(job.id, NOW - 20, None),
                task(job.id, NOW - 10, None),
            ],
        )
        .await;
        let ninth = task(job.id, NOW, Some("order-9"));
        // Cancelled while in the wheel: it is no longer the node's to hand out.
        store.cancel_task(ids[2], NOW).await.unwrap();
        let leases: Vec<Leased> = fires
            .iter()
            .zip(200..)
            .map(|(t, run_id)| Leased {
                task_id: t.task_id,
                job_id: t.job_id,
                attempt: t.attempt,
                run_id,
                lease: lease_token(run_id),
                payload: t.payload.clone(),
                key: t.key.clone(),
                priority: t.priority,
                due_at: t.due_at,
                lease_expires_at: NOW + 30_000,
                traceparent: None,
            })
            .collect();
        assert_eq!(
            fires[0].key.as_deref(),
            Some("order-1"),
            "a claimed fire carries its key to the consumer"
        );
        let handovers = vec![
            Handover {
                consumer: "a".into(),
                leases: leases[..2].to_vec(),
            },
            Handover {
                consumer: "b".into(),
                leases: leases[2..].to_vec(),
            },
        ];
        let got = store.lease_claimed(lease, &handovers, NOW).await.unwrap();
        let a: Vec<(i64, Option<&str>)> = got[0]
            .leases
            .iter()
            .map(|l| (l.task_id, l.key.as_deref()))
            .collect();
        assert_eq!(a, vec![(ids[0], Some("order-1")), (ids[1], None)]);
        assert!(
            got[1].leases.is_empty(),
            "a cancelled fire was leased: {got:?}"
        );
        let run = store.get_run(200).await.unwrap();
        assert_eq!(run.executor.as_deref(), Some("pull:a"));
        assert_eq!(run.status, RunStatus::Running);
        assert!(
            store.get_run(202).await.is_err(),
            "the cancelled fire got a run"
        );
        let task = store.get_task(ids[0]).await.unwrap();
        assert_eq!(task.status, TaskStatus::Running);
        assert_eq!(
            store.get_task(ids[2]).await.unwrap().status,
            TaskStatus::Cancelled
        );
        // Leased once only: a second hand-over of the same fires leases nothing.
        let again = store.lease_claimed(lease, &handovers, NOW).await.unwrap();
        assert!(again.iter().all(|h| h.leases.is_empty()), "{again:?}");

        // The pull left before it got them: back to ready, unspent, leased again as the
        // same attempt.
        assert_eq!(
            store.release_leases(&got[0].leases, NOW + 5).await.unwrap(),
            2
        );
        assert!(
            store.get_run(200).await.is_err(),
            "a released lease kept its run"
        );
        let task = store.get_task(ids[0]).await.unwrap();
        assert_eq!((task.status, task.attempt), (TaskStatus::Ready, 1));
        let pulled = store
            .lease_ready(job.id, "c", &[300, 301], 30_000, NOW + 10)
            .await
            .unwrap();
        let pulled: Vec<(i64, i32)> = pulled.iter().map(|l| (l.task_id, l.attempt)).collect();
        assert_eq!(pulled, vec![(ids[0], 1), (ids[1], 1)]);
        // A released lease cannot be given back twice, nor end the new one's run.
        assert_eq!(
            store
                .release_leases(&got[0].leases, NOW + 20)
                .await
                .unwrap(),
            0
        );
        assert_eq!(store.get_run(300).await.unwrap().status, RunStatus::Running);

        // Fires all still held are leased as they are, keys and all.
        let (more, fires) = claimed_tasks(&store, lease, &[ninth]).await;
        let handover = Handover {
            consumer: "d".into(),
            leases: vec![Leased {
                task_id: fires[0].task_id,
                run_id: 400,
                lease: lease_token(400),
                key: fires[0].key.clone(),
                ..leases[0].clone()
            }],
        };
        let got = store
            .lease_claimed(lease, &[handover], NOW + 30)
            .await
            .unwrap();
        let leased: Vec<(i64, Option<&str>)> = got[0]
            .leases
            .iter()
            .map(|l| (l.task_id, l.key.as_deref()))
            .collect();
        assert_eq!(leased, vec![(more[0], Some("order-9"))]);
        assert_eq!(
            store.get_run(400).await.unwrap().executor.as_deref(),
            Some("pull:d")
        );
        assert_eq!(
            store.get_task(more[0]).await.unwrap().status,
            TaskStatus::Running
        );
    }
);

/// A pull job `orders` with three ready tasks, leased by consumer `a` (one, run 100) and
/// consumer `b` (two, runs 101 and 102).
async fn three_leases(
    store: &Store,
) -> (
    Job,
    rota_scheduler::store::Leased,
    rota_scheduler::store::Leased,
    rota_scheduler::store::Leased,
) {
    let lease = lease(store).await;
    let job = store
        .insert_job(&pull_spec("orders"), None, NOW)
        .await
        .unwrap();
    ready_tasks(store, lease, job.id, &[0, 0, 0]).await;
    let mut a = store
        .lease_ready(job.id, "a", &[100], 30_000, NOW)
        .await
        .unwrap();
    let mut b = store
        .lease_ready(job.id, "b", &[101, 102], 30_000, NOW)
        .await
        .unwrap();
    let b2 = b.pop().unwrap();
    (job, a.remove(0), b.remove(0), b2)
}

contract!(a_lease_opens_its_own_task_only, |store: Store| async move {
    use rota_scheduler::store::Leased;
    let (_, a, b, b2) = three_leases(&store).await;
    let (a, b, b2) = (&a, &b, &b2);
    let secret = |l: &Leased| l.lease.split_once('.').unwrap().1.to_owned();
    let held = store
        .held_leases(&[b.task_id])
        .await
        .unwrap()
        .pop()
        .unwrap();
    assert!(held.is(&b.lease));
    let forged = format!("{}.{}", b.run_id, secret(a));
    assert!(!held.is(&forged), "a's lease opens none of b's tasks");
    assert!(!held.is(&a.lease));
    assert!(
        !held.is(&b2.lease),
        "a lease names its own attempt's run: b's other lease is not this task's"
    );
    let other_secret = format!("{}.{}", b.run_id, secret(b2));
    assert!(
        !held.is(&other_secret),
        "each task has its own secret: another task's, under this run id, is not this lease"
    );
    assert!(
        !store
            .extend_lease(b.task_id, &forged, NOW + 60_000, NOW)
            .await
            .unwrap()
    );
    assert!(
        !store
            .extend_lease(b.task_id, &b2.lease, NOW + 60_000, NOW)
            .await
            .unwrap()
    );
    assert!(
        store
            .extend_lease(b.task_id, &b.lease, NOW + 60_000, NOW)
            .await
            .unwrap()
    );
});

contract!(
    an_ack_or_a_nack_ends_a_live_lease_only,
    |store: Store| async move {
        use rota_scheduler::store::LeaseEnding;
        let (job, a, b, b2) = three_leases(&store).await;
        let (a, b, b2) = (&a, &b, &b2);
        let other = store
            .insert_job(&pull_spec("refunds"), None, NOW)
            .await
            .unwrap();
        let ending =
            |task_id: i64, lease: &str, status: RunStatus, message: Option<&str>| LeaseEnding {
                task_id,
                lease: lease.to_owned(),
                status,
                message: message.map(str::to_owned),
                output: None,
            };
        // Success succeeds, a failure is retried, a loss is the end.
        let mut decide = |e: &AttemptEnded| match e.status {
            RunStatus::Succeeded => TaskNext::Succeeded,
            RunStatus::Failed => TaskNext::Retry {
                due_at: NOW + 1_000,
                lost: false,
            },
            _ => TaskNext::Dead,
        };
        let end = |job_id: i64, endings: Vec<LeaseEnding>| {
            let store = store.clone();
            async move {
                store
                    .end_leases(
                        Some(job_id),
                        &endings,
                        NOW + 5,
                        Completing {
                            decide: &mut decide,
                            raise: &|_, _, _| Vec::new(),
                            claim: None,
                            rules: &HashMap::new(),
                        },
                    )
                    .await
                    .unwrap()
            }
        };
        // Another job's leases are not found through this job.
        let elsewhere = end(
            other.id,
            vec![ending(b.task_id, &b.lease, RunStatus::Succeeded, None)],
        )
        .await;
        assert!(elsewhere.found.is_empty() && elsewhere.ended.is_empty());
        let ended = end(
            job.id,
            vec![
                ending(a.task_id, &a.lease, RunStatus::Succeeded, None),
                ending(b.task_id, &a.lease, RunStatus::Succeeded, None),
                ending(b2.task_id, &b2.lease, RunStatus::Failed, Some("no stock")),
                ending(424_242, &b.lease, RunStatus::Succeeded, None),
            ],
        )
        .await;
        let want: std::collections::HashSet<(i64, String)> =
            [(a.task_id, a.lease.clone()), (b2.task_id, b2.lease.clone())].into();
        assert_eq!(ended.ended, want, "a's lease does not end b's attempt");
        assert_eq!(
            ended.found,
            [a.task_id, b.task_id, b2.task_id].into(),
            "a task that does not exist is not found"
        );
        let run = store.get_run(a.run_id).await.unwrap();
        assert_eq!(
            (run.status, run.finished_at),
            (RunStatus::Succeeded, Some(NOW + 5))
        );
        assert_eq!(run.executor.as_deref(), Some("pull:a"));
        assert_eq!(
            store.get_task(a.task_id).await.unwrap().status,
            TaskStatus::Succeeded
        );
        let run = store.get_run(b2.run_id).await.unwrap();
        assert_eq!(run.status, RunStatus::Failed);
        assert_eq!(run.message.as_deref(), Some("no stock"));
        let retried = store.get_task(b2.task_id).await.unwrap();
        assert_eq!(
            (retried.status, retried.attempt),
            (TaskStatus::Pending, 2),
            "a nack with attempts left is retried"
        );
        assert_eq!(
            store.get_task(b.task_id).await.unwrap().status,
            TaskStatus::Running
        );
        assert_eq!(
            store.get_run(b.run_id).await.unwrap().status,
            RunStatus::Running
        );
        // The same ack again: the lease ended with its attempt, so it ends nothing.
        // So does a nacked attempt's lease once the task is at its next attempt.
        let again = end(
            job.id,
            vec![
                ending(a.task_id, &a.lease, RunStatus::Failed, None),
                ending(b2.task_id, &b2.lease, RunStatus::Succeeded, None),
            ],
        )
        .await;
        assert!(again.ended.is_empty() && again.applied.tasks.is_empty());
        assert_eq!(again.found, [a.task_id, b2.task_id].into());
        assert_eq!(
            store.get_run(a.run_id).await.unwrap().status,
            RunStatus::Succeeded
        );
        assert_eq!(
            store.get_task(b2.task_id).await.unwrap().status,
            TaskStatus::Pending
        );
        // A lease the expiry took (its run not yet ended as lost) ends nothing either, and
        // the loss then ends the attempt.
        let expired = store.expire_leases(NOW + 30_000, 10).await.unwrap();
        assert_eq!(
            expired.iter().map(|h| h.task_id).collect::<Vec<_>>(),
            vec![b.task_id]
        );
        let late = end(
            job.id,
            vec![ending(b.task_id, &b.lease, RunStatus::Succeeded, None)],
        )
        .await;
        assert!(late.ended.is_empty() && late.found.contains(&b.task_id));
        assert_eq!(
            store.get_run(b.run_id).await.unwrap().status,
            RunStatus::Running
        );
        let lost = expired[0].ending(RunStatus::Lost, NOW + 30_001, None);
        store
            .apply_run_updates(&[lost], NOW + 30_001, &mut |_| TaskNext::Dead)
            .await
            .unwrap();
        assert_eq!(
            store.get_run(b.run_id).await.unwrap().status,
            RunStatus::Lost
        );
        assert_eq!(
            store.get_task(b.task_id).await.unwrap().status,
            TaskStatus::Dead
        );
    }
);

/// MySQL reads a pull's candidates without locks and then locks them by key, skipping
/// those another transaction holds: a pull takes the next untaken tasks in order, and
/// finds the rest of the queue when every candidate it read is held.
#[tokio::test]
async fn a_pull_passes_over_tasks_another_transaction_holds_mysql() {
    use sqlx::Connection;

    let Some(db) = TestDb::mysql().await else {
        return;
    };
    let store = &db.store;
    let lease = lease(store).await;
    let job = store
        .insert_job(&pull_spec("orders"), None, NOW)
        .await
        .unwrap();
    let ids = ready_tasks(store, lease, job.id, &[0; 10]).await;
    let url = &db.mysql.as_ref().unwrap().url;
    let mut other = sqlx::MySqlConnection::connect(url).await.unwrap();
    let mut holding = other.begin().await.unwrap();
    // One row at a time: a scan would lock every row it passed (repeatable read).
    for &id in &ids[..4] {
        sqlx::query("SELECT id FROM tasks WHERE id = ? FOR UPDATE")
            .bind(id)
            .fetch_one(&mut *holding)
            .await
            .unwrap();
    }
    let task_ids = |leased: Vec<rota_scheduler::store::Leased>| -> Vec<i64> {
        leased.iter().map(|l| l.task_id).collect()
    };

    // One wanted: its candidates are the first four, all held; the locking scan finds
    // the fifth.
    let got = store.lease_ready(job.id, "a", &[100], 30_000, NOW).await;
    assert_eq!(task_ids(got.unwrap()), vec![ids[4]]);
    // Two wanted: eight candidates, the first four held (the fifth is leased now).
    let got = store
        .lease_ready(job.id, "b", &[101, 102], 30_000, NOW)
        .await;
    assert_eq!(task_ids(got.unwrap()), vec![ids[5], ids[6]]);

    // Released, the held ones come first again, in order, then the rest.
    holding.rollback().await.unwrap();
    let got = store
        .lease_ready(job.id, "c", &[103, 104, 105, 106, 107, 108], 30_000, NOW)
        .await;
    assert_eq!(
        task_ids(got.unwrap()),
        vec![ids[0], ids[1], ids[2], ids[3], ids[7], ids[8]]
    );
    db.drop_db().await;
}

contract!(
    a_lease_ends_once_by_its_ack_or_its_expiry,
    |store: Store| async move {
        let lease = lease(&store).await;
        let job = store
            .insert_job(&pull_spec("orders"), None, NOW)
            .await
            .unwrap();
        let ids = ready_tasks(&store, lease, job.id, &[0, 0]).await;
        let leased = store
            .lease_ready(job.id, "a", &[200, 201], 1_000, NOW)
            .await
            .unwrap();
        let (acked, expiring) = (&leased[0], &leased[1]);

        // An ack: the holder's token ends the attempt once.
        let held = store.held_leases(&[acked.task_id]).await.unwrap();
        assert!(held[0].is(&acked.lease));
        assert!(!held[0].is(&expiring.lease), "another task's token");
        let ack = held[0].ending(RunStatus::Succeeded, NOW + 10, None);
        let applied = store
            .apply_run_updates(std::slice::from_ref(&ack), NOW + 10, &mut policy)
            .await
            .unwrap();
        assert_eq!(applied.tasks, vec![(acked.task_id, TaskNext::Succeeded)]);
        let again = store
            .apply_run_updates(&[ack], NOW + 20, &mut policy)
            .await
            .unwrap();
        assert!(again.tasks.is_empty(), "a second ack ends nothing");
        assert_eq!(
            store.get_task(acked.task_id).await.unwrap().status,
            TaskStatus::Succeeded
        );

        // An extension moves the end; a wrong token or a past end changes nothing.
        assert!(
            !store
                .extend_lease(expiring.task_id, "200.0", NOW + 5_000, NOW)
                .await
                .unwrap()
        );
        assert!(
            store
                .extend_lease(expiring.task_id, &expiring.lease, NOW + 2_000, NOW + 500)
                .await
                .unwrap()
        );
        assert!(
            store
                .expire_leases(NOW + 1_500, 100)
                .await
                .unwrap()
                .is_empty(),
            "extended past 1.5 s"
        );
        // Expired: its token is taken, so the holder can neither ack nor extend it.
        let expired = store.expire_leases(NOW + 2_000, 100).await.unwrap();
        assert_eq!(expired.len(), 1);
        assert_eq!(expired[0].task_id, expiring.task_id);
        let held = store.held_leases(&[expiring.task_id]).await.unwrap();
        assert!(!held[0].is(&expiring.lease), "an expired lease is not held");
        assert!(
            !store
                .extend_lease(expiring.task_id, &expiring.lease, NOW + 9_000, NOW + 2_001)
                .await
                .unwrap()
        );
        let lost = expired[0].ending(RunStatus::Lost, NOW + 2_001, Some("expired".into()));
        let applied = store
            .apply_run_updates(&[lost], NOW + 2_001, &mut policy)
            .await
            .unwrap();
        assert!(matches!(
            applied.tasks[..],
            [(id, TaskNext::Retry { lost: true, .. })] if id == expiring.task_id
        ));
        let task = store.get_task(expiring.task_id).await.unwrap();
        assert_eq!((task.status, task.attempt), (TaskStatus::Pending, 2));
        assert!(
            store
                .expire_leases(NOW + 60_000, 100)
                .await
                .unwrap()
                .is_empty(),
            "a retried task holds no lease"
        );
        assert_eq!(store.get_run(201).await.unwrap().status, RunStatus::Lost);
        let _ = ids;
    }
);

contract!(
    dead_tasks_are_re_driven_and_pending_ones_moved,
    |store: Store| async move {
        let lease = lease(&store).await;
        let mut one_attempt = pull_spec("orders");
        one_attempt.max_attempts = 1;
        let job = store.insert_job(&one_attempt, None, NOW).await.unwrap();
        let ids = ready_tasks(&store, lease, job.id, &[0, 0]).await;
        let leased = store
            .lease_ready(job.id, "a", &[300, 301], 30_000, NOW)
            .await
            .unwrap();
        let held = store.held_leases(&ids).await.unwrap();
        let failed: Vec<RunUpdate> = held
            .iter()
            .map(|h| h.ending(RunStatus::Failed, NOW + 10, None))
            .collect();
        store
            .apply_run_updates(&failed, NOW + 10, &mut policy)
            .await
            .unwrap();
        assert_eq!(leased.len(), 2);
        for id in &ids {
            assert_eq!(store.get_task(*id).await.unwrap().status, TaskStatus::Dead);
        }
        let task = store
            .redrive_task(ids[0], NOW + 20, NOW + 20)
            .await
            .unwrap();
        assert_eq!(
            (task.status, task.attempt, task.due_at),
            (TaskStatus::Pending, 2, NOW + 20)
        );
        assert!(matches!(
            store.redrive_task(ids[0], NOW + 20, NOW + 20).await,
            Err(Error::Conflict(m)) if m.contains("only a dead task")
        ));
        assert_eq!(
            store
                .redrive_dead(job.id, 10, NOW + 30, NOW + 30)
                .await
                .unwrap(),
            1
        );
        assert_eq!(
            store
                .redrive_dead(job.id, 10, NOW + 30, NOW + 30)
                .await
                .unwrap(),
            0
        );

        // A pending task moves; a claimed one (in a wheel) does not.
        assert!(
            store
                .reschedule_task(
                    ids[0],
                    NOW + 3_600_000,
                    Some(9),
                    Some(Some("new")),
                    NOW + 40
                )
                .await
                .unwrap()
        );
        let task = store.get_task(ids[0]).await.unwrap();
        assert_eq!((task.due_at, task.priority), (NOW + 3_600_000, 9));
        assert_eq!(task.payload.as_deref(), Some("new"));
        store
            .claim_due(lease, NOW + 40, NOW + 5_000, NOW + 5_000, 100, &mut no_jobs)
            .await
            .unwrap();
        assert_eq!(
            store.get_task(ids[1]).await.unwrap().status,
            TaskStatus::Claimed
        );
        assert!(
            !store
                .reschedule_task(ids[1], NOW + 60_000, None, None, NOW + 50)
                .await
                .unwrap()
        );
    }
);

contract!(
    alarm_events_fold_into_an_alarm_whose_send_one_claimer_takes,
    |store: Store| async move {
        use rota_scheduler::store::{AlarmChannelRow, AlarmEvent, AlarmRuleRow, Folded};
        store
            .create_alarm_channel(&AlarmChannelRow {
                name: "ops".into(),
                app: Some("shop".into()),
                kind: "webhook".into(),
                url_sealed: Some(vec![1, 2, 3]),
                url_hint: Some("http://x/…".into()),
                recipients: None,
                secret: None,
                created_at: NOW,
            })
            .await
            .unwrap();
        let rule_id = store
            .create_alarm_rule(&AlarmRuleRow {
                id: 0,
                name: "dead".into(),
                app: "shop".into(),
                job_id: None,
                on_event: "task_dead".into(),
                threshold: None,
                channels: "[\"ops\"]".into(),
                throttle_ms: 60_000,
                enabled: true,
                open_since: None,
                last_sent_at: None,
                created_at: NOW,
                updated_at: NOW,
            })
            .await
            .unwrap();
        let event = |task: i64| AlarmEvent {
            id: 0,
            rule_id,
            resolved: false,
            count: 1,
            job_id: Some(1),
            task_id: Some(task),
            run_id: Some(100 + task),
            attempt: Some(3),
            message: format!("task {task} is dead"),
            at: NOW,
        };
        store
            .raise_alarm_events(&[event(1), event(2)])
            .await
            .unwrap();
        store
            .raise_alarm_events(&[AlarmEvent {
                count: 3,
                ..event(4)
            }])
            .await
            .unwrap();
        let waiting = store.waiting_alarm_events().await.unwrap();
        assert_eq!(waiting.len(), 1);
        assert_eq!(
            (
                waiting[0].rule_id,
                waiting[0].first_at,
                waiting[0].last_at,
                waiting[0].last_resolved
            ),
            (rule_id, NOW, NOW, false)
        );

        // A fold that waits consumes nothing; one that folds makes one alarm with a send.
        let waited = store
            .fold_alarm_events(rule_id, NOW, &|_, _| Folded::default())
            .await
            .unwrap();
        assert!(waited.is_empty());
        let made = store
            .fold_alarm_events(rule_id, NOW + 1_000, &|rule, pending| {
                // Two rows, one standing for three events: five, told by the last.
                let p = pending.problems.as_ref().expect("problems");
                assert_eq!((p.count, p.first_at, p.last.task_id), (5, NOW, Some(4)));
                assert_eq!(pending.resolve, None);
                Folded {
                    alarms: vec![rota_scheduler::store::AlarmRow {
                        id: 0,
                        rule_id: rule.id,
                        rule: rule.name.clone(),
                        on_event: rule.on_event.clone(),
                        app: rule.app.clone(),
                        job_id: p.last.job_id,
                        task_id: p.last.task_id,
                        run_id: p.last.run_id,
                        attempt: p.last.attempt,
                        message: p.last.message.clone(),
                        count: p.count as i32,
                        resolved: false,
                        first_at: p.first_at,
                        last_at: p.last.at,
                        created_at: 0,
                    }],
                    consumed: true,
                    open_since: None,
                    last_sent_at: Some(NOW + 1_000),
                }
            })
            .await
            .unwrap();
        assert_eq!(made.len(), 1);
        assert_eq!(made[0].count, 5);
        assert!(store.waiting_alarm_events().await.unwrap().is_empty());
        let rule = store.alarm_rule("dead").await.unwrap().unwrap();
        assert_eq!(rule.last_sent_at, Some(NOW + 1_000));

        // One claimer takes the send; the other finds nothing until the claim ends.
        let t = NOW + 2_000;
        let (a, b) = tokio::join!(
            store.claim_alarm_deliveries(t, t + 30_000, 10),
            store.claim_alarm_deliveries(t, t + 30_000, 10),
        );
        let (a, b) = (a.unwrap(), b.unwrap());
        assert_eq!(a.len() + b.len(), 1, "{a:?} {b:?}");
        let alarm_id = made[0].id;
        store
            .finish_alarm_delivery(alarm_id, "ops", Err(("refused".into(), Some(t + 5_000))))
            .await
            .unwrap();
        assert!(
            store
                .claim_alarm_deliveries(t + 4_999, t + 60_000, 10)
                .await
                .unwrap()
                .is_empty()
        );
        let again = store
            .claim_alarm_deliveries(t + 5_000, t + 60_000, 10)
            .await
            .unwrap();
        assert_eq!(again.len(), 1);
        assert_eq!(again[0].attempts, 1);
        store
            .finish_alarm_delivery(alarm_id, "ops", Ok(t + 5_001))
            .await
            .unwrap();
        let history = store
            .alarm_history(None, Some(&["shop".into()]), None, 10)
            .await
            .unwrap();
        assert_eq!(history.len(), 1);
        let (alarm, sends) = &history[0];
        assert_eq!((alarm.count, alarm.task_id), (5, Some(4)));
        assert_eq!(sends[0].status, "sent");
        assert_eq!(sends[0].attempts, 2);
        assert_eq!(sends[0].last_error.as_deref(), Some("refused"));
        assert!(
            store
                .alarm_history(None, Some(&["other".into()]), None, 10)
                .await
                .unwrap()
                .is_empty()
        );
        // Deleting the rule drops what it had not folded.
        store.raise_alarm_events(&[event(3)]).await.unwrap();
        assert!(store.delete_alarm_rule("dead").await.unwrap());
        assert!(store.waiting_alarm_events().await.unwrap().is_empty());
    }
);

contract!(
    a_backfill_creates_each_fire_once_and_meets_the_scans_own_fires,
    |store: Store| async move {
        let mut every = spec("every-second");
        every.schedule = Schedule::FixedRate { every_ms: 1_000 };
        let job = store.insert_job(&every, Some(NOW), NOW).await.unwrap();
        let times: Vec<Millis> = (0..5).map(|i| NOW - 5_000 + i * 1_000).collect();
        let created = store
            .backfill_fires(job.id, job.generation, &times, NOW)
            .await
            .unwrap();
        assert_eq!(created, 5);
        assert_eq!(
            store
                .backfill_fires(job.id, job.generation, &times, NOW)
                .await
                .unwrap(),
            0,
            "once per fire time"
        );
        // The scan's own fires of the same times are the same tasks.
        let lease = lease(&store).await;
        let mut plan = |_: &DueJob| JobFires {
            fires: vec![NOW - 1_000, NOW],
            next_fire_at: Some(NOW + 1_000),
        };
        let claimed = store
            .claim_due(lease, NOW, NOW + 5_000, NOW + 5_000, 100, &mut plan)
            .await
            .unwrap();
        assert_eq!(claimed.tasks.len(), 6, "five backfilled and one new fire");
        assert_eq!(
            store
                .backfill_fires(job.id, job.generation, &[NOW], NOW)
                .await
                .unwrap(),
            0
        );
    }
);
