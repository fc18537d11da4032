//! The store's half of workflows (SPEC §10), on SQLite and MySQL: instances started with
//! their roots' tasks, step endings applied in the report's transaction that create what
//! they make ready — data passed along, every `when`, skips, maps in order — a join
//! decided once when its predecessors end at the same moment through two connections, an
//! idempotent start, a new version while instances run on the old, retries of failed
//! instances, and scheduled fires with each overlap policy.

use std::collections::HashMap;

use serde_json::{Value, json};

use crate::store_contract::{NOW, TestDb, dispatched, lease, lease_of, no_jobs, report, spec};
use rota_scheduler::model::*;
use rota_scheduler::schedule::Schedule;
use rota_scheduler::store::{Applied, Completing, Instance, Scheduled, Store, Timing, Workflow};
use rota_scheduler::workflow::{InstanceStatus, Overlap, StepSpec, StepStatus};

/// A step of job `job` after `after`.
fn step(name: &str, job: i64, after: &[&str]) -> StepSpec {
    StepSpec {
        name: name.into(),
        job_id: job,
        after: after.iter().map(|s| s.to_string()).collect(),
        when: None,
        map: false,
        params: None,
    }
}

/// A job per name, in app `default`; their ids by name.
async fn jobs(store: &Store, names: &[&str]) -> HashMap<String, i64> {
    let mut out = HashMap::new();
    for name in names {
        let job = store.insert_job(&spec(name), None, NOW).await.unwrap();
        out.insert(name.to_string(), job.id);
    }
    out
}

async fn workflow(store: &Store, name: &str, steps: &[StepSpec]) -> Workflow {
    let app = store.ensure_app("default", NOW).await.unwrap();
    store
        .create_workflow(name, app, steps, true, &Scheduled::default(), NOW)
        .await
        .unwrap()
}

/// Jobs `root`, `left`, `right`, `join` and workflow `name`: root → (left, right) → join.
async fn diamond(store: &Store, name: &str) -> (HashMap<String, i64>, Workflow) {
    let j = jobs(store, &["root", "left", "right", "join"]).await;
    let wf = workflow(
        store,
        name,
        &[
            step("root", j["root"], &[]),
            step("left", j["left"], &["root"]),
            step("right", j["right"], &["root"]),
            step("join", j["join"], &["left", "right"]),
        ],
    )
    .await;
    (j, wf)
}

/// Jobs `list`, `each`, `sum` and workflow `name`: list → each (a map over list's output)
/// → sum.
async fn mapped(store: &Store, name: &str) -> (HashMap<String, i64>, Workflow) {
    let j = jobs(store, &["list", "each", "sum"]).await;
    let mut each = step("each", j["each"], &["list"]);
    each.map = true;
    let wf = workflow(
        store,
        name,
        &[
            step("list", j["list"], &[]),
            each,
            step("sum", j["sum"], &["each"]),
        ],
    )
    .await;
    (j, wf)
}

/// A new instance of `wf` with `input`, no key; the start's answer (built from what it
/// wrote) is checked against the instance read back.
async fn start(store: &Store, wf: &Workflow, input: Value) -> Instance {
    let started = store
        .start_instance(wf, &input, None, NOW, None, None)
        .await
        .unwrap()
        .instance;
    let read = store.get_instance(started.id).await.unwrap();
    assert_eq!(started, read, "a start answered other than what it wrote");
    started
}

/// What one due step task was given.
struct Fired {
    task: DueTask,
    payload: Value,
}

/// Claims every due task (as the scan would) and records its dispatch.
async fn fire_all(store: &Store, lease: NodeLease) -> Vec<Fired> {
    let claimed = store
        .claim_due(lease, NOW, NOW + 5_000, NOW + 5_000, 20_000, &mut no_jobs)
        .await
        .unwrap();
    let first = store
        .allocate_ids("run", claimed.tasks.len().max(1) as i64)
        .await
        .unwrap();
    let sent: Vec<Dispatched> = claimed
        .tasks
        .iter()
        .enumerate()
        .map(|(i, t)| dispatched(t, first + i as i64))
        .collect();
    store.record_dispatches(lease, &sent, NOW).await.unwrap();
    claimed
        .tasks
        .into_iter()
        .map(|task| Fired {
            payload: serde_json::from_str(task.payload.as_deref().unwrap_or("null")).unwrap(),
            task,
        })
        .collect()
}

/// The run report ending `f`'s attempt with `status` and `output`.
fn ending(f: &Fired, run_id: i64, status: RunStatus, output: Option<Value>) -> RunUpdate {
    RunUpdate {
        output: output.map(|v| match v {
            Value::String(s) => s,
            other => other.to_string(),
        }),
        ..report(&f.task, run_id, status)
    }
}

