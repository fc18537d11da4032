//! The HTTP API through `router(state).oneshot(req)`, on a real SQLite store in a temp dir.

use crate::support;

use std::collections::BTreeSet;
use support::{Answer, SECRET, TOKEN, TestApp};

use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use rota_proto::wire::{PATH_HEARTBEAT, PATH_REGISTER, plugin_path};
use rota_scheduler::api::api_routes;
use serde_json::{Value, json};

/// The two 4xx of bad input: a value out of range, or a request that does not parse.
const INVALID: StatusCode = StatusCode::UNPROCESSABLE_ENTITY;
const MALFORMED: StatusCode = StatusCode::BAD_REQUEST;
const START: &str = r#"(module (func (export "_start")))"#;

async fn start() -> TestApp {
    TestApp::start_with(|_| {}).await
}

/// This module's calls on the shared [`TestApp`] (a trait: each test module keeps its own).
trait ApiCalls {
    async fn send(&self, req: Request<Body>) -> Answer;
    async fn call(&self, method: Method, path: &str, body: Option<Value>) -> Answer;
    async fn get(&self, path: &str) -> Answer;
    async fn post(&self, path: &str, body: Value) -> Answer;
    async fn patch(&self, path: &str, body: Value) -> Answer;
    async fn delete(&self, path: &str) -> Answer;
    async fn post_raw(&self, path: &str, content_type: &str, body: impl Into<Body>) -> Answer;
    async fn upload(&self, name: &str, module: &str) -> Answer;
    async fn job(&self, name: &str) -> i64;
    async fn expect_rejections(&self, path: &str, cases: Vec<(Value, StatusCode, &str)>);
    async fn signed(&self, method: Method, path: &str, body: &[u8], secret: &[u8]) -> Answer;
    async fn signed_as(
        &self,
        app: &str,
        method: Method,
        path: &str,
        body: &[u8],
        secret: &[u8],
    ) -> Answer;
}

impl ApiCalls for TestApp {
    async fn send(&self, req: Request<Body>) -> Answer {
        self.reply(req).await
    }

    async fn call(&self, method: Method, path: &str, body: Option<Value>) -> Answer {
        self.token_call(method, path, body).await
    }

    async fn get(&self, path: &str) -> Answer {
        self.call(Method::GET, path, None).await
    }

    async fn post(&self, path: &str, body: Value) -> Answer {
        self.call(Method::POST, path, Some(body)).await
    }

    async fn patch(&self, path: &str, body: Value) -> Answer {
        self.call(Method::PATCH, path, Some(body)).await
    }

    async fn delete(&self, path: &str) -> Answer {
        self.call(Method::DELETE, path, None).await
    }

    /// A POST with a raw body and content type.
    async fn post_raw(&self, path: &str, content_type: &str, body: impl Into<Body>) -> Answer {
        let req = Request::post(path)
            .header(header::AUTHORIZATION, format!("Bearer {TOKEN}"))
            .header(header::CONTENT_TYPE, content_type)
            .body(body.into())
            .unwrap();
        self.send(req).await
    }

    async fn upload(&self, name: &str, module: &str) -> Answer {
        self.post_raw(
            &format!("/api/v1/plugins?name={name}"),
            "application/wasm",
            module.to_owned(),
        )
        .await
    }

    /// Uploads the `echo` plugin and creates a job `name` running it on schedule `none`.
    async fn job(&self, name: &str) -> i64 {
        self.upload("echo", START).await;
        let job = self
            .post("/api/v1/jobs", json!({"name": name, "app": "default", "plugin": "echo", "schedule": {"kind": "none"}}))
            .await;
        job.expect(StatusCode::CREATED);
        job.json()["id"].as_i64().unwrap()
    }

    /// POSTs each body and checks its status and that its error message mentions the
    /// needle.
    async fn expect_rejections(&self, path: &str, cases: Vec<(Value, StatusCode, &str)>) {
        for (body, status, needle) in cases {
            let res = self.post(path, body.clone()).await;
            let text = String::from_utf8_lossy(&res.body);
            assert_eq!(res.status, status, "{body} → {text}");
            let message = res.error();
            assert!(
                message.contains(needle),
                "{body}: `{message}` should mention `{needle}`"
            );
        }
    }

    /// An executor-protocol request of an executor of app `default`, signed with that app's
    /// key derived from the master `secret`.
    async fn signed(&self, method: Method, path: &str, body: &[u8], secret: &[u8]) -> Answer {
        self.signed_as("default", method, path, body, secret).await
    }

    /// An executor-protocol request of an executor of `app`.
    async fn signed_as(
        &self,
        app: &str,
        method: Method,
        path: &str,
        body: &[u8],
        secret: &[u8],
    ) -> Answer {
        let key = rota_proto::app_secret(&rota_proto::Secret::new(secret), app);
        let now = chrono::Utc::now().timestamp_millis();
        let signed = rota_proto::sign_now(key.as_bytes(), method.as_str(), path, now, body);
        let mut req = Request::builder()
            .method(method)
            .uri(path)
            .header(header::CONTENT_TYPE, "application/json")
            .header(rota_proto::HEADER_APP, app);
        for (name, value) in signed.pairs() {
            req = req.header(name, value);
        }
        self.send(req.body(Body::from(body.to_vec())).unwrap())
            .await
    }
}

/// Parses an RFC 3339 answer, checking the millisecond UTC form.
#[track_caller]
fn time(v: &Value) -> i64 {
    let s = v.as_str().unwrap_or_else(|| panic!("not a time: {v}"));
    assert!(
        s.ends_with('Z') && s.len() == "2026-11-30T03:29:00.123Z".len(),
        "not RFC 3339 ms UTC: {s}"
    );
    chrono::DateTime::parse_from_rfc3339(s)
        .unwrap()
        .timestamp_millis()
}

fn now() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

#[tokio::test]
async fn healthz_and_readyz_are_open() {
    let t = start().await;
    let res = t
        .send(Request::get("/healthz").body(Body::empty()).unwrap())
        .await;
    res.expect(StatusCode::OK);
    assert_eq!(res.json(), json!({"status": "ok"}));
    // Ready, too: the node wrote its heartbeat (the unready story, a full disk, is in
    // rota/tests/integration/resources.rs).
    let res = t
        .send(Request::get("/readyz").body(Body::empty()).unwrap())
        .await;
    res.expect(StatusCode::OK);
    assert_eq!(res.json(), json!({"status": "ready"}));
    t.stop().await;
}

#[tokio::test]
async fn api_and_metrics_want_the_token() {
    let t = start().await;
    for path in ["/api/v1/jobs", "/api/v1/no-such-route", "/metrics"] {
        let anonymous = t
            .send(Request::get(path).body(Body::empty()).unwrap())
            .await;
        anonymous.expect_error(StatusCode::UNAUTHORIZED, "Authorization");
        let wrong = Request::get(path)
            .header(header::AUTHORIZATION, "Bearer nope")
            .body(Body::empty())
            .unwrap();
        t.send(wrong)
            .await
            .expect_error(StatusCode::UNAUTHORIZED, "invalid API token");
        let basic = Request::get(path)
            .header(header::AUTHORIZATION, "Basic abc")
            .body(Body::empty())
            .unwrap();
        t.send(basic)
            .await
            .expect_error(StatusCode::UNAUTHORIZED, "Bearer");
    }
    t.get("/api/v1/jobs").await.expect(StatusCode::OK);
    let metrics = t.get("/metrics").await;
    metrics.expect(StatusCode::OK);
    assert!(
        metrics.headers[header::CONTENT_TYPE]
            .to_str()
            .unwrap()
            .starts_with("text/plain")
    );
    t.stop().await;
}

#[tokio::test]
async fn without_a_configured_token_only_issued_tokens_open_the_api() {
    let t = TestApp::start_with(|c| c.api_token = None).await;
    t.get("/api/v1/jobs")
        .await
        .expect_error(StatusCode::UNAUTHORIZED, "ROTA_API_TOKEN");
    t.stop().await;
}

