//! Alarms through the real binary (SPEC §9): a `rota standalone` whose `http` job fails
//! (its target refuses connections), rules on those failures, and channels that reach
//! receivers this test runs on 127.0.0.1 — a webhook receiver that checks the signature
//! and an SMTP server that takes the email.

use crate::support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use support::sink::Sink;
use support::*;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// An alarm webhook receiver ([`Sink`] at `/alarms`, answering 200).
#[derive(Clone, Default)]
struct Hook(Sink);

impl Hook {
    async fn start_on(listener: tokio::net::TcpListener) -> Hook {
        let hook = Hook::default();
        hook.0.serve("/alarms", listener);
        hook
    }

    async fn start() -> (Hook, String) {
        let (sink, url) = Sink::default().start("/alarms").await;
        (Hook(sink), url)
    }

    /// The alarms received so far, each checked against the signature of `secret`.
    fn alarms(&self, secret: &[u8]) -> Vec<Value> {
        self.0
            .got()
            .iter()
            .map(|r| {
                r.assert_signed(secret);
                serde_json::from_str(&r.body).unwrap()
            })
            .collect()
    }

    /// Waits for the first alarm on `on` that is (or is not) a resolve.
    async fn wait_for_one(&self, secret: &[u8], on: &str, resolved: bool) -> Value {
        eventually(
            Duration::from_secs(30),
            &format!("{on} (resolved: {resolved})"),
            || async {
                self.alarms(secret)
                    .into_iter()
                    .find(|a| a["on"] == on && a["resolved"] == resolved)
            },
        )
        .await
    }

    async fn wait_for(&self, secret: &[u8], n: usize) -> Vec<Value> {
        eventually(
            Duration::from_secs(60),
            &format!("{n} alarm(s)"),
            || async {
                let got = self.alarms(secret);
                (got.len() >= n).then_some(got)
            },
        )
        .await
    }
}

/// App `app`'s secret `alarmsec` (`k3y`) and its webhook channel `ops` to `url`, signed
/// with it.
async fn ops_channel(api: &Api, app: &str, url: &str) {
    api.ok(
        "PUT",
        &format!("/api/v1/apps/{app}/secrets/alarmsec"),
        Some(json!({"value": "k3y"})),
    )
    .await;
    api.ok(
        "POST",
        "/api/v1/alarm-channels",
        Some(
            json!({"name": "ops", "kind": "webhook", "url": url, "secret": "alarmsec", "app": app}),
        ),
    )
    .await;
}

/// A node with an `http` job `orders` whose target refuses connections (every attempt
/// fails at once), one attempt per task; a webhook channel `ops` to `hook_url` signed with
/// the app's secret `alarmsec`.
async fn failing_job(node: &Standalone, hook_url: &str) {
    let api = &node.api;
    let down = format!("http://127.0.0.1:{}", free_port());
    api.ok(
        "POST",
        "/api/v1/jobs",
        Some(json!({
            "name": "orders", "app": "shop", "schedule": {"kind": "none"},
            "delivery": {"kind": "http", "url": format!("{down}/orders"), "timeout_ms": 2_000},
            "http_allow": [down], "max_attempts": 1,
        })),
    )
    .await;
    ops_channel(api, "shop", hook_url).await;
}

async fn rule(api: &Api, name: &str, on: &str) {
    api.ok(
        "POST",
        "/api/v1/alarm-rules",
        Some(json!({"name": name, "app": "shop", "job": "orders", "on": on, "channels": ["ops"]})),
    )
    .await;
}