/// The run id the dispatch of `f` recorded.
async fn run_of(store: &Store, f: &Fired) -> i64 {
    store
        .get_task(f.task.task_id)
        .await
        .unwrap()
        .last_run_id
        .unwrap()
}

/// Ends each fired task as `outcome` says (status and output, from its payload).
async fn end_all(
    store: &Store,
    fired: &[Fired],
    outcome: impl Fn(&Fired) -> (RunStatus, Option<Value>),
) {
    let mut updates = Vec::new();
    for f in fired {
        let (status, output) = outcome(f);
        updates.push(ending(f, run_of(store, f).await, status, output));
    }
    // One attempt each: a failure is final.
    let mut once = |a: &AttemptEnded| match a.status {
        RunStatus::Succeeded => TaskNext::Succeeded,
        _ => TaskNext::Dead,
    };
    store
        .apply_run_updates(&updates, NOW, &mut once)
        .await
        .unwrap();
}

fn step_of<'a>(i: &'a Instance, name: &str) -> &'a rota_scheduler::store::InstanceStep {
    i.steps.iter().find(|s| s.name == name).unwrap()
}

fn statuses(i: &Instance) -> Vec<(String, StepStatus)> {
    i.steps.iter().map(|s| (s.name.clone(), s.status)).collect()
}

/// Which job a fired task belongs to, by name.
fn job_name(jobs: &HashMap<String, i64>, f: &Fired) -> String {
    jobs.iter()
        .find(|(_, id)| **id == f.task.job_id)
        .map(|(n, _)| n.clone())
        .unwrap()
}

contract!(
    a_diamond_passes_data_along_and_joins_once,
    |store: Store| async move {
        let (j, wf) = diamond(&store, "diamond").await;
        let lease = lease(&store).await;
        let started = store
            .start_instance(&wf, &json!({"day": "2026-12-04"}), None, NOW, None, None)
            .await
            .unwrap();
        assert!(started.created);
        assert!(started.claimed.is_empty() && started.unclaimed == 1);
        let inst = started.instance;
        assert_eq!(inst.status, InstanceStatus::Running);
        assert_eq!(step_of(&inst, "root").status, StepStatus::Running);
        assert_eq!(step_of(&inst, "join").status, StepStatus::Pending);

        let fired = fire_all(&store, lease).await;
        assert_eq!(fired.len(), 1, "only the root starts");
        assert_eq!(fired[0].task.kind, TaskKind::Step);
        assert_eq!(
            fired[0].payload,
            json!({"input": {"day": "2026-12-04"}, "steps": {}})
        );
        end_all(&store, &fired, |_| {
            (RunStatus::Succeeded, Some(json!({"orders": [1, 2, 3]})))
        })
        .await;

        let fired = fire_all(&store, lease).await;
        assert_eq!(fired.len(), 2, "both branches start");
        for f in &fired {
            assert_eq!(
                f.payload,
                json!({"input": {"day": "2026-12-04"}, "steps": {"root": {"orders": [1, 2, 3]}}})
            );
        }
        // left ends first, alone: the join waits for right.
        let (a, b): (Vec<Fired>, Vec<Fired>) =
            fired.into_iter().partition(|f| job_name(&j, f) == "left");
        end_all(&store, &a, |_| {
            (RunStatus::Succeeded, Some(json!("text from left")))
        })
        .await;
        assert!(
            fire_all(&store, lease).await.is_empty(),
            "the join waits for right"
        );
        end_all(&store, &b, |_| (RunStatus::Succeeded, Some(json!(6)))).await;

        let fired = fire_all(&store, lease).await;
        assert_eq!(fired.len(), 1, "the join starts once");
        assert_eq!(
            fired[0].payload,
            json!({"input": {"day": "2026-12-04"}, "steps": {"left": "text from left", "right": 6}})
        );
        end_all(&store, &fired, |_| {
            (RunStatus::Succeeded, Some(json!({"total": 6})))
        })
        .await;

        let done = store.get_instance(inst.id).await.unwrap();
        assert_eq!(done.status, InstanceStatus::Succeeded);
        assert_eq!(done.output, Some(json!({"join": {"total": 6}})));
        assert!(done.finished_at.is_some());
        assert!(
            done.steps
                .iter()
                .all(|s| s.status == StepStatus::Succeeded && s.task_id.is_some()),
            "{:?}",
            statuses(&done)
        );
        assert_eq!(step_of(&done, "left").output, Some(json!("text from left")));
    }
);