#[tokio::test]
async fn unknown_routes_and_methods_answer_json() {
    let t = start().await;
    t.get("/nope")
        .await
        .expect_error(StatusCode::NOT_FOUND, "/nope");
    t.get("/api/v1/nope")
        .await
        .expect_error(StatusCode::NOT_FOUND, "/api/v1/nope");
    t.call(Method::PUT, "/api/v1/plugins", None)
        .await
        .expect_error(StatusCode::METHOD_NOT_ALLOWED, "PUT");
    t.call(Method::POST, "/healthz", None)
        .await
        .expect_error(StatusCode::METHOD_NOT_ALLOWED, "POST");
    t.get("/api/v1/tasks/abc")
        .await
        .expect_error(MALFORMED, "`id`");
    t.get("/api/v1/runs/1.5")
        .await
        .expect_error(MALFORMED, "`id`");
    t.get("/api/v1/tasks?limit=many")
        .await
        .expect_error(MALFORMED, "`limit`");
    t.stop().await;
}

#[tokio::test]
async fn plugin_upload() {
    let t = start().await;
    let first = t.upload("echo", START).await;
    first.expect(StatusCode::CREATED);
    let p = first.json();
    assert_eq!(p["name"], "echo");
    assert_eq!(p["version"], 1);
    let sha = p["sha256"].as_str().unwrap().to_owned();
    assert_eq!(sha.len(), 64);
    assert!(p["size"].as_i64().unwrap() > 8);
    time(&p["created_at"]);

    let again = t.upload("echo", START).await;
    again.expect(StatusCode::OK);
    assert_eq!(again.json()["id"], p["id"]);

    let second = t
        .upload("echo", r#"(module (func (export "_start") nop))"#)
        .await;
    second.expect(StatusCode::CREATED);
    assert_eq!(second.json()["version"], 2);

    t.upload("bad", "this is not wasm")
        .await
        .expect_error(INVALID, "WebAssembly");
    t.upload("bad", "(module)")
        .await
        .expect_error(INVALID, "_start");
    t.upload("bad", "").await.expect_error(INVALID, "empty");
    t.post_raw("/api/v1/plugins", "application/wasm", START)
        .await
        .expect_error(MALFORMED, "`name`");
    t.upload("", START).await.expect_error(INVALID, "name");
    t.upload(&"x".repeat(201), START)
        .await
        .expect_error(INVALID, "200");

    let list = t.get("/api/v1/plugins").await;
    list.expect(StatusCode::OK);
    assert_eq!(list.json()["items"].as_array().unwrap().len(), 2);
    assert_eq!(list.json()["next"], Value::Null);

    // Executors fetch modules by hash, signed, and only those their app's jobs use.
    t.signed(Method::GET, &plugin_path(&sha), b"", SECRET)
        .await
        .expect_error(StatusCode::NOT_FOUND, "used by a job of app `default`");
    t.post(
        "/api/v1/jobs",
        json!({"name": "uses-echo", "app": "default", "plugin": "echo", "schedule": {"kind": "none"}}),
    )
    .await
    .expect(StatusCode::CREATED);
    t.signed_as("other", Method::GET, &plugin_path(&sha), b"", SECRET)
        .await
        .expect(StatusCode::NOT_FOUND);
    let module = t.signed(Method::GET, &plugin_path(&sha), b"", SECRET).await;
    module.expect(StatusCode::OK);
    assert_eq!(module.headers[header::CONTENT_TYPE], "application/wasm");
    assert!(module.body.starts_with(b"\0asm"));
    t.signed(Method::GET, &plugin_path("ABC"), b"", SECRET)
        .await
        .expect_error(MALFORMED, "sha256");
    t.signed(Method::GET, &plugin_path(&"0".repeat(64)), b"", SECRET)
        .await
        .expect(StatusCode::NOT_FOUND);
    t.stop().await;
}

#[tokio::test]
async fn bodies_over_the_caps_are_413() {
    let t = TestApp::start_with(|c| {
        c.max_plugin_bytes = 1_000;
        c.max_body_bytes = 2_000;
    })
    .await;
    let big = format!(
        "(module (func (export \"_start\")) (; {} ;))",
        "x".repeat(2_000)
    );
    t.upload("big", &big)
        .await
        .expect_error(StatusCode::PAYLOAD_TOO_LARGE, "larger");
    let tasks: Vec<Value> = (0..200).map(|_| json!({"job": 1})).collect();
    t.post("/api/v1/tasks/batch", json!({ "tasks": tasks }))
        .await
        .expect(StatusCode::PAYLOAD_TOO_LARGE);
    t.stop().await;
}

#[tokio::test]
async fn job_create_read_list() {
    let t = start().await;
    t.upload("echo", START).await.expect(StatusCode::CREATED);
    let before = now();
    let res = t
        .post(
            "/api/v1/jobs",
            json!({"name": "every-5s", "app": "default", "plugin": "echo",
                   "schedule": {"kind": "cron", "expr": "0/5 * * * * ?"}, "params": "a b"}),
        )
        .await;
    res.expect(StatusCode::CREATED);
    let job = res.json();
    let next = time(&job["next_fire_at"]);
    assert!(
        next > before && next <= before + 5_000 + 1_000,
        "next fire {next} vs now {before}"
    );
    assert_eq!(next % 5_000, 0);
    assert_eq!(job["timeout_ms"], 300_000);
    assert_eq!(job["max_attempts"], 1);
    assert_eq!(job["memory_mb"], 64);
    assert_eq!(job["route"], "first");
    assert_eq!(job["block"], "serial");
    assert_eq!(job["misfire"], "do_nothing");
    assert_eq!(job["enabled"], true);
    assert_eq!(job["plugin"], "echo");
    assert_eq!(job["params"], "a b");
    assert_eq!(job["child_jobs"], json!([]));
    assert_eq!(
        job["backoff"],
        json!({"kind": "exponential", "base_ms": 1000, "factor": 2.0, "max_ms": 3600000, "jitter": false})
    );
    let id = job["id"].as_i64().unwrap();

    // By id, by name, and an unknown one.
    assert_eq!(
        t.get(&format!("/api/v1/jobs/{id}")).await.json()["name"],
        "every-5s"
    );
    assert_eq!(t.get("/api/v1/jobs/every-5s").await.json()["id"], id);
    t.get("/api/v1/jobs/nope")
        .await
        .expect_error(StatusCode::NOT_FOUND, "nope");

    // The plugin by id; schedule none and disabled jobs have no next fire time.
    let plugin_id = t.get("/api/v1/plugins").await.json()["items"][0]["id"].clone();
    let none = t
        .post("/api/v1/jobs", json!({"name": "manual", "app": "default", "plugin": plugin_id, "schedule": {"kind": "none"}}))
        .await;
    none.expect(StatusCode::CREATED);
    assert_eq!(none.json()["next_fire_at"], Value::Null);
    let off = t
        .post(
            "/api/v1/jobs",
            json!({"name": "off", "app": "other", "plugin": "echo", "enabled": false,
                   "schedule": {"kind": "fixed_rate", "every_ms": 1000}}),
        )
        .await;
    off.expect(StatusCode::CREATED);
    assert_eq!(off.json()["next_fire_at"], Value::Null);

    // Same name again: 409.
    t.post(
        "/api/v1/jobs",
        json!({"name": "off", "app": "other", "plugin": "echo", "schedule": {"kind": "none"}}),
    )
    .await
    .expect_error(StatusCode::CONFLICT, "off");

    // Pages of 2, newest first, then the rest.
    let page = t.get("/api/v1/jobs?limit=2").await.json();
    let names: Vec<&str> = page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["off", "manual"]);
    let cursor = page["next"].as_str().expect("a cursor").to_owned();
    let rest = t
        .get(&format!("/api/v1/jobs?limit=2&after={cursor}"))
        .await
        .json();
    assert_eq!(rest["items"].as_array().unwrap().len(), 1);
    assert_eq!(rest["next"], Value::Null);
    assert_eq!(
        t.get("/api/v1/jobs?app=other").await.json()["items"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert_eq!(
        t.get("/api/v1/jobs?q=every").await.json()["items"][0]["id"],
        id
    );
    t.stop().await;
}

#[tokio::test]
async fn bad_job_input_is_a_4xx_naming_the_problem() {
    let t = start().await;
    t.upload("echo", START).await.expect(StatusCode::CREATED);
    let base = json!({"name": "j", "app": "default", "plugin": "echo", "schedule": {"kind": "cron", "expr": "0 * * * * ?"}});
    let with = |key: &str, value: Value| {
        let mut v = base.clone();
        v[key] = value;
        v
    };
    let cases: Vec<(Value, StatusCode, &str)> = vec![
        (
            with("schedule", json!({"kind": "cron", "expr": "not a cron"})),
            INVALID,
            "cron",
        ),
        (
            with(
                "schedule",
                json!({"kind": "cron", "expr": "0 * * * * ?", "time_zone": "Mars/Olympus"}),
            ),
            INVALID,
            "time zone",
        ),
        (
            with(
                "schedule",
                json!({"kind": "cron", "expr": "0 0 0 1 1 ? 2001"}),
            ),
            INVALID,
            "never",
        ),
        (
            with("schedule", json!({"kind": "fixed_rate", "every_ms": 0})),
            INVALID,
            "every_ms",
        ),
        // Ten fires a second at most: a faster one is a loop (a fuzzer's 1 ms jobs once
        // kept a node spinning long after the run that made them).
        (
            with("schedule", json!({"kind": "fixed_delay", "every_ms": 99})),
            INVALID,
            "at least 100",
        ),
        (
            with("schedule", json!({"kind": "fixed_delay"})),
            MALFORMED,
            "missing field `every_ms`",
        ),
        (
            with("schedule", json!({"kind": "fixed_delay", "every_ms": -5})),
            INVALID,
            "schedule: every_ms must be at least 1",
        ),
        (
            with("schedule", json!({"kind": "hourly"})),
            MALFORMED,
            "schedule",
        ),
        // A reference to nothing is a 404 naming the field (SPEC §6: 404 missing).
        (
            with("plugin", json!("nope")),
            StatusCode::NOT_FOUND,
            "plugin",
        ),
        (
            with(
                "http_allow",
                json!(["https://ok.example", "ftp://files.example"]),
            ),
            INVALID,
            "http_allow: entry 1 (`ftp://files.example`) has scheme `ftp`",
        ),
        (
            with("http_allow", json!(["https://user:pw@x.example"])),
            INVALID,
            "credentials",
        ),
        (
            with("http_allow", json!("https://x.example")),
            MALFORMED,
            "http_allow",
        ),
        (with("plugin", json!(999)), StatusCode::NOT_FOUND, "plugin"),
        (with("route", json!("sideways")), INVALID, "route"),
        (with("block", json!("maybe")), INVALID, "block"),
        (with("misfire", json!("panic")), INVALID, "misfire"),
        (with("timeout_ms", json!(0)), INVALID, "timeout_ms"),
        (with("timeout_ms", json!(86_400_001)), INVALID, "timeout_ms"),
        (with("timeout_ms", json!("soon")), MALFORMED, "timeout_ms"),
        (with("max_attempts", json!(101)), INVALID, "max_attempts"),
        (with("memory_mb", json!(0)), INVALID, "memory_mb"),
        (
            with("max_concurrency", json!(0)),
            INVALID,
            "max_concurrency",
        ),
        (
            with("concurrency", json!({"key": "customer", "limit": 2})),
            INVALID,
            "concurrency.key: `customer` is not a JSON Pointer (RFC 6901)",
        ),
        (
            with("concurrency", json!({"key": "/a~2b", "limit": 2})),
            INVALID,
            "concurrency.key: `/a~2b` is not a JSON Pointer",
        ),
        (
            with("concurrency", json!({"key": "/customer", "limit": 0})),
            INVALID,
            "concurrency.limit: must be between 1 and 1000000",
        ),
        (
            with("concurrency", json!({"key": "/customer"})),
            MALFORMED,
            "limit",
        ),
        (
            with("concurrency", json!({"limit": 2, "per": "customer"})),
            MALFORMED,
            "per",
        ),
        (
            with(
                "rate_limit",
                json!({"key": "partner", "limit": 2, "per_ms": 1000}),
            ),
            INVALID,
            "rate_limit.key: `partner` is not a JSON Pointer (RFC 6901)",
        ),
        (
            with("rate_limit", json!({"limit": 0, "per_ms": 1000})),
            INVALID,
            "rate_limit.limit: must be between 1 and 10000",
        ),
        (
            with("rate_limit", json!({"limit": 100, "per_ms": 0})),
            INVALID,
            "rate_limit.per_ms: must be between 1 and 86400000",
        ),
        (
            with("rate_limit", json!({"limit": 100})),
            MALFORMED,
            "per_ms",
        ),
        (
            with("debounce_ms", json!(0)),
            INVALID,
            "debounce_ms: must be between 1 and 604800000",
        ),
        (
            {
                let mut v = with("concurrency", json!({"limit": 2}));
                v["max_concurrency"] = json!(3);
                v
            },
            INVALID,
            "max_concurrency: disagrees with `concurrency`",
        ),
        (
            with(
                "backoff",
                json!({"kind": "exponential", "base_ms": 1000, "factor": 0.5, "max_ms": 5000}),
            ),
            INVALID,
            "factor",
        ),
        (
            with("child_jobs", json!([12345])),
            StatusCode::NOT_FOUND,
            "child_jobs[0]",
        ),
        (with("name", json!("x".repeat(201))), INVALID, "name"),
        (with("name", json!("two\nlines")), INVALID, "control"),
        (with("app", json!("")), INVALID, "app"),
        (
            with("colour", json!("blue")),
            MALFORMED,
            "unknown field `colour`",
        ),
        (
            json!({"name": "j", "app": "default", "plugin": "echo"}),
            MALFORMED,
            "schedule",
        ),
        (json!([1, 2]), MALFORMED, "invalid JSON"),
    ];
    t.expect_rejections("/api/v1/jobs", cases).await;
    t.post_raw("/api/v1/jobs", "application/json", "{\"name\":")
        .await
        .expect_error(MALFORMED, "malformed JSON");
    t.post_raw("/api/v1/jobs", "text/plain", base.to_string())
        .await
        .expect_error(MALFORMED, "Content-Type");
    // Nothing was created.
    assert_eq!(t.get("/api/v1/jobs").await.json()["items"], json!([]));
    t.stop().await;
}

#[tokio::test]
async fn a_concurrency_bound_is_set_per_key_shown_and_cleared() {
    let t = start().await;
    t.upload("echo", START).await.expect(StatusCode::CREATED);
    let created = t
        .post(
            "/api/v1/jobs",
            json!({"name": "reports", "app": "default", "plugin": "echo", "schedule": {"kind": "none"},
                   "concurrency": {"key": "/customer/id", "limit": 2}}),
        )
        .await;
    created.expect(StatusCode::CREATED);
    let job = created.json();
    assert_eq!(
        job["concurrency"],
        json!({"key": "/customer/id", "limit": 2})
    );
    assert_eq!(job["max_concurrency"], 2);
    let path = format!("/api/v1/jobs/{}", job["id"]);
    // A change of something else keeps the bound and its key.
    let kept = t.patch(&path, json!({"timeout_ms": 1000})).await.json();
    assert_eq!(
        kept["concurrency"],
        json!({"key": "/customer/id", "limit": 2})
    );
    // `max_concurrency` alone is the older spelling of a bound of the whole job.
    let whole = t.patch(&path, json!({"max_concurrency": 3})).await.json();
    assert_eq!(whole["concurrency"], json!({"limit": 3}));
    let cleared = t.patch(&path, json!({"concurrency": null})).await.json();
    assert_eq!(cleared["concurrency"], Value::Null);
    assert_eq!(cleared["max_concurrency"], Value::Null);
    t.stop().await;
}

#[tokio::test]
async fn a_rate_limit_is_set_per_key_shown_kept_and_cleared() {
    let t = start().await;
    t.upload("echo", START).await.expect(StatusCode::CREATED);
    let created = t
        .post(
            "/api/v1/jobs",
            json!({"name": "calls", "app": "default", "plugin": "echo", "schedule": {"kind": "none"},
                   "rate_limit": {"key": "/partner", "limit": 100, "per_ms": 60000}}),
        )
        .await;
    created.expect(StatusCode::CREATED);
    let job = created.json();
    assert_eq!(
        job["rate_limit"],
        json!({"key": "/partner", "limit": 100, "per_ms": 60000})
    );
    let path = format!("/api/v1/jobs/{}", job["id"]);
    let kept = t.patch(&path, json!({"timeout_ms": 1000})).await.json();
    assert_eq!(kept["rate_limit"], job["rate_limit"]);
    let whole = t
        .patch(&path, json!({"rate_limit": {"limit": 5, "per_ms": 1000}}))
        .await
        .json();
    assert_eq!(whole["rate_limit"], json!({"limit": 5, "per_ms": 1000}));
    let cleared = t.patch(&path, json!({"rate_limit": null})).await.json();
    assert_eq!(cleared["rate_limit"], Value::Null);
    assert_eq!(t.get(&path).await.json()["rate_limit"], Value::Null);
    t.stop().await;
}

#[tokio::test]
async fn a_backfill_creates_each_fire_time_of_a_range_once() {
    let t = start().await;
    t.upload("echo", START).await.expect(StatusCode::CREATED);
    // Every ten minutes, its phase set by its next fire time.
    let job = t
        .post(
            "/api/v1/jobs",
            json!({"name": "ten", "app": "default", "plugin": "echo", "enabled": false,
                   "schedule": {"kind": "cron", "expr": "0 */10 * * * ?", "time_zone": "UTC"}}),
        )
        .await;
    job.expect(StatusCode::CREATED);
    let range = json!({"from": "2026-12-01T00:00:00Z", "to": "2026-12-01T01:00:00Z"});
    let first = t.post("/api/v1/jobs/ten/backfill", range.clone()).await;
    first.expect(StatusCode::OK);
    assert_eq!(first.json(), json!({"fire_times": 6, "created": 6}));
    // Again, and overlapping: only the new fire times are created.
    let again = t.post("/api/v1/jobs/ten/backfill", range).await.json();
    assert_eq!(again, json!({"fire_times": 6, "created": 0}));
    let wider = t
        .post(
            "/api/v1/jobs/ten/backfill",
            json!({"from": "2026-12-01T00:30:00Z", "to": "2026-12-01T01:30:00Z"}),
        )
        .await
        .json();
    assert_eq!(wider, json!({"fire_times": 6, "created": 3}));
    let tasks = t.get("/api/v1/tasks?job=ten&limit=100").await.json();
    let mut due: Vec<String> = tasks["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["due_at"].as_str().unwrap_or_default().to_owned())
        .collect();
    due.sort();
    assert_eq!(due.len(), 9, "{tasks}");
    assert!(due[0].starts_with("2026-12-01T00:00:00"), "{due:?}");
    assert!(due[8].starts_with("2026-12-01T01:20:00"), "{due:?}");

    t.expect_rejections(
        "/api/v1/jobs/ten/backfill",
        vec![
            (
                json!({"from": "yesterday", "to": "2026-12-01T01:00:00Z"}),
                INVALID,
                "from: `yesterday` is not an RFC 3339 time",
            ),
            (
                json!({"from": "2026-12-01T01:00:00Z", "to": "2026-12-01T00:00:00Z"}),
                INVALID,
                "to: must be after `from`",
            ),
            (
                json!({"from": "2026-01-01T00:00:00Z", "to": "2026-12-01T00:00:00Z"}),
                INVALID,
                "to: the range holds more than 1000 fire times",
            ),
            (
                json!({"from": "2026-12-01T00:00:00Z", "to": "2026-12-01T01:00:00Z", "max": 5}),
                INVALID,
                "more than 5 fire times",
            ),
            (
                json!({"from": "2026-12-01T00:00:00Z", "to": "2026-12-01T01:00:00Z", "max": 10001}),
                INVALID,
                "max: must be between 1 and 10000",
            ),
            (json!({"from": "2026-12-01T00:00:00Z"}), MALFORMED, "to"),
        ],
    )
    .await;
    t.post(
        "/api/v1/jobs/nope/backfill",
        json!({"from": "2026-12-01T00:00:00Z", "to": "2026-12-01T01:00:00Z"}),
    )
    .await
    .expect(StatusCode::NOT_FOUND);
    t.stop().await;
}

#[tokio::test]
async fn job_patch_and_delete() {
    let t = start().await;
    let id = t.job("j").await;
    let other = t.job("child").await;
    let path = format!("/api/v1/jobs/{id}");

    let res = t
        .patch(&path, json!({"schedule": {"kind": "cron", "expr": "0 0 * * * ?"}, "params": "x", "child_jobs": ["child"]}))
        .await;
    res.expect(StatusCode::OK);
    let job = res.json();
    assert_eq!(time(&job["next_fire_at"]) % 3_600_000, 0);
    assert_eq!(job["params"], "x");
    assert_eq!(job["child_jobs"], json!([other]));
    assert_eq!(job["name"], "j");

    let job = t
        .patch(&path, json!({"enabled": false, "params": null}))
        .await
        .json();
    assert_eq!(job["next_fire_at"], Value::Null);
    assert_eq!(job["params"], Value::Null);

    t.patch(&path, json!({"timeout_ms": -1}))
        .await
        .expect_error(INVALID, "timeout_ms");
    t.patch(&path, json!({"child_jobs": [id]}))
        .await
        .expect_error(INVALID, "own child");
    t.patch(
        &format!("/api/v1/jobs/{other}"),
        json!({"child_jobs": [id]}),
    )
    .await
    .expect_error(INVALID, "cycle");
    t.patch("/api/v1/jobs/999", json!({"enabled": true}))
        .await
        .expect(StatusCode::NOT_FOUND);
    assert_eq!(t.get(&path).await.json()["timeout_ms"], 300_000);
    // A pull job moved to a delivery that runs a plugin must name one: a 422, not a
    // missing field.
    t.post(
        "/api/v1/jobs",
        json!({"name": "pulled", "app": "default", "schedule": {"kind": "none"},
               "delivery": {"kind": "pull"}}),
    )
    .await
    .expect(StatusCode::CREATED);
    t.patch("/api/v1/jobs/pulled", json!({"delivery": {"kind": "wasm"}}))
        .await
        .expect_error(INVALID, "plugin: a job delivered by `wasm` runs a plugin");

    // A pending task blocks the delete unless forced.
    t.post("/api/v1/tasks", json!({"job": id, "delay_ms": 3_600_000}))
        .await
        .expect(StatusCode::CREATED);
    t.delete(&path)
        .await
        .expect_error(StatusCode::CONFLICT, "force");
    t.delete(&format!("{path}?force=maybe"))
        .await
        .expect_error(MALFORMED, "`force`");
    let gone = t.delete(&format!("{path}?force=true")).await;
    gone.expect(StatusCode::NO_CONTENT);
    assert!(gone.body.is_empty());
    t.get(&path).await.expect(StatusCode::NOT_FOUND);
    t.stop().await;
}

#[tokio::test]
async fn trigger_creates_a_task_due_now() {
    let t = start().await;
    let id = t.job("j").await;
    let before = now();
    let res = t
        .call(Method::POST, &format!("/api/v1/jobs/{id}/trigger"), None)
        .await;
    res.expect(StatusCode::CREATED);
    let task_id = res.json()["task_id"].as_i64().expect("task_id");
    let task = t.get(&format!("/api/v1/tasks/{task_id}")).await.json();
    assert_eq!(task["job"], id);
    assert!(time(&task["due_at"]) >= before && time(&task["due_at"]) <= now());

    let res = t
        .post("/api/v1/jobs/j/trigger", json!({"params": "--dry-run"}))
        .await;
    res.expect(StatusCode::CREATED);
    assert_ne!(res.json()["task_id"].as_i64(), Some(task_id));
    t.post("/api/v1/jobs/j/trigger", json!({"parms": "x"}))
        .await
        .expect_error(MALFORMED, "parms");
    t.post("/api/v1/jobs/nope/trigger", json!({}))
        .await
        .expect(StatusCode::NOT_FOUND);
    t.stop().await;
}

#[tokio::test]
async fn a_debounced_key_keeps_one_task_with_the_last_payload() {
    let t = start().await;
    let job = t.job("reindex").await;
    t.patch(
        &format!("/api/v1/jobs/{job}"),
        json!({"debounce_ms": 60_000}),
    )
    .await
    .expect(StatusCode::OK);
    let first_at = now();
    let mut ids = Vec::new();
    for v in 1..=5 {
        let res = t
            .post(
                "/api/v1/tasks",
                json!({"job": "reindex", "key": "doc-42", "payload": format!("v{v}"), "delay_ms": 30_000}),
            )
            .await;
        res.expect(if v == 1 {
            StatusCode::CREATED
        } else {
            StatusCode::OK
        });
        ids.push(res.json()["id"].as_i64().unwrap());
    }
    assert!(ids.iter().all(|&id| id == ids[0]), "{ids:?}");
    let task = t.get(&format!("/api/v1/tasks/{}", ids[0])).await.json();
    assert_eq!(task["payload"], "v5");
    assert_eq!(task["status"], "pending");
    let due = time(&task["due_at"]);
    assert!(
        due >= first_at + 30_000 && due <= now() + 30_000,
        "due {due}"
    );
    let all = t.get("/api/v1/tasks?job=reindex").await.json();
    assert_eq!(all["items"].as_array().unwrap().len(), 1);

    // One about to fire (due inside the window: in this node's wheel) is taken out and
    // replaced; the replacement keeps the first create's time, which bounds it.
    let soon = t
        .post(
            "/api/v1/tasks",
            json!({"job": "reindex", "key": "doc-7", "payload": "w1", "delay_ms": 3_000}),
        )
        .await
        .json();
    let again = t
        .post(
            "/api/v1/tasks",
            json!({"job": "reindex", "key": "doc-7", "payload": "w2", "delay_ms": 3_000}),
        )
        .await
        .json();
    assert_ne!(again["id"], soon["id"]);
    assert_eq!(again["payload"], "w2");
    assert_eq!(again["created_at"], soon["created_at"]);
    let old = t.get(&format!("/api/v1/tasks/{}", soon["id"])).await.json();
    assert_eq!(old["status"], "cancelled");
    // The key now names the replacement.
    let by_key = t.get("/api/v1/tasks?job=reindex&key=doc-7").await.json();
    let holders: Vec<&Value> = by_key["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| &t["id"])
        .collect();
    assert_eq!(holders, vec![&again["id"]]);
    t.stop().await;
}

#[tokio::test]
async fn task_create_get_list_cancel() {
    let t = start().await;
    let job = t.job("close-order").await;
    let before = now();
    let res = t
        .post("/api/v1/tasks", json!({"job": "close-order", "payload": "order 42", "delay_ms": 1_800_000, "priority": 5}))
        .await;
    res.expect(StatusCode::CREATED);
    let task = res.json();
    let id = task["id"].as_i64().unwrap();
    assert_eq!(task["job"], job);
    assert_eq!(task["status"], "pending");
    assert_eq!(task["attempts"], 0);
    assert_eq!(task["payload"], "order 42");
    assert_eq!(task["priority"], 5);
    assert_eq!(task["last_run_id"], Value::Null);
    let due = time(&task["due_at"]);
    assert!(due >= before + 1_800_000 && due <= now() + 1_800_000);
    time(&task["created_at"]);

    let run_at = (chrono::Utc::now() + chrono::Duration::days(1))
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    let later = t
        .post("/api/v1/tasks", json!({"job": job, "run_at": run_at}))
        .await;
    later.expect(StatusCode::CREATED);
    assert_eq!(later.json()["due_at"], run_at);
    let later_id = later.json()["id"].as_i64().unwrap();

    assert_eq!(t.get(&format!("/api/v1/tasks/{id}")).await.json()["id"], id);
    t.get("/api/v1/tasks/999999")
        .await
        .expect(StatusCode::NOT_FOUND);

    let list = t
        .get(&format!("/api/v1/tasks?job={job}&status=pending"))
        .await
        .json();
    let ids: Vec<i64> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids, [later_id, id]);
    let page = t.get("/api/v1/tasks?limit=1").await.json();
    assert_eq!(page["items"][0]["id"], later_id);
    let cursor = page["next"].as_str().unwrap().to_owned();
    assert_eq!(
        t.get(&format!("/api/v1/tasks?limit=1&after={cursor}"))
            .await
            .json()["items"][0]["id"],
        id
    );
    assert_eq!(
        t.get("/api/v1/tasks?status=failed").await.json()["items"],
        json!([])
    );
    t.get("/api/v1/tasks?status=lost")
        .await
        .expect_error(MALFORMED, "status");
    t.get("/api/v1/tasks?job=nope")
        .await
        .expect(StatusCode::NOT_FOUND);

    let cancelled = t.delete(&format!("/api/v1/tasks/{id}")).await;
    cancelled.expect(StatusCode::OK);
    assert_eq!(cancelled.json()["status"], "cancelled");
    assert_eq!(cancelled.json()["id"], id);
    t.delete(&format!("/api/v1/tasks/{id}"))
        .await
        .expect(StatusCode::OK);
    assert_eq!(
        t.get(&format!("/api/v1/tasks/{id}")).await.json()["status"],
        "cancelled"
    );
    assert_eq!(
        t.get("/api/v1/tasks?status=cancelled").await.json()["items"][0]["id"],
        id
    );
    t.delete("/api/v1/tasks/999999")
        .await
        .expect(StatusCode::NOT_FOUND);
    t.stop().await;
}

#[tokio::test]
async fn bad_task_input() {
    let t = start().await;
    let job = t.job("j").await;
    let cases: Vec<(Value, StatusCode, &str)> = vec![
        (
            json!({"job": job, "delay_ms": 10, "run_at": "2099-01-01T00:00:00Z"}),
            INVALID,
            "run_at",
        ),
        (json!({"job": job, "delay_ms": -1}), INVALID, "delay_ms"),
        (
            json!({"job": job, "delay_ms": 11_i64 * 366 * 86_400_000}),
            INVALID,
            "10 years",
        ),
        (
            json!({"job": job, "run_at": "3000-01-01T00:00:00Z"}),
            INVALID,
            "10 years",
        ),
        (
            json!({"job": job, "run_at": "tomorrow"}),
            INVALID,
            "RFC 3339",
        ),
        (
            json!({"job": job, "payload": "x".repeat(64 * 1024 + 1)}),
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload",
        ),
        (
            json!({"job": job, "max_attempts": 0}),
            INVALID,
            "max_attempts",
        ),
        (json!({"job": job, "priority": 1001}), INVALID, "priority"),
        (json!({"job": job, "key": "k".repeat(201)}), INVALID, "key"),
        (
            json!({"job": job, "backoff": {"kind": "fixed", "delay_ms": -5}}),
            INVALID,
            "backoff",
        ),
        (json!({"job": 424242}), StatusCode::NOT_FOUND, "job"),
        (json!({"job": true}), MALFORMED, "job"),
        (json!({"payload": "x"}), MALFORMED, "job"),
        (
            json!({"job": job, "delay": 5}),
            MALFORMED,
            "unknown field `delay`",
        ),
    ];
    t.expect_rejections("/api/v1/tasks", cases).await;
    // A past run_at is due at once.
    let past = t
        .post(
            "/api/v1/tasks",
            json!({"job": job, "run_at": "2001-01-01T00:00:00Z"}),
        )
        .await;
    past.expect(StatusCode::CREATED);
    assert!(time(&past.json()["due_at"]) > 1_000_000_000_000);
    t.stop().await;
}

#[tokio::test]
async fn task_keys_are_idempotent() {
    let t = start().await;
    let job = t.job("j").await;
    let body = json!({"job": job, "key": "order-42", "delay_ms": 3_600_000});
    let first = t.post("/api/v1/tasks", body.clone()).await;
    first.expect(StatusCode::CREATED);
    let again = t.post("/api/v1/tasks", body).await;
    again.expect(StatusCode::OK);
    assert_eq!(again.json()["id"], first.json()["id"]);
    assert_eq!(again.json()["key"], "order-42");

    // Cancel by key.
    t.delete("/api/v1/tasks?job=j&key=nope")
        .await
        .expect(StatusCode::NOT_FOUND);
    t.delete("/api/v1/tasks?job=j")
        .await
        .expect_error(MALFORMED, "`key`");
    let cancelled = t.delete("/api/v1/tasks?job=j&key=order-42").await;
    cancelled.expect(StatusCode::OK);
    assert_eq!(cancelled.json()["id"], first.json()["id"]);
    assert_eq!(cancelled.json()["status"], "cancelled");
    t.stop().await;
}

#[tokio::test]
async fn task_batches_are_all_or_nothing() {
    let t = start().await;
    let job = t.job("j").await;
    let existing = t
        .post(
            "/api/v1/tasks",
            json!({"job": job, "key": "old", "delay_ms": 3_600_000}),
        )
        .await;
    let existing_id = existing.json()["id"].as_i64().unwrap();

    let res = t
        .post(
            "/api/v1/tasks/batch",
            json!({"tasks": [
                {"job": job, "delay_ms": 3_600_000, "payload": "a"},
                {"job": "j", "delay_ms": 3_600_000, "key": "new"},
                {"job": job, "key": "old"},
            ]}),
        )
        .await;
    res.expect(StatusCode::CREATED);
    let ids: Vec<i64> = res.json()["ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_i64().unwrap())
        .collect();
    assert_eq!(ids.len(), 3);
    assert_eq!(ids[2], existing_id);
    assert_eq!(
        t.get(&format!("/api/v1/tasks/{}", ids[0])).await.json()["payload"],
        "a"
    );
    let count = || async {
        t.get("/api/v1/tasks?limit=1000").await.json()["items"]
            .as_array()
            .unwrap()
            .len()
    };
    assert_eq!(count().await, 3);

    let bad = t
        .post(
            "/api/v1/tasks/batch",
            json!({"tasks": [{"job": job}, {"job": job}, {"job": job, "delay_ms": -7}]}),
        )
        .await;
    bad.expect_error(INVALID, "tasks[2].delay_ms");
    let twice = t
        .post(
            "/api/v1/tasks/batch",
            json!({"tasks": [{"job": job, "key": "k"}, {"job": job, "key": "k"}]}),
        )
        .await;
    twice.expect_error(INVALID, "tasks[1].key");
    t.post(
        "/api/v1/tasks/batch",
        json!({"tasks": [{"job": job}, {"job": "nope"}]}),
    )
    .await
    .expect_error(StatusCode::NOT_FOUND, "tasks[1].job");
    t.post(
        "/api/v1/tasks/batch",
        json!({"tasks": [{"job": job}, {"job": job, "delay_ms": "x"}]}),
    )
    .await
    .expect_error(MALFORMED, "tasks[1].delay_ms");
    let too_many: Vec<Value> = (0..10_001).map(|_| json!({"job": job})).collect();
    t.post("/api/v1/tasks/batch", json!({ "tasks": too_many }))
        .await
        .expect_error(StatusCode::PAYLOAD_TOO_LARGE, "10000");
    assert_eq!(count().await, 3, "nothing of a failed batch is created");
    t.stop().await;
}

#[tokio::test]
async fn runs_and_executors() {
    let t = start().await;
    let runs = t.get("/api/v1/runs").await;
    runs.expect(StatusCode::OK);
    assert_eq!(runs.json(), json!({"items": [], "next": null}));
    t.get("/api/v1/runs/999")
        .await
        .expect(StatusCode::NOT_FOUND);
    t.get("/api/v1/runs/999/log")
        .await
        .expect(StatusCode::NOT_FOUND);
    t.get("/api/v1/runs/999/log?from_line=0")
        .await
        .expect_error(MALFORMED, "from_line");
    t.call(Method::POST, "/api/v1/runs/999/kill", None)
        .await
        .expect(StatusCode::NOT_FOUND);
    t.get("/api/v1/runs?status=weird")
        .await
        .expect_error(MALFORMED, "status");
    assert_eq!(
        t.get("/api/v1/executors").await.json(),
        json!({"items": [], "next": null})
    );
    // The node itself: live, its clock the database's (SQLite's is this machine's).
    let nodes = t.get("/api/v1/nodes").await;
    nodes.expect(StatusCode::OK);
    let nodes = nodes.json();
    let items = nodes["items"].as_array().unwrap();
    assert_eq!(items.len(), 1, "{nodes}");
    assert_eq!(items[0]["live"], true, "{nodes}");
    // Zero, give or take the reading's millisecond (MySQL's `NOW(3)`).
    let offset = items[0]["clock_offset_ms"].as_i64().unwrap();
    assert!(offset.abs() <= 1, "{nodes}");
    assert_eq!(items[0]["clock_off"], false, "{nodes}");
    assert!(items[0]["last_heartbeat_at"].is_string(), "{nodes}");
    t.stop().await;
}

/// Changes made through the API are in the audit log, which only admins read.
/// Changing a task through the API is audited as through the console (one door: the use
/// case audits, whichever adapter called it): reschedule, cancel, retry of a dead task,
/// a bulk retry and a cancel by key. A cancel that changes nothing is not.
#[tokio::test]
async fn task_changes_through_the_api_are_audited() {
    let t = start().await;
    t.post(
        "/api/v1/jobs",
        json!({"name": "q", "app": "default", "schedule": {"kind": "none"},
               "delivery": {"kind": "pull"}, "max_attempts": 1}),
    )
    .await
    .expect(StatusCode::CREATED);
    let task = |body: Value| async {
        let res = t.post("/api/v1/tasks", body).await;
        res.expect(StatusCode::CREATED);
        res.json()["id"].as_i64().unwrap()
    };
    let later = task(json!({"job": "q", "delay_ms": 3_600_000})).await;
    t.patch(
        &format!("/api/v1/tasks/{later}"),
        json!({"delay_ms": 7_200_000}),
    )
    .await
    .expect(StatusCode::OK);
    t.delete(&format!("/api/v1/tasks/{later}"))
        .await
        .expect(StatusCode::OK);
    t.delete(&format!("/api/v1/tasks/{later}"))
        .await
        .expect(StatusCode::OK);
    let keyed = task(json!({"job": "q", "delay_ms": 3_600_000, "key": "k1"})).await;
    t.delete("/api/v1/tasks?job=q&key=k1")
        .await
        .expect(StatusCode::OK);
    // Two tasks die (one attempt each, nacked); one is retried alone, then the rest.
    let dead = [
        task(json!({"job": "q"})).await,
        task(json!({"job": "q"})).await,
    ];
    for _ in 0..2 {
        let pulled = t
            .post(
                "/api/v1/jobs/q/pull",
                json!({"max": 1, "wait_ms": 10_000, "lease_ms": 60_000}),
            )
            .await
            .json();
        let item = &pulled["items"][0];
        let id = item["task"].as_i64().unwrap();
        t.post(
            &format!("/api/v1/tasks/{id}/nack"),
            json!({"lease": item["lease"], "error": "no"}),
        )
        .await
        .expect(StatusCode::OK);
    }
    t.post(&format!("/api/v1/tasks/{}/retry", dead[0]), json!({}))
        .await
        .expect(StatusCode::OK);
    t.post("/api/v1/tasks/retry", json!({"job": "q", "status": "dead"}))
        .await
        .expect(StatusCode::OK);

    let log = t.get("/api/v1/audit?limit=6").await.json();
    let entries: Vec<(String, String)> = log["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            assert_eq!(e["user"], "root", "{e}");
            let text = |k: &str| e[k].as_str().unwrap().to_owned();
            (text("action"), text("target"))
        })
        .collect();
    let expected = [
        ("retry dead tasks", "1 dead task(s) of job `q`".to_owned()),
        ("retry task", dead[0].to_string()),
        ("cancel task", keyed.to_string()),
        ("cancel task", later.to_string()),
        ("reschedule task", later.to_string()),
        ("create job", "q".to_owned()),
    ]
    .map(|(a, target)| (a.to_owned(), target));
    assert_eq!(entries, expected);
    t.stop().await;
}

#[tokio::test]
async fn api_changes_are_audited() {
    let t = start().await;
    let id = t.job("audited").await;
    t.patch(&format!("/api/v1/jobs/{id}"), json!({"enabled": false}))
        .await
        .expect(StatusCode::OK);
    t.post(&format!("/api/v1/jobs/{id}/trigger"), json!({}))
        .await
        .expect(StatusCode::CREATED);
    t.delete(&format!("/api/v1/jobs/{id}?force=true"))
        .await
        .expect(StatusCode::NO_CONTENT);

    let log = t.get("/api/v1/audit?limit=3").await;
    log.expect(StatusCode::OK);
    let page = log.json();
    let entries: Vec<(String, String, String)> = page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            time(&e["at"]);
            let text = |k: &str| e[k].as_str().unwrap().to_owned();
            (text("user"), text("action"), text("target"))
        })
        .collect();
    let expected = [
        ("root", "delete job", "audited"),
        ("root", "trigger job", "audited"),
        ("root", "disable job", "audited"),
    ]
    .map(|(u, a, t)| (u.to_owned(), a.to_owned(), t.to_owned()));
    assert_eq!(entries, expected);
    // Older entries on the next page: the job's creation and the plugin's upload.
    let next = page["next"].as_str().unwrap();
    let older = t.get(&format!("/api/v1/audit?after={next}")).await.json();
    let actions: Vec<&str> = older["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    assert_eq!(actions, ["create job", "upload plugin"]);

    // A viewer's token reads jobs, but not the audit log.
    let store = t.node.ports().store();
    let now = chrono::Utc::now().timestamp_millis();
    let user = store
        .insert_user("vic", "x", "viewer", "*", now)
        .await
        .unwrap();
    let token = "viewer-token-0123456789";
    store
        .insert_token(
            user,
            "t",
            &rota_scheduler::console::auth::token_hash(token),
            now,
        )
        .await
        .unwrap();
    let req = Request::get("/api/v1/audit")
        .header(header::AUTHORIZATION, format!("Bearer {token}"))
        .body(Body::empty())
        .unwrap();
    t.send(req)
        .await
        .expect_error(StatusCode::FORBIDDEN, "admin");
    t.stop().await;
}

#[tokio::test]
async fn executor_protocol_is_signed() {
    let t = start().await;
    let reg = json!({"app": "default", "address": "http://127.0.0.1:9", "capacity": 8, "running": 0, "active_runs": []});
    let body = serde_json::to_vec(&reg).unwrap();

    let unsigned = Request::post(PATH_HEARTBEAT)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body.clone()))
        .unwrap();
    t.send(unsigned)
        .await
        .expect_error(StatusCode::UNAUTHORIZED, "signed");
    t.signed(Method::POST, PATH_HEARTBEAT, &body, b"wrong-secret")
        .await
        .expect_error(StatusCode::UNAUTHORIZED, "ROTA_EXECUTOR_SECRET");
    // The API token is no substitute for a signature.
    let with_token = Request::post(PATH_HEARTBEAT)
        .header(header::AUTHORIZATION, format!("Bearer {TOKEN}"))
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body.clone()))
        .unwrap();
    t.send(with_token).await.expect(StatusCode::UNAUTHORIZED);

    let res = t.signed(Method::POST, PATH_REGISTER, &body, SECRET).await;
    res.expect(StatusCode::OK);
    assert_eq!(res.json()["heartbeat_interval_ms"], 30_000);
    t.signed(Method::POST, PATH_HEARTBEAT, &body, SECRET)
        .await
        .expect(StatusCode::OK);
    t.signed(Method::POST, PATH_HEARTBEAT, b"{\"app\":", SECRET)
        .await
        .expect(MALFORMED);

    let executors = t.get("/api/v1/executors").await.json();
    let e = &executors["items"][0];
    assert_eq!(e["app"], "default");
    assert_eq!(e["address"], "http://127.0.0.1:9");
    assert_eq!(e["capacity"], 8);
    time(&e["last_heartbeat_at"]);
    assert_eq!(
        t.get("/api/v1/executors?app=other").await.json()["items"],
        json!([])
    );

    let callback = serde_json::to_vec(&json!({"reports": []})).unwrap();
    let ack = t
        .signed(
            Method::POST,
            rota_proto::wire::PATH_CALLBACK,
            &callback,
            SECRET,
        )
        .await;
    ack.expect(StatusCode::OK);
    assert_eq!(ack.json(), json!({"accepted": 0}));

    let bye =
        serde_json::to_vec(&json!({"app": "default", "address": "http://127.0.0.1:9"})).unwrap();
    let res = t
        .signed(
            Method::POST,
            rota_proto::wire::PATH_DEREGISTER,
            &bye,
            SECRET,
        )
        .await;
    res.expect(StatusCode::OK);
    assert_eq!(res.json(), json!({}));
    assert_eq!(t.get("/api/v1/executors").await.json()["items"], json!([]));
    t.stop().await;
}