#[tokio::test]
async fn a_dead_task_sends_one_signed_alarm_and_the_history_shows_it_sent() {
    let (hook, url) = Hook::start().await;
    let dir = tempfile::tempdir().unwrap();
    let node = Standalone::start(dir.path());
    failing_job(&node, &url).await;
    let api = &node.api;
    rule(api, "orders-dead", "task_dead").await;
    let ids = api
        .add_tasks(vec![json!({"job": "orders", "payload": "x"})])
        .await;
    task_reaches(api, ids[0], "dead").await;
    let dead_at = now_ms();

    let got = hook.wait_for(b"k3y", 1).await;
    let took = now_ms() - dead_at;
    eprintln!("task_dead alarm received {took} ms after the test saw the task dead");
    let a = &got[0];
    assert_eq!(a["rule"], "orders-dead");
    assert_eq!(a["on"], "task_dead");
    assert_eq!(a["app"], "shop");
    assert_eq!(a["job"], "orders");
    assert_eq!(a["task"], ids[0]);
    assert_eq!(a["attempt"], 1);
    assert_eq!(a["count"], 1);
    assert_eq!(a["resolved"], false);
    assert!(a["message"].as_str().unwrap().contains("dead"), "{a}");

    let history = eventually(Duration::from_secs(10), "the send recorded", || async {
        let h = api.ok("GET", "/api/v1/alarms?rule=orders-dead", None).await;
        (h["items"][0]["sends"][0]["status"] == "sent").then_some(h)
    })
    .await;
    assert_eq!(history["items"].as_array().unwrap().len(), 1);
    assert_eq!(history["items"][0]["sends"][0]["channel"], "ops");
    // One alarm, and its one send is recorded `sent`: the receiver got it exactly once (a
    // second POST of it would have come before that record).
    assert_eq!(hook.alarms(b"k3y").len(), 1);
    // The channel's URL is never shown again, only its host.
    let c = api.ok("GET", "/api/v1/alarm-channels/ops", None).await;
    assert_eq!(c["url"], format!("{}/…", url.trim_end_matches("/alarms")));
    assert!(!c.to_string().contains("/alarms\""), "{c}");
}

#[tokio::test]
async fn a_hundred_failures_fold_into_one_message_then_a_resolved_notice() {
    let (hook, url) = Hook::start().await;
    let dir = tempfile::tempdir().unwrap();
    let node = Standalone::start(dir.path());
    failing_job(&node, &url).await;
    let api = &node.api;
    rule(api, "orders-failing", "run_failed").await;
    let tasks: Vec<Value> = (0..100)
        .map(|i| json!({"job": "orders", "payload": format!("{i}"), "delay_ms": 500}))
        .collect();
    api.add_tasks(tasks).await;
    let first = hook.wait_for(b"k3y", 1).await;
    assert_eq!(first[0]["on"], "run_failed");
    assert!(
        first[0]["count"].as_i64().unwrap() >= 100,
        "100 failures in one burst: {}",
        first[0]
    );
    assert_eq!(first[0]["resolved"], false);

    // The target comes back: the next run succeeds and clears the condition.
    let (_ok, ok_url) = Hook::start().await;
    let origin = ok_url.trim_end_matches("/alarms").to_owned();
    api.ok(
        "PATCH",
        "/api/v1/jobs/orders",
        Some(json!({"delivery": {"kind": "http", "url": ok_url}, "http_allow": [origin]})),
    )
    .await;
    let ok = api.add_tasks(vec![json!({"job": "orders"})]).await;
    task_reaches(api, ok[0], "succeeded").await;
    let got = hook.wait_for(b"k3y", 2).await;
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!(got[1]["resolved"], true, "{}", got[1]);
    assert_eq!(got[1]["rule"], "orders-failing");
    let rule = api
        .ok("GET", "/api/v1/alarm-rules/orders-failing", None)
        .await;
    assert_eq!(rule["open_since"], Value::Null, "{rule}");
}