contract!(
    steps_end_on_a_node_that_did_not_create_them_as_on_the_one_that_did,
    |store: Store| async move {
        let (_, wf) = diamond(&store, "across").await;
        let lease = lease(&store).await;
        // The node that starts the instances knows where their tasks are; the other one
        // has met no step, and reads what it needs in each report's transaction.
        let other = store.as_another_node();
        let first = start(&store, &wf, json!(1)).await;
        let second = start(&store, &wf, json!(2)).await;
        let roots = fire_all(&store, lease).await;
        let ids = |fired: &[Fired]| fired.iter().map(|f| f.task.task_id).collect::<Vec<_>>();
        let mut places: Vec<i64> = store
            .step_instances(&ids(&roots))
            .await
            .unwrap()
            .into_values()
            .collect();
        places.sort_unstable();
        assert_eq!(places, [first.id, second.id]);
        assert!(
            other.step_instances(&ids(&roots)).await.unwrap().is_empty(),
            "a node that met no step has no instance to split a batch by"
        );
        let succeed = |_: &Fired| (RunStatus::Succeeded, Some(json!("ok")));
        end_all(&other, &roots[..1], succeed).await;
        end_all(&store, &roots[1..], succeed).await;

        let branches = fire_all(&store, lease).await;
        assert_eq!(branches.len(), 4, "both instances' branches start");
        // Having ended a step, the other node tells where the rest are too.
        let seen = other.step_instances(&ids(&branches)).await.unwrap();
        assert_eq!(seen, store.step_instances(&ids(&branches)).await.unwrap());
        assert_eq!(seen.len(), 4);
        end_all(&other, &branches, succeed).await;
        let joins = fire_all(&store, lease).await;
        assert_eq!(joins.len(), 2, "each join starts once");
        end_all(&store, &joins, succeed).await;
        for id in [first.id, second.id] {
            let done = store.get_instance(id).await.unwrap();
            assert_eq!(
                done.status,
                InstanceStatus::Succeeded,
                "{:?}",
                statuses(&done)
            );
        }
    }
);

contract!(
    a_failure_runs_the_compensation_skips_the_rest_and_fails_the_instance,
    |store: Store| async move {
        let j = jobs(&store, &["charge", "notify", "refund", "audit"]).await;
        let mut refund = step("refund", j["refund"], &["charge"]);
        refund.when = Some("any_failed".into());
        let mut audit = step("audit", j["audit"], &["notify", "refund"]);
        audit.when = Some("all_done".into());
        let wf = workflow(
            &store,
            "orders",
            &[
                step("charge", j["charge"], &[]),
                step("notify", j["notify"], &["charge"]),
                refund,
                audit,
            ],
        )
        .await;
        let lease = lease(&store).await;
        let inst = start(&store, &wf, json!(null)).await;
        let fired = fire_all(&store, lease).await;
        end_all(&store, &fired, |_| (RunStatus::Failed, None)).await;

        let now = store.get_instance(inst.id).await.unwrap();
        assert_eq!(
            statuses(&now),
            vec![
                ("charge".into(), StepStatus::Failed),
                ("notify".into(), StepStatus::Skipped),
                ("refund".into(), StepStatus::Running),
                ("audit".into(), StepStatus::Pending),
            ]
        );
        let fired = fire_all(&store, lease).await;
        assert_eq!(fired.len(), 1);
        assert_eq!(job_name(&j, &fired[0]), "refund");
        end_all(&store, &fired, |_| {
            (RunStatus::Succeeded, Some(json!("refunded")))
        })
        .await;

        // audit runs after a skip and a success (all_done), with both outputs.
        let fired = fire_all(&store, lease).await;
        assert_eq!(fired.len(), 1);
        assert_eq!(
            fired[0].payload["steps"],
            json!({"notify": null, "refund": "refunded"})
        );
        end_all(&store, &fired, |_| (RunStatus::Succeeded, None)).await;
        let end = store.get_instance(inst.id).await.unwrap();
        assert_eq!(end.status, InstanceStatus::Failed, "{:?}", statuses(&end));
    }
);

contract!(
    a_map_of_a_thousand_runs_each_element_and_the_reduce_gets_them_in_order,
    |store: Store| async move {
        let (_, wf) = mapped(&store, "mapped").await;
        let lease = lease(&store).await;
        let inst = start(&store, &wf, json!({})).await;
        let fired = fire_all(&store, lease).await;
        let items: Vec<i64> = (0..1000).collect();
        end_all(&store, &fired, |_| {
            (RunStatus::Succeeded, Some(json!(items)))
        })
        .await;

        let fired = fire_all(&store, lease).await;
        assert_eq!(fired.len(), 1000);
        let mut seen: Vec<i64> = fired
            .iter()
            .map(|f| {
                assert_eq!(f.payload["item"], f.payload["index"]);
                f.payload["item"].as_i64().unwrap()
            })
            .collect();
        seen.sort_unstable();
        assert_eq!(seen, items);
        let running = store.get_instance(inst.id).await.unwrap();
        assert_eq!(
            step_of(&running, "each")
                .items
                .as_ref()
                .map(|i| (i.total, i.running)),
            Some((1000, 1000))
        );
        // Elements end in two batches, the later half first: the output is still in order.
        let (late, early): (Vec<Fired>, Vec<Fired>) = fired
            .into_iter()
            .partition(|f| f.payload["index"].as_i64().unwrap() >= 500);
        let square = |f: &Fired| {
            let n = f.payload["item"].as_i64().unwrap();
            (RunStatus::Succeeded, Some(json!(n * n)))
        };
        end_all(&store, &late, square).await;
        assert!(fire_all(&store, lease).await.is_empty(), "the reduce waits");
        end_all(&store, &early, square).await;

        let fired = fire_all(&store, lease).await;
        assert_eq!(fired.len(), 1);
        let squares: Vec<i64> = items.iter().map(|n| n * n).collect();
        assert_eq!(fired[0].payload["steps"]["each"], json!(squares));
        end_all(&store, &fired, |_| (RunStatus::Succeeded, None)).await;
        assert_eq!(
            store.get_instance(inst.id).await.unwrap().status,
            InstanceStatus::Succeeded
        );
    }
);