/// The methods an OpenAPI path item can hold.
const OPENAPI_METHODS: [&str; 8] = [
    "get", "put", "post", "delete", "options", "head", "patch", "trace",
];

/// What the fallback says when no route matches (a 404 about a missing job is a route).
const NO_ROUTE: &str = "no route for";

#[tokio::test]
async fn openapi_document_describes_every_route() {
    let t = start().await;
    let anonymous = Request::get("/api/v1/openapi.json")
        .body(Body::empty())
        .unwrap();
    t.send(anonymous)
        .await
        .expect_error(StatusCode::UNAUTHORIZED, "Authorization");
    let answer = t.get("/api/v1/openapi.json").await;
    answer.expect(StatusCode::OK);
    let doc = answer.json();
    let version = doc["openapi"].as_str().unwrap_or_default();
    assert!(version.starts_with("3."), "openapi: {version:?}");
    assert_eq!(
        doc["components"]["securitySchemes"]["api_token"]["scheme"],
        "bearer"
    );

    // Both ways: a route served but not documented, or documented but not served, fails.
    let paths = doc["paths"].as_object().expect("paths");
    let documented: BTreeSet<(String, String)> = paths
        .iter()
        .flat_map(|(path, item)| {
            OPENAPI_METHODS
                .iter()
                .filter(|m| item.get(**m).is_some())
                .map(|m| (m.to_uppercase(), path.clone()))
        })
        .collect();
    let served: BTreeSet<(String, String)> = api_routes()
        .into_iter()
        .map(|(method, path)| (method.to_string(), path))
        .collect();
    let undocumented: Vec<_> = served.difference(&documented).collect();
    assert!(
        undocumented.is_empty(),
        "served, not in the document: {undocumented:?}"
    );
    let unserved: Vec<_> = documented.difference(&served).collect();
    assert!(unserved.is_empty(), "documented, not served: {unserved:?}");

    let mut operation_ids = BTreeSet::new();
    for (method, path) in &documented {
        let operation = &paths[path][method.to_lowercase()];
        let id = operation["operationId"].as_str().unwrap_or_default();
        assert!(
            operation_ids.insert(id.to_owned()),
            "{method} {path}: operationId {id:?} repeats"
        );
        let responses = operation["responses"].as_object().expect("responses");
        assert!(
            responses.keys().any(|s| s.starts_with('2')),
            "{method} {path}: no success documented"
        );
        for (status, response) in responses {
            if status.starts_with('4') || status.starts_with('5') {
                assert_eq!(
                    response["content"]["application/json"]["schema"]["$ref"],
                    "#/components/schemas/ErrorBody",
                    "{method} {path} {status}: not the error shape"
                );
            }
        }

        // The router answers it: any path parameter will do, a missing resource is fine.
        let uri = path
            .split('/')
            .map(|seg| if seg.starts_with('{') { "1" } else { seg })
            .collect::<Vec<_>>()
            .join("/");
        let method = Method::from_bytes(method.as_bytes()).unwrap();
        let res = t.call(method.clone(), &uri, None).await;
        assert_ne!(res.status, StatusCode::METHOD_NOT_ALLOWED, "{method} {uri}");
        if res.status == StatusCode::NOT_FOUND {
            assert!(
                !res.error().starts_with(NO_ROUTE),
                "{method} {uri}: no route"
            );
        }
    }
    t.stop().await;
}