#[tokio::test]
async fn an_alarm_survives_a_sigkill_before_its_send_and_is_delivered_once_after_restart() {
    // The channel's endpoint is down while the alarm is made: it waits in the outbox.
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}/alarms");
    let dir = tempfile::tempdir().unwrap();
    let mut node = Standalone::start(dir.path());
    failing_job(&node, &url).await;
    rule(&node.api, "orders-dead", "task_dead").await;
    let ids = node.api.add_tasks(vec![json!({"job": "orders"})]).await;
    task_reaches(&node.api, ids[0], "dead").await;
    eventually(
        Duration::from_secs(30),
        "a failed send of the alarm",
        || async {
            let h = node.api.ok("GET", "/api/v1/alarms", None).await;
            let send = &h["items"][0]["sends"][0];
            (send["status"] == "pending" && send["attempts"].as_i64() >= Some(1)).then_some(())
        },
    )
    .await;
    node.child.0.kill().unwrap();
    node.child.0.wait().unwrap();

    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .unwrap();
    let hook = Hook::start_on(listener).await;
    let node = Standalone::start(dir.path());
    let got = hook.wait_for(b"k3y", 1).await;
    assert_eq!(got[0]["task"], ids[0]);
    let history = eventually(
        Duration::from_secs(10),
        "the send recorded as sent",
        || async {
            let h = node.api.ok("GET", "/api/v1/alarms", None).await;
            (h["items"][0]["sends"][0]["status"] == "sent").then_some(h)
        },
    )
    .await;
    // One alarm, its one send recorded `sent`: nothing of it can come again.
    assert_eq!(history["items"].as_array().unwrap().len(), 1, "{history}");
    assert_eq!(hook.alarms(b"k3y").len(), 1, "delivered once");
}

/// One email as the server took it: its recipients and its data.
type Mail = (Vec<String>, String);

/// A small SMTP server: takes one message per connection and keeps its envelope and data.
#[derive(Clone, Default)]
struct Smtp {
    mails: Arc<Mutex<Vec<Mail>>>,
}

impl Smtp {
    async fn start() -> (Smtp, u16) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let smtp = Smtp::default();
        let me = smtp.clone();
        tokio::spawn(async move {
            loop {
                let (socket, _) = listener.accept().await.unwrap();
                let me = me.clone();
                tokio::spawn(async move { me.session(socket).await });
            }
        });
        (smtp, port)
    }

    async fn session(&self, socket: tokio::net::TcpStream) {
        let (read, mut write) = socket.into_split();
        let mut lines = BufReader::new(read).lines();
        write.write_all(b"220 test ESMTP\r\n").await.unwrap();
        let mut rcpt = Vec::new();
        while let Ok(Some(line)) = lines.next_line().await {
            let upper = line.to_ascii_uppercase();
            let reply: &[u8] = if upper.starts_with("EHLO") || upper.starts_with("HELO") {
                b"250 test\r\n"
            } else if upper.starts_with("RCPT TO:") {
                rcpt.push(line[8..].trim().to_owned());
                b"250 OK\r\n"
            } else if upper.starts_with("DATA") {
                write.write_all(b"354 go on\r\n").await.unwrap();
                let mut data = String::new();
                while let Ok(Some(l)) = lines.next_line().await {
                    if l == "." {
                        break;
                    }
                    data.push_str(&l);
                    data.push('\n');
                }
                self.mails
                    .lock()
                    .unwrap()
                    .push((std::mem::take(&mut rcpt), data));
                b"250 queued\r\n"
            } else if upper.starts_with("QUIT") {
                write.write_all(b"221 bye\r\n").await.unwrap();
                return;
            } else {
                b"250 OK\r\n"
            };
            write.write_all(reply).await.unwrap();
        }
    }
}