contract!(
    a_map_over_something_else_than_an_array_fails_its_step_saying_why,
    |store: Store| async move {
        let j = jobs(&store, &["list", "each"]).await;
        let mut each = step("each", j["each"], &["list"]);
        each.map = true;
        let wf = workflow(&store, "bad-map", &[step("list", j["list"], &[]), each]).await;
        let lease = lease(&store).await;
        let inst = start(&store, &wf, json!({})).await;
        let fired = fire_all(&store, lease).await;
        end_all(&store, &fired, |_| {
            (RunStatus::Succeeded, Some(json!({"not": "a list"})))
        })
        .await;
        let end = store.get_instance(inst.id).await.unwrap();
        assert_eq!(end.status, InstanceStatus::Failed);
        let each = step_of(&end, "each");
        assert_eq!(each.status, StepStatus::Failed);
        assert!(
            each.message.as_deref().unwrap().contains("it is an object"),
            "{each:?}"
        );
    }
);

contract!(
    a_start_with_a_known_key_returns_that_instance,
    |store: Store| async move {
        let j = jobs(&store, &["only"]).await;
        let wf = workflow(&store, "keyed", &[step("only", j["only"], &[])]).await;
        let first = store
            .start_instance(&wf, &json!(1), Some("order-42"), NOW, None, Some("alice"))
            .await
            .unwrap();
        assert!(first.created);
        let first = first.instance;
        let again = store
            .start_instance(&wf, &json!(2), Some("order-42"), NOW, None, Some("alice"))
            .await
            .unwrap();
        assert!(!again.created && again.claimed.is_empty() && again.unclaimed == 0);
        // The start that created the instance is noted, with it; the one that found it is not.
        let notes: Vec<(String, String, String)> = store
            .list_audit(None, 10)
            .await
            .unwrap()
            .into_iter()
            .map(|a| (a.user_name, a.action, a.target))
            .collect();
        let target = format!("keyed (instance {})", first.id);
        assert_eq!(notes, [("alice".into(), "start workflow".into(), target)]);
        let again = again.instance;
        assert_eq!(
            again, first,
            "the first start's answer is not what a read finds"
        );
        assert_eq!(again.input, json!(1));
        let lease = lease(&store).await;
        assert_eq!(fire_all(&store, lease).await.len(), 1, "one task, not two");
    }
);

contract!(
    a_new_version_leaves_running_instances_on_theirs,
    |store: Store| async move {
        let j = jobs(&store, &["one", "two", "three"]).await;
        let wf = workflow(
            &store,
            "versioned",
            &[step("one", j["one"], &[]), step("two", j["two"], &["one"])],
        )
        .await;
        assert_eq!(wf.version, 1);
        let lease = lease(&store).await;
        let old = start(&store, &wf, json!(null)).await;
        let v2 = store
            .update_workflow(
                wf.id,
                Some(&[
                    step("one", j["one"], &[]),
                    step("three", j["three"], &["one"]),
                ]),
                None,
                None,
                NOW,
            )
            .await
            .unwrap();
        assert_eq!(v2.version, 2);
        let fired = fire_all(&store, lease).await;
        end_all(&store, &fired, |_| (RunStatus::Succeeded, None)).await;
        let fired = fire_all(&store, lease).await;
        assert_eq!(fired.len(), 1);
        assert_eq!(job_name(&j, &fired[0]), "two", "version 1's graph");
        let old = store.get_instance(old.id).await.unwrap();
        assert_eq!(old.version, 1);
        assert_eq!(old.steps[1].name, "two");
        let new = start(&store, &v2, json!(null)).await;
        assert_eq!(new.version, 2);
        assert_eq!(new.steps[1].name, "three");

        // A start with the workflow as read before a change starts nothing: read it again.
        let stale = store
            .start_instance(&wf, &json!(null), None, NOW, None, None)
            .await;
        assert!(
            matches!(stale, Err(rota_scheduler::store::Error::Changed(_))),
            "version 1 after version 2: {stale:?}"
        );
        let off = store
            .update_workflow(wf.id, None, Some(false), None, NOW + 1)
            .await
            .unwrap();
        assert!(!off.enabled);
        let disabled = store
            .start_instance(&v2, &json!(null), None, NOW, None, None)
            .await;
        assert!(
            matches!(disabled, Err(rota_scheduler::store::Error::Changed(_))),
            "a start of a disabled workflow: {disabled:?}"
        );
        let instances = store
            .list_instances(Some(wf.id), None, None, 10)
            .await
            .unwrap();
        assert_eq!(instances.len(), 2, "the refused starts left no instance");
    }
);

