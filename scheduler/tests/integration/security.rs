//! The node's attack surface, walked whole: every route of the router refuses callers
//! without the credentials its guard wants, and a battery of malformed requests across the
//! endpoints is answered with a 4xx naming the problem, leaving the node healthy.
//!
//! Through `router(state).oneshot(req)` on a real SQLite store in a temp dir.

use crate::support;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use rota_scheduler::api::{Guard, route_table};
use rota_scheduler::console::auth::token_hash;
use serde_json::{Value, json};
use support::{Answer, SECRET, TOKEN, TestApp};
use tower::ServiceExt;

const START: &str = r#"(module (func (export "_start")))"#;

async fn start() -> TestApp {
    TestApp::start_with(|_| {}).await
}

/// How a request authenticates itself.
#[derive(Debug, Clone, Copy)]
enum As<'a> {
    Nobody,
    Bearer(&'a str),
    /// Signed as an executor of this app, with the key derived from this master secret.
    Executor(&'a str, &'a [u8]),
    /// Signed as a scheduler node, with this master secret.
    Peer(&'a [u8]),
    Cookie(&'a str),
}

/// This module's calls on the shared [`TestApp`] (a trait: each test module keeps its own).
trait SecurityCalls {
    async fn request(
        &self,
        who: As<'_>,
        method: Method,
        path: &str,
        content_type: Option<&str>,
        body: Vec<u8>,
    ) -> Answer;
    async fn api(&self, method: Method, path: &str, body: Option<Value>) -> Answer;
    async fn upload_echo(&self) -> Answer;
    async fn token_of(&self, name: &str, role: &str) -> String;
}

impl SecurityCalls for TestApp {
    async fn request(
        &self,
        who: As<'_>,
        method: Method,
        path: &str,
        content_type: Option<&str>,
        body: Vec<u8>,
    ) -> Answer {
        let mut req = Request::builder().method(method.clone()).uri(path);
        if let Some(ct) = content_type {
            req = req.header(header::CONTENT_TYPE, ct);
        }
        let key = match who {
            As::Nobody => None,
            As::Bearer(token) => {
                req = req.header(header::AUTHORIZATION, format!("Bearer {token}"));
                None
            }
            As::Cookie(cookie) => {
                req = req.header(header::COOKIE, cookie);
                None
            }
            As::Executor(app, master) => {
                req = req.header(rota_proto::HEADER_APP, app);
                Some(rota_proto::app_secret(
                    &rota_proto::Secret::new(master),
                    app,
                ))
            }
            As::Peer(master) => Some(rota_proto::Secret::new(master)),
        };
        if let Some(key) = key {
            let now = chrono::Utc::now().timestamp_millis();
            let signed = rota_proto::sign_now(key.as_bytes(), method.as_str(), path, now, &body);
            for (name, value) in signed.pairs() {
                req = req.header(name, value);
            }
        }
        self.reply(req.body(Body::from(body)).unwrap()).await
    }

    async fn api(&self, method: Method, path: &str, body: Option<Value>) -> Answer {
        let (ct, body) = match body {
            Some(v) => (Some("application/json"), v.to_string().into_bytes()),
            None => (None, Vec::new()),
        };
        self.request(As::Bearer(TOKEN), method, path, ct, body)
            .await
    }

    /// Uploads the `echo` plugin; its answer.
    async fn upload_echo(&self) -> Answer {
        let upload = self
            .request(
                As::Bearer(TOKEN),
                Method::POST,
                "/api/v1/plugins?name=echo",
                Some("application/wasm"),
                START.as_bytes().to_vec(),
            )
            .await;
        assert_eq!(upload.status, StatusCode::CREATED, "{}", upload.text);
        upload
    }

    /// A user with this role over app `default`, and an API token of theirs.
    async fn token_of(&self, name: &str, role: &str) -> String {
        let store = self.node.ports().store();
        let now = chrono::Utc::now().timestamp_millis();
        let user = store
            .insert_user(name, "not-a-hash", role, "default", now)
            .await
            .unwrap();
        let token = format!("token-of-{name}-0123456789");
        store
            .insert_token(user, "test", &token_hash(&token), now)
            .await
            .unwrap();
        token
    }
}

/// A route's path with its parameters filled in.
fn concrete(path: &str) -> String {
    path.replace("{id}", "1")
        .replace("{name}", "echo")
        .replace("{app}", "default")
        .replace("{tag}", "en")
        .replace("{sha256}", &"0".repeat(64))
}

/// Every route of the router, walked with no credentials and with the wrong kind: each
/// answers 401 or 403 (and a console page asked for by a browser sends it to the login
/// form), and only the routes on the open list are reachable by anyone.
#[tokio::test]
async fn every_route_refuses_callers_without_proper_credentials() {
    let t = start().await;
    let table = route_table();
    assert!(table.len() >= 60, "{} routes: {table:?}", table.len());

    let mut open: Vec<String> = table
        .iter()
        .filter(|(_, _, g)| *g == Guard::Open)
        .map(|(m, p, _)| format!("{m} {p}"))
        .collect();
    open.sort();
    assert_eq!(
        open,
        [
            "GET /",
            "GET /favicon.ico",
            "GET /healthz",
            "GET /lang/{tag}",
            "GET /login",
            "GET /login/oidc",
            "GET /login/oidc/callback",
            "GET /readyz",
            "GET /static/console.css",
            "GET /static/console.js",
            "GET /static/favicon.svg",
            "POST /login",
        ],
        "a route became open to anyone"
    );

    let viewer = t.token_of("vera", "viewer").await;
    let wrong_master: &[u8] = b"not-the-master-secret";
    let mut checked = 0;
    for (method, path, guard) in &table {
        let path = concrete(path);
        let json = Some("application/json");
        let body = b"{}".to_vec();
        let what = format!("{method} {path} ({guard:?})");
        match guard {
            Guard::Open => continue,
            Guard::Token => {
                for who in [
                    As::Nobody,
                    As::Bearer("wrong-token"),
                    As::Bearer(""),
                    As::Cookie("rota_session=forged"),
                    As::Executor("default", SECRET),
                    As::Peer(SECRET),
                ] {
                    let res = t
                        .request(who, method.clone(), &path, json, body.clone())
                        .await;
                    assert_eq!(res.status, StatusCode::UNAUTHORIZED, "{what} as {who:?}");
                    assert!(res.error().contains("token"), "{what}: {}", res.text);
                }
                // A viewer reads, but changes nothing.
                if *method != Method::GET {
                    let res = t
                        .request(
                            As::Bearer(&viewer),
                            method.clone(),
                            &path,
                            json,
                            body.clone(),
                        )
                        .await;
                    // Refused by the role, before the made-up body is even read.
                    assert_eq!(
                        res.status,
                        StatusCode::FORBIDDEN,
                        "{what} as a viewer: {}",
                        res.text
                    );
                    assert!(res.error().contains("viewer"), "{what}: {}", res.text);
                }
            }
            Guard::Signature => {
                for who in [
                    As::Nobody,
                    As::Bearer(TOKEN),
                    As::Cookie("rota_session=forged"),
                    As::Executor("default", wrong_master),
                    As::Peer(wrong_master),
                ] {
                    let res = t
                        .request(who, method.clone(), &path, json, body.clone())
                        .await;
                    assert_eq!(res.status, StatusCode::UNAUTHORIZED, "{what} as {who:?}");
                    res.error();
                }
                // Right key, wrong kind of caller: executors and nodes have their own routes.
                let wrong_kind = if path.starts_with("/api/node/") {
                    As::Executor("default", SECRET)
                } else {
                    As::Peer(SECRET)
                };
                let res = t
                    .request(wrong_kind, method.clone(), &path, json, body.clone())
                    .await;
                assert!(
                    matches!(res.status, StatusCode::FORBIDDEN | StatusCode::BAD_REQUEST),
                    "{what} as {wrong_kind:?}: {} {}",
                    res.status,
                    res.text
                );
            }
            Guard::Session => {
                for who in [
                    As::Nobody,
                    As::Cookie("rota_session=forged"),
                    As::Bearer(TOKEN),
                    As::Executor("default", SECRET),
                ] {
                    let res = t
                        .request(
                            who,
                            method.clone(),
                            &path,
                            Some("application/x-www-form-urlencoded"),
                            Vec::new(),
                        )
                        .await;
                    let want = if *method == Method::GET {
                        StatusCode::UNAUTHORIZED
                    } else {
                        StatusCode::FORBIDDEN
                    };
                    assert_eq!(res.status, want, "{what} as {who:?}: {}", res.text);
                }
                // A browser asking for the page without a session is sent to the login form.
                if *method == Method::GET {
                    let req = Request::get(&path)
                        .header(header::ACCEPT, "text/html")
                        .body(Body::empty())
                        .unwrap();
                    let res = t.app.clone().oneshot(req).await.unwrap();
                    assert_eq!(res.status(), StatusCode::SEE_OTHER, "{what}");
                    assert_eq!(res.headers()[header::LOCATION], "/login", "{what}");
                }
            }
        }
        checked += 1;
    }
    assert!(checked >= 50, "{checked} guarded routes");
    println!(
        "{} routes, {checked} guarded, each refused without proper credentials",
        table.len()
    );
    t.upload_echo().await;
    // With a body that would be accepted from an operator, the viewer's change is a 403.
    let viewer_job = t
        .request(
            As::Bearer(&viewer),
            Method::POST,
            "/api/v1/jobs",
            Some("application/json"),
            json!({"name": "v", "app": "default", "plugin": "echo", "schedule": {"kind": "none"}})
                .to_string()
                .into_bytes(),
        )
        .await;
    assert_eq!(
        viewer_job.status,
        StatusCode::FORBIDDEN,
        "{}",
        viewer_job.text
    );
    assert!(viewer_job.error().contains("viewer"));
    t.stop().await;
}

/// An executor speaks for its own app only: its key registers, reports and reads nothing
/// of another app's.
#[tokio::test]
async fn an_executor_of_one_app_cannot_act_for_another() {
    let t = start().await;
    let upload = t.upload_echo().await;
    let sha: Value = serde_json::from_str(&upload.text).unwrap();
    let sha = sha["sha256"].as_str().unwrap().to_owned();
    let job = t
        .api(
            Method::POST,
            "/api/v1/jobs",
            Some(json!({"name": "billing-job", "app": "billing", "plugin": "echo", "schedule": {"kind": "none"}})),
        )
        .await;
    assert_eq!(job.status, StatusCode::CREATED, "{}", job.text);
    let job_id = serde_json::from_str::<Value>(&job.text).unwrap()["id"]
        .as_i64()
        .unwrap();
    let task = t
        .api(
            Method::POST,
            "/api/v1/tasks",
            Some(json!({"job": "billing-job", "delay_ms": 600000})),
        )
        .await;
    assert_eq!(task.status, StatusCode::CREATED, "{}", task.text);
    let task_id = serde_json::from_str::<Value>(&task.text).unwrap()["id"]
        .as_i64()
        .unwrap();

    let shop = As::Executor("shop", SECRET);
    let billing = As::Executor("billing", SECRET);
    let json = Some("application/json");
    let reg = |app: &str| {
        json!({"app": app, "address": "http://127.0.0.1:9", "capacity": 1, "running": 0, "active_runs": []})
            .to_string()
            .into_bytes()
    };
    // Registering, beating or leaving as another app.
    for path in [
        rota_proto::wire::PATH_REGISTER,
        rota_proto::wire::PATH_HEARTBEAT,
    ] {
        let res = t
            .request(shop, Method::POST, path, json, reg("billing"))
            .await;
        assert_eq!(res.status, StatusCode::FORBIDDEN, "{path}: {}", res.text);
        assert!(res.error().contains("app `shop`"));
    }
    let res = t
        .request(
            shop,
            Method::POST,
            rota_proto::wire::PATH_DEREGISTER,
            json,
            br#"{"app":"billing","address":"http://127.0.0.1:9"}"#.to_vec(),
        )
        .await;
    assert_eq!(res.status, StatusCode::FORBIDDEN);
    // The right app's key is welcome.
    let res = t
        .request(
            billing,
            Method::POST,
            rota_proto::wire::PATH_REGISTER,
            json,
            reg("billing"),
        )
        .await;
    assert_eq!(res.status, StatusCode::OK, "{}", res.text);

    // Fetching the other app's plugin.
    let path = rota_proto::wire::plugin_path(&sha);
    let res = t.request(shop, Method::GET, &path, None, Vec::new()).await;
    assert_eq!(res.status, StatusCode::NOT_FOUND);
    let res = t
        .request(billing, Method::GET, &path, None, Vec::new())
        .await;
    assert_eq!(res.status, StatusCode::OK);

    // Reporting on the other app's task.
    let report = json!({"reports": [{
        "run_id": 42, "job_id": job_id, "task_id": task_id, "attempt": 1,
        "shard_index": 0, "shard_total": 1, "executor": "http://127.0.0.1:9",
        "scheduled_at": 0, "status": "succeeded"
    }]});
    let res = t
        .request(
            shop,
            Method::POST,
            rota_proto::wire::PATH_CALLBACK,
            json,
            report.to_string().into_bytes(),
        )
        .await;
    // Dropped, not refused (the executor must not retry it forever), and without effect.
    assert_eq!(res.status, StatusCode::OK, "{}", res.text);
    let task = t
        .api(Method::GET, &format!("/api/v1/tasks/{task_id}"), None)
        .await;
    assert!(task.text.contains("\"pending\""), "{}", task.text);
    let run = t.api(Method::GET, "/api/v1/runs/42", None).await;
    assert_eq!(run.status, StatusCode::NOT_FOUND, "{}", run.text);

    // The other app's job state and secrets.
    for (path, body) in [
        (
            rota_proto::wire::PATH_KV,
            json!({"app": "billing", "job_id": job_id, "op": "get", "key": "k"}),
        ),
        (
            rota_proto::wire::PATH_SECRET,
            json!({"app": "billing", "job_id": job_id, "name": "db"}),
        ),
    ] {
        let res = t
            .request(
                shop,
                Method::POST,
                path,
                json,
                body.to_string().into_bytes(),
            )
            .await;
        assert_eq!(res.status, StatusCode::FORBIDDEN, "{path}: {}", res.text);
    }
    // Once the job is deleted its tasks name no app: a report about one from another
    // app's executor (which no run was recorded as sent to) is still dropped.
    let deleted = t
        .api(
            Method::DELETE,
            &format!("/api/v1/jobs/{job_id}?force=true"),
            None,
        )
        .await;
    assert_eq!(deleted.status, StatusCode::NO_CONTENT, "{}", deleted.text);
    let res = t
        .request(
            shop,
            Method::POST,
            rota_proto::wire::PATH_CALLBACK,
            json,
            report.to_string().into_bytes(),
        )
        .await;
    assert_eq!(res.status, StatusCode::OK, "{}", res.text);
    let run = t.api(Method::GET, "/api/v1/runs/42", None).await;
    assert_eq!(run.status, StatusCode::NOT_FOUND, "{}", run.text);
    t.stop().await;
}

/// A plugin cannot fill the database through `kv_set`: a job's state holds at most
/// `KV_KEYS_PER_JOB` keys and `KV_BYTES_PER_JOB` bytes; past that a `set` is a 413 that
/// says so, while replacing a key within the bound still works.
#[tokio::test]
async fn a_jobs_key_value_state_is_bounded() {
    use base64::Engine as _;
    let t = start().await;
    t.upload_echo().await;
    let job = t
        .api(
            Method::POST,
            "/api/v1/jobs",
            Some(json!({"name": "kv-job", "app": "billing", "plugin": "echo", "schedule": {"kind": "none"}})),
        )
        .await;
    let job_id = serde_json::from_str::<Value>(&job.text).unwrap()["id"]
        .as_i64()
        .unwrap();
    let billing = As::Executor("billing", SECRET);
    let value =
        base64::engine::general_purpose::STANDARD.encode(vec![7u8; rota_proto::wire::KV_VALUE_MAX]);
    let set = |key: String| {
        json!({"app": "billing", "job_id": job_id, "op": "set", "key": key, "value": value})
            .to_string()
            .into_bytes()
    };
    let per_key = rota_proto::wire::KV_VALUE_MAX + 4;
    let fit = rota_proto::wire::KV_BYTES_PER_JOB / per_key;
    for i in 0..fit {
        let res = t
            .request(
                billing,
                Method::POST,
                rota_proto::wire::PATH_KV,
                Some("application/json"),
                set(format!("k{i:03}")),
            )
            .await;
        assert_eq!(res.status, StatusCode::OK, "set {i}: {}", res.text);
    }
    let res = t
        .request(
            billing,
            Method::POST,
            rota_proto::wire::PATH_KV,
            Some("application/json"),
            set("knew".into()),
        )
        .await;
    assert_eq!(res.status, StatusCode::PAYLOAD_TOO_LARGE, "{}", res.text);
    assert!(
        res.error().contains("key-value state is full"),
        "{}",
        res.text
    );
    let res = t
        .request(
            billing,
            Method::POST,
            rota_proto::wire::PATH_KV,
            Some("application/json"),
            set("k000".into()),
        )
        .await;
    assert_eq!(res.status, StatusCode::OK, "replacing a key: {}", res.text);
    t.stop().await;
}

/// Naming a job as a child is triggering it: an operator of one app cannot chain another
/// app's job to its own (XXL-JOB's CVE-2024-42681), nor a job it may only read.
#[tokio::test]
async fn child_jobs_must_be_the_users_to_change() {
    let t = start().await;
    t.upload_echo().await;
    for (name, app) in [("billing-job", "billing"), ("shop-job", "default")] {
        let job = t
            .api(
                Method::POST,
                "/api/v1/jobs",
                Some(json!({"name": name, "app": app, "plugin": "echo", "schedule": {"kind": "none"}})),
            )
            .await;
        assert_eq!(job.status, StatusCode::CREATED, "{}", job.text);
    }
    let operator = t.token_of("olga", "operator").await;
    let as_operator = |method: Method, path: &'static str, body: Value| {
        let body = body.to_string().into_bytes();
        t.request(
            As::Bearer(&operator),
            method,
            path,
            Some("application/json"),
            body,
        )
    };
    let parent_of = |child: &str| {
        json!({"name": format!("parent-of-{child}"), "app": "default", "plugin": "echo",
               "schedule": {"kind": "none"}, "child_jobs": [child]})
    };
    let res = as_operator(Method::POST, "/api/v1/jobs", parent_of("billing-job")).await;
    assert_eq!(res.status, StatusCode::NOT_FOUND, "{}", res.text);
    assert!(res.error().contains("billing-job"));
    // Its own app's job is fine.
    let res = as_operator(Method::POST, "/api/v1/jobs", parent_of("shop-job")).await;
    assert_eq!(res.status, StatusCode::CREATED, "{}", res.text);
    // Nor through an update.
    let res = as_operator(
        Method::PATCH,
        "/api/v1/jobs/parent-of-shop-job",
        json!({"child_jobs": ["billing-job"]}),
    )
    .await;
    assert_eq!(res.status, StatusCode::NOT_FOUND, "{}", res.text);
    t.stop().await;
}

/// An operator writes its job's allow-list, but the admin's egress policy bounds it: a job
/// that lists loopback, the node's own port, a name that resolves to loopback, the cloud
/// metadata address or an IPv6 link-local address is a 422 naming the rule, and so is an
/// alarm channel pointed at one; what the policy allows is accepted.
#[tokio::test]
async fn an_operator_cannot_allow_what_the_egress_policy_denies() {
    let t = start().await;
    let operator = t.token_of("olga", "operator").await;
    let create = |body: Value, path: &'static str| {
        let body = body.to_string().into_bytes();
        t.request(
            As::Bearer(&operator),
            Method::POST,
            path,
            Some("application/json"),
            body,
        )
    };
    let hook = |allow: &str, url: &str| {
        json!({"name": "hook", "app": "default", "schedule": {"kind": "none"},
               "http_allow": [allow], "delivery": {"kind": "http", "url": url}})
    };
    for (allow, url, rule) in [
        (
            "http://127.0.0.1:18282/",
            "http://127.0.0.1:18282/api/v1/jobs",
            "refuses 127.0.0.1:18282: loopback (127.0.0.0/8",
        ),
        (
            "http://localhost:18282",
            "http://localhost:18282/x",
            "refuses localhost:18282 (resolves to ",
        ),
        (
            "http://169.254.169.254/",
            "http://169.254.169.254/latest/meta-data/",
            "refuses 169.254.169.254:80: the cloud metadata address",
        ),
        (
            "http://[fe80::1]:8080",
            "http://[fe80::1]:8080/",
            "refuses [fe80::1]:8080: link-local (fe80::/10",
        ),
        (
            "http://[::ffff:127.0.0.1]:9000",
            "http://[::ffff:127.0.0.1]:9000/",
            "refuses 127.0.0.1:9000: loopback",
        ),
    ] {
        let res = create(hook(allow, url), "/api/v1/jobs").await;
        assert_eq!(
            res.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{allow}: {}",
            res.text
        );
        let error = res.error();
        assert!(
            error.starts_with("http_allow: entry 0 (`")
                && error.contains(&format!("the egress policy {rule}"))
                && error.ends_with("only an admin can open it (--egress-allow)"),
            "{allow}: {error}"
        );
    }
    let channel = json!({"name": "ops", "kind": "webhook", "url": "http://127.0.0.1:9/alarm"});
    let res = t
        .api(Method::POST, "/api/v1/alarm-channels", Some(channel))
        .await;
    assert_eq!(res.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", res.text);
    assert!(
        res.error()
            .contains("the egress policy refuses 127.0.0.1:9: loopback")
    );
    // A private address is allowed by default (the admin may deny it).
    let res = create(
        hook("http://10.20.30.40:8080", "http://10.20.30.40:8080/close"),
        "/api/v1/jobs",
    )
    .await;
    assert_eq!(res.status, StatusCode::CREATED, "{}", res.text);
    t.stop().await;
}

/// An admin who denies a private range closes it to every job; one who opens a single
/// destination opens exactly that one.
#[tokio::test]
async fn the_admins_egress_rules_narrow_and_open_exactly_what_they_name() {
    let t = TestApp::start_with(|c| {
        c.egress = rota_net::egress::Policy::new(
            &["127.0.0.1:18282".to_owned()],
            &["10.0.0.0/8".to_owned()],
        )
        .unwrap();
    })
    .await;
    let job = |name: &str, allow: &str| {
        json!({"name": name, "app": "default", "schedule": {"kind": "none"},
               "http_allow": [allow], "delivery": {"kind": "http", "url": allow}})
    };
    let res = t
        .api(
            Method::POST,
            "/api/v1/jobs",
            Some(job("a", "http://10.1.2.3/")),
        )
        .await;
    assert_eq!(res.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", res.text);
    assert!(
        res.error()
            .contains("the egress policy refuses 10.1.2.3:80: --egress-deny 10.0.0.0/8"),
        "{}",
        res.text
    );
    let res = t
        .api(
            Method::POST,
            "/api/v1/jobs",
            Some(job("b", "http://127.0.0.1:18282/")),
        )
        .await;
    assert_eq!(
        res.status,
        StatusCode::CREATED,
        "the exception: {}",
        res.text
    );
    let res = t
        .api(
            Method::POST,
            "/api/v1/jobs",
            Some(job("c", "http://127.0.0.1:18283/")),
        )
        .await;
    assert_eq!(
        res.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "only that port: {}",
        res.text
    );
    t.stop().await;
}

/// A POST from an executor of app `default`, with exactly these signing headers.
fn as_default_executor(
    path: &str,
    signed: &rota_proto::SignedHeaders,
    body: Vec<u8>,
) -> Request<Body> {
    let mut req = Request::post(path)
        .header(header::CONTENT_TYPE, "application/json")
        .header(rota_proto::HEADER_APP, "default");
    for (name, value) in signed.pairs() {
        req = req.header(name, value);
    }
    req.body(Body::from(body)).unwrap()
}

/// A signed request replayed inside the window, replayed after it, or with one byte
/// changed is refused by the scheduler.
#[tokio::test]
async fn replayed_late_or_altered_executor_requests_are_refused() {
    let t = start().await;
    let key = rota_proto::app_secret(&rota_proto::Secret::new(SECRET), "default");
    let body = json!({"app": "default", "address": "http://127.0.0.1:9", "capacity": 1, "running": 0, "active_runs": []})
        .to_string()
        .into_bytes();
    let path = rota_proto::wire::PATH_HEARTBEAT;
    let send = |signed: rota_proto::SignedHeaders, body: Vec<u8>| {
        let req = as_default_executor(path, &signed, body);
        let app = t.app.clone();
        async move {
            let res = app.oneshot(req).await.unwrap();
            let status = res.status();
            let bytes = axum::body::to_bytes(res.into_body(), 1 << 20)
                .await
                .unwrap();
            (status, String::from_utf8_lossy(&bytes).into_owned())
        }
    };
    let now = || chrono::Utc::now().timestamp_millis();

    let signed = rota_proto::sign_now(key.as_bytes(), "POST", path, now(), &body);
    assert_eq!(send(signed.clone(), body.clone()).await.0, StatusCode::OK);
    let (status, answer) = send(signed, body.clone()).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert!(answer.contains("replayed"), "{answer}");

    let late = now() - rota_proto::MAX_SKEW_MS - 1_000;
    let stale = rota_proto::sign_now(key.as_bytes(), "POST", path, late, &body);
    let (status, answer) = send(stale, body.clone()).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert!(answer.contains("away from the server clock"), "{answer}");

    for i in 0..body.len() {
        let signed = rota_proto::sign_now(key.as_bytes(), "POST", path, now(), &body);
        let mut altered = body.clone();
        altered[i] ^= 0x01;
        let (status, answer) = send(signed, altered).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "byte {i}");
        assert!(answer.contains("does not match"), "byte {i}: {answer}");
    }
    t.stop().await;
}

/// A registration, heartbeat or goodbye older than one already accepted from the same
/// executor is ignored: what a captured request replayed to another scheduler node within
/// the window would be (each node remembers only its own nonces, but the executor's clock
/// is kept in the database they share).
#[tokio::test]
async fn an_executors_older_requests_are_ignored() {
    let t = start().await;
    let key = rota_proto::app_secret(&rota_proto::Secret::new(SECRET), "default");
    let now = chrono::Utc::now().timestamp_millis();
    let send = |path: &'static str, at: i64, body: Value| {
        let body = body.to_string().into_bytes();
        let signed = rota_proto::sign_now(key.as_bytes(), "POST", path, at, &body);
        let req = as_default_executor(path, &signed, body);
        let app = t.app.clone();
        async move {
            let res = app.oneshot(req).await.unwrap();
            assert_eq!(res.status(), StatusCode::OK);
        }
    };
    let reg = |capacity: u32| json!({"app": "default", "address": "http://127.0.0.1:9", "capacity": capacity, "running": 0, "active_runs": []});
    let capacity = || async {
        let list = t.api(Method::GET, "/api/v1/executors", None).await;
        let list: Value = serde_json::from_str(&list.text).unwrap();
        list["items"]
            .as_array()
            .unwrap()
            .first()
            .map(|e| e["capacity"].clone())
    };
    send(rota_proto::wire::PATH_REGISTER, now - 2_000, reg(1)).await;
    send(rota_proto::wire::PATH_HEARTBEAT, now, reg(2)).await;
    assert_eq!(capacity().await, Some(json!(2)));
    // Older than the newest: ignored, whatever it says.
    send(rota_proto::wire::PATH_HEARTBEAT, now - 1_000, reg(3)).await;
    send(rota_proto::wire::PATH_REGISTER, now - 1_000, reg(4)).await;
    assert_eq!(capacity().await, Some(json!(2)));
    let bye = json!({"app": "default", "address": "http://127.0.0.1:9"});
    send(rota_proto::wire::PATH_DEREGISTER, now - 500, bye.clone()).await;
    assert_eq!(
        capacity().await,
        Some(json!(2)),
        "an old goodbye removes nothing"
    );
    // A newer goodbye does.
    send(rota_proto::wire::PATH_DEREGISTER, now + 1, bye).await;
    assert_eq!(capacity().await, None);
    t.stop().await;
}

