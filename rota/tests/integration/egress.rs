//! The egress policy through the real binary (docs/security.md, "SSRF"): whatever a job's
//! `http_allow` says, a webhook delivery or an alarm never reaches the node itself, its
//! database, loopback or the cloud metadata address unless the admin opened it — and then
//! only what the admin named. A plugin's `http_request` under the same policy is tested
//! with real wasmtime in `executor/tests/integration/host.rs`.
//!
//! Every other test starts its nodes with the test-only allowance
//! [`support::TEST_EGRESS_ALLOW`]; these set `ROTA_EGRESS_ALLOW` themselves.

use crate::support;

use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use support::*;

/// A receiver on 127.0.0.1 that counts what reaches it and answers 200.
async fn receiver() -> (Arc<Mutex<usize>>, u16) {
    let got = Arc::new(Mutex::new(0));
    let seen = got.clone();
    let app = axum::Router::new().fallback(move || {
        let seen = seen.clone();
        async move {
            *seen.lock().unwrap() += 1;
            "ok"
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (got, port)
}

fn webhook_job(name: &str, url: &str) -> Value {
    let origin = url.splitn(4, '/').take(3).collect::<Vec<_>>().join("/");
    json!({"name": name, "app": "default", "schedule": {"kind": "none"},
           "delivery": {"kind": "http", "url": url, "timeout_ms": 2_000},
           "http_allow": [origin], "max_attempts": 1})
}

/// Creating `job` is refused with a 422: its error.
async fn refused(api: &Api, job: Value) -> String {
    let (status, body) = api.call("POST", "/api/v1/jobs", Some(job)).await;
    assert_eq!(status, 422, "{body}");
    body["error"].as_str().unwrap().to_owned()
}

/// The first run's message of task `id`, once the task is finished.
async fn run_message(api: &Api, id: i64, status: &str) -> String {
    task_reaches(api, id, status).await;
    let runs = api
        .ok("GET", &format!("/api/v1/runs?task={id}"), None)
        .await;
    runs["items"][0]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// The reproduction: even with all of loopback opened by the admin, a job cannot
/// POST to the node's own API or its embedded executor (save-time 422, naming the rule).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_cannot_reach_the_node_itself_even_where_the_admin_opened_loopback() {
    let dir = tempfile::tempdir().unwrap();
    let node = Standalone::start_with_env(dir.path(), &[("ROTA_EGRESS_ALLOW", "127.0.0.0/8")]);
    wait_ready(&node.api).await;
    let own = format!("{}/api/v1/jobs", node.api.base);
    let e = refused(&node.api, webhook_job("self", &own)).await;
    assert!(
        e.contains("the egress policy refuses 127.0.0.1:")
            && e.contains("this node's API and console (port "),
        "{e}"
    );
    let executors = node.api.ok("GET", "/api/v1/executors", None).await;
    let executor = executors["items"][0]["address"]
        .as_str()
        .unwrap()
        .to_owned();
    let e = refused(&node.api, webhook_job("exec", &format!("{executor}/run"))).await;
    assert!(e.contains("the embedded executor (port "), "{e}");
    // The metadata address is a /32: opening 127.0.0.0/8 (or 169.254.0.0/16) leaves it shut.
    let meta = webhook_job("meta", "http://169.254.169.254/latest/meta-data/");
    let e = refused(&node.api, meta).await;
    assert!(e.contains("the cloud metadata address"), "{e}");
    // The start was audited with the rule that widened the policy.
    let audit = node.api.ok("GET", "/api/v1/audit?limit=50", None).await;
    assert!(
        audit["items"].as_array().unwrap().iter().any(|e| {
            e["action"] == "egress policy" && e["target"] == "--egress-allow 127.0.0.0/8"
        }),
        "{audit}"
    );
}

/// A `rota server` on MariaDB: a job cannot reach the database's host and port, even with
/// loopback opened.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_cannot_reach_the_nodes_database() {
    let Some(db) = rota_testkit::MysqlDb::create("rota_eg").await else {
        return; // `create` reported what is missing
    };
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let _server = spawn_server_env(
        &db.url,
        port,
        &dir.path().join("server.log"),
        "egress",
        &[("ROTA_EGRESS_ALLOW", "127.0.0.0/8")],
    );
    let api = Api::new(format!("http://127.0.0.1:{port}"));
    wait_healthy(&api).await;
    let address = db.url.split('@').nth(1).unwrap().split('/').next().unwrap();
    let e = refused(&api, webhook_job("db", &format!("http://{address}/"))).await;
    assert!(e.contains("this node's database (127.0.0.1:"), "{e}");
    drop(_server);
    db.drop_db().await;
}

/// An admin's exception opens exactly one destination; when the admin closes it again (a
/// restart with the default policy), deliveries and alarms already saved send nothing —
/// by address or by a name that resolves to it — and say which rule refused them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_and_alarms_the_policy_refuses_send_nothing_and_name_the_rule() {
    let (got, port) = receiver().await;
    let dir = tempfile::tempdir().unwrap();
    let exception = format!("127.0.0.1:{port},[::1]:{port}");
    let node = Standalone::start_with_env(dir.path(), &[("ROTA_EGRESS_ALLOW", &exception)]);
    let api = &node.api;
    let by_ip = format!("http://127.0.0.1:{port}/hook");
    let by_name = format!("http://localhost:{port}/hook");
    api.ok("POST", "/api/v1/jobs", Some(webhook_job("by-ip", &by_ip)))
        .await;
    api.ok(
        "POST",
        "/api/v1/jobs",
        Some(webhook_job("by-name", &by_name)),
    )
    .await;
    api.ok(
        "POST",
        "/api/v1/alarm-channels",
        Some(json!({"name": "ops", "kind": "webhook", "url": by_name})),
    )
    .await;
    // Exactly that port: the next one is still loopback, denied.
    let next = format!("http://127.0.0.1:{}/hook", port + 1);
    let e = refused(api, webhook_job("next", &next)).await;
    assert!(e.contains("loopback"), "{e}");
    let ids = api
        .add_tasks(vec![json!({"job": "by-ip"}), json!({"job": "by-name"})])
        .await;
    for id in &ids {
        let m = run_message(api, *id, "succeeded").await;
        assert_eq!(m, "HTTP 200", "task {id}");
    }
    api.ok("POST", "/api/v1/alarm-channels/ops/test", None)
        .await;
    let delivered = *got.lock().unwrap();
    assert_eq!(delivered, 3, "two deliveries and one alarm");

    drop(node);
    let node = Standalone::start_with_env(dir.path(), &[("ROTA_EGRESS_ALLOW", "")]);
    let api = &node.api;
    let ids = api
        .add_tasks(vec![json!({"job": "by-ip"}), json!({"job": "by-name"})])
        .await;
    let m = run_message(api, ids[0], "dead").await;
    assert_eq!(
        m,
        format!(
            "nothing was sent to {by_ip}: the egress policy refuses 127.0.0.1:{port}: \
             loopback (127.0.0.0/8, denied by default)"
        )
    );
    let m = run_message(api, ids[1], "dead").await;
    assert!(
        m.starts_with(&format!(
            "nothing was sent to {by_name}: the egress policy refuses localhost:{port} \
             (resolves to "
        )) && m.contains("loopback ("),
        "{m}"
    );
    let (status, body) = api
        .call("POST", "/api/v1/alarm-channels/ops/test", None)
        .await;
    assert_eq!(status, 502, "{body}");
    let e = body["error"].as_str().unwrap();
    assert!(
        e.contains("nothing was sent: the egress policy refuses localhost:"),
        "{e}"
    );
    assert_eq!(*got.lock().unwrap(), delivered, "nothing more arrived");
}