contract!(
    two_changes_of_a_workflow_at_once_both_hold,
    |store: Store| async move {
        let j = jobs(&store, &["one", "two"]).await;
        for round in 0..20 {
            let name = format!("changed-{round}");
            let wf = workflow(&store, &name, &[step("one", j["one"], &[])]).await;
            let steps = [step("one", j["one"], &[]), step("two", j["two"], &["one"])];
            let off = Scheduled {
                next_fire_at: Some(NOW + 60_000),
                ..Scheduled::default()
            };
            // New steps and a new schedule at once, on two connections.
            let (a, b) = tokio::join!(
                store.update_workflow(wf.id, Some(&steps), None, None, NOW + 1),
                store.update_workflow(wf.id, None, Some(false), Some(&off), NOW + 2),
            );
            a.unwrap();
            b.unwrap();
            let now = store.get_workflow(wf.id).await.unwrap();
            assert_eq!(now.version, 2, "the new steps were lost: {now:?}");
            assert_eq!(now.steps.len(), 2);
            assert!(!now.enabled, "the disable was lost");
            assert_eq!(now.next_fire_at, Some(NOW + 60_000));
        }
    }
);

contract!(
    a_join_whose_predecessors_end_at_once_on_two_connections_starts_once,
    |store: Store| async move {
        let (j, wf) = diamond(&store, "race").await;
        let lease = lease(&store).await;
        // Many instances, so the two reports race on many joins.
        let mut ids = Vec::new();
        for _ in 0..20 {
            ids.push(
                store
                    .start_instance(&wf, &json!(null), None, NOW, None, None)
                    .await
                    .unwrap()
                    .instance
                    .id,
            );
        }
        let roots = fire_all(&store, lease).await;
        end_all(&store, &roots, |_| (RunStatus::Succeeded, None)).await;
        let branches = fire_all(&store, lease).await;
        assert_eq!(branches.len(), 40);
        let (left, right): (Vec<Fired>, Vec<Fired>) = branches
            .into_iter()
            .partition(|f| job_name(&j, f) == "left");
        // The lefts and the rights in two report batches at the same moment, on two
        // connections: two nodes' transactions, as the database sees them.
        let other = store.clone();
        tokio::join!(
            end_all(&store, &left, |_| (RunStatus::Succeeded, None)),
            end_all(&other, &right, |_| (RunStatus::Succeeded, None)),
        );
        let joins = fire_all(&store, lease).await;
        assert_eq!(joins.len(), 20, "one join per instance, not zero, not two");
        end_all(&store, &joins, |_| (RunStatus::Succeeded, None)).await;
        for id in ids {
            assert_eq!(
                store.get_instance(id).await.unwrap().status,
                InstanceStatus::Succeeded
            );
        }
    }
);