#[tokio::test]
async fn an_email_channel_sends_the_alarm_over_smtp() {
    let (smtp, port) = Smtp::start().await;
    let dir = tempfile::tempdir().unwrap();
    let smtp_url = format!("smtp://127.0.0.1:{port}");
    let node = Standalone::start_with_env(dir.path(), &[("ROTA_SMTP_URL", &smtp_url)]);
    let (_hook, url) = Hook::start().await;
    failing_job(&node, &url).await;
    let api = &node.api;
    api.ok(
        "POST",
        "/api/v1/alarm-channels",
        Some(json!({"name": "mail", "kind": "email", "to": ["ops@example.com"], "app": "shop"})),
    )
    .await;
    api.ok(
        "POST",
        "/api/v1/alarm-rules",
        Some(
            json!({"name": "orders-dead", "app": "shop", "on": "task_dead", "channels": ["mail"]}),
        ),
    )
    .await;
    let ids = api.add_tasks(vec![json!({"job": "orders"})]).await;
    task_reaches(api, ids[0], "dead").await;
    let mails = eventually(Duration::from_secs(30), "an email", || async {
        let m = smtp.mails.lock().unwrap().clone();
        (!m.is_empty()).then_some(m)
    })
    .await;
    let (to, data) = &mails[0];
    assert_eq!(to, &vec!["<ops@example.com>".to_owned()]);
    assert!(data.contains("Subject: [Rota ALARM] task_dead"), "{data}");
    assert!(data.contains(&format!("task {}", ids[0])), "{data}");
    // The test button sends through the same transport.
    let (status, body) = api
        .call("POST", "/api/v1/alarm-channels/mail/test", None)
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(smtp.mails.lock().unwrap().len(), 2);
}

#[tokio::test]
async fn a_channel_test_says_why_it_was_not_delivered() {
    let dir = tempfile::tempdir().unwrap();
    let node = Standalone::start(dir.path());
    let api = &node.api;
    let down = format!("http://127.0.0.1:{}/hook", free_port());
    api.ok(
        "POST",
        "/api/v1/alarm-channels",
        Some(json!({"name": "bot", "kind": "slack", "url": down})),
    )
    .await;
    let (status, body) = api
        .call("POST", "/api/v1/alarm-channels/bot/test", None)
        .await;
    assert_eq!(status, 502, "{body}");
    let e = body["error"].as_str().unwrap();
    assert!(e.contains("bot") && e.contains("did not deliver"), "{e}");
    // An email channel without ROTA_SMTP_URL says what to set.
    api.ok(
        "POST",
        "/api/v1/alarm-channels",
        Some(json!({"name": "mail", "kind": "email", "to": ["a@example.com"]})),
    )
    .await;
    let (status, body) = api
        .call("POST", "/api/v1/alarm-channels/mail/test", None)
        .await;
    assert_eq!(status, 502, "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("ROTA_SMTP_URL"),
        "{body}"
    );
}

#[tokio::test]
async fn a_pull_backlog_older_than_the_threshold_alarms_and_clears_once_pulled() {
    let (hook, url) = Hook::start().await;
    let dir = tempfile::tempdir().unwrap();
    let node = Standalone::start(dir.path());
    let api = &node.api;
    api.ok(
        "POST",
        "/api/v1/jobs",
        Some(json!({"name": "queue", "app": "shop", "schedule": {"kind": "none"}, "delivery": {"kind": "pull"}})),
    )
    .await;
    ops_channel(api, "shop", &url).await;
    api.ok(
        "POST",
        "/api/v1/alarm-rules",
        Some(
            json!({"name": "queue-behind", "app": "shop", "job": "queue", "on": "backlog",
                    "threshold": 1_000, "channels": ["ops"]}),
        ),
    )
    .await;
    api.add_tasks(vec![json!({"job": "queue", "payload": "waiting"})])
        .await;
    let got = hook.wait_for(b"k3y", 1).await;
    assert_eq!(got[0]["on"], "backlog");
    assert_eq!(got[0]["resolved"], false);
    assert_eq!(got[0]["job"], "queue");
    assert!(
        got[0]["message"].as_str().unwrap().contains("waits"),
        "{}",
        got[0]
    );

    // A consumer takes it: the backlog clears.
    let pulled = api
        .ok("POST", "/api/v1/jobs/queue/pull", Some(json!({"max": 10})))
        .await;
    let item = &pulled["items"][0];
    api.ok(
        "POST",
        &format!("/api/v1/tasks/{}/ack", item["task"]),
        Some(json!({"lease": item["lease"]})),
    )
    .await;
    let got = hook.wait_for(b"k3y", 2).await;
    assert_eq!(got[1]["resolved"], true, "{}", got[1]);
    // The counters say so too.
    let metrics = api.metrics().await;
    for line in [
        r#"rota_alarms_total{rule="queue-behind",on="backlog",status="raised"} 1"#,
        r#"rota_alarms_total{rule="queue-behind",on="backlog",status="resolved"} 1"#,
    ] {
        assert!(metrics.contains(line), "no `{line}` in /metrics");
    }
}

