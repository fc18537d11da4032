//! The `rota` import module with real wasmtime, `.wat` fixtures and a real HTTP server on
//! 127.0.0.1: the allow-list, redirects, limits, the log lines, key-value state and
//! secrets (in memory here, as `rota plugin run` keeps them; `rota/tests` covers the
//! scheduler-backed ones).

use crate::common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::{HeaderMap, StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use rota_executor::logs::RunLog;
use rota_executor::runtime::host::{HostAccess, LocalServices, Services};
use rota_executor::runtime::{
    Invocation, PluginEnv, RunOutcome, RunStatus, Runtime, RuntimeConfig,
};
use rota_net::egress::Policy;
use rota_proto::allow::AllowList;
use tokio_util::sync::CancellationToken;

/// A runtime whose egress policy opens 127.0.0.1, where this file's server listens: the
/// explicit, test-only allowance (the policy itself is tested with [`runtime_with`]).
fn runtime() -> Runtime {
    runtime_with(Policy::new(&["127.0.0.1".into()], &[]).unwrap())
}

fn runtime_with(egress: Policy) -> Runtime {
    Runtime::new(RuntimeConfig {
        max_instances: 4,
        egress,
        ..RuntimeConfig::default()
    })
    .unwrap()
}

fn access(allow: &[String], services: &Services) -> HostAccess {
    HostAccess {
        allow: AllowList::parse(allow).unwrap(),
        job_id: 7,
        services: services.clone(),
    }
}

fn local(secrets: &[(&str, &str)]) -> Services {
    Services::Local(Arc::new(LocalServices {
        kv: Default::default(),
        secrets: secrets
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    }))
}

/// Runs `wat` once (on a blocking thread: runs block) and returns its status and log.
async fn run(
    rt: &Runtime,
    wat: String,
    input: Vec<u8>,
    access: Option<HostAccess>,
) -> (RunStatus, Vec<String>) {
    let (outcome, lines) = run_to_end(rt, wat, input, access).await;
    (outcome.status, lines)
}

/// [`run`], with the whole outcome.
async fn run_to_end(
    rt: &Runtime,
    wat: String,
    input: Vec<u8>,
    access: Option<HostAccess>,
) -> (RunOutcome, Vec<String>) {
    let rt = rt.clone();
    tokio::task::spawn_blocking(move || {
        let (wasm, sha256) = common::compiled(&wat);
        let plugin = rt.compile(&sha256, &wasm).unwrap();
        let env = PluginEnv::default();
        let invocation = Invocation {
            plugin_name: "host",
            input: &input,
            params: None,
            env: &env,
            timeout: Duration::from_secs(20),
            memory_mb: 0,
            host: access.as_ref(),
        };
        let log = RunLog::memory(1 << 20);
        let outcome = rt.run(&plugin, &invocation, &log, &CancellationToken::new());
        (outcome, log.lines())
    })
    .await
    .unwrap()
}

/// The test's HTTP server: what it was asked, and a few endpoints.
struct Server {
    base: String,
    requests: Arc<Mutex<Vec<String>>>,
}

async fn server() -> Server {
    let requests = Arc::new(Mutex::new(Vec::new()));
    let seen = |path: &'static str| {
        let requests = requests.clone();
        move || {
            requests.lock().unwrap().push(path.to_owned());
        }
    };
    let orders = seen("/orders/42");
    let big = seen("/big");
    let app = axum::Router::new()
        .route(
            "/orders/42",
            get(move || async move {
                orders();
                "unpaid"
            }),
        )
        .route(
            "/redirect-in",
            get(|| async { (StatusCode::FOUND, [(header::LOCATION, "/orders/42")]) }),
        )
        .route(
            "/redirect-out",
            get(|| async {
                (
                    StatusCode::FOUND,
                    [(header::LOCATION, "http://example.invalid/steal")],
                )
            }),
        )
        .route(
            "/redirect-meta",
            get(|| async {
                (
                    StatusCode::FOUND,
                    [(header::LOCATION, "http://169.254.169.254/latest/meta-data/")],
                )
            }),
        )
        .route(
            "/big",
            get(move || async move {
                big();
                vec![b'x'; 2 << 20]
            }),
        )
        .route(
            "/echo",
            post(|headers: HeaderMap, body: String| async move {
                let tag = headers
                    .get("x-test")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("-")
                    .to_owned();
                ([("x-reply", "yes")], format!("{tag}:{body}")).into_response()
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    Server { base, requests }
}

/// The egress policy bounds every job's allow-list: under the defaults, a job that lists
/// loopback, a name that resolves to it, the metadata address or an IPv6 link-local one
/// reaches none of them, and the log names the rule; an admin's exception opens exactly
/// one destination, and a redirect from it to a denied address is refused at that hop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_egress_policy_bounds_the_allow_list_at_every_hop() {
    let s = server().await;
    let services = local(&[]);
    let port = s.base.rsplit(':').next().unwrap().to_owned();
    let by_name = format!("http://localhost:{port}");
    let listed = [
        s.base.clone(),
        by_name.clone(),
        "http://169.254.169.254".to_owned(),
        "http://[fe80::1]:8080".to_owned(),
    ];
    let job = access(&listed, &services);

    let defaults = runtime_with(Policy::default());
    for (url, rule) in [
        (format!("{}/orders/42", s.base), "loopback (127.0.0.0/8"),
        (format!("{by_name}/orders/42"), "loopback ("),
        (
            "http://169.254.169.254/latest/meta-data/".to_owned(),
            "the cloud metadata address (169.254.169.254/32",
        ),
        ("http://[fe80::1]:8080/".to_owned(), "link-local (fe80::/10"),
    ] {
        let (status, lines) = run(
            &defaults,
            common::http_plugin("GET", &url, ""),
            vec![],
            Some(job.clone()),
        )
        .await;
        assert_eq!(status, RunStatus::Succeeded, "{url}");
        assert!(
            lines[0].starts_with(&format!(
                "[rota] http GET {url} refused: the egress policy refuses "
            )) && lines[0].contains(rule),
            "{url}: {lines:?}"
        );
        assert_eq!(lines[1], "-1", "DENIED, for {url}: {lines:?}");
    }
    assert!(
        s.requests.lock().unwrap().is_empty(),
        "nothing reached the server"
    );

    // The admin opens exactly this port of 127.0.0.1.
    let exception = runtime_with(Policy::new(&[format!("127.0.0.1:{port}")], &[]).unwrap());
    let (_, lines) = run(
        &exception,
        common::http_plugin("GET", &format!("{}/orders/42", s.base), ""),
        vec![],
        Some(job.clone()),
    )
    .await;
    assert_eq!(lines[1..], ["200", "unpaid"], "{lines:?}");
    let (_, lines) = run(
        &exception,
        common::http_plugin("GET", &format!("{}/redirect-meta", s.base), ""),
        vec![],
        Some(job.clone()),
    )
    .await;
    assert!(
        lines[0].contains("/redirect-meta -> 302"),
        "the first hop went out: {lines:?}"
    );
    assert!(
        lines[1].starts_with(
            "[rota] http GET http://169.254.169.254/latest/meta-data/ refused: the egress \
             policy refuses 169.254.169.254:80: the cloud metadata address"
        ),
        "the second hop is refused: {lines:?}"
    );
    assert_eq!(lines[2], "-1", "{lines:?}");
    let other = format!("http://127.0.0.1:{}/", port.parse::<u16>().unwrap() ^ 1);
    let (_, lines) = run(
        &exception,
        common::http_plugin("GET", &other, ""),
        vec![],
        Some(access(std::slice::from_ref(&other), &services)),
    )
    .await;
    assert!(lines[0].contains("refused: the egress policy"), "{lines:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_reaches_only_the_allow_list_and_is_logged_without_queries() {
    let rt = runtime();
    let s = server().await;
    let services = local(&[]);
    let open = access(std::slice::from_ref(&s.base), &services);

    // Allowed: the body comes back, the log says what was asked, without the query.
    let url = format!("{}/orders/42?token=hunter2", s.base);
    let (status, lines) = run(
        &rt,
        common::http_plugin("GET", &url, ""),
        vec![],
        Some(open.clone()),
    )
    .await;
    assert_eq!(status, RunStatus::Succeeded);
    assert_eq!(lines[1..], ["200", "unpaid"], "{lines:?}");
    assert!(
        lines[0].starts_with(&format!("[rota] http GET {}/orders/42?… -> 200 (", s.base)),
        "{lines:?}"
    );
    assert!(lines.iter().all(|l| !l.contains("hunter2")), "{lines:?}");

    // A POST with a header and a body.
    let (_, lines) = run(
        &rt,
        common::http_plugin("post", &format!("{}/echo", s.base), "X-Test: tagged\n"),
        b"hello".to_vec(),
        Some(open.clone()),
    )
    .await;
    assert_eq!(lines[1..], ["200", "tagged:hello"], "{lines:?}");

    // Not on the list (an empty list, or a prefix that does not cover the path): denied,
    // logged, and nothing reaches the server.
    let before = s.requests.lock().unwrap().len();
    let prefix = access(&[format!("{}/orders", s.base)], &services);
    for (who, access) in [("empty", access(&[], &services)), ("prefix", prefix)] {
        let (status, lines) = run(
            &rt,
            common::http_plugin("GET", &format!("{}/big", s.base), ""),
            vec![],
            Some(access),
        )
        .await;
        assert_eq!(status, RunStatus::Succeeded, "{who}");
        let denied = format!(
            "http GET {}/big denied: not on the job's allow-list",
            s.base
        );
        assert_eq!(lines[0], format!("[rota] {denied}"), "{who}: {lines:?}");
        assert_eq!(lines[1..], ["-1".to_owned(), denied], "{who}");
    }
    assert_eq!(s.requests.lock().unwrap().len(), before, "nothing was sent");

    // Redirects: followed within the list, refused out of it.
    let (_, lines) = run(
        &rt,
        common::http_plugin("GET", &format!("{}/redirect-in", s.base), ""),
        vec![],
        Some(open.clone()),
    )
    .await;
    assert_eq!(lines[lines.len() - 2..], ["200", "unpaid"], "{lines:?}");
    let (_, lines) = run(
        &rt,
        common::http_plugin("GET", &format!("{}/redirect-out", s.base), ""),
        vec![],
        Some(open.clone()),
    )
    .await;
    assert!(
        lines.iter().any(|l| l
            == "[rota] http GET http://example.invalid/steal denied: not on the job's allow-list"),
        "{lines:?}"
    );
    assert_eq!(lines[lines.len() - 2], "-1", "{lines:?}");

    // A response over 1 MiB is refused.
    let (_, lines) = run(
        &rt,
        common::http_plugin("GET", &format!("{}/big", s.base), ""),
        vec![],
        Some(open.clone()),
    )
    .await;
    assert_eq!(lines[lines.len() - 2], "-3", "{lines:?}");
    assert!(
        lines[lines.len() - 1].ends_with("the response body is over 1048576 bytes; refused"),
        "{lines:?}"
    );

    // Bad arguments are INVALID; a port nobody listens on is FAILED.
    for (method, url, headers) in [
        ("GE T", format!("{}/orders/42", s.base), ""),
        (
            "GET",
            format!("{}/orders/42", s.base),
            "Host: evil.example\n",
        ),
        ("GET", "not a url".to_owned(), ""),
    ] {
        let (_, lines) = run(
            &rt,
            common::http_plugin(method, &url, headers),
            vec![],
            Some(open.clone()),
        )
        .await;
        assert_eq!(lines[0], "-4", "{method} {url} {headers:?}: {lines:?}");
    }
    let closed = format!("http://127.0.0.1:{}", {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    });
    let (_, lines) = run(
        &rt,
        common::http_plugin("GET", &format!("{closed}/x"), ""),
        vec![],
        Some(access(std::slice::from_ref(&closed), &services)),
    )
    .await;
    assert_eq!(lines[lines.len() - 2], "-5", "{lines:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_value_state_is_kept_and_oversized_values_are_refused() {
    let rt = runtime();
    let services = local(&[]);
    let with = || Some(access(&[], &services));
    let (_, lines) = run(&rt, common::kv_plugin(), b"alpha".to_vec(), with()).await;
    assert_eq!(lines, ["-2", "0"], "first run: no key, then set");
    let (_, lines) = run(&rt, common::kv_plugin(), b"beta".to_vec(), with()).await;
    assert_eq!(lines, ["5", "alpha", "0"]);
    let (_, lines) = run(&rt, common::kv_plugin(), vec![b'v'; 70_000], with()).await;
    assert_eq!(
        lines,
        [
            "4",
            "beta",
            "-3",
            "a value may be at most 65536 bytes, not 70000"
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_sets_its_output_and_an_oversized_one_is_refused() {
    let rt = runtime();
    let doc = br#"{"orders": [1, 2, 3]}"#.to_vec();
    let (outcome, lines) = run_to_end(&rt, common::output_plugin(), doc, None).await;
    assert_eq!(lines, ["0"]);
    assert_eq!(outcome.status, RunStatus::Succeeded);
    assert_eq!(outcome.output.as_deref(), Some(r#"{"orders": [1, 2, 3]}"#));
    let (outcome, lines) = run_to_end(&rt, common::output_plugin(), vec![b'o'; 70_000], None).await;
    assert_eq!(
        lines,
        ["-4", "output of 70000 bytes, at most 65536 allowed"],
        "the plugin can read why"
    );
    assert_eq!(outcome.output, None, "nothing was set");
    let (outcome, _) = run_to_end(&rt, common::output_plugin(), vec![0xff, 0xfe], None).await;
    assert_eq!(outcome.output, None, "not UTF-8");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_are_read_by_name_and_runs_without_access_are_denied() {
    let rt = runtime();
    let services = local(&[("ORDER_TOKEN", "tok-123")]);
    let (_, lines) = run(
        &rt,
        common::secret_plugin("ORDER_TOKEN", true),
        vec![],
        Some(access(&[], &services)),
    )
    .await;
    assert_eq!(lines, ["7", "tok-123"]);
    let (_, lines) = run(
        &rt,
        common::secret_plugin("NOPE", true),
        vec![],
        Some(access(&[], &services)),
    )
    .await;
    assert_eq!(lines, ["-2", "no secret `NOPE` for this app"]);
    let (status, lines) = run(&rt, common::kv_plugin(), b"x".to_vec(), None).await;
    assert_eq!(status, RunStatus::Succeeded);
    assert_eq!(
        lines,
        [
            "-1",
            "-1",
            "this run has no host access (no job, no scheduler)"
        ]
    );
}

/// A run that times out while its `http_request` waits for an answer takes the request
/// down with it: the connection closes when the run ends, not when the client's own 30 s
/// timeout would have fired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timed_out_runs_request_ends_with_it() {
    use tokio::io::AsyncReadExt;

    // A server that reads the request and never answers; it reports when the peer closes.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (closed_tx, closed_rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let (mut conn, _) = listener.accept().await.unwrap();
        let mut buf = [0u8; 4096];
        while conn.read(&mut buf).await.map(|n| n > 0).unwrap_or(false) {}
        let _ = closed_tx.send(());
    });

    let rt = runtime();
    let services = local(&[]);
    let open = access(std::slice::from_ref(&base), &services);
    let url = format!("{base}/never");
    let ended = tokio::task::spawn_blocking(move || {
        let (wasm, sha256) = common::compiled(&common::http_plugin("GET", &url, ""));
        let plugin = rt.compile(&sha256, &wasm).unwrap();
        let env = PluginEnv::default();
        let invocation = Invocation {
            plugin_name: "host",
            input: b"",
            params: None,
            env: &env,
            timeout: Duration::from_millis(300),
            memory_mb: 0,
            host: Some(&open),
        };
        let log = RunLog::memory(1 << 20);
        let outcome = rt.run(&plugin, &invocation, &log, &CancellationToken::new());
        outcome.status
    })
    .await
    .unwrap();
    assert_eq!(ended, RunStatus::Timeout);
    // Well inside the client's 30 s request timeout: the request went with the run.
    tokio::time::timeout(Duration::from_secs(10), closed_rx)
        .await
        .expect("the request was still open 10 s after its run timed out")
        .expect("the server saw the connection end");
}