/// SPEC §4: anywhere a body, path or query names a job or a plugin, it takes the name or
/// the id. The test walks every route whose path names one (checked against the router's
/// own list, so a route added later must join the walk) and every body field the OpenAPI
/// document types as such a reference, once with names and once with ids.
#[tokio::test]
async fn every_reference_to_a_job_or_plugin_takes_its_name_or_its_id() {
    let t = start().await;
    let mut walked: BTreeSet<(Method, &str)> = BTreeSet::new();
    t.post(
        "/api/v1/alarm-channels",
        json!({"name": "ops", "kind": "webhook", "url": "http://192.0.2.1/alarms"}),
    )
    .await
    .expect(StatusCode::CREATED);
    for by_id in [false, true] {
        let form = if by_id { "id" } else { "name" };
        // A reference in a body (a JSON string or number) and in a path or query.
        let body_ref = |name: &str, id: i64| if by_id { json!(id) } else { json!(name) };
        let path_ref = |name: &str, id: i64| {
            if by_id {
                id.to_string()
            } else {
                name.to_owned()
            }
        };
        let plugin = format!("echo-{form}");
        let uploaded = t.upload(&plugin, START).await;
        uploaded.expect(StatusCode::CREATED);
        let plugin_id = uploaded.json()["id"].as_i64().unwrap();
        let (q, w) = (format!("q-{form}"), format!("w-{form}"));
        let made = t
            .post(
                "/api/v1/jobs",
                json!({"name": q, "app": "default", "schedule": {"kind": "none"},
                       "delivery": {"kind": "pull"}}),
            )
            .await;
        made.expect(StatusCode::CREATED);
        let q_id = made.json()["id"].as_i64().unwrap();
        let made = t
            .post(
                "/api/v1/jobs",
                json!({"name": w, "app": "default", "schedule": {"kind": "none"},
                       "plugin": body_ref(&plugin, plugin_id),
                       "child_jobs": [body_ref(&q, q_id)]}),
            )
            .await;
        made.expect(StatusCode::CREATED);
        walked.insert((Method::POST, "/api/v1/jobs"));
        let w_id = made.json()["id"].as_i64().unwrap();
        assert_eq!(made.json()["plugin"], plugin.as_str(), "{form}");
        assert_eq!(made.json()["child_jobs"], json!([q_id]), "{form}");
        let (qp, wp) = (path_ref(&q, q_id), path_ref(&w, w_id));

        let got = t.get(&format!("/api/v1/jobs/{qp}")).await;
        got.expect(StatusCode::OK);
        assert_eq!(got.json()["id"], q_id, "{form}");
        walked.insert((Method::GET, "/api/v1/jobs/{id}"));
        t.patch(&format!("/api/v1/jobs/{wp}"), json!({"child_jobs": []}))
            .await
            .expect(StatusCode::OK);
        walked.insert((Method::PATCH, "/api/v1/jobs/{id}"));
        let fired = t
            .call(Method::POST, &format!("/api/v1/jobs/{wp}/trigger"), None)
            .await;
        assert!(fired.status.is_success(), "{form}: {}", fired.status);
        walked.insert((Method::POST, "/api/v1/jobs/{id}/trigger"));
        // Found by name or id: the job itself (without a schedule) is what is refused.
        t.post(
            &format!("/api/v1/jobs/{wp}/backfill"),
            json!({"from": "2026-12-01T00:00:00Z", "to": "2026-12-02T00:00:00Z"}),
        )
        .await
        .expect_error(INVALID, &format!("job `{w}` has no schedule"));
        walked.insert((Method::POST, "/api/v1/jobs/{id}/backfill"));

        // Tasks of the pull job, named every way a task names its job.
        t.post(
            "/api/v1/tasks",
            json!({"job": body_ref(&q, q_id), "key": "k", "delay_ms": 3_600_000}),
        )
        .await
        .expect(StatusCode::CREATED);
        t.delete(&format!("/api/v1/tasks?job={qp}&key=k"))
            .await
            .expect(StatusCode::OK);
        walked.insert((Method::DELETE, "/api/v1/tasks"));
        t.post(
            "/api/v1/tasks/batch",
            json!({"tasks": [{"job": body_ref(&q, q_id)}, {"job": body_ref(&q, q_id)}]}),
        )
        .await
        .expect(StatusCode::CREATED);
        let listed = t.get(&format!("/api/v1/tasks?job={qp}")).await;
        listed.expect(StatusCode::OK);
        assert_eq!(
            listed.json()["items"].as_array().unwrap().len(),
            3,
            "{form}"
        );
        walked.insert((Method::GET, "/api/v1/tasks"));
        // The tasks are due now but ready only once the wheel fires them: a long poll
        // takes them as they come, one pull or several.
        let mut acks: Vec<Value> = Vec::new();
        for _ in 0..10 {
            if acks.len() == 2 {
                break;
            }
            let pulled = t
                .post(
                    &format!("/api/v1/jobs/{qp}/pull"),
                    json!({"max": 10, "wait_ms": 2_000}),
                )
                .await;
            pulled.expect(StatusCode::OK);
            acks.extend(
                pulled.json()["items"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|i| json!({"task": i["task"], "lease": i["lease"]})),
            );
        }
        walked.insert((Method::POST, "/api/v1/jobs/{id}/pull"));
        assert_eq!(acks.len(), 2, "{form}: {acks:?}");
        let acked = t
            .post(&format!("/api/v1/jobs/{qp}/ack"), json!({"acks": acks}))
            .await;
        acked.expect(StatusCode::OK);
        assert!(
            acked.json()["results"]
                .as_array()
                .unwrap()
                .iter()
                .all(|r| r["status"] == "acked"),
            "{form}: {}",
            acked.json()
        );
        walked.insert((Method::POST, "/api/v1/jobs/{id}/ack"));
        t.post(
            "/api/v1/tasks/retry",
            json!({"job": body_ref(&q, q_id), "status": "dead"}),
        )
        .await
        .expect(StatusCode::OK);
        walked.insert((Method::POST, "/api/v1/tasks/retry"));
        let runs = t.get(&format!("/api/v1/runs?job={qp}")).await;
        runs.expect(StatusCode::OK);
        assert_eq!(runs.json()["items"].as_array().unwrap().len(), 2, "{form}");
        walked.insert((Method::GET, "/api/v1/runs"));

        let rule = format!("r-{form}");
        let made = t
            .post(
                "/api/v1/alarm-rules",
                json!({"name": rule, "app": "default", "job": body_ref(&w, w_id),
                       "on": "run_failed", "channels": ["ops"]}),
            )
            .await;
        made.expect(StatusCode::CREATED);
        assert_eq!(made.json()["job"], w_id, "{form}: {}", made.json());
        walked.insert((Method::POST, "/api/v1/alarm-rules"));
        t.delete(&format!("/api/v1/alarm-rules/{rule}"))
            .await
            .expect(StatusCode::NO_CONTENT);

        for job in [&wp, &qp] {
            t.delete(&format!("/api/v1/jobs/{job}?force=true"))
                .await
                .expect(StatusCode::NO_CONTENT);
        }
        walked.insert((Method::DELETE, "/api/v1/jobs/{id}"));
        t.delete(&format!("/api/v1/plugins/{}", path_ref(&plugin, plugin_id)))
            .await
            .expect(StatusCode::NO_CONTENT);
        walked.insert((Method::DELETE, "/api/v1/plugins/{name}"));
        t.get(&format!("/api/v1/jobs/{qp}"))
            .await
            .expect(StatusCode::NOT_FOUND);
    }

    // Every route whose path names a job or a plugin was walked.
    for (method, path) in api_routes() {
        if path.starts_with("/api/v1/jobs/") || path.starts_with("/api/v1/plugins/") {
            assert!(
                walked.contains(&(method.clone(), path.as_str())),
                "{method} {path} names a job or plugin and is not walked"
            );
        }
    }
    // Every body field that names a job or plugin is typed as a name or an id, and each
    // was walked above.
    let doc = t.get("/api/v1/openapi.json").await.json();
    fn names_or_ids(spec: &Value) -> bool {
        spec.is_object()
            && (spec["$ref"] == "#/components/schemas/NameOrId"
                || names_or_ids(&spec["items"])
                || ["oneOf", "anyOf"].iter().any(|k| {
                    spec[k]
                        .as_array()
                        .is_some_and(|alts| alts.iter().any(names_or_ids))
                }))
    }
    let mut fields = BTreeSet::new();
    for (schema, body) in doc["components"]["schemas"].as_object().unwrap() {
        let Some(props) = body["properties"].as_object() else {
            continue;
        };
        for (field, spec) in props {
            if !["job", "plugin", "child_jobs"].contains(&field.as_str()) {
                continue;
            }
            // A request body's field (views answer with the name or id they hold).
            if schema.ends_with("View") || schema.starts_with("PageView") {
                continue;
            }
            // A jobs-as-code document names jobs and plugins by name alone: ids differ
            // between the nodes a document moves between (`usecase::export`).
            if schema.ends_with("Entry") {
                continue;
            }
            let typed = names_or_ids(spec);
            assert!(
                typed,
                "{schema}.{field} does not take a name or an id: {spec}"
            );
            fields.insert(format!("{schema}.{field}"));
        }
    }
    assert!(
        fields.len() >= 5,
        "the job, child_jobs, plugin, task and rule fields: {fields:?}"
    );
    eprintln!(
        "walked {} routes; reference fields: {fields:?}",
        walked.len()
    );
    t.stop().await;
}