contract!(
    a_retried_instance_runs_its_failed_step_again_and_what_it_skipped,
    |store: Store| async move {
        let j = jobs(&store, &["fetch", "charge", "ship", "refund"]).await;
        let mut refund = step("refund", j["refund"], &["charge"]);
        refund.when = Some("any_failed".into());
        let wf = workflow(
            &store,
            "order",
            &[
                step("fetch", j["fetch"], &[]),
                step("charge", j["charge"], &["fetch"]),
                step("ship", j["ship"], &["charge"]),
                refund,
            ],
        )
        .await;
        let lease = lease(&store).await;
        let inst = start(&store, &wf, json!({"order": 42})).await;
        let conflict = store.retry_instance(inst.id, NOW).await.unwrap_err();
        assert!(
            conflict.to_string().contains("only a failed instance"),
            "a running instance is not retried: {conflict}"
        );
        let fired = fire_all(&store, lease).await;
        end_all(&store, &fired, |_| (RunStatus::Succeeded, Some(json!(7)))).await;
        let fired = fire_all(&store, lease).await;
        end_all(&store, &fired, |_| (RunStatus::Failed, None)).await;
        let fired = fire_all(&store, lease).await;
        assert_eq!(fired.len(), 1);
        assert_eq!(job_name(&j, &fired[0]), "refund");
        end_all(&store, &fired, |_| (RunStatus::Succeeded, None)).await;
        let failed = store.get_instance(inst.id).await.unwrap();
        assert_eq!(failed.status, InstanceStatus::Failed);
        assert_eq!(step_of(&failed, "ship").status, StepStatus::Skipped);

        assert_eq!(store.retry_instance(inst.id, NOW).await.unwrap(), 1);
        let again = store.get_instance(inst.id).await.unwrap();
        assert_eq!(again.status, InstanceStatus::Running);
        assert_eq!(again.finished_at, None);
        assert_eq!(
            statuses(&again),
            [
                ("fetch".to_owned(), StepStatus::Succeeded),
                ("charge".to_owned(), StepStatus::Running),
                ("ship".to_owned(), StepStatus::Pending),
                ("refund".to_owned(), StepStatus::Succeeded),
            ],
            "the compensation that ran is kept"
        );
        let fired = fire_all(&store, lease).await;
        assert_eq!(fired.len(), 1);
        assert_eq!(job_name(&j, &fired[0]), "charge");
        assert_eq!(
            fired[0].payload,
            json!({"input": {"order": 42}, "steps": {"fetch": 7}}),
            "the retried step is given what it was given before"
        );
        assert_eq!(
            store.get_task(fired[0].task.task_id).await.unwrap().attempt,
            1,
            "a fresh attempt budget: a new task"
        );
        end_all(&store, &fired, |_| {
            (RunStatus::Succeeded, Some(json!("paid")))
        })
        .await;
        let fired = fire_all(&store, lease).await;
        assert_eq!(fired.len(), 1);
        assert_eq!(job_name(&j, &fired[0]), "ship");
        end_all(&store, &fired, |_| (RunStatus::Succeeded, None)).await;
        let done = store.get_instance(inst.id).await.unwrap();
        assert_eq!(done.status, InstanceStatus::Succeeded);
        assert_eq!(
            step_of(&done, "charge").runs.len(),
            2,
            "both attempts' runs"
        );
        let conflict = store.retry_instance(inst.id, NOW).await.unwrap_err();
        assert!(conflict.to_string().contains("is succeeded"), "{conflict}");
    }
);

contract!(
    a_retried_map_runs_only_its_failed_elements_and_reduces_all_in_order,
    |store: Store| async move {
        let (_, wf) = mapped(&store, "retried-map").await;
        let lease = lease(&store).await;
        let inst = start(&store, &wf, json!({})).await;
        let fired = fire_all(&store, lease).await;
        end_all(&store, &fired, |_| {
            (
                RunStatus::Succeeded,
                Some(json!((0..10).collect::<Vec<i64>>())),
            )
        })
        .await;
        let fired = fire_all(&store, lease).await;
        assert_eq!(fired.len(), 10);
        let index = |f: &Fired| f.payload["index"].as_i64().unwrap();
        end_all(&store, &fired, |f| match index(f) {
            3 | 7 => (RunStatus::Failed, None),
            n => (RunStatus::Succeeded, Some(json!(n * 10))),
        })
        .await;
        let failed = store.get_instance(inst.id).await.unwrap();
        assert_eq!(failed.status, InstanceStatus::Failed);
        assert_eq!(step_of(&failed, "sum").status, StepStatus::Skipped);

        assert_eq!(store.retry_instance(inst.id, NOW).await.unwrap(), 2);
        let again = store.get_instance(inst.id).await.unwrap();
        let each = step_of(&again, "each");
        assert_eq!(each.status, StepStatus::Running);
        assert_eq!(each.message, None);
        assert_eq!(
            each.items
                .as_ref()
                .map(|i| (i.total, i.succeeded, i.failed, i.running)),
            Some((10, 8, 0, 2)),
            "the failed elements' first tasks are no longer counted"
        );
        let fired = fire_all(&store, lease).await;
        let mut retried: Vec<i64> = fired.iter().map(index).collect();
        retried.sort_unstable();
        assert_eq!(retried, [3, 7], "only the elements that failed");
        assert_eq!(fired[0].payload["item"], fired[0].payload["index"]);
        end_all(&store, &fired, |f| {
            (RunStatus::Succeeded, Some(json!(index(f) * 10)))
        })
        .await;
        let fired = fire_all(&store, lease).await;
        assert_eq!(fired.len(), 1);
        assert_eq!(
            fired[0].payload["steps"]["each"],
            json!((0..10).map(|n| n * 10).collect::<Vec<i64>>())
        );
        end_all(&store, &fired, |_| (RunStatus::Succeeded, None)).await;
        assert_eq!(
            store.get_instance(inst.id).await.unwrap().status,
            InstanceStatus::Succeeded
        );
    }
);