/// Bad values (422) and bad shapes (400) are the same failure to a client; these say more.
fn same_class(got: StatusCode, want: StatusCode) -> bool {
    let bad_input = [StatusCode::BAD_REQUEST, StatusCode::UNPROCESSABLE_ENTITY];
    got == want || (bad_input.contains(&got) && bad_input.contains(&want))
}

/// One malformed request: what is sent, and the 4xx it must get.
struct Bad {
    method: Method,
    path: &'static str,
    content_type: Option<&'static str>,
    body: Vec<u8>,
    status: StatusCode,
    /// A word the error message must contain.
    mentions: &'static str,
}

fn bad(method: Method, path: &'static str, body: &str, status: u16, mentions: &'static str) -> Bad {
    Bad {
        method,
        path,
        content_type: (!body.is_empty()).then_some("application/json"),
        body: body.as_bytes().to_vec(),
        status: StatusCode::from_u16(status).unwrap(),
        mentions,
    }
}

fn job(fields: &str) -> String {
    format!(
        r#"{{"name": "j", "app": "default", "plugin": "echo", "schedule": {{"kind": "none"}}{fields}}}"#
    )
}

/// A malformed request, each of a different kind, at every endpoint that takes input:
/// every one is a 4xx with a message naming the problem, nothing is created, and the node
/// answers normally afterwards.
#[tokio::test]
async fn malformed_requests_are_4xx_and_leave_the_node_healthy() {
    use Method as M;
    // Its alarm channel points at 127.0.0.1: an explicit, test-only egress allowance.
    let t = TestApp::start_with(|c| {
        c.egress = rota_net::egress::Policy::new(&["127.0.0.1".to_owned()], &[]).unwrap();
    })
    .await;
    t.upload_echo().await;
    let created = t.api(M::POST, "/api/v1/jobs", Some(json!({"name": "base", "app": "default", "plugin": "echo", "schedule": {"kind": "none"}}))).await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.text);
    let pulled = t.api(M::POST, "/api/v1/jobs", Some(json!({"name": "q", "app": "default", "schedule": {"kind": "none"}, "delivery": {"kind": "pull"}}))).await;
    assert_eq!(pulled.status, StatusCode::CREATED, "{}", pulled.text);
    let channel = t.api(M::POST, "/api/v1/alarm-channels", Some(json!({"name": "ops", "kind": "slack", "url": "http://127.0.0.1:1/hook", "app": "default"}))).await;
    assert_eq!(channel.status, StatusCode::CREATED, "{}", channel.text);
    let rule = t
        .api(
            M::POST,
            "/api/v1/alarm-rules",
            Some(json!({"name": "r", "app": "default", "on": "task_dead", "channels": ["ops"]})),
        )
        .await;
    assert_eq!(rule.status, StatusCode::CREATED, "{}", rule.text);
    // A job is named by its name or its id, here as everywhere (SPEC §6).
    let q_id = serde_json::from_str::<Value>(&pulled.text).unwrap()["id"].clone();
    let by_id = t
        .api(
            M::POST,
            "/api/v1/alarm-rules",
            Some(
                json!({"name": "by-id", "app": "default", "job": q_id, "on": "backlog",
                        "threshold": 1000, "channels": ["ops"]}),
            ),
        )
        .await;
    assert_eq!(by_id.status, StatusCode::CREATED, "{}", by_id.text);
    let wf = t
        .api(
            M::POST,
            "/api/v1/workflows",
            Some(json!({"name": "w", "app": "default", "steps": [{"name": "a", "job": "base"}]})),
        )
        .await;
    assert_eq!(wf.status, StatusCode::CREATED, "{}", wf.text);
    let steps_over = format!(
        r#"{{"name": "x", "app": "default", "steps": [{}]}}"#,
        (0..101)
            .map(|i| format!(r#"{{"name": "s{i}", "job": "base"}}"#))
            .collect::<Vec<_>>()
            .join(",")
    );
    let acks_over = format!(
        r#"{{"acks": [{}]}}"#,
        vec![r#"{"task": 1, "lease": "x"}"#; 1_001].join(",")
    );
    let big_name = "n".repeat(10_000);
    let big_payload = "p".repeat(70 * 1024);
    let batch_over = format!(
        r#"{{"tasks": [{}]}}"#,
        vec![r#"{"job": "base"}"#; 10_001].join(",")
    );

    let leak = |s: String| -> &'static str { Box::leak(s.into_boxed_str()) };
    let mut cases = vec![
        // --- jobs: JSON shape ---
        bad(M::POST, "/api/v1/jobs", "{", 400, "JSON"),
        bad(M::POST, "/api/v1/jobs", "[]", 400, ""),
        bad(M::POST, "/api/v1/jobs", "null", 400, ""),
        bad(M::POST, "/api/v1/jobs", "{}", 400, "name"),
        bad(
            M::POST,
            "/api/v1/jobs",
            r#"{"name": 5, "app": "default", "plugin": "echo", "schedule": {"kind": "none"}}"#,
            400,
            "name",
        ),
        bad(
            M::POST,
            "/api/v1/jobs",
            r#"{"name": "a", "name": "b", "app": "default", "plugin": "echo", "schedule": {"kind": "none"}}"#,
            400,
            "duplicate",
        ),
        bad(
            M::POST,
            "/api/v1/jobs",
            &job(r#", "unknown_field": 1"#),
            400,
            "unknown_field",
        ),
        // --- jobs: values ---
        bad(
            M::POST,
            "/api/v1/jobs",
            r#"{"name": "", "app": "default", "plugin": "echo", "schedule": {"kind": "none"}}"#,
            422,
            "name",
        ),
        bad(
            M::POST,
            "/api/v1/jobs",
            leak(format!(
                r#"{{"name": "{big_name}", "app": "default", "plugin": "echo", "schedule": {{"kind": "none"}}}}"#
            )),
            422,
            "200",
        ),
        bad(
            M::POST,
            "/api/v1/jobs",
            r#"{"name": "a\u0000b", "app": "default", "plugin": "echo", "schedule": {"kind": "none"}}"#,
            422,
            "control",
        ),
        bad(
            M::POST,
            "/api/v1/jobs",
            r#"{"name": "a\nb", "app": "default", "plugin": "echo", "schedule": {"kind": "none"}}"#,
            422,
            "control",
        ),
        bad(
            M::POST,
            "/api/v1/jobs",
            r#"{"name": "evil\u202egnp.exe", "app": "default", "plugin": "echo", "schedule": {"kind": "none"}}"#,
            422,
            "invisible",
        ),
        bad(
            M::POST,
            "/api/v1/jobs",
            r#"{"name": "j", "app": "../../etc", "plugin": "echo", "schedule": {"kind": "none"}}"#,
            422,
            "app",
        ),
        bad(
            M::POST,
            "/api/v1/jobs",
            r#"{"name": "j", "app": "default", "plugin": "no-such-plugin", "schedule": {"kind": "none"}}"#,
            404,
            "plugin",
        ),
        bad(
            M::POST,
            "/api/v1/jobs",
            r#"{"name": "j", "app": "default", "plugin": "echo", "schedule": {"kind": "cron", "expr": "* * *"}}"#,
            422,
            "cron",
        ),
        bad(
            M::POST,
            "/api/v1/jobs",
            r#"{"name": "j", "app": "default", "plugin": "echo", "schedule": {"kind": "cron", "expr": "99 * * * * *"}}"#,
            422,
            "cron",
        ),
        bad(
            M::POST,
            "/api/v1/jobs",
            r#"{"name": "j", "app": "default", "plugin": "echo", "schedule": {"kind": "cron", "expr": "0 * * * * *", "time_zone": "Mars/Olympus"}}"#,
            422,
            "Mars",
        ),
        bad(
            M::POST,
            "/api/v1/jobs",
            r#"{"name": "j", "app": "default", "plugin": "echo", "schedule": {"kind": "cron", "expr": "0 * * * * *", "tz": "UTC"}}"#,
            400,
            "tz",
        ),
        bad(
            M::POST,
            "/api/v1/jobs",
            r#"{"name": "j", "app": "default", "plugin": "echo", "schedule": {"kind": "fixed_rate", "every_ms": -5}}"#,
            422,
            "every_ms",
        ),
        bad(
            M::POST,
            "/api/v1/jobs",
            r#"{"name": "j", "app": "default", "plugin": "echo", "schedule": {"kind": "teleport"}}"#,
            400,
            "teleport",
        ),
        bad(
            M::POST,
            "/api/v1/jobs",
            &job(r#", "timeout_ms": -1"#),
            422,
            "timeout_ms",
        ),
        bad(
            M::POST,
            "/api/v1/jobs",
            &job(r#", "timeout_ms": 1e30"#),
            400,
            "timeout_ms",
        ),
        bad(
            M::POST,
            "/api/v1/jobs",
            &job(r#", "timeout_ms": 9223372036854775808"#),
            400,
            "timeout_ms",
        ),
        bad(
            M::POST,
            "/api/v1/jobs",
            &job(r#", "timeout_ms": "fast""#),
            400,
            "timeout_ms",
        ),
        bad(
            M::POST,
            "/api/v1/jobs",
            &job(r#", "max_attempts": -1"#),
            400,
            "max_attempts",
        ),
        bad(
            M::POST,
            "/api/v1/jobs",
            &job(r#", "memory_mb": 0"#),
            422,
            "memory_mb",
        ),
        bad(
            M::POST,
            "/api/v1/jobs",
            &job(r#", "memory_mb": 4294967296"#),
            400,
            "memory_mb",
        ),
        bad(
            M::POST,
            "/api/v1/jobs",
            &job(r#", "route": "teleport""#),
            400,
            "teleport",
        ),
        bad(
            M::POST,
            "/api/v1/jobs",
            &job(r#", "child_jobs": [987654]"#),
            404,
            "987654",
        ),
        bad(
            M::POST,
            "/api/v1/jobs",
            &job(r#", "http_allow": ["file:///etc/passwd"]"#),
            422,
            "http_allow",
        ),
        bad(
            M::POST,
            "/api/v1/jobs",
            &job(r#", "backoff": {"kind": "fibonacci"}"#),
            400,
            "fibonacci",
        ),
        Bad {
            content_type: Some("text/plain"),
            ..bad(M::POST, "/api/v1/jobs", &job(""), 400, "application/json")
        },
        Bad {
            content_type: None,
            ..bad(M::POST, "/api/v1/jobs", &job(""), 400, "application/json")
        },
        Bad {
            body: b"{\"name\": \"\xff\xfe\"}".to_vec(),
            ..bad(M::POST, "/api/v1/jobs", "{}", 400, "")
        },
        // --- jobs: ids and other routes ---
        // A job is named by id or by name: what is not an id is a name not found.
        bad(M::GET, "/api/v1/jobs/abc", "", 404, "not found"),
        bad(
            M::GET,
            "/api/v1/jobs/99999999999999999999",
            "",
            404,
            "not found",
        ),
        bad(M::GET, "/api/v1/jobs/1%20OR%201=1", "", 404, "not found"),
        bad(M::GET, "/api/v1/jobs/-1", "", 404, "job"),
        bad(M::GET, "/api/v1/jobs?limit=abc", "", 400, "limit"),
        bad(M::GET, "/api/v1/jobs?limit=-1", "", 400, "limit"),
        bad(
            M::PATCH,
            "/api/v1/jobs/999999",
            r#"{"enabled": false}"#,
            404,
            "job",
        ),
        bad(
            M::PATCH,
            "/api/v1/jobs/1",
            r#"{"timeout_ms": "fast"}"#,
            400,
            "timeout_ms",
        ),
        bad(
            M::PATCH,
            "/api/v1/jobs/1",
            r#"{"schedule": {"kind": "cron", "expr": "nope"}}"#,
            422,
            "cron",
        ),
        bad(
            M::POST,
            "/api/v1/jobs/1/trigger",
            r#"{"params": 5}"#,
            400,
            "params",
        ),
        bad(M::DELETE, "/api/v1/jobs/1.5", "", 404, "not found"),
        bad(M::PUT, "/api/v1/jobs", "{}", 405, "PUT"),
        // --- tasks ---
        bad(
            M::POST,
            "/api/v1/tasks",
            r#"{"job": "base", "delay_ms": -1}"#,
            422,
            "delay_ms",
        ),
        bad(
            M::POST,
            "/api/v1/tasks",
            r#"{"job": "base", "delay_ms": 9223372036854775807}"#,
            422,
            "delay_ms",
        ),
        bad(
            M::POST,
            "/api/v1/tasks",
            r#"{"job": "base", "delay_ms": 9223372036854775808}"#,
            400,
            "delay_ms",
        ),
        bad(
            M::POST,
            "/api/v1/tasks",
            r#"{"job": "base", "delay_ms": 1.5}"#,
            400,
            "delay_ms",
        ),
        bad(
            M::POST,
            "/api/v1/tasks",
            r#"{"job": "base", "run_at": "tomorrow"}"#,
            400,
            "run_at",
        ),
        bad(
            M::POST,
            "/api/v1/tasks",
            r#"{"job": "base", "run_at": "2026-01-01T00:00:00Z", "delay_ms": 5}"#,
            422,
            "delay_ms",
        ),
        bad(
            M::POST,
            "/api/v1/tasks",
            r#"{"job": "x' OR '1'='1", "delay_ms": 5}"#,
            404,
            "does not exist",
        ),
        bad(
            M::POST,
            "/api/v1/tasks",
            r#"{"job": "base", "key": "k\u0007"}"#,
            422,
            "key",
        ),
        bad(
            M::POST,
            "/api/v1/tasks",
            leak(format!(r#"{{"job": "base", "key": "{big_name}"}}"#)),
            422,
            "key",
        ),
        bad(
            M::POST,
            "/api/v1/tasks",
            leak(format!(r#"{{"job": "base", "payload": "{big_payload}"}}"#)),
            413,
            "payload",
        ),
        bad(
            M::POST,
            "/api/v1/tasks",
            r#"{"job": "base", "priority": 99999999999}"#,
            400,
            "priority",
        ),
        bad(
            M::POST,
            "/api/v1/tasks",
            r#"{"job": "base", "max_attempts": 0}"#,
            422,
            "max_attempts",
        ),
        bad(
            M::POST,
            "/api/v1/tasks",
            r#"{"job": "base", "backoff": {"kind": "exponential", "base_ms": -3}}"#,
            422,
            "backoff",
        ),
        bad(M::POST, "/api/v1/tasks", r#"{"job": ["base"]}"#, 400, "job"),
        bad(
            M::POST,
            "/api/v1/tasks/batch",
            r#"{"tasks": null}"#,
            400,
            "tasks",
        ),
        bad(
            M::POST,
            "/api/v1/tasks/batch",
            r#"{"tasks": [{"job": "base"}, {"job": "base", "delay_ms": -1}]}"#,
            422,
            "tasks[1]",
        ),
        bad(
            M::POST,
            "/api/v1/tasks/batch",
            leak(batch_over),
            413,
            "10000",
        ),
        bad(M::GET, "/api/v1/tasks/abc", "", 400, "id"),
        bad(M::GET, "/api/v1/tasks/18446744073709551616", "", 400, "id"),
        bad(M::GET, "/api/v1/tasks?status=bogus", "", 400, "status"),
        bad(M::GET, "/api/v1/tasks?after=%27%3B--", "", 400, "after"),
        bad(M::GET, "/api/v1/tasks?limit=0", "", 400, "limit"),
        bad(M::DELETE, "/api/v1/tasks?job=base", "", 400, "key"),
        bad(M::DELETE, "/api/v1/tasks/abc", "", 400, "id"),
        // --- runs ---
        bad(M::GET, "/api/v1/runs/1.5", "", 400, "id"),
        bad(
            M::GET,
            "/api/v1/runs/99999999999999999999999",
            "",
            400,
            "id",
        ),
        bad(
            M::GET,
            "/api/v1/runs/1/log?from_line=-1",
            "",
            400,
            "from_line",
        ),
        bad(M::GET, "/api/v1/runs?status=%00", "", 400, "status"),
        bad(M::POST, "/api/v1/runs/abc/kill", "", 400, "id"),
        // --- plugins ---
        Bad {
            content_type: Some("application/wasm"),
            ..bad(M::POST, "/api/v1/plugins", START, 400, "name")
        },
        Bad {
            content_type: Some("application/wasm"),
            ..bad(
                M::POST,
                "/api/v1/plugins?name=..%2F..%2Fetc%2Fpasswd",
                START,
                422,
                "name",
            )
        },
        Bad {
            content_type: Some("application/wasm"),
            ..bad(
                M::POST,
                "/api/v1/plugins?name=junk",
                "not wasm at all",
                422,
                "",
            )
        },
        Bad {
            content_type: Some("application/wasm"),
            ..bad(
                M::POST,
                "/api/v1/plugins?name=shell",
                r#"(module (import "env" "system" (func)) (func (export "_start")))"#,
                422,
                "env::system",
            )
        },
        Bad {
            content_type: Some("application/wasm"),
            ..bad(
                M::POST,
                "/api/v1/plugins?name=sock",
                r#"(module (import "wasi_snapshot_preview1" "sock_open" (func)) (func (export "_start")))"#,
                422,
                "sock_open",
            )
        },
        Bad {
            content_type: Some("application/wasm"),
            ..bad(
                M::POST,
                "/api/v1/plugins?name=incoming",
                r#"(component (import "wasi:http/incoming-handler@0.2.0" (instance)))"#,
                422,
                "wasi:http/incoming-handler@0.2.0",
            )
        },
        Bad {
            content_type: Some("application/wasm"),
            ..bad(
                M::POST,
                "/api/v1/plugins?name=worldless",
                "(component)",
                422,
                "exports neither",
            )
        },
        Bad {
            content_type: Some("application/wasm"),
            ..bad(
                M::POST,
                "/api/v1/plugins?name=wrongrun",
                r#"(component (core module $m (func (export "run"))) (core instance $i (instantiate $m))
                    (func (export "run") (canon lift (core func $i "run"))))"#,
                422,
                "do not match",
            )
        },
        bad(
            M::DELETE,
            "/api/v1/plugins/..%2F..%2Fetc",
            "",
            404,
            "plugin",
        ),
        // --- secrets ---
        bad(
            M::PUT,
            "/api/v1/apps/default/secrets/db",
            r#"{"value": 5}"#,
            400,
            "value",
        ),
        bad(
            M::PUT,
            "/api/v1/apps/default/secrets/db",
            "{}",
            400,
            "value",
        ),
        bad(
            M::PUT,
            "/api/v1/apps/default/secrets/a%0Ab",
            r#"{"value": "x"}"#,
            422,
            "name",
        ),
        bad(M::GET, "/api/v1/apps/..%2F..%2F/secrets", "", 422, "app"),
        // --- delivery (SPEC §8) ---
        bad(
            M::POST,
            "/api/v1/jobs",
            leak(job(r#", "delivery": {"kind": "pigeon"}"#)),
            400,
            "pigeon",
        ),
        bad(
            M::POST,
            "/api/v1/jobs",
            leak(job(r#", "delivery": {"kind": "pull", "url": "x"}"#)),
            400,
            "url",
        ),
        bad(
            M::POST,
            "/api/v1/jobs",
            leak(job(r#", "delivery": {"kind": "pull"}"#)),
            422,
            "plugin",
        ),
        bad(
            M::POST,
            "/api/v1/jobs",
            leak(job(
                r#", "delivery": {"kind": "http", "url": "http://127.0.0.1:1/"}"#,
            )),
            422,
            "plugin",
        ),
        bad(
            M::POST,
            "/api/v1/jobs",
            r#"{"name": "w", "app": "default", "schedule": {"kind": "none"}, "delivery": {"kind": "http", "url": "http://127.0.0.1:1/"}}"#,
            422,
            "http_allow",
        ),
        bad(
            M::POST,
            "/api/v1/jobs",
            r#"{"name": "w", "app": "default", "schedule": {"kind": "none"}, "delivery": {"kind": "http", "url": "ftp://x/"}, "http_allow": ["http://127.0.0.1:1"]}"#,
            422,
            "http://",
        ),
        bad(
            M::POST,
            "/api/v1/jobs",
            r#"{"name": "w", "app": "default", "schedule": {"kind": "none"}, "delivery": {"kind": "http"}}"#,
            400,
            "url",
        ),
        bad(
            M::POST,
            "/api/v1/jobs",
            r#"{"name": "w", "app": "default", "schedule": {"kind": "none"}, "delivery": {"kind": "http", "url": "http://127.0.0.1:1/", "timeout_ms": 0}, "http_allow": ["http://127.0.0.1:1"]}"#,
            422,
            "timeout_ms",
        ),
        bad(
            M::PATCH,
            "/api/v1/jobs/base?force=maybe",
            "{}",
            400,
            "force",
        ),
        bad(M::POST, "/api/v1/jobs/q/pull", "{", 400, "JSON"),
        bad(
            M::POST,
            "/api/v1/jobs/q/pull",
            r#"{"bogus": 1}"#,
            400,
            "bogus",
        ),
        bad(M::POST, "/api/v1/jobs/q/pull", r#"{"max": 0}"#, 422, "max"),
        bad(
            M::POST,
            "/api/v1/jobs/q/pull",
            r#"{"max": 1001}"#,
            422,
            "max",
        ),
        bad(
            M::POST,
            "/api/v1/jobs/q/pull",
            r#"{"lease_ms": 999}"#,
            422,
            "lease_ms",
        ),
        bad(
            M::POST,
            "/api/v1/jobs/q/pull",
            r#"{"wait_ms": 30001}"#,
            422,
            "wait_ms",
        ),
        bad(
            M::POST,
            "/api/v1/jobs/q/pull",
            r#"{"consumer": " "}"#,
            422,
            "consumer",
        ),
        bad(M::POST, "/api/v1/jobs/base/pull", "{}", 409, "pull"),
        bad(M::POST, "/api/v1/jobs/nope/pull", "{}", 404, "nope"),
        bad(M::POST, "/api/v1/tasks/1/ack", "{}", 400, "lease"),
        bad(
            M::POST,
            "/api/v1/tasks/1/ack",
            r#"{"lease": 5}"#,
            400,
            "lease",
        ),
        bad(
            M::POST,
            "/api/v1/tasks/abc/ack",
            r#"{"lease": "x"}"#,
            400,
            "id",
        ),
        bad(
            M::POST,
            "/api/v1/tasks/999999/ack",
            r#"{"lease": "x"}"#,
            404,
            "task",
        ),
        bad(
            M::POST,
            "/api/v1/tasks/1/nack",
            r#"{"lease": "x", "delay_ms": -1}"#,
            422,
            "delay_ms",
        ),
        bad(
            M::POST,
            "/api/v1/tasks/1/extend",
            r#"{"lease": "x", "lease_ms": 10}"#,
            422,
            "lease_ms",
        ),
        bad(
            M::POST,
            "/api/v1/tasks/1/extend",
            r#"{"lease": "x"}"#,
            400,
            "lease_ms",
        ),
        bad(M::POST, "/api/v1/jobs/q/ack", r#"{"acks": 5}"#, 400, "acks"),
        bad(
            M::POST,
            "/api/v1/jobs/q/ack",
            leak(acks_over),
            413,
            "at most",
        ),
        bad(
            M::POST,
            "/api/v1/tasks/retry",
            r#"{"job": "q", "status": "failed"}"#,
            422,
            "status",
        ),
        bad(
            M::POST,
            "/api/v1/tasks/retry",
            r#"{"job": "q", "status": "dead", "limit": 0}"#,
            422,
            "limit",
        ),
        bad(
            M::POST,
            "/api/v1/tasks/retry",
            r#"{"job": "nope", "status": "dead"}"#,
            404,
            "nope",
        ),
        bad(M::POST, "/api/v1/tasks/999999/retry", "", 404, "task"),
        bad(M::PATCH, "/api/v1/tasks/1", "{}", 422, "run_at"),
        bad(
            M::PATCH,
            "/api/v1/tasks/1",
            r#"{"delay_ms": -5}"#,
            422,
            "delay_ms",
        ),
        bad(
            M::PATCH,
            "/api/v1/tasks/1",
            r#"{"delay_ms": 0, "priority": 5000}"#,
            422,
            "priority",
        ),
        bad(
            M::PATCH,
            "/api/v1/tasks/999999",
            r#"{"delay_ms": 0}"#,
            404,
            "task",
        ),
        // --- alarms (SPEC §9) ---
        bad(M::POST, "/api/v1/alarm-channels", "{", 400, "JSON"),
        bad(
            M::POST,
            "/api/v1/alarm-channels",
            r#"{"name": "c", "kind": "webhook", "url": "http://x/", "colour": 1}"#,
            400,
            "colour",
        ),
        bad(
            M::POST,
            "/api/v1/alarm-channels",
            r#"{"name": "c", "kind": "pager", "url": "http://x/"}"#,
            422,
            "pager",
        ),
        bad(
            M::POST,
            "/api/v1/alarm-channels",
            r#"{"name": "c/d", "kind": "slack", "url": "http://x/"}"#,
            422,
            "name",
        ),
        bad(
            M::POST,
            "/api/v1/alarm-channels",
            r#"{"name": "c", "kind": "slack"}"#,
            422,
            "url",
        ),
        bad(
            M::POST,
            "/api/v1/alarm-channels",
            r#"{"name": "c", "kind": "slack", "url": "ftp://x/"}"#,
            422,
            "http://",
        ),
        bad(
            M::POST,
            "/api/v1/alarm-channels",
            r#"{"name": "c", "kind": "slack", "url": "not a url"}"#,
            422,
            "URL",
        ),
        bad(
            M::POST,
            "/api/v1/alarm-channels",
            r#"{"name": "c", "kind": "email"}"#,
            422,
            "to",
        ),
        bad(
            M::POST,
            "/api/v1/alarm-channels",
            r#"{"name": "c", "kind": "email", "to": ["not-an-address"]}"#,
            422,
            "to[0]",
        ),
        bad(
            M::POST,
            "/api/v1/alarm-channels",
            r#"{"name": "c", "kind": "email", "to": ["a@example.com"], "url": "http://x/"}"#,
            422,
            "url",
        ),
        bad(
            M::POST,
            "/api/v1/alarm-channels",
            r#"{"name": "c", "kind": "slack", "url": "http://x/", "to": ["a@example.com"]}"#,
            422,
            "to",
        ),
        bad(
            M::POST,
            "/api/v1/alarm-channels",
            r#"{"name": "c", "kind": "slack", "url": "http://x/", "secret": "s", "app": "default"}"#,
            422,
            "secret",
        ),
        bad(
            M::POST,
            "/api/v1/alarm-channels",
            r#"{"name": "c", "kind": "webhook", "url": "http://x/", "secret": "s"}"#,
            422,
            "app",
        ),
        bad(
            M::POST,
            "/api/v1/alarm-channels",
            r#"{"name": "c", "kind": "webhook", "url": "http://x/", "secret": "missing", "app": "default"}"#,
            422,
            "missing",
        ),
        bad(
            M::POST,
            "/api/v1/alarm-channels",
            r#"{"name": "ops", "kind": "slack", "url": "http://x/"}"#,
            409,
            "ops",
        ),
        bad(M::GET, "/api/v1/alarm-channels/nope", "", 404, "nope"),
        bad(M::DELETE, "/api/v1/alarm-channels/ops", "", 409, "r"),
        bad(M::POST, "/api/v1/alarm-channels/nope/test", "", 404, "nope"),
        bad(M::POST, "/api/v1/alarm-rules", "{}", 400, "name"),
        bad(
            M::POST,
            "/api/v1/alarm-rules",
            r#"{"name": "x", "app": "default", "on": "meteor", "channels": ["ops"]}"#,
            422,
            "meteor",
        ),
        bad(
            M::POST,
            "/api/v1/alarm-rules",
            r#"{"name": "x", "app": "default", "on": "lateness", "channels": ["ops"]}"#,
            422,
            "threshold",
        ),
        bad(
            M::POST,
            "/api/v1/alarm-rules",
            r#"{"name": "x", "app": "default", "on": "lateness", "threshold": 0, "channels": ["ops"]}"#,
            422,
            "threshold",
        ),
        bad(
            M::POST,
            "/api/v1/alarm-rules",
            r#"{"name": "x", "app": "default", "on": "task_dead", "threshold": 5, "channels": ["ops"]}"#,
            422,
            "threshold",
        ),
        bad(
            M::POST,
            "/api/v1/alarm-rules",
            r#"{"name": "x", "app": "default", "on": "task_dead", "channels": []}"#,
            422,
            "channels",
        ),
        bad(
            M::POST,
            "/api/v1/alarm-rules",
            r#"{"name": "x", "app": "default", "on": "task_dead", "channels": ["nope"]}"#,
            404,
            "nope",
        ),
        bad(
            M::POST,
            "/api/v1/alarm-rules",
            r#"{"name": "x", "app": "default", "job": "nope", "on": "task_dead", "channels": ["ops"]}"#,
            404,
            "nope",
        ),
        bad(
            M::POST,
            "/api/v1/alarm-rules",
            r#"{"name": "x", "app": "default", "on": "backlog", "threshold": 1000, "channels": ["ops"]}"#,
            422,
            "job",
        ),
        bad(
            M::POST,
            "/api/v1/alarm-rules",
            r#"{"name": "x", "app": "default", "job": "base", "on": "backlog", "threshold": 1000, "channels": ["ops"]}"#,
            422,
            "pull",
        ),
        bad(
            M::POST,
            "/api/v1/alarm-rules",
            r#"{"name": "x", "app": "default", "job": "base", "on": "executor_lost", "channels": ["ops"]}"#,
            422,
            "job",
        ),
        bad(
            M::POST,
            "/api/v1/alarm-rules",
            r#"{"name": "x", "app": "default", "job": "base", "on": "clock_skew", "channels": ["ops"]}"#,
            422,
            "`clock_skew` is about the cluster, not one job",
        ),
        bad(
            M::POST,
            "/api/v1/alarm-rules",
            r#"{"name": "x", "app": "default", "on": "clock_skew", "threshold": -1, "channels": ["ops"]}"#,
            422,
            "threshold",
        ),
        bad(
            M::POST,
            "/api/v1/alarm-rules",
            r#"{"name": "x", "app": "default", "on": "task_dead", "channels": ["ops"], "throttle_ms": -1}"#,
            422,
            "throttle_ms",
        ),
        bad(
            M::POST,
            "/api/v1/alarm-rules",
            r#"{"name": "r", "app": "default", "on": "task_dead", "channels": ["ops"]}"#,
            409,
            "r",
        ),
        bad(
            M::PATCH,
            "/api/v1/alarm-rules/r",
            r#"{"on": "run_failed"}"#,
            400,
            "on",
        ),
        bad(
            M::PATCH,
            "/api/v1/alarm-rules/r",
            r#"{"throttle_ms": 99999999999}"#,
            422,
            "throttle_ms",
        ),
        bad(M::PATCH, "/api/v1/alarm-rules/nope", "{}", 404, "nope"),
        bad(M::DELETE, "/api/v1/alarm-rules/nope", "", 404, "nope"),
        bad(M::GET, "/api/v1/alarms?limit=0", "", 400, "limit"),
        bad(M::GET, "/api/v1/alarms?after=x", "", 400, "after"),
        // --- workflows ---
        bad(M::POST, "/api/v1/workflows", "{", 400, "JSON"),
        bad(
            M::POST,
            "/api/v1/workflows",
            r#"{"name": "x", "app": "default"}"#,
            400,
            "steps",
        ),
        bad(
            M::POST,
            "/api/v1/workflows",
            r#"{"name": "x", "app": "default", "steps": []}"#,
            422,
            "at least one step",
        ),
        bad(
            M::POST,
            "/api/v1/workflows",
            leak(steps_over),
            422,
            "at most 100",
        ),
        bad(
            M::POST,
            "/api/v1/workflows",
            r#"{"name": "x", "app": "default", "steps": [{"name": "a", "job": "base", "after": ["b"]}, {"name": "b", "job": "base", "after": ["a"]}]}"#,
            422,
            "cycle",
        ),
        bad(
            M::POST,
            "/api/v1/workflows",
            r#"{"name": "x", "app": "default", "steps": [{"name": "a", "job": "base"}, {"name": "a", "job": "base"}]}"#,
            422,
            "duplicate",
        ),
        bad(
            M::POST,
            "/api/v1/workflows",
            r#"{"name": "x", "app": "default", "steps": [{"name": "a", "job": "base", "after": ["ghost"]}]}"#,
            422,
            "ghost",
        ),
        bad(
            M::POST,
            "/api/v1/workflows",
            r#"{"name": "x", "app": "default", "steps": [{"name": "a", "job": "base"}, {"name": "b", "job": "base"}, {"name": "m", "job": "base", "map": true, "after": ["a", "b"]}]}"#,
            422,
            "map",
        ),
        bad(
            M::POST,
            "/api/v1/workflows",
            r#"{"name": "x", "app": "default", "steps": [{"name": "a", "job": "base"}, {"name": "b", "job": "base", "after": ["a"], "when": "sometimes"}]}"#,
            422,
            "sometimes",
        ),
        bad(
            M::POST,
            "/api/v1/workflows",
            r#"{"name": "x", "app": "default", "steps": [{"name": "a", "job": "no-such-job"}]}"#,
            404,
            "no-such-job",
        ),
        bad(
            M::POST,
            "/api/v1/workflows",
            r#"{"name": "x", "app": "default", "steps": [{"name": "a", "job": "base", "colour": "red"}]}"#,
            400,
            "colour",
        ),
        bad(
            M::POST,
            "/api/v1/workflows",
            r#"{"name": "w", "app": "default", "steps": [{"name": "a", "job": "base"}]}"#,
            409,
            "w",
        ),
        bad(
            M::PATCH,
            "/api/v1/workflows/w",
            r#"{"steps": [{"name": "a", "job": "base", "after": ["a"]}]}"#,
            422,
            "cycle",
        ),
        bad(M::PATCH, "/api/v1/workflows/nope", "{}", 404, "nope"),
        bad(M::DELETE, "/api/v1/workflows/nope", "", 404, "nope"),
        bad(M::POST, "/api/v1/workflows/w/instances", "{", 400, "JSON"),
        bad(
            M::POST,
            "/api/v1/workflows/w/instances",
            r#"{"key": ""}"#,
            422,
            "key",
        ),
        bad(
            M::POST,
            "/api/v1/workflows/w/instances",
            leak(format!(r#"{{"input": "{big_payload}"}}"#)),
            413,
            "input",
        ),
        bad(
            M::POST,
            "/api/v1/workflows/nope/instances",
            "{}",
            404,
            "nope",
        ),
        bad(
            M::GET,
            "/api/v1/workflow-instances?status=lost",
            "",
            400,
            "lost",
        ),
        bad(
            M::GET,
            "/api/v1/workflow-instances?limit=0",
            "",
            400,
            "limit",
        ),
        bad(
            M::GET,
            "/api/v1/workflow-instances?workflow=nope",
            "",
            404,
            "nope",
        ),
        bad(M::GET, "/api/v1/workflow-instances/abc", "", 400, "id"),
        bad(
            M::POST,
            "/api/v1/workflow-instances/987654/cancel",
            "",
            404,
            "987654",
        ),
        bad(
            M::POST,
            "/api/v1/workflow-instances/987654/retry",
            "",
            404,
            "987654",
        ),
        // --- jobs as code ---
        bad(M::GET, "/api/v1/export?format=xml", "", 400, "xml"),
        bad(M::GET, "/api/v1/export?app=no%20spaces", "", 422, "app"),
        bad(M::POST, "/api/v1/apply", "{", 400, "JSON"),
        bad(
            M::POST,
            "/api/v1/apply?prune=maybe",
            r#"{"version": 1}"#,
            400,
            "prune",
        ),
        bad(
            M::POST,
            "/api/v1/apply",
            r#"{"version": 2}"#,
            422,
            "version",
        ),
        bad(
            M::POST,
            "/api/v1/apply",
            r#"{"version": 1, "jobz": []}"#,
            400,
            "jobz",
        ),
        bad(
            M::POST,
            "/api/v1/apply",
            r#"{"version": 1, "jobs": [{"name": "j", "app": "a", "schedule": {"kind": "cron", "expr": "61 * * * * *"}, "delivery": {"kind": "pull"}}]}"#,
            422,
            "jobs[0] `j`: schedule",
        ),
        bad(
            M::POST,
            "/api/v1/apply",
            r#"{"version": 1, "plugins": [{"name": "p", "sha256": "00"}]}"#,
            422,
            "plugins[0] `p`",
        ),
        bad(
            M::POST,
            "/api/v1/apply",
            r#"{"version": 1, "secrets": [{"app": "a", "name": "nope"}]}"#,
            422,
            "secrets[0]",
        ),
        // --- anything else ---
        bad(M::GET, "/api/v1/../../etc/passwd", "", 404, "no route"),
        bad(
            M::GET,
            "/api/v1/%2e%2e/%2e%2e/etc/passwd",
            "",
            404,
            "no route",
        ),
    ];
    assert!(cases.len() >= 60, "{} cases", cases.len());

    // The executor protocol, signed properly but with bad bodies.
    let signed_cases = vec![
        bad(M::POST, rota_proto::wire::PATH_REGISTER, "{", 400, "JSON"),
        bad(
            M::POST,
            rota_proto::wire::PATH_REGISTER,
            r#"{"app": "default", "address": "ftp://x", "capacity": 1, "running": 0, "active_runs": []}"#,
            422,
            "address",
        ),
        bad(
            M::POST,
            rota_proto::wire::PATH_REGISTER,
            r#"{"app": "default", "address": "http://x", "capacity": -1, "running": 0, "active_runs": []}"#,
            400,
            "capacity",
        ),
        bad(
            M::POST,
            rota_proto::wire::PATH_CALLBACK,
            r#"{"reports": 5}"#,
            400,
            "reports",
        ),
        bad(
            M::POST,
            rota_proto::wire::PATH_KV,
            leak(format!(
                r#"{{"app": "default", "job_id": 1, "op": "get", "key": "{big_name}"}}"#
            )),
            422,
            "key",
        ),
        bad(
            M::POST,
            rota_proto::wire::PATH_KV,
            r#"{"app": "default", "job_id": 1, "op": "explode", "key": "k"}"#,
            400,
            "explode",
        ),
        bad(
            M::GET,
            "/api/executor/v1/plugins/..%2F..%2Fetc%2Fpasswd",
            "",
            400,
            "sha256",
        ),
    ];
    let total = cases.len() + signed_cases.len();
    let mut failures = Vec::new();
    let signed = signed_cases
        .into_iter()
        .map(|c| (As::Executor("default", SECRET), c));
    let all = cases
        .drain(..)
        .map(|c| (As::Bearer(TOKEN), c))
        .chain(signed);
    for (who, case) in all {
        let res = t
            .request(
                who,
                case.method.clone(),
                case.path,
                case.content_type,
                case.body,
            )
            .await;
        let what = format!("{} {}", case.method, case.path);
        if !same_class(res.status, case.status) {
            failures.push(format!(
                "{what}: {} instead of {}: {}",
                res.status, case.status, res.text
            ));
            continue;
        }
        let message = res.error();
        if !message.contains(case.mentions) {
            failures.push(format!(
                "{what}: `{message}` should mention `{}`",
                case.mentions
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    println!("{total} malformed requests, each a 4xx");

    // Nothing was created by any of them, and the node still works.
    let jobs = t.api(M::GET, "/api/v1/jobs", None).await;
    let jobs: Value = serde_json::from_str(&jobs.text).unwrap();
    let names: Vec<&str> = jobs["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["q", "base"],
        "the two jobs made before the battery, newest first"
    );
    let workflows = t.api(M::GET, "/api/v1/workflows", None).await;
    let workflows: Value = serde_json::from_str(&workflows.text).unwrap();
    let names: Vec<&str> = workflows["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["w"],
        "the workflow made before the battery, unchanged"
    );
    assert_eq!(workflows["items"][0]["version"], 1);
    let instances = t.api(M::GET, "/api/v1/workflow-instances", None).await;
    let instances: Value = serde_json::from_str(&instances.text).unwrap();
    assert_eq!(instances["items"], json!([]), "no instance was started");
    let health = t
        .request(As::Nobody, M::GET, "/healthz", None, Vec::new())
        .await;
    assert_eq!(health.status, StatusCode::OK);
    let task = t
        .api(
            M::POST,
            "/api/v1/tasks",
            Some(json!({"job": "base", "delay_ms": 1000})),
        )
        .await;
    assert_eq!(task.status, StatusCode::CREATED, "{}", task.text);
    t.stop().await;
}
