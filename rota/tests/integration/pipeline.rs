//! End to end over real HTTP: a scheduler node and executor doubles on port 0. Jobs and
//! tasks fire, callbacks complete runs, dead executors' runs become `lost` and are retried.

use crate::support;

use std::collections::HashMap;
use std::time::Duration;

use serde_json::{Value, json};
use support::*;

async fn job(api: &Api, name: &str, extra: Value) -> i64 {
    let mut body =
        json!({"name": name, "app": "default", "plugin": "noop", "schedule": {"kind": "none"}});
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    api.ok("POST", "/api/v1/jobs", Some(body)).await["id"]
        .as_i64()
        .unwrap()
}

async fn task_status(api: &Api, id: i64) -> String {
    api.ok("GET", &format!("/api/v1/tasks/{id}"), None).await["status"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cron_jobs_and_delayed_tasks_fire_and_complete() {
    let (db, _dir) = sqlite_url();
    let server = TestServer::start(&db, |_| {}).await;
    let api = &server.api;
    api.upload_plugin("noop").await;
    let executor = ExecutorDouble::start(&server.url, "default", Behaviour::Succeed).await;

    // A recurring job every second.
    let cron = job(
        api,
        "every-second",
        json!({"schedule": {"kind": "cron", "expr": "* * * * * ?"}}),
    )
    .await;
    // Delayed tasks, due in 300 ms … 1.5 s.
    let delayed = job(api, "close-order", json!({})).await;
    let mut tasks = Vec::new();
    for i in 0..5 {
        let t = api
            .ok("POST", "/api/v1/tasks", Some(json!({"job": "close-order", "delay_ms": 300 + i * 300, "payload": format!("order-{i}")})))
            .await;
        tasks.push(t["id"].as_i64().unwrap());
    }

    for &id in &tasks {
        eventually(
            Duration::from_secs(15),
            "a delayed task to succeed",
            || async move { (task_status(api, id).await == "succeeded").then_some(()) },
        )
        .await;
    }
    eventually(
        Duration::from_secs(15),
        "two recurring fires to succeed",
        || async move {
            let runs = api
                .ok(
                    "GET",
                    &format!("/api/v1/runs?job={cron}&status=succeeded"),
                    None,
                )
                .await;
            (runs["items"].as_array().unwrap().len() >= 2).then_some(())
        },
    )
    .await;

    let received = executor.received();
    // Every delayed task was triggered exactly once, with its payload, never early.
    for (i, &id) in tasks.iter().enumerate() {
        let hits: Vec<_> = received
            .iter()
            .filter(|r| r.trigger.task_id == id)
            .collect();
        assert_eq!(hits.len(), 1, "task {id} triggered {} times", hits.len());
        let t = &hits[0].trigger;
        assert_eq!(t.input, format!("order-{i}"));
        assert_eq!(t.job_id, delayed);
        assert!(!t.exclusive, "delayed tasks run concurrently");
    }
    // Recurring fires are whole seconds, each once.
    let mut seen: HashMap<i64, usize> = HashMap::new();
    for r in received.iter().filter(|r| r.trigger.job_id == cron) {
        assert_eq!(r.trigger.scheduled_at % 1000, 0);
        assert!(r.trigger.exclusive);
        *seen.entry(r.trigger.scheduled_at).or_default() += 1;
    }
    assert!(
        seen.values().all(|&n| n == 1),
        "a fire time is dispatched once: {seen:?}"
    );
    assert_eq!(
        *executor.state.bad_signatures.lock().unwrap(),
        0,
        "every scheduler call is signed"
    );

    // The run carries the whole story.
    let run_id = api
        .ok("GET", &format!("/api/v1/tasks/{}", tasks[0]), None)
        .await["last_run_id"]
        .as_i64()
        .unwrap();
    let run = api.ok("GET", &format!("/api/v1/runs/{run_id}"), None).await;
    assert_eq!(run["status"], "succeeded");
    assert_eq!(run["executor"], executor.address());
    assert!(run["dispatched_at"].is_string() && run["started_at"].is_string());
    let log = api
        .ok("GET", &format!("/api/v1/runs/{run_id}/log"), None)
        .await;
    assert_eq!(log["lines"][0], format!("run {run_id} says hello"));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_runs_are_retried_with_backoff_then_dead() {
    let (db, _dir) = sqlite_url();
    let server = TestServer::start(&db, |_| {}).await;
    let api = &server.api;
    api.upload_plugin("noop").await;
    let executor = ExecutorDouble::start(&server.url, "default", Behaviour::Fail).await;
    job(
        api,
        "flaky",
        json!({"max_attempts": 3, "backoff": {"kind": "fixed", "delay_ms": 200}}),
    )
    .await;
    let id = api
        .ok("POST", "/api/v1/tasks", Some(json!({"job": "flaky"})))
        .await["id"]
        .as_i64()
        .unwrap();
    eventually(
        Duration::from_secs(15),
        "the task to be dead",
        || async move { (task_status(api, id).await == "dead").then_some(()) },
    )
    .await;
    let mut attempts: Vec<(i32, i64)> = executor
        .received()
        .iter()
        .filter(|r| r.trigger.task_id == id)
        .map(|r| (r.trigger.attempt, r.trigger.scheduled_at))
        .collect();
    attempts.sort();
    assert_eq!(
        attempts.iter().map(|a| a.0).collect::<Vec<_>>(),
        vec![1, 2, 3]
    );
    for w in attempts.windows(2) {
        assert!(w[1].1 - w[0].1 >= 200, "backoff respected: {attempts:?}");
    }
    let runs = api
        .ok("GET", &format!("/api/v1/runs?task={id}"), None)
        .await;
    assert_eq!(
        runs["items"].as_array().unwrap().len(),
        3,
        "every attempt keeps its run"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_executors_runs_are_lost_and_retried_elsewhere() {
    let (db, _dir) = sqlite_url();
    let server = TestServer::start(&db, |c| c.executor_dead_after_ms = 1_500).await;
    let api = &server.api;
    api.upload_plugin("noop").await;
    // The only executor takes the run and dies with it.
    let doomed = ExecutorDouble::start(&server.url, "default", Behaviour::Hang).await;
    job(api, "long", json!({})).await;
    let id = api
        .ok("POST", "/api/v1/tasks", Some(json!({"job": "long"})))
        .await["id"]
        .as_i64()
        .unwrap();
    eventually(
        Duration::from_secs(10),
        "the run to reach the doomed executor",
        || async { (!doomed.received().is_empty()).then_some(()) },
    )
    .await;
    doomed.kill();
    let survivor = ExecutorDouble::start(&server.url, "default", Behaviour::Succeed).await;
    // The survivor heartbeats while the doomed one times out.
    eventually(
        Duration::from_secs(20),
        "the task to succeed on the survivor",
        || async {
            survivor.register().await;
            (task_status(api, id).await == "succeeded").then_some(())
        },
    )
    .await;
    let runs = api
        .ok("GET", &format!("/api/v1/runs?task={id}"), None)
        .await;
    let runs = runs["items"].as_array().unwrap();
    assert_eq!(runs.len(), 2);
    let statuses: Vec<&str> = runs.iter().map(|r| r["status"].as_str().unwrap()).collect();
    assert!(
        statuses.contains(&"lost") && statuses.contains(&"succeeded"),
        "{statuses:?}"
    );
    assert_eq!(survivor.received().len(), 1);
    assert_eq!(survivor.received()[0].trigger.attempt, 2);
    server.stop().await;
}

/// A trigger request that timed out unanswered counts as delivered (it may have arrived:
/// sending it elsewhere could run the attempt twice). If the executor never read it, its
/// next heartbeat, which does not list the run, finds it lost, and the task is retried —
/// it is not left `dispatched` for as long as the executor lives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trigger_that_timed_out_unread_is_found_lost_by_a_heartbeat_and_retried() {
    let (db, _dir) = sqlite_url();
    let server = TestServer::start(&db, |c| c.dispatch_timeout_ms = 500).await;
    let api = &server.api;
    api.upload_plugin("noop").await;
    let executor = ExecutorDouble::start(&server.url, "default", Behaviour::UnansweredOnce).await;
    executor.heartbeat_every(Duration::from_millis(300));
    job(
        api,
        "over-a-slow-wire",
        json!({"max_attempts": 2, "backoff": {"kind": "fixed", "delay_ms": 100}}),
    )
    .await;
    let id = api
        .ok(
            "POST",
            "/api/v1/tasks",
            Some(json!({"job": "over-a-slow-wire"})),
        )
        .await["id"]
        .as_i64()
        .unwrap();
    let runs = eventually(
        Duration::from_secs(20),
        "the task to succeed on its second attempt",
        || async {
            if task_status(api, id).await != "succeeded" {
                return None;
            }
            Some(
                api.ok("GET", &format!("/api/v1/runs?task={id}"), None)
                    .await,
            )
        },
    )
    .await;
    let mut runs: Vec<(i64, String, String)> = runs["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["attempt"].as_i64().unwrap(),
                r["status"].as_str().unwrap().to_owned(),
                r["message"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    runs.sort();
    assert_eq!(runs.len(), 2, "{runs:?}");
    assert_eq!((runs[0].0, runs[0].1.as_str()), (1, "lost"), "{runs:?}");
    assert!(runs[0].2.contains("no longer has this run"), "{runs:?}");
    assert_eq!(
        (runs[1].0, runs[1].1.as_str()),
        (2, "succeeded"),
        "{runs:?}"
    );
    // The first request was left unread; only the retry was taken.
    assert_eq!(executor.state.requests.lock().unwrap().len(), 2);
    let received = executor.received();
    assert_eq!(received.len(), 1);
    assert_eq!(received[0].trigger.attempt, 2);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_cancelled_in_the_wheel_never_runs() {
    let (db, _dir) = sqlite_url();
    let server = TestServer::start(&db, |_| {}).await;
    let api = &server.api;
    api.upload_plugin("noop").await;
    let executor = ExecutorDouble::start(&server.url, "default", Behaviour::Succeed).await;
    job(api, "close-order", json!({})).await;
    // Due in 1 s: inside the window, so it is in the wheel already.
    let id = api
        .ok(
            "POST",
            "/api/v1/tasks",
            Some(json!({"job": "close-order", "delay_ms": 1000})),
        )
        .await["id"]
        .as_i64()
        .unwrap();
    let probe = api
        .ok(
            "POST",
            "/api/v1/tasks",
            Some(json!({"job": "close-order", "delay_ms": 1500})),
        )
        .await["id"]
        .as_i64()
        .unwrap();
    let cancelled = api.ok("DELETE", &format!("/api/v1/tasks/{id}"), None).await;
    assert_eq!(cancelled["status"], "cancelled");
    eventually(
        Duration::from_secs(10),
        "the later task to run",
        || async move { (task_status(api, probe).await == "succeeded").then_some(()) },
    )
    .await;
    assert!(
        executor.received().iter().all(|r| r.trigger.task_id != id),
        "a cancelled task never starts"
    );
    assert_eq!(task_status(api, id).await, "cancelled");
    let (status, _) = api
        .call("DELETE", &format!("/api/v1/tasks/{probe}"), None)
        .await;
    assert_eq!(status, 409, "a finished task cannot be cancelled");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_beyond_the_executors_room_is_sent_as_room_frees_up() {
    let (db, _dir) = sqlite_url();
    let server = TestServer::start(&db, |_| {}).await;
    let api = &server.api;
    api.upload_plugin("noop").await;
    let executor = ExecutorDouble::start(&server.url, "default", Behaviour::Slots(20)).await;
    job(api, "close-order", json!({})).await;
    // One batch: one due instant for all, so one dispatch at a time sends them.
    let tasks: Vec<_> = (0..300)
        .map(|_| json!({"job": "close-order", "delay_ms": 1500}))
        .collect();
    let ids = api.add_tasks(tasks).await;
    eventually(
        Duration::from_secs(30),
        "every task of the burst to succeed",
        || async {
            for id in &ids {
                if task_status(api, *id).await != "succeeded" {
                    return None;
                }
            }
            Some(())
        },
    )
    .await;
    let received = executor.received();
    assert_eq!(received.len(), 300, "each task delivered once");
    assert!(received.iter().all(|r| !r.duplicate), "none sent twice");
    // After the first answer, no request carries more than the room the executor last
    // said it had (or a probe of 64, once it has drained for a while): the burst is held
    // back, not sent and refused over and over.
    let requests = executor.state.requests.lock().unwrap().clone();
    assert!(requests.len() > 1, "{requests:?}");
    for pair in requests.windows(2) {
        let ((_, said), (carried, _)) = (pair[0], pair[1]);
        let room = said.expect("the double always says its room") as usize;
        assert!(carried <= room.max(64), "{requests:?}");
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sharding_broadcast_reaches_every_executor() {
    let (db, _dir) = sqlite_url();
    let server = TestServer::start(&db, |_| {}).await;
    let api = &server.api;
    api.upload_plugin("noop").await;
    let a = ExecutorDouble::start(&server.url, "default", Behaviour::Succeed).await;
    let b = ExecutorDouble::start(&server.url, "default", Behaviour::Succeed).await;
    let jid = job(api, "broadcast", json!({"route": "sharding_broadcast"})).await;
    let task = api
        .ok(
            "POST",
            &format!("/api/v1/jobs/{jid}/trigger"),
            Some(json!({"params": "--all"})),
        )
        .await["task_id"]
        .as_i64()
        .unwrap();
    eventually(
        Duration::from_secs(10),
        "the broadcast to succeed",
        || async move { (task_status(api, task).await == "succeeded").then_some(()) },
    )
    .await;
    let mut shards: Vec<(i32, i32)> = a
        .received()
        .iter()
        .chain(b.received().iter())
        .map(|r| (r.trigger.shard_index, r.trigger.shard_total))
        .collect();
    shards.sort();
    assert_eq!(shards, vec![(0, 2), (1, 2)]);
    assert_eq!(a.received()[0].trigger.params.as_deref(), Some("--all"));
    server.stop().await;
}

/// An executor that refuses (503: nothing delivered) fails the run of a `first` job, which
/// does not fail over; from then on every route leaves it out until it heartbeats again —
/// `failover` and `first` alike go to the other — and once it has, `first` is it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_executor_that_refuses_is_left_out_until_it_heartbeats() {
    let (db, _dir) = sqlite_url();
    let server = TestServer::start(&db, |_| {}).await;
    let api = &server.api;
    api.upload_plugin("noop").await;
    let a = ExecutorDouble::start(&server.url, "default", Behaviour::Refuse).await;
    let b = ExecutorDouble::start(&server.url, "default", Behaviour::Succeed).await;
    // Executors are tried in address order: make the refusing one first.
    let (first, second) = if a.address() < b.address() {
        (&a, &b)
    } else {
        (&b, &a)
    };
    first.set_behaviour(Behaviour::Refuse);
    second.set_behaviour(Behaviour::Succeed);
    job(api, "ha", json!({"route": "failover"})).await;
    job(api, "pinned", json!({"route": "first"})).await;
    let add = |job: &'static str| async move {
        api.ok("POST", "/api/v1/tasks", Some(json!({"job": job})))
            .await["id"]
            .as_i64()
            .unwrap()
    };
    let ends = |id: i64, status: &'static str| async move {
        eventually(Duration::from_secs(10), "the task to end", || async move {
            (task_status(api, id).await == status).then_some(())
        })
        .await
    };
    // `first` does not fail over: its run fails with the reason, and with one attempt it is
    // dead.
    let pinned = add("pinned").await;
    ends(pinned, "dead").await;
    let runs = api
        .ok("GET", &format!("/api/v1/runs?task={pinned}"), None)
        .await;
    let message = runs["items"][0]["message"].as_str().unwrap().to_owned();
    assert!(message.contains("503"), "the reason is kept: {message}");

    // Left out since: both routes go to the other executor.
    let ha = add("ha").await;
    ends(ha, "succeeded").await;
    let pinned_again = add("pinned").await;
    ends(pinned_again, "succeeded").await;
    let got = |e: &ExecutorDouble, id: i64| e.received().iter().any(|r| r.trigger.task_id == id);
    assert!(got(second, ha) && got(second, pinned_again));
    assert!(
        !got(first, ha) && !got(first, pinned_again),
        "sent to the refusing one again"
    );

    // It heartbeats (and takes triggers again): `first` is it once more.
    first.set_behaviour(Behaviour::Succeed);
    first.register().await;
    let back = eventually(
        Duration::from_secs(10),
        "the first executor to be back",
        || async {
            let id = add("pinned").await;
            ends(id, "succeeded").await;
            got(first, id).then_some(id)
        },
    )
    .await;
    assert!(!got(second, back));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn busyover_sends_to_an_idle_executor() {
    let (db, _dir) = sqlite_url();
    let server = TestServer::start(&db, |_| {}).await;
    let api = &server.api;
    api.upload_plugin("noop").await;
    let a = ExecutorDouble::start(&server.url, "default", Behaviour::Succeed).await;
    let b = ExecutorDouble::start(&server.url, "default", Behaviour::Succeed).await;
    let (first, second) = if a.address() < b.address() {
        (&a, &b)
    } else {
        (&b, &a)
    };
    // The first executor takes the first run and keeps running it.
    first.set_behaviour(Behaviour::Hang);
    let jid = job(api, "busy", json!({"route": "busyover"})).await;
    api.ok("POST", &format!("/api/v1/jobs/{jid}/trigger"), None)
        .await;
    eventually(
        Duration::from_secs(10),
        "the first run to reach the first executor",
        || async { (!first.received().is_empty()).then_some(()) },
    )
    .await;
    let t2 = api
        .ok("POST", &format!("/api/v1/jobs/{jid}/trigger"), None)
        .await["task_id"]
        .as_i64()
        .unwrap();
    eventually(
        Duration::from_secs(10),
        "the second run to succeed",
        || async move { (task_status(api, t2).await == "succeeded").then_some(()) },
    )
    .await;
    assert!(
        second.received().iter().any(|r| r.trigger.task_id == t2),
        "the busy executor was skipped"
    );
    assert_eq!(first.received().len(), 1);
    server.stop().await;
}

/// A run whose result something waits on — a workflow's next step, a job's children — is
/// sent asking for its report within
/// `report_within_ms` (the executor's batching window would otherwise hold it); a run
/// nothing waits on is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_something_waits_on_ask_for_a_prompt_report() {
    let (db, _dir) = sqlite_url();
    let server = TestServer::start(&db, |_| {}).await;
    let api = &server.api;
    api.upload_plugin("noop").await;
    let executor = ExecutorDouble::start(&server.url, "default", Behaviour::Succeed).await;
    let plain = job(api, "notify", json!({})).await;
    let parent = job(api, "close-order", json!({"child_jobs": ["notify"]})).await;
    let bounded = job(api, "report", json!({"max_concurrency": 2})).await;
    let step = job(api, "step", json!({})).await;
    api.ok(
        "POST",
        "/api/v1/workflows",
        Some(json!({"name": "two", "app": "default", "steps": [
            {"name": "a", "job": "step"},
            {"name": "b", "job": "step", "after": ["a"]},
        ]})),
    )
    .await;
    for job in ["close-order", "report"] {
        api.ok("POST", "/api/v1/tasks", Some(json!({"job": job})))
            .await;
    }
    api.ok(
        "POST",
        "/api/v1/workflows/two/instances",
        Some(json!({"input": {}})),
    )
    .await;
    // The parent, its child, the bounded job's task and the workflow's two steps.
    let within = report_asks(&executor, 5).await;
    let of = |job: i64| asks_of(&within, job);
    assert_eq!(
        of(parent),
        vec![Some(10)],
        "a job with children: {within:?}"
    );
    // A bounded job's slot waits for a run's end too, but not at this price (issue 36).
    assert_eq!(of(bounded), vec![None], "a bounded job: {within:?}");
    assert_eq!(
        of(step),
        vec![Some(10), Some(10)],
        "workflow steps: {within:?}"
    );
    assert_eq!(
        of(plain),
        vec![None],
        "a child with no children of its own: {within:?}"
    );
    server.stop().await;
}

/// Each run's `report_within_ms` as its first trigger asked (a trigger sent again is not
/// another run), as `(job, ask)`, once `runs` runs have arrived.
async fn report_asks(executor: &ExecutorDouble, runs: usize) -> Vec<(i64, Option<u32>)> {
    let firsts = || {
        let mut seen = std::collections::HashSet::new();
        executor
            .received()
            .into_iter()
            .filter(|r| !r.duplicate && seen.insert(r.trigger.task_id))
            .map(|r| (r.trigger.job_id, r.trigger.report_within_ms))
            .collect::<Vec<_>>()
    };
    eventually(Duration::from_secs(15), &format!("{runs} runs"), || async {
        (firsts().len() >= runs).then_some(())
    })
    .await;
    firsts()
}

/// The asks of `job`'s runs, in the order they arrived.
fn asks_of(asks: &[(i64, Option<u32>)], job: i64) -> Vec<Option<u32>> {
    asks.iter()
        .filter(|(j, _)| *j == job)
        .map(|(_, w)| *w)
        .collect()
}

/// SPEC §11: a freed slot is taken within 100 ms. So a run that holds a slot others wait
/// for (its job's bucket is at its bound) asks for its report within 30 ms, not the
/// executor's 100 ms window; a run of a job whose bound does not bind, or of a job with a
/// rate limit alone, does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_of_a_job_at_its_bound_asks_for_its_report_within_30_ms() {
    let (db, _dir) = sqlite_url();
    let server = TestServer::start(&db, |_| {}).await;
    let api = &server.api;
    api.upload_plugin("noop").await;
    let executor = ExecutorDouble::start(&server.url, "default", Behaviour::Takes(200)).await;
    let one_at_a_time = job(api, "report", json!({"concurrency": {"limit": 1}})).await;
    let roomy = job(api, "export", json!({"concurrency": {"limit": 5}})).await;
    let paced = job(
        api,
        "call-partner",
        json!({"rate_limit": {"limit": 100, "per_ms": 1000}}),
    )
    .await;
    for job in ["report", "report", "report", "export", "call-partner"] {
        api.ok("POST", "/api/v1/tasks", Some(json!({"job": job})))
            .await;
    }
    let within = report_asks(&executor, 5).await;
    assert_eq!(
        asks_of(&within, one_at_a_time),
        vec![Some(30); 3],
        "each run of a job whose one slot is held while others wait: {within:?}"
    );
    assert_eq!(
        asks_of(&within, roomy),
        vec![None],
        "one run of five slots: {within:?}"
    );
    assert_eq!(
        asks_of(&within, paced),
        vec![None],
        "a rate limit frees no slot: {within:?}"
    );
    server.stop().await;
}