#[tokio::test]
async fn a_lost_executor_and_fires_waiting_for_one_alarm_and_clear_when_one_is_back() {
    let (hook, url) = Hook::start().await;
    let (db, _dir) = sqlite_url();
    let server = TestServer::start(&db, |c| c.executor_dead_after_ms = 1_500).await;
    let api = &server.api;
    api.upload_plugin("noop").await;
    api.ok(
        "POST",
        "/api/v1/jobs",
        Some(json!({"name": "nightly", "app": "default", "plugin": "noop", "schedule": {"kind": "none"}})),
    )
    .await;
    ops_channel(api, "default", &url).await;
    for on in ["executor_lost", "no_executor"] {
        api.ok(
            "POST",
            "/api/v1/alarm-rules",
            Some(json!({"name": on, "app": "default", "on": on, "channels": ["ops"]})),
        )
        .await;
    }
    let wait_for = |on: &'static str, resolved: bool| hook.wait_for_one(b"k3y", on, resolved);

    let first = ExecutorDouble::start(&server.url, "default", Behaviour::Succeed).await;
    first.register().await;
    first.kill();
    let lost = wait_for("executor_lost", false).await;
    assert!(
        lost["message"]
            .as_str()
            .unwrap()
            .contains("stopped heartbeating"),
        "{lost}"
    );

    // A fire now has no executor to go to: it waits, and the watcher says so.
    let ids = api.add_tasks(vec![json!({"job": "nightly"})]).await;
    let waiting = wait_for("no_executor", false).await;
    assert!(
        waiting["message"]
            .as_str()
            .unwrap()
            .contains("wait for an executor"),
        "{waiting}"
    );

    // An executor comes back: both conditions clear, and the fire runs.
    let second = ExecutorDouble::start(&server.url, "default", Behaviour::Succeed).await;
    second.register().await;
    task_reaches(api, ids[0], "succeeded").await;
    wait_for("executor_lost", true).await;
    wait_for("no_executor", true).await;
    server.stop().await;
}