/// A workflow of `job`'s one step, firing every second from `NOW + 1000`, with `overlap`.
async fn every_second(store: &Store, name: &str, job: i64, overlap: Overlap) -> Workflow {
    let scheduled = Scheduled {
        timing: Timing {
            schedule: Some(Schedule::FixedRate { every_ms: 1_000 }),
            overlap,
            ..Timing::default()
        },
        next_fire_at: Some(NOW + 1_000),
    };
    let app = store.ensure_app("default", NOW).await.unwrap();
    store
        .create_workflow(name, app, &[step("only", job, &[])], true, &scheduled, NOW)
        .await
        .unwrap()
}

/// The instances of `wf`, oldest first: (key, status).
async fn instances_of(store: &Store, wf: &Workflow) -> Vec<(Option<String>, InstanceStatus)> {
    let mut all = store
        .list_instances(Some(wf.id), None, None, 100)
        .await
        .unwrap();
    all.reverse();
    all.into_iter().map(|i| (i.key, i.status)).collect()
}

contract!(
    a_scheduled_workflow_fires_once_per_fire_time_and_skips_queues_or_allows_overlaps,
    |store: Store| async move {
        let j = jobs(&store, &["s", "q", "a"]).await;
        let skip = every_second(&store, "skips", j["s"], Overlap::Skip).await;
        let queue = every_second(&store, "queues", j["q"], Overlap::Queue).await;
        let allow = every_second(&store, "allows", j["a"], Overlap::Allow).await;
        assert_eq!(skip.next_fire_at, Some(NOW + 1_000));
        assert_eq!(
            store
                .fire_workflows(NOW + 999, 5_000, 100)
                .await
                .unwrap()
                .started,
            0,
            "nothing fires early"
        );
        // Two nodes fire the same moment: one instance per workflow.
        let other = store.clone();
        let (a, b) = tokio::join!(
            store.fire_workflows(NOW + 1_000, 5_000, 100),
            other.fire_workflows(NOW + 1_000, 5_000, 100),
        );
        assert_eq!(a.unwrap().started + b.unwrap().started, 3);
        let first = Some(format!("fire:{}", NOW + 1_000));
        for wf in [&skip, &queue, &allow] {
            assert_eq!(
                instances_of(&store, wf).await,
                [(first.clone(), InstanceStatus::Running)]
            );
        }
        let inst = store
            .list_instances(Some(queue.id), None, None, 1)
            .await
            .unwrap();
        assert!(
            inst[0].input["scheduled_at"]
                .as_str()
                .unwrap()
                .ends_with("Z"),
            "{:?}",
            inst[0].input
        );

        // The next second, the first instances still run.
        let done = store.fire_workflows(NOW + 2_000, 5_000, 100).await.unwrap();
        assert_eq!((done.started, done.skipped, done.queued), (1, 1, 1));
        assert_eq!(instances_of(&store, &skip).await.len(), 1, "skipped");
        assert_eq!(instances_of(&store, &queue).await.len(), 1, "queued");
        assert_eq!(instances_of(&store, &allow).await.len(), 2, "allowed");
        assert_eq!(
            store.get_workflow(skip.id).await.unwrap().next_fire_at,
            Some(NOW + 3_000)
        );
        // Its schedule removed, a workflow fires no more, however late it is asked.
        store
            .update_workflow(allow.id, None, None, Some(&Scheduled::default()), NOW)
            .await
            .unwrap();
        assert_eq!(
            store.get_workflow(allow.id).await.unwrap().next_fire_at,
            None
        );

        // The queue's running instance ends: the queued fire starts in that transaction.
        let lease = lease(&store).await;
        let fired = fire_all(&store, lease).await;
        let queued_step: Vec<Fired> = fired
            .into_iter()
            .filter(|f| f.task.job_id == j["q"])
            .collect();
        assert_eq!(queued_step.len(), 1);
        end_all(&store, &queued_step, |_| (RunStatus::Succeeded, None)).await;
        assert_eq!(
            instances_of(&store, &queue).await,
            [
                (first.clone(), InstanceStatus::Succeeded),
                (
                    Some(format!("fire:{}", NOW + 2_000)),
                    InstanceStatus::Running
                ),
            ]
        );
        store
            .fire_workflows(NOW + 60_000, 5_000, 100)
            .await
            .unwrap();
        assert_eq!(
            instances_of(&store, &allow).await.len(),
            2,
            "no schedule, no fire"
        );
    }
);

