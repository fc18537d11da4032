//! TLS end to end, real processes: `rota server` serving its API over HTTPS, a `rota
//! executor` serving the schedulers' calls over HTTPS, each checking the other's
//! certificate against a private CA (`--tls-ca`), and a plugin reaching an `https://`
//! service through `http_request`.

use crate::fixtures;
use crate::support;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::json;
use support::*;
use tokio::net::TcpListener;

/// The test certificate (for 127.0.0.1 and localhost), its key, and the CA that signed it.
fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../net/tests/fixtures")
        .join(name)
}

fn tls_args() -> Vec<std::ffi::OsString> {
    let mut args = Vec::new();
    for (flag, file) in [
        ("--tls-cert", "server.pem"),
        ("--tls-key", "server.key"),
        ("--tls-ca", "ca.pem"),
    ] {
        args.push(flag.into());
        args.push(fixture(file).into_os_string());
    }
    args
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_executor_and_plugin_traffic_over_tls() {
    // The service the plugin calls, over HTTPS.
    let service_tls = rota_net::Tls::load(
        Some(&fixture("server.pem")),
        Some(&fixture("server.key")),
        None,
    )
    .unwrap();
    let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let service = format!("https://127.0.0.1:{}", tcp.local_addr().unwrap().port());
    let app =
        axum::Router::new().route("/hello", axum::routing::get(|| async { "hello over tls" }));
    let listener = service_tls.listener(tcp);
    tokio::spawn(async move { axum::serve(listener, app).await });

    let (db, _db_dir) = sqlite_url();
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let _server = KillOnDrop::logged(
        Command::new(env!("CARGO_BIN_EXE_rota"))
            .args(["server", "--database-url", &db, "--node-name", "tls"])
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .args(tls_args())
            .env("ROTA_EXECUTOR_SECRET", std::str::from_utf8(SECRET).unwrap())
            .env("ROTA_API_TOKEN", TOKEN)
            .env("ROTA_EGRESS_ALLOW", TEST_EGRESS_ALLOW)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("server.log")).unwrap())
            .spawn()
            .unwrap(),
        &dir.path().join("server.log"),
    );
    let url = format!("https://127.0.0.1:{port}");
    let trusting = rota_net::Tls::load(None, None, Some(&fixture("ca.pem"))).unwrap();
    let api = Api::with_client(&url, trusting.client().build().unwrap());
    // Until it listens, connections are refused: not a failure.
    wait_healthy(&api).await;
    // Plain HTTP on the same port gets no answer, and a client without the CA refuses
    // the certificate.
    assert!(
        reqwest::get(format!("http://127.0.0.1:{port}/healthz"))
            .await
            .and_then(|r| r.error_for_status())
            .is_err()
    );
    let err = reqwest::get(format!("{url}/healthz")).await.unwrap_err();
    assert!(err.is_connect(), "{err:?}");

    let executor_port = free_port();
    let mut executor = Command::new(env!("CARGO_BIN_EXE_rota"));
    executor_setup(
        &mut executor,
        "default",
        &url,
        &format!("127.0.0.1:{executor_port}"),
        &dir.path().join("executor"),
    )
    .args(tls_args())
    .stderr(std::fs::File::create(dir.path().join("executor.log")).unwrap());
    let _executor = KillOnDrop::logged(executor.spawn().unwrap(), &dir.path().join("executor.log"));
    let executors = eventually(
        Duration::from_secs(30),
        "the executor to register",
        || async {
            let list = api.ok("GET", "/api/v1/executors", None).await;
            let items = list["items"].as_array().unwrap().clone();
            (!items.is_empty()).then_some(items)
        },
    )
    .await;
    assert_eq!(
        executors[0]["address"],
        format!("https://127.0.0.1:{executor_port}")
    );

    // A run dispatched over HTTPS, whose plugin calls an HTTPS service, reported back and
    // its log read over HTTPS.
    let hello = format!("{service}/hello");
    api.upload("tls-call", fixtures::http_plugin("GET", &hello, ""))
        .await;
    api.ok(
        "POST",
        "/api/v1/jobs",
        Some(
            json!({"name": "tls-call", "app": "default", "plugin": "tls-call",
                    "schedule": {"kind": "none"}, "http_allow": [service]}),
        ),
    )
    .await;
    let task = api
        .ok("POST", "/api/v1/tasks", Some(json!({"job": "tls-call"})))
        .await;
    let task = task_reaches(&api, task["id"].as_i64().unwrap(), "succeeded").await;
    let lines = run_log(&api, task["last_run_id"].as_i64().unwrap()).await;
    assert_eq!(lines[1..], ["200", "hello over tls"], "{lines:?}");
}