/// A workflow instance whose step's task dies sends one `workflow_failed` alarm naming the
/// workflow, the instance and the step (the rule is about the app: it names no job).
#[tokio::test]
async fn a_failed_workflow_instance_sends_an_alarm_naming_it_and_its_step() {
    let (hook, url) = Hook::start().await;
    let dir = tempfile::tempdir().unwrap();
    let node = Standalone::start(dir.path());
    failing_job(&node, &url).await;
    let api = &node.api;
    let refused = api
        .call(
            "POST",
            "/api/v1/alarm-rules",
            Some(json!({"name": "wf", "app": "shop", "job": "orders", "on": "workflow_failed", "channels": ["ops"]})),
        )
        .await;
    assert_eq!(refused.0, 422, "{}", refused.1);
    assert!(
        refused.1.to_string().contains("not one job"),
        "{}",
        refused.1
    );
    api.ok(
        "POST",
        "/api/v1/alarm-rules",
        Some(json!({"name": "wf", "app": "shop", "on": "workflow_failed", "channels": ["ops"]})),
    )
    .await;
    api.ok(
        "POST",
        "/api/v1/workflows",
        Some(json!({"name": "checkout", "app": "shop", "steps": [
            {"name": "charge", "job": "orders"},
            {"name": "refund", "job": "orders", "after": ["charge"], "when": "any_failed"},
        ]})),
    )
    .await;
    let inst = api
        .ok(
            "POST",
            "/api/v1/workflows/checkout/instances",
            Some(json!({"input": {"order": 42}})),
        )
        .await;
    let id = inst["id"].as_i64().unwrap();
    let a = hook.wait_for_one(b"k3y", "workflow_failed", false).await;
    assert_eq!(a["rule"], "wf");
    assert_eq!(a["app"], "shop");
    assert_eq!(a["count"], 1);
    assert_eq!(
        a["message"],
        format!("workflow `checkout` instance {id} failed: steps `charge`, `refund` failed"),
        "{a}"
    );
    let end = api
        .ok("GET", &format!("/api/v1/workflow-instances/{id}"), None)
        .await;
    assert_eq!(end["status"], "failed");
    let metrics = api.metrics().await;
    assert!(
        metrics.contains(r#"rota_workflow_instances_total{status="failed"} 1"#)
            && metrics.contains(r#"rota_workflow_instances_total{status="running"} 1"#)
            // One hand-off: charge's end started refund.
            && metrics.contains("rota_workflow_handoff_seconds_count 1"),
        "{}",
        metrics
            .lines()
            .filter(|l| l.contains("workflow"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// Sleeps 1.2 s (WASI `poll_oneoff` on the monotonic clock): longer than its job's interval.
const SLOW: &str = r#"(module
  (import "wasi_snapshot_preview1" "poll_oneoff"
    (func $poll (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (func (export "_start")
    ;; One subscription at 0: a clock (tag 0 at 8), monotonic (id 1 at 16), 1.2 s from
    ;; now (timeout in ns at 24, flags 0: relative); its event at 64, the count at 128.
    (i32.store (i32.const 16) (i32.const 1))
    (i64.store (i32.const 24) (i64.const 1200000000))
    (drop (call $poll (i32.const 0) (i32.const 64) (i32.const 1) (i32.const 128)))))"#;

/// SPEC §11 drift: a job firing every 500 ms whose runs take 1.2 s, one at a time
/// (`serial`): each fire starts later after its fire time than the one before, and the
/// `schedule_drift` rule says so; the metric shows how far behind the last fire was.
#[tokio::test]
async fn a_job_whose_runs_outlast_its_interval_alarms_its_drift() {
    let (hook, url) = Hook::start().await;
    let dir = tempfile::tempdir().unwrap();
    let node = Standalone::start(dir.path());
    let api = &node.api;
    ops_channel(api, "default", &url).await;
    api.upload("slow", SLOW).await;
    let job = api
        .ok(
            "POST",
            "/api/v1/jobs",
            Some(json!({"name": "report", "app": "default", "plugin": "slow",
                        "schedule": {"kind": "fixed_rate", "every_ms": 500}, "block": "serial"})),
        )
        .await;
    let refused = api
        .call(
            "POST",
            "/api/v1/alarm-rules",
            Some(json!({"name": "behind", "app": "default", "job": "report",
                        "on": "schedule_drift", "channels": ["ops"]})),
        )
        .await;
    assert_eq!(
        refused.0, 422,
        "a drift rule needs its threshold: {}",
        refused.1
    );
    assert!(refused.1.to_string().contains("threshold"), "{}", refused.1);
    api.ok(
        "POST",
        "/api/v1/alarm-rules",
        Some(json!({"name": "behind", "app": "default", "job": "report",
                    "on": "schedule_drift", "threshold": 300, "channels": ["ops"]})),
    )
    .await;
    let a = hook.wait_for_one(b"k3y", "schedule_drift", false).await;
    assert_eq!(a["rule"], "behind");
    let message = a["message"].as_str().unwrap();
    assert!(
        message.contains("ms after its fire time (threshold 300 ms)"),
        "{message}"
    );
    let drift: f64 = api
        .metrics()
        .await
        .lines()
        .find_map(|l| l.strip_prefix("rota_schedule_drift_seconds{job=\"report\"} "))
        .expect("the drift metric")
        .parse()
        .unwrap();
    assert!(drift > 0.3, "the last fire was {drift} s behind");
    api.ok(
        "PATCH",
        &format!("/api/v1/jobs/{}", job["id"]),
        Some(json!({"enabled": false})),
    )
    .await;
}