/// Ends `fired` as succeeded through a batch applied under `claim`, as a node applies its
/// executors' reports.
async fn succeed_claiming(store: &Store, fired: &[Fired], claim: NodeLease) -> Applied {
    let mut updates = Vec::new();
    for f in fired {
        updates.push(ending(
            f,
            run_of(store, f).await,
            RunStatus::Succeeded,
            None,
        ));
    }
    store
        .apply_run_updates_raising(
            &updates,
            NOW,
            Completing {
                decide: &mut |_| TaskNext::Succeeded,
                raise: &|_, _, _| Vec::new(),
                claim: Some(claim),
                rules: &HashMap::new(),
            },
        )
        .await
        .unwrap()
}

contract!(
    the_steps_a_report_makes_ready_are_claimed_by_the_node_that_applied_it,
    |store: Store| async move {
        let j = jobs(&store, &["root", "free"]).await;
        let mut bounded = spec("bounded");
        bounded.max_concurrency = Some(1);
        let bounded = store.insert_job(&bounded, None, NOW).await.unwrap().id;
        let wf = workflow(
            &store,
            "claimed",
            &[
                step("root", j["root"], &[]),
                step("free", j["free"], &["root"]),
                step("bounded", bounded, &["root"]),
            ],
        )
        .await;
        let lease = lease(&store).await;
        start(&store, &wf, json!({})).await;
        let applied = succeed_claiming(&store, &fire_all(&store, lease).await, lease).await;
        assert_eq!(applied.step_tasks, 2);
        let claimed: Vec<i64> = applied.claimed.iter().map(|t| t.job_id).collect();
        assert_eq!(
            claimed,
            vec![j["free"]],
            "a bounded job's task waits for a scan"
        );
        let free = &applied.claimed[0];
        assert_eq!((free.epoch, free.attempt), (lease.epoch, 1));
        assert_eq!(
            store.get_task(free.task_id).await.unwrap().status,
            TaskStatus::Claimed
        );
        let scanned = fire_all(&store, lease).await;
        assert_eq!(
            scanned.iter().map(|f| f.task.job_id).collect::<Vec<_>>(),
            vec![bounded],
            "the scan finds only the bounded step"
        );

        // A node that was taken over meanwhile claims nothing: the steps wait for a scan.
        start(&store, &wf, json!({})).await;
        let roots = fire_all(&store, lease).await;
        let restarted = lease_of(&store).await;
        let applied = succeed_claiming(&store, &roots, lease).await;
        assert_eq!(applied.step_tasks, 2);
        assert!(applied.claimed.is_empty(), "{:?}", applied.claimed);
        // (The bounded step waits too: the first instance's still holds its one slot.)
        let scanned = fire_all(&store, restarted).await;
        assert_eq!(
            scanned.iter().map(|f| f.task.job_id).collect::<Vec<_>>(),
            vec![j["free"]]
        );
    }
);

contract!(
    an_instance_started_on_a_node_has_its_first_steps_claimed_by_it,
    |store: Store| async move {
        let free = jobs(&store, &["free"]).await["free"];
        let mut bounded = spec("bounded");
        bounded.max_concurrency = Some(1);
        let bounded = store.insert_job(&bounded, None, NOW).await.unwrap().id;
        let wf = workflow(
            &store,
            "two-roots",
            &[step("free", free, &[]), step("bounded", bounded, &[])],
        )
        .await;
        let lease = lease(&store).await;
        let started = store
            .start_instance(&wf, &json!({}), None, NOW, Some(lease), None)
            .await
            .unwrap();
        assert!(started.created);
        assert_eq!(
            started.claimed.iter().map(|t| t.job_id).collect::<Vec<_>>(),
            vec![free],
            "a bounded job's task waits for a scan"
        );
        assert_eq!(started.unclaimed, 1);
        let claimed = &started.claimed[0];
        assert_eq!((claimed.epoch, claimed.attempt), (lease.epoch, 1));
        assert_eq!(
            store.get_task(claimed.task_id).await.unwrap().status,
            TaskStatus::Claimed
        );
        assert_eq!(
            step_of(&started.instance, "free").task_id,
            Some(claimed.task_id)
        );
        assert_eq!(
            step_of(&started.instance, "bounded").status,
            StepStatus::Running
        );
        let scanned = fire_all(&store, lease).await;
        assert_eq!(
            scanned.iter().map(|f| f.task.job_id).collect::<Vec<_>>(),
            vec![bounded],
            "the scan finds only the bounded step"
        );

        // A node taken over meanwhile claims nothing: both wait for a scan.
        let restarted = lease_of(&store).await;
        let started = store
            .start_instance(&wf, &json!({}), None, NOW, Some(lease), None)
            .await
            .unwrap();
        assert!(started.claimed.is_empty(), "{:?}", started.claimed);
        assert_eq!(started.unclaimed, 2);
        let scanned = fire_all(&store, restarted).await;
        assert_eq!(
            scanned.iter().map(|f| f.task.job_id).collect::<Vec<_>>(),
            vec![free],
            "(the bounded step waits: the first instance's holds its one slot)"
        );
    }
);
