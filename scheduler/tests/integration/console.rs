//! The web console through `router(state).oneshot(req)`, on a real SQLite store in a temp
//! dir: sign-in, the login wall on every route, CSRF, every page, the job form.

use crate::support;

use std::net::SocketAddr;
use support::{Answer, TOKEN, TestApp};

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{Method, Request, StatusCode, header};
use rota_scheduler::console::auth::token_hash;
use rota_scheduler::console::console_routes;
use rota_scheduler::model::{Dispatched, now_ms};
use rota_scheduler::store::JobFires;
use serde_json::{Value, json};

const PASSWORD: &str = "correct horse battery staple";
const START: &str = r#"(module (func (export "_start")))"#;

async fn start() -> TestApp {
    TestApp::start_with(|config| config.admin_password = Some(PASSWORD.into())).await
}

/// A signed-in browser: its session cookie and CSRF token.
struct Browser {
    cookie: String,
    csrf: String,
}

/// This module's calls on the shared [`TestApp`] (a trait: each test module keeps its own).
trait ConsoleCalls {
    async fn send(&self, req: Request<Body>) -> Answer;
    async fn get(&self, path: &str, cookie: Option<&str>) -> Answer;
    async fn post_form(&self, path: &str, cookie: Option<&str>, form: &[(&str, &str)]) -> Answer;
    async fn login(&self, user: &str, password: &str) -> Answer;
    async fn sign_in(&self) -> Browser;
    async fn sign_in_as(&self, user: &str, password: &str) -> Browser;
    async fn submit(&self, b: &Browser, path: &str, form: &[(&str, &str)]) -> Answer;
    async fn api(&self, method: Method, path: &str, content_type: &str, body: String) -> Value;
    async fn upload_plugin(&self);
    async fn create_job(&self, b: &Browser, name: &str) -> i64;
}

impl ConsoleCalls for TestApp {
    async fn send(&self, req: Request<Body>) -> Answer {
        self.reply(req).await
    }

    /// A browser's GET (it asks for HTML).
    async fn get(&self, path: &str, cookie: Option<&str>) -> Answer {
        let mut req = Request::get(path).header(header::ACCEPT, "text/html,*/*;q=0.8");
        if let Some(c) = cookie {
            req = req.header(header::COOKIE, c);
        }
        self.send(req.body(Body::empty()).unwrap()).await
    }

    async fn post_form(&self, path: &str, cookie: Option<&str>, form: &[(&str, &str)]) -> Answer {
        let body = form
            .iter()
            .map(|(k, v)| format!("{k}={}", encode(v)))
            .collect::<Vec<_>>()
            .join("&");
        let mut req =
            Request::post(path).header(header::CONTENT_TYPE, "application/x-www-form-urlencoded");
        if let Some(c) = cookie {
            req = req.header(header::COOKIE, c);
        }
        self.send(req.body(Body::from(body)).unwrap()).await
    }

    async fn login(&self, user: &str, password: &str) -> Answer {
        self.post_form("/login", None, &[("user", user), ("password", password)])
            .await
    }

    async fn sign_in(&self) -> Browser {
        self.sign_in_as("admin", PASSWORD).await
    }

    async fn sign_in_as(&self, user: &str, password: &str) -> Browser {
        let res = self.login(user, password).await;
        res.expect(StatusCode::SEE_OTHER);
        let set = res
            .headers
            .get(header::SET_COOKIE)
            .and_then(|v| v.to_str().ok())
            .expect("a session cookie")
            .to_owned();
        let cookie = set.split(';').next().unwrap().to_owned();
        let page = self.get("/console", Some(&cookie)).await;
        page.expect(StatusCode::OK);
        Browser {
            csrf: page.csrf(),
            cookie,
        }
    }

    /// A form POST with the browser's session and CSRF token.
    async fn submit(&self, b: &Browser, path: &str, form: &[(&str, &str)]) -> Answer {
        let mut form = form.to_vec();
        form.push(("csrf", &b.csrf));
        self.post_form(path, Some(&b.cookie), &form).await
    }

    /// An API call with the token (to set up what the console shows).
    async fn api(&self, method: Method, path: &str, content_type: &str, body: String) -> Value {
        let req = Request::builder()
            .method(method)
            .uri(path)
            .header(header::AUTHORIZATION, format!("Bearer {TOKEN}"))
            .header(header::CONTENT_TYPE, content_type)
            .body(Body::from(body))
            .unwrap();
        let res = self.send(req).await;
        assert!(res.status.is_success(), "{path}: {}", res.text);
        serde_json::from_str(&res.text).unwrap_or(Value::Null)
    }

    async fn upload_plugin(&self) {
        self.api(
            Method::POST,
            "/api/v1/plugins?name=echo",
            "application/wasm",
            START.into(),
        )
        .await;
    }

    /// Creates a job through the console's form; returns its id.
    async fn create_job(&self, b: &Browser, name: &str) -> i64 {
        let res = self.submit(b, "/console/jobs", &job_form(name)).await;
        res.expect(StatusCode::SEE_OTHER);
        res.location()
            .strip_prefix("/console/jobs/")
            .and_then(|id| id.parse().ok())
            .unwrap_or_else(|| panic!("redirect to the job: {}", res.location()))
    }
}

fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A valid job form with schedule `none`.
fn job_form(name: &str) -> Vec<(&str, &str)> {
    vec![
        ("name", name),
        ("app", "default"),
        ("plugin", "echo"),
        ("schedule_kind", "none"),
        ("cron_expr", ""),
        ("time_zone", ""),
        ("every_ms", ""),
        ("params", ""),
        ("route", "first"),
        ("block", "serial"),
        ("misfire", "do_nothing"),
        ("timeout_ms", "300000"),
        ("max_attempts", "1"),
        ("memory_mb", "64"),
        ("max_concurrency", ""),
        ("concurrency_key", ""),
        ("rate_limit", ""),
        ("rate_per_ms", ""),
        ("rate_key", ""),
        ("debounce_ms", ""),
        ("enabled", "on"),
    ]
}

/// `form` with `key` set to `value` (a key the form lacks is a mistake of the test).
fn with<'a>(
    mut form: Vec<(&'a str, &'a str)>,
    key: &'a str,
    value: &'a str,
) -> Vec<(&'a str, &'a str)> {
    let field = form.iter_mut().find(|kv| kv.0 == key);
    field
        .unwrap_or_else(|| panic!("the form has no field `{key}`"))
        .1 = value;
    form
}

fn concrete(path: &str, id: i64) -> String {
    path.replace("{id}", &id.to_string())
}

#[tokio::test]
async fn every_console_route_needs_a_login() {
    let t = start().await;
    let routes = console_routes();
    assert!(routes.len() >= 15, "the console's routes: {routes:?}");
    for cookie in [None, Some("rota_session=forged")] {
        for (method, path) in &routes {
            let path = concrete(path, 1);
            let res = if *method == Method::GET {
                t.get(&path, cookie).await
            } else {
                t.post_form(&path, cookie, &[]).await
            };
            if *method == Method::GET {
                assert_eq!(res.status, StatusCode::SEE_OTHER, "GET {path}");
                assert_eq!(res.location(), "/login", "GET {path}");
                // Not a browser (a script, the log tail's fetch): a plain 401.
                let mut req = Request::get(&path);
                if let Some(c) = cookie {
                    req = req.header(header::COOKIE, c);
                }
                let res = t.send(req.body(Body::empty()).unwrap()).await;
                assert_eq!(res.status, StatusCode::UNAUTHORIZED, "GET {path}");
            } else {
                assert_eq!(res.status, StatusCode::FORBIDDEN, "{method} {path}");
            }
        }
    }
    // An expired session is no session.
    let store = t.node.ports().store();
    let user = store.user_by_name("admin").await.unwrap().unwrap();
    let now = now_ms();
    let old = "0123456789abcdef";
    store
        .insert_session(&token_hash(old), user.id, now - 10_000, now - 1)
        .await
        .unwrap();
    let res = t
        .get("/console", Some(&format!("rota_session={old}")))
        .await;
    assert_eq!(res.location(), "/login");
    // The login page itself and the assets are open.
    t.get("/login", None).await.expect(StatusCode::OK);
    t.get("/static/console.css", None)
        .await
        .expect(StatusCode::OK);
    t.get("/static/console.js", None)
        .await
        .expect(StatusCode::OK);
    t.stop().await;
}

#[tokio::test]
async fn sign_in_and_out() {
    let t = start().await;
    t.login("admin", "wrong")
        .await
        .expect(StatusCode::UNAUTHORIZED)
        .contains("Wrong user name or password");
    t.login("nobody", PASSWORD)
        .await
        .expect(StatusCode::UNAUTHORIZED);

    let res = t.login("admin", PASSWORD).await;
    res.expect(StatusCode::SEE_OTHER);
    assert_eq!(res.location(), "/console");
    let cookie = res.headers[header::SET_COOKIE].to_str().unwrap();
    for part in ["rota_session=", "HttpOnly", "SameSite=Strict", "Path=/"] {
        assert!(cookie.contains(part), "{cookie}");
    }
    assert!(!cookie.contains("Secure"), "no TLS in tests: {cookie}");
    // A login form posted from another site is refused.
    let req = Request::post("/login")
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .header(header::HOST, "rota.example")
        .header(header::ORIGIN, "https://evil.example")
        .body(Body::from(format!(
            "user=admin&password={}",
            encode(PASSWORD)
        )))
        .unwrap();
    t.send(req)
        .await
        .expect(StatusCode::FORBIDDEN)
        .contains("did not come from this site");

    let b = t.sign_in().await;
    t.get("/console", Some(&b.cookie))
        .await
        .expect(StatusCode::OK)
        .contains("Dashboard")
        .contains("admin");
    // Signed in, the login page sends you on.
    assert_eq!(
        t.get("/login", Some(&b.cookie)).await.location(),
        "/console"
    );

    let out = t.submit(&b, "/console/logout", &[]).await;
    out.expect(StatusCode::SEE_OTHER);
    assert_eq!(out.location(), "/login");
    assert!(
        out.headers[header::SET_COOKIE]
            .to_str()
            .unwrap()
            .contains("Max-Age=0")
    );
    let after = t.get("/console", Some(&b.cookie)).await;
    assert_eq!(after.location(), "/login", "the session is gone");
    t.stop().await;
}

#[tokio::test]
async fn failed_sign_ins_are_slowed() {
    let t = start().await;
    for _ in 0..3 {
        t.login("admin", "guess")
            .await
            .expect(StatusCode::UNAUTHORIZED);
    }
    // Even the right password waits now.
    t.login("admin", PASSWORD)
        .await
        .expect(StatusCode::TOO_MANY_REQUESTS)
        .contains("try again in");
    t.stop().await;
}

#[tokio::test]
async fn failed_sign_ins_slow_down_only_their_own_address() {
    let t = start().await;
    let from = |ip: [u8; 4], password: &str| {
        let mut req = Request::post("/login")
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(Body::from(format!(
                "user=admin&password={}",
                encode(password)
            )))
            .unwrap();
        req.extensions_mut()
            .insert(ConnectInfo(rota_net::ClientAddr(SocketAddr::from((
                ip, 40_000,
            )))));
        req
    };
    let attacker = [203, 0, 113, 9];
    for _ in 0..3 {
        t.send(from(attacker, "guess"))
            .await
            .expect(StatusCode::UNAUTHORIZED);
    }
    t.send(from(attacker, PASSWORD))
        .await
        .expect(StatusCode::TOO_MANY_REQUESTS);
    t.send(from([192, 0, 2, 1], PASSWORD))
        .await
        .expect(StatusCode::SEE_OTHER);
    t.stop().await;
}

#[tokio::test]
async fn posts_need_the_sessions_csrf_token() {
    let t = start().await;
    t.upload_plugin().await;
    let b = t.sign_in().await;
    let form = job_form("nightly");
    for csrf in [None, Some("0".repeat(64)), Some("not hex".to_owned())] {
        let mut f = form.clone();
        if let Some(c) = &csrf {
            f.push(("csrf", c));
        }
        t.post_form("/console/jobs", Some(&b.cookie), &f)
            .await
            .expect(StatusCode::FORBIDDEN);
    }
    // Another session's token does not do either.
    let other = t.sign_in().await;
    assert_ne!(other.csrf, b.csrf);
    let mut f = form.clone();
    f.push(("csrf", &other.csrf));
    t.post_form("/console/jobs", Some(&b.cookie), &f)
        .await
        .expect(StatusCode::FORBIDDEN);
    // The header works for scripts.
    let body = form
        .iter()
        .map(|(k, v)| format!("{k}={}", encode(v)))
        .collect::<Vec<_>>()
        .join("&");
    let req = Request::post("/console/jobs")
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .header(header::COOKIE, &b.cookie)
        .header("x-csrf-token", &b.csrf)
        .body(Body::from(body))
        .unwrap();
    t.send(req).await.expect(StatusCode::SEE_OTHER);
    t.stop().await;
}

#[tokio::test]
async fn every_page_renders() {
    let t = start().await;
    t.upload_plugin().await;
    let b = t.sign_in().await;
    let job = t.create_job(&b, "report").await;
    // A run, as if dispatched to an executor that is not there.
    let delayed = t
        .api(
            Method::POST,
            "/api/v1/tasks",
            "application/json",
            json!({"job": job, "delay_ms": 3_600_000}).to_string(),
        )
        .await;
    let task = delayed["id"].as_i64().unwrap();
    let store = t.node.ports().store();
    let now = now_ms();
    let lease = t.node.ports().lease();
    store
        .claim_due(
            lease,
            now,
            now + 3_600_001,
            now + 3_600_001,
            10,
            &mut |_| JobFires::default(),
        )
        .await
        .unwrap();
    store
        .record_dispatches(
            lease,
            &[Dispatched {
                run_id: 7,
                job_id: job,
                task_id: task,
                attempt: 1,
                shard_index: 0,
                shard_total: 1,
                executor: "http://127.0.0.1:9".into(),
                scheduled_at: now,
                dispatched_at: now,
            }],
            now,
        )
        .await
        .unwrap();

    let wf = t
        .api(
            Method::POST,
            "/api/v1/workflows",
            "application/json",
            json!({"name": "nightly", "app": "default", "steps": [{"name": "report", "job": job}]})
                .to_string(),
        )
        .await;
    let instance = t
        .api(
            Method::POST,
            "/api/v1/workflows/nightly/instances",
            "application/json",
            "{}".into(),
        )
        .await;

    for (method, path) in console_routes() {
        if method != Method::GET {
            continue;
        }
        let id = match path.split('/').nth(2) {
            Some("jobs") => job,
            Some("tasks") => task,
            Some("runs") => 7,
            Some("workflows") => wf["id"].as_i64().unwrap(),
            Some("workflow-instances") => instance["id"].as_i64().unwrap(),
            _ => 1,
        };
        let path = concrete(&path, id);
        let res = t.get(&path, Some(&b.cookie)).await;
        if path.ends_with("/log") {
            // JSON for the live tail; the executor is unreachable here.
            assert!(res.text.starts_with('{'), "{path}: {}", res.text);
            continue;
        }
        res.expect(StatusCode::OK);
        assert!(res.text.starts_with("<!doctype html>"), "{path}");
        assert_eq!(res.headers[header::CACHE_CONTROL], "no-store", "{path}");
        assert!(
            res.headers[header::CONTENT_SECURITY_POLICY]
                .to_str()
                .unwrap()
                .contains("frame-ancestors 'none'")
        );
        res.contains(r#"name="csrf""#);
    }
    t.get(&format!("/console/jobs/{job}"), Some(&b.cookie))
        .await
        .contains("report")
        .contains("Trigger now");
    t.get(&format!("/console/tasks/{task}"), Some(&b.cookie))
        .await
        .contains("/console/runs/7");
    t.get("/console/runs/7", Some(&b.cookie))
        .await
        .contains("http://127.0.0.1:9")
        .contains("Kill run");
    t.get("/console/plugins", Some(&b.cookie))
        .await
        .contains("echo");
    t.get("/console/jobs?q=rep", Some(&b.cookie))
        .await
        .contains("report");
    t.get("/console/jobs?q=zzz", Some(&b.cookie))
        .await
        .contains("No jobs.");
    t.get("/console/tasks/999", Some(&b.cookie))
        .await
        .expect(StatusCode::NOT_FOUND);
    t.stop().await;
}

#[tokio::test]
async fn the_job_form_shows_errors_next_to_their_fields() {
    let t = start().await;
    t.upload_plugin().await;
    let b = t.sign_in().await;
    let base = job_form("daily");
    let cases: Vec<(Vec<(&str, &str)>, &str)> = vec![
        (
            with(base.clone(), "timeout_ms", "soon"),
            "`soon` is not a whole number",
        ),
        (with(base.clone(), "name", "  "), "must not be empty"),
        (
            with(base.clone(), "max_attempts", "0"),
            "must be between 1 and 100",
        ),
        (
            with(
                with(base.clone(), "schedule_kind", "cron"),
                "cron_expr",
                "every day",
            ),
            "field-error",
        ),
        (
            with(base.clone(), "schedule_kind", "fixed_rate"),
            "required for a fixed rate",
        ),
        (
            with(
                with(base.clone(), "max_concurrency", "2"),
                "concurrency_key",
                "customer",
            ),
            "is not a JSON Pointer (RFC 6901)",
        ),
        (
            with(base.clone(), "max_concurrency", "0"),
            "must be between 1 and 1000000",
        ),
        (
            with(base.clone(), "rate_limit", "100"),
            "required with a rate limit",
        ),
        (
            with(
                with(
                    with(base.clone(), "rate_limit", "100"),
                    "rate_per_ms",
                    "1000",
                ),
                "rate_key",
                "partner",
            ),
            "is not a JSON Pointer (RFC 6901)",
        ),
        (
            with(with(base.clone(), "rate_limit", "100"), "rate_per_ms", "0"),
            "must be between 1 and 86400000",
        ),
        (
            with(base.clone(), "debounce_ms", "0"),
            "must be between 1 and 604800000",
        ),
    ];
    for (form, needle) in cases {
        let res = t.submit(&b, "/console/jobs", &form).await;
        res.expect(StatusCode::UNPROCESSABLE_ENTITY)
            .contains("field-error")
            .contains(needle)
            // What was typed stays in the form.
            .contains(r#"value="default""#);
    }
    // Every field's problem shows at once, next to its field.
    let all_wrong = with(
        with(
            with(with(base.clone(), "name", "  "), "max_attempts", "0"),
            "plugin",
            "nope",
        ),
        "timeout_ms",
        "soon",
    );
    let res = t.submit(&b, "/console/jobs", &all_wrong).await;
    res.expect(StatusCode::UNPROCESSABLE_ENTITY)
        .contains("must not be empty")
        .contains("must be between 1 and 100")
        .contains("nope")
        .contains("`soon` is not a whole number");
    assert!(
        res.text.matches(r#"class="field-error""#).count() >= 4,
        "{}",
        res.text
    );
    // A plugin that does not exist is shown next to its field, with the API's 404.
    t.submit(&b, "/console/jobs", &with(base.clone(), "plugin", "nope"))
        .await
        .expect(StatusCode::NOT_FOUND)
        .contains("field-error")
        .contains("plugin `nope` does not exist")
        .contains(r#"value="default""#);
    // A taken name is the API's 409, in its words, above the form.
    t.create_job(&b, "daily").await;
    t.submit(&b, "/console/jobs", &base)
        .await
        .expect(StatusCode::CONFLICT)
        .contains("a job named `daily` already exists");
    t.stop().await;
}

#[tokio::test]
async fn the_preview_shows_the_next_five_fire_times_and_saves_nothing() {
    let t = start().await;
    t.upload_plugin().await;
    let b = t.sign_in().await;
    let mut form = with(
        with(job_form("noon"), "schedule_kind", "cron"),
        "cron_expr",
        "0 0 12 * * ?",
    );
    form.push(("preview", "1"));
    let res = t.submit(&b, "/console/jobs", &form).await;
    res.expect(StatusCode::OK);
    assert_eq!(
        res.text.matches("<li><time datetime=").count(),
        5,
        "{}",
        res.text
    );
    res.contains("12:00:00 UTC");
    t.get("/console/jobs", Some(&b.cookie))
        .await
        .contains("No jobs.");
    t.stop().await;
}

#[tokio::test]
async fn job_names_are_escaped() {
    let t = start().await;
    t.upload_plugin().await;
    let b = t.sign_in().await;
    let name = "<script>alert(1)</script>";
    let job = t.create_job(&b, name).await;
    for path in ["/console/jobs".to_owned(), format!("/console/jobs/{job}")] {
        let res = t.get(&path, Some(&b.cookie)).await;
        res.expect(StatusCode::OK).contains("alert(1)");
        assert!(
            res.text.contains("&#60;script&#62;") || res.text.contains("&lt;script&gt;"),
            "{path}: the name, escaped"
        );
        assert!(!res.text.contains(name), "{path} must escape the name");
    }
    t.stop().await;
}

/// Whatever users supply (job names and params, task keys and payloads, user, token and
/// secret names, the audit trail of them) reaches every page escaped.
#[tokio::test]
async fn everything_users_supply_is_escaped_on_every_page() {
    const PROBE: &str = "\"'><xss-probe>";
    let t = start().await;
    t.upload_plugin().await;
    let b = t.sign_in().await;
    let job = t.create_job(&b, &format!("job{PROBE}")).await;
    let name = format!("job{PROBE}");
    t.submit(
        &b,
        &format!("/console/jobs/{job}"),
        &with(job_form(&name), "params", PROBE),
    )
    .await;
    let task = t
        .api(
            Method::POST,
            "/api/v1/tasks",
            "application/json",
            json!({"job": job, "delay_ms": 3_600_000, "key": format!("key{PROBE}"), "payload": PROBE})
                .to_string(),
        )
        .await;
    let task = task["id"].as_i64().unwrap();
    make_user(&t, &b, &format!("user{PROBE}"), "viewer", "*").await;
    make_token(&t, &b, &format!("token{PROBE}")).await;
    t.submit(
        &b,
        "/console/secrets",
        &[
            ("app", "default"),
            ("name", &format!("secret{PROBE}")),
            ("value", "v"),
        ],
    )
    .await;

    let mut pages = 0;
    for (method, path) in console_routes() {
        if method != Method::GET || path.ends_with("/log") {
            continue;
        }
        let id = if path.starts_with("/console/tasks") {
            task
        } else {
            job
        };
        let path = concrete(&path, id);
        let res = t.get(&path, Some(&b.cookie)).await;
        assert!(
            !res.text.contains("<xss-probe>"),
            "{path} shows user input unescaped"
        );
        pages += 1;
    }
    assert!(pages >= 10, "{pages} pages");
    // The probe is shown, escaped, where it belongs.
    for path in [
        format!("/console/jobs/{job}"),
        format!("/console/tasks/{task}"),
        "/console/users".to_owned(),
        "/console/tokens".to_owned(),
        "/console/audit".to_owned(),
    ] {
        let body = t.get(&path, Some(&b.cookie)).await.text;
        assert!(
            body.contains("&lt;xss-probe&gt;") || body.contains("&#60;xss-probe&#62;"),
            "{path}: the probe, escaped"
        );
    }
    t.stop().await;
}

/// A user scoped to some apps counts only their jobs, tasks, runs and executors on the
/// dashboard, sees no chart of every app's runs, and lists only their apps' executors.
#[tokio::test]
async fn a_scoped_user_sees_only_their_apps_numbers() {
    let t = start().await;
    t.upload_plugin().await;
    let b = t.sign_in().await;
    t.create_job(&b, "in-default").await;
    let other = t
        .submit(
            &b,
            "/console/jobs",
            &with(job_form("in-billing"), "app", "billing"),
        )
        .await;
    other.expect(StatusCode::SEE_OTHER);
    for (app, port) in [("default", 9), ("billing", 10), ("billing", 11)] {
        let reg = rota_proto::Registration {
            app: app.into(),
            address: format!("http://127.0.0.1:{port}"),
            capacity: 1,
            running: 0,
            active_runs: Vec::new(),
        };
        t.node
            .ports()
            .executor_registered(&reg, now_ms())
            .await
            .unwrap();
    }
    let tiles = |body: &str| {
        let count = |href: &str| {
            let needle = format!("href=\"{href}\"><b>");
            let at = body.find(&needle).expect(href) + needle.len();
            body[at..].split('<').next().unwrap().to_owned()
        };
        (count("/console/jobs"), count("/console/executors"))
    };
    let admin = t.get("/console", Some(&b.cookie)).await;
    assert_eq!(tiles(&admin.text), ("2".into(), "3".into()));
    assert!(admin.text.contains("<svg"));

    let scoped = make_user(&t, &b, "dora", "viewer", "default").await;
    let page = t.get("/console", Some(&scoped.cookie)).await;
    assert_eq!(tiles(&page.text), ("1".into(), "1".into()));
    assert!(!page.text.contains("<svg"), "charts of every app");
    let executors = t.get("/console/executors", Some(&scoped.cookie)).await;
    assert!(executors.text.contains("127.0.0.1:9"));
    assert!(!executors.text.contains("127.0.0.1:10"));
    let token = make_token(&t, &scoped, "dora").await;
    let (status, body) = api_as(&t, &token, Method::GET, "/api/v1/executors", None).await;
    assert_eq!(status, StatusCode::OK);
    let listed: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(listed["items"].as_array().unwrap().len(), 1, "{body}");
    t.stop().await;
}

#[tokio::test]
async fn job_actions_edit_disable_trigger_and_delete() {
    let t = start().await;
    t.upload_plugin().await;
    let b = t.sign_in().await;
    let job = t.create_job(&b, "cleanup").await;
    let path = format!("/console/jobs/{job}");

    let edit = with(
        with(job_form("cleanup"), "schedule_kind", "cron"),
        "cron_expr",
        "0 0 3 * * ?",
    );
    let res = t.submit(&b, &path, &edit).await;
    res.expect(StatusCode::SEE_OTHER);
    t.get(&path, Some(&b.cookie))
        .await
        .contains("0 0 3 * * ?")
        .contains("03:00:00 UTC");

    t.submit(&b, &format!("{path}/enabled"), &[("enabled", "false")])
        .await
        .expect(StatusCode::SEE_OTHER);
    t.get(&path, Some(&b.cookie))
        .await
        .contains(">Enable</button>");
    assert!(
        !t.node
            .ports()
            .store()
            .get_job(job)
            .await
            .unwrap()
            .spec
            .enabled
    );

    let res = t
        .submit(&b, &format!("{path}/trigger"), &[("params", "--dry-run")])
        .await;
    res.expect(StatusCode::SEE_OTHER);
    let task: i64 = res
        .location()
        .strip_prefix("/console/tasks/")
        .and_then(|id| id.parse().ok())
        .expect("redirect to the task");
    let stored = t.node.ports().store().get_task(task).await.unwrap();
    assert_eq!(stored.params.as_deref(), Some("--dry-run"));

    t.get(&format!("{path}/delete"), Some(&b.cookie))
        .await
        .expect(StatusCode::OK)
        .contains("Delete job cleanup?");
    let res = t.submit(&b, &format!("{path}/delete"), &[]).await;
    res.expect(StatusCode::SEE_OTHER);
    assert_eq!(res.location(), "/console/jobs");
    t.get(&path, Some(&b.cookie))
        .await
        .expect(StatusCode::NOT_FOUND);

    // Each change is in the audit log, with who made it.
    let audit = t.get("/console/audit", Some(&b.cookie)).await;
    for action in [
        "create job",
        "update job",
        "disable job",
        "trigger job",
        "delete job",
        "login",
    ] {
        audit.contains(&format!("<td>{action}</td>"));
    }
    audit
        .contains("<td>admin</td>")
        .contains("<td>cleanup</td>");
    t.stop().await;
}

#[tokio::test]
async fn a_delayed_task_is_cancelled_from_its_page() {
    let t = start().await;
    t.upload_plugin().await;
    let b = t.sign_in().await;
    let job = t.create_job(&b, "close-order").await;
    let task = t
        .api(
            Method::POST,
            "/api/v1/tasks",
            "application/json",
            json!({"job": job, "delay_ms": 3_600_000, "key": "order-42"}).to_string(),
        )
        .await["id"]
        .as_i64()
        .unwrap();
    t.get(
        &format!("/console/tasks?job={job}&status=pending&key=order-42"),
        Some(&b.cookie),
    )
    .await
    .expect(StatusCode::OK)
    .contains(&format!("/console/tasks/{task}"));
    let page = format!("/console/tasks/{task}");
    t.get(&page, Some(&b.cookie)).await.contains("Cancel task");
    t.submit(&b, &format!("{page}/cancel"), &[])
        .await
        .expect(StatusCode::SEE_OTHER);
    let after = t.get(&page, Some(&b.cookie)).await;
    after.contains("cancelled");
    assert!(!after.text.contains("Cancel task"));
    // A filter that is not a status says so.
    t.get("/console/tasks?status=bogus", Some(&b.cookie))
        .await
        .expect(StatusCode::BAD_REQUEST);
    t.stop().await;
}

#[tokio::test]
async fn plugins_are_uploaded_with_the_csrf_header() {
    let t = start().await;
    let b = t.sign_in().await;
    let upload = |body: &'static str, csrf: Option<&str>| {
        let mut req = Request::post("/console/plugins?name=echo")
            .header(header::CONTENT_TYPE, "application/wasm")
            .header(header::COOKIE, &b.cookie);
        if let Some(c) = csrf {
            req = req.header("x-csrf-token", c);
        }
        req.body(Body::from(body)).unwrap()
    };
    t.send(upload(START, None))
        .await
        .expect(StatusCode::FORBIDDEN);
    let bad = t.send(upload("not a module", Some(&b.csrf))).await;
    bad.expect(StatusCode::UNPROCESSABLE_ENTITY);
    assert!(bad.text.contains("\"error\""), "{}", bad.text);
    t.send(upload(START, Some(&b.csrf)))
        .await
        .expect(StatusCode::CREATED);
    t.get("/console/plugins", Some(&b.cookie))
        .await
        .expect(StatusCode::OK)
        .contains("echo")
        .contains("at most 32 MiB");
    t.stop().await;
}

#[tokio::test]
async fn pages_speak_english_or_chinese() {
    let t = start().await;
    let b = t.sign_in().await;
    let get = |path: &'static str, extra: Option<(header::HeaderName, &'static str)>| {
        let mut req = Request::get(path).header(header::COOKIE, &b.cookie);
        if let Some((k, v)) = extra {
            req = req.header(k, v);
        }
        req.body(Body::empty()).unwrap()
    };
    t.send(get("/console/jobs", None))
        .await
        .contains(r#"<html lang="en">"#)
        .contains(">New job<");
    let zh = Some((header::ACCEPT_LANGUAGE, "zh-CN,zh;q=0.9,en;q=0.5"));
    for (_, path) in console_routes()
        .into_iter()
        .filter(|(m, p)| *m == Method::GET && !p.contains('{'))
    {
        let res = t.send(get(path.leak(), zh.clone())).await;
        res.expect(StatusCode::OK)
            .contains(r#"<html lang="zh-CN">"#)
            .contains(">作业<");
    }
    // The switch's cookie outranks the browser's languages.
    let res = t.get("/lang/en", None).await;
    res.expect(StatusCode::SEE_OTHER);
    let cookie = res.headers[header::SET_COOKIE].to_str().unwrap();
    assert!(cookie.starts_with("rota_lang=en;"), "{cookie}");
    let both = format!("{}; rota_lang=en", b.cookie);
    let req = Request::get("/console")
        .header(header::COOKIE, both)
        .header(header::ACCEPT_LANGUAGE, "zh-CN")
        .body(Body::empty())
        .unwrap();
    t.send(req).await.contains(">Dashboard<");
    // The login page too, and its errors.
    let req = Request::post("/login")
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .header(header::ACCEPT_LANGUAGE, "zh-CN")
        .body(Body::from("user=admin&password=nope"))
        .unwrap();
    t.send(req)
        .await
        .expect(StatusCode::UNAUTHORIZED)
        .contains("用户名或密码错误");
    t.stop().await;
}

#[tokio::test]
async fn a_password_change_checks_the_old_one_and_ends_other_sessions() {
    let t = start().await;
    let b = t.sign_in().await;
    let elsewhere = t.sign_in().await;
    t.get("/console/account", Some(&b.cookie))
        .await
        .expect(StatusCode::OK)
        .contains("Change password");
    let new = "a much better passphrase";
    let cases = [
        (("wrong", new, new), "This is not your password."),
        ((PASSWORD, "short", "short"), "Use at least 10 characters."),
        (
            (PASSWORD, new, "something else"),
            "The two passwords differ.",
        ),
    ];
    for ((current, password, confirm), needle) in cases {
        t.submit(
            &b,
            "/console/account",
            &[
                ("current", current),
                ("new", password),
                ("confirm", confirm),
            ],
        )
        .await
        .expect(StatusCode::UNPROCESSABLE_ENTITY)
        .contains(needle);
    }
    let res = t
        .submit(
            &b,
            "/console/account",
            &[("current", PASSWORD), ("new", new), ("confirm", new)],
        )
        .await;
    res.expect(StatusCode::SEE_OTHER);
    t.get(res.location(), Some(&b.cookie))
        .await
        .expect(StatusCode::OK)
        .contains("Password changed");
    // This session goes on; the other one has ended.
    assert_eq!(
        t.get("/console", Some(&elsewhere.cookie)).await.location(),
        "/login"
    );
    t.login("admin", PASSWORD)
        .await
        .expect(StatusCode::UNAUTHORIZED);
    t.login("admin", new).await.expect(StatusCode::SEE_OTHER);
    t.stop().await;
}

/// Makes a user through the admin's users page.
async fn make_user(t: &TestApp, admin: &Browser, name: &str, role: &str, apps: &str) -> Browser {
    let password = format!("{name}-password-long");
    t.submit(
        admin,
        "/console/users",
        &[
            ("name", name),
            ("password", &password),
            ("role", role),
            ("apps", apps),
        ],
    )
    .await
    .expect(StatusCode::SEE_OTHER);
    t.sign_in_as(name, &password).await
}

/// An API call with `token`: (status, body).
async fn api_as(
    t: &TestApp,
    token: &str,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> (StatusCode, String) {
    let mut req = Request::builder()
        .method(method)
        .uri(path)
        .header(header::AUTHORIZATION, format!("Bearer {token}"));
    let body = match body {
        Some(v) => {
            req = req.header(header::CONTENT_TYPE, "application/json");
            Body::from(v.to_string())
        }
        None => Body::empty(),
    };
    let res = t.send(req.body(body).unwrap()).await;
    (res.status, res.text)
}

/// Creates an API token on the tokens page; returns it (shown this once).
async fn make_token(t: &TestApp, b: &Browser, name: &str) -> String {
    let page = t.submit(b, "/console/tokens", &[("name", name)]).await;
    page.expect(StatusCode::OK).contains("shown only this once");
    let marker = r#"<code id="new-token" class="token">"#;
    let at = page.text.find(marker).expect("the new token") + marker.len();
    let token = page.text[at..].split('<').next().unwrap().to_owned();
    assert!(token.starts_with("rota_") && token.len() == 45, "{token}");
    token
}

#[tokio::test]
async fn roles_and_app_scopes_hold_on_pages_actions_and_tokens() {
    let t = start().await;
    t.upload_plugin().await;
    let admin = t.sign_in().await;
    let shop_form = with(job_form("shop-job"), "app", "shop");
    let res = t.submit(&admin, "/console/jobs", &shop_form).await;
    res.expect(StatusCode::SEE_OTHER);
    let shop: i64 = res.location().rsplit('/').next().unwrap().parse().unwrap();
    let hr_form = with(job_form("hr-job"), "app", "hr");
    let res = t.submit(&admin, "/console/jobs", &hr_form).await;
    let hr: i64 = res.location().rsplit('/').next().unwrap().parse().unwrap();

    // A viewer of `shop` sees shop's job, not hr's, and changes nothing.
    let vera = make_user(&t, &admin, "vera", "viewer", "shop").await;
    t.get("/console/jobs", Some(&vera.cookie))
        .await
        .expect(StatusCode::OK)
        .contains("shop-job");
    assert!(
        !t.get("/console/jobs", Some(&vera.cookie))
            .await
            .text
            .contains("hr-job")
    );
    t.get(&format!("/console/jobs/{hr}"), Some(&vera.cookie))
        .await
        .expect(StatusCode::NOT_FOUND);
    t.submit(&vera, &format!("/console/jobs/{shop}/trigger"), &[])
        .await
        .expect(StatusCode::FORBIDDEN)
        .contains("operator or admin");
    for admin_only in ["/console/users", "/console/audit"] {
        t.get(admin_only, Some(&vera.cookie))
            .await
            .expect(StatusCode::FORBIDDEN);
    }
    assert!(
        !t.get("/console", Some(&vera.cookie))
            .await
            .text
            .contains(r#"href="/console/users""#)
    );

    // An operator of `shop` triggers shop's job, not hr's, and makes no job in hr.
    let otto = make_user(&t, &admin, "otto", "operator", "shop").await;
    t.submit(&otto, &format!("/console/jobs/{shop}/trigger"), &[])
        .await
        .expect(StatusCode::SEE_OTHER);
    t.submit(&otto, &format!("/console/jobs/{hr}/trigger"), &[])
        .await
        .expect(StatusCode::NOT_FOUND);
    t.submit(
        &otto,
        "/console/jobs",
        &with(job_form("sneaky"), "app", "hr"),
    )
    .await
    .expect(StatusCode::FORBIDDEN)
    .contains("no access to app `hr`");
    let runs = t.get("/console/tasks", Some(&otto.cookie)).await;
    runs.expect(StatusCode::OK);

    // Their tokens act as they do.
    let otto_token = make_token(&t, &otto, "ci").await;
    let vera_token = make_token(&t, &vera, "dashboards").await;
    let (status, body) = api_as(&t, &otto_token, Method::GET, "/api/v1/jobs", None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(
        body.contains("shop-job") && !body.contains("hr-job"),
        "{body}"
    );
    let (status, _) = api_as(
        &t,
        &otto_token,
        Method::POST,
        &format!("/api/v1/jobs/{shop}/trigger"),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, _) = api_as(
        &t,
        &otto_token,
        Method::POST,
        &format!("/api/v1/jobs/{hr}/trigger"),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, body) = api_as(
        &t,
        &otto_token,
        Method::POST,
        "/api/v1/tasks/batch",
        Some(json!({"tasks": [{"job": "shop-job", "delay_ms": 1000}, {"job": "hr-job", "delay_ms": 1000}]})),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert!(body.contains("tasks[1]."), "{body}");
    let (status, body) = api_as(
        &t,
        &vera_token,
        Method::POST,
        &format!("/api/v1/jobs/{shop}/trigger"),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    let (status, _) = api_as(&t, &vera_token, Method::GET, "/api/v1/tasks", None).await;
    assert_eq!(status, StatusCode::OK);
    let req = Request::post("/api/v1/plugins?name=mine")
        .header(header::AUTHORIZATION, format!("Bearer {vera_token}"))
        .body(Body::from(START))
        .unwrap();
    let res = t.send(req).await;
    res.expect(StatusCode::FORBIDDEN).contains("viewer");

    // The admin demotes otto: his token loses the right at once.
    let users = t.node.ports().store().list_users().await.unwrap();
    let id_of = |name: &str| users.iter().find(|u| u.name == name).unwrap().id;
    t.submit(
        &admin,
        &format!("/console/users/{}", id_of("otto")),
        &[("role", "viewer"), ("apps", "shop")],
    )
    .await
    .expect(StatusCode::SEE_OTHER);
    let (status, _) = api_as(
        &t,
        &otto_token,
        Method::POST,
        &format!("/api/v1/jobs/{shop}/trigger"),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);

    // Revoked, a token is refused; the hash is all the store ever had.
    let tokens = t.node.ports().store().list_tokens(None).await.unwrap();
    let ci = tokens.iter().find(|k| k.name == "ci").unwrap();
    t.submit(&otto, &format!("/console/tokens/{}/revoke", ci.id), &[])
        .await
        .expect(StatusCode::SEE_OTHER);
    let (status, body) = api_as(&t, &otto_token, Method::GET, "/api/v1/jobs", None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    // Vera cannot revoke the admin's tokens, nor see them.
    let admin_token = make_token(&t, &admin, "ops").await;
    let ops = t.node.ports().store().list_tokens(None).await.unwrap();
    let ops = ops.iter().find(|k| k.name == "ops").unwrap();
    t.submit(&vera, &format!("/console/tokens/{}/revoke", ops.id), &[])
        .await
        .expect(StatusCode::NOT_FOUND);
    assert!(
        !t.get("/console/tokens", Some(&vera.cookie))
            .await
            .text
            .contains(">ops<")
    );
    let (status, _) = api_as(&t, &admin_token, Method::GET, "/api/v1/jobs", None).await;
    assert_eq!(status, StatusCode::OK);

    // The last admin stays an admin; nobody deletes themselves.
    t.submit(
        &admin,
        &format!("/console/users/{}", id_of("admin")),
        &[("role", "viewer"), ("apps", "*")],
    )
    .await
    .expect(StatusCode::CONFLICT)
    .contains("only admin");
    t.submit(
        &admin,
        &format!("/console/users/{}/delete", id_of("admin")),
        &[],
    )
    .await
    .expect(StatusCode::CONFLICT);
    t.submit(
        &admin,
        &format!("/console/users/{}/delete", id_of("vera")),
        &[],
    )
    .await
    .expect(StatusCode::SEE_OTHER);
    t.get("/console", Some(&vera.cookie))
        .await
        .expect(StatusCode::SEE_OTHER);
    t.stop().await;
}

#[tokio::test]
async fn the_user_form_names_every_bad_field() {
    let t = start().await;
    let admin = t.sign_in().await;
    let page = t
        .submit(
            &admin,
            "/console/users",
            &[
                ("name", ""),
                ("password", "short"),
                ("role", "root"),
                ("apps", " , "),
            ],
        )
        .await;
    page.expect(StatusCode::UNPROCESSABLE_ENTITY)
        .contains("name: must not be empty")
        .contains("at least 10 characters")
        .contains("role `root` is not one of admin, operator, viewer");
    for (apps, error) in [
        ("", "apps: name at least one app"),
        ("*", "a user `admin` exists"),
    ] {
        let form = [
            ("name", "admin"),
            ("password", "long enough password"),
            ("role", "viewer"),
            ("apps", apps),
        ];
        t.submit(&admin, "/console/users", &form)
            .await
            .expect(StatusCode::UNPROCESSABLE_ENTITY)
            .contains(error);
    }
    t.submit(&admin, "/console/tokens", &[("name", "")])
        .await
        .expect(StatusCode::UNPROCESSABLE_ENTITY)
        .contains("name: must not be empty");
    t.stop().await;
}

#[tokio::test]
async fn plugins_show_their_jobs_and_unused_ones_can_be_deleted() {
    let t = start().await;
    t.upload_plugin().await;
    t.api(
        Method::POST,
        "/api/v1/plugins?name=spare",
        "application/wasm",
        START.into(),
    )
    .await;
    let b = t.sign_in().await;
    let job = t.create_job(&b, "uses-echo").await;
    let page = t.get("/console/plugins", Some(&b.cookie)).await;
    page.expect(StatusCode::OK)
        .contains(&format!(r#"<a href="/console/jobs/{job}">uses-echo</a>"#))
        .contains(r#"action="/console/plugins/spare/delete""#);
    assert!(
        !page
            .text
            .contains(r#"action="/console/plugins/echo/delete""#)
    );

    t.submit(&b, "/console/plugins/echo/delete", &[])
        .await
        .expect(StatusCode::CONFLICT)
        .contains("used by job `uses-echo`");
    t.submit(&b, "/console/plugins/spare/delete", &[])
        .await
        .expect(StatusCode::SEE_OTHER);
    assert!(
        !t.get("/console/plugins", Some(&b.cookie))
            .await
            .text
            .contains("spare")
    );

    let req = |path: &str| {
        Request::delete(path)
            .header(header::AUTHORIZATION, format!("Bearer {TOKEN}"))
            .body(Body::empty())
            .unwrap()
    };
    t.send(req("/api/v1/plugins/spare"))
        .await
        .expect(StatusCode::NOT_FOUND);
    t.send(req("/api/v1/plugins/echo"))
        .await
        .expect(StatusCode::CONFLICT);
    t.stop().await;
}

/// The plugins page says what each plugin is: a preview 1 module, or a component with its
/// world and imports.
#[tokio::test]
async fn plugins_show_whether_they_are_modules_or_components() {
    let t = start().await;
    t.upload_plugin().await;
    t.api(
        Method::POST,
        "/api/v1/plugins?name=handler",
        "application/wasm",
        include_str!("../../../executor/tests/fixtures/handler.wat").into(),
    )
    .await;
    let b = t.sign_in().await;
    t.get("/console/plugins", Some(&b.cookie))
        .await
        .expect(StatusCode::OK)
        .contains("module <span class=\"hint\">WASI preview 1</span>")
        .contains("component <code>rota:plugin/handler</code>")
        .contains("<summary>2 imports</summary>")
        .contains("<li><code>rota:plugin/log@0.1.0</code></li>");
    t.stop().await;
}

#[tokio::test]
async fn tasks_are_found_by_due_time() {
    let t = start().await;
    t.upload_plugin().await;
    let b = t.sign_in().await;
    let job = t.create_job(&b, "timed").await;
    let mut ids = Vec::new();
    for (key, at) in [
        ("early", "2030-01-01T10:00:00Z"),
        ("late", "2030-01-02T10:00:00Z"),
    ] {
        let task = t
            .api(
                Method::POST,
                "/api/v1/tasks",
                "application/json",
                json!({"job": job, "run_at": at, "key": key}).to_string(),
            )
            .await;
        ids.push(task["id"].as_i64().unwrap());
    }
    let page = t
        .get(
            "/console/tasks?due_from=2030-01-01T09:00&due_to=2030-01-01T11:00",
            Some(&b.cookie),
        )
        .await;
    page.expect(StatusCode::OK)
        .contains(&format!("/console/tasks/{}", ids[0]));
    assert!(!page.text.contains(&format!("/console/tasks/{}\"", ids[1])));
    t.get("/console/tasks?due_from=tomorrow", Some(&b.cookie))
        .await
        .expect(StatusCode::BAD_REQUEST)
        .contains("due from: `tomorrow` is not a date and time");
    let listed = t
        .api(
            Method::GET,
            "/api/v1/tasks?due_after=2030-01-02T00:00:00Z",
            "application/json",
            String::new(),
        )
        .await;
    let found: Vec<i64> = listed["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_i64().unwrap())
        .collect();
    assert_eq!(found, [ids[1]]);
    t.stop().await;
}

#[tokio::test]
async fn every_console_action_refuses_a_post_without_the_csrf_token() {
    let t = start().await;
    let b = t.sign_in().await;
    for (method, path) in console_routes() {
        if method != Method::POST {
            continue;
        }
        let path = concrete(&path, 1).replace("{name}", "echo");
        t.post_form(&path, Some(&b.cookie), &[("x", "y")])
            .await
            .expect(StatusCode::FORBIDDEN)
            .contains("did not come from the console");
    }
    t.stop().await;
}

#[tokio::test]
async fn a_delayed_task_is_scheduled_from_the_job_page() {
    let t = start().await;
    t.upload_plugin().await;
    let b = t.sign_in().await;
    let job = t.create_job(&b, "reminder").await;
    let page = t
        .get(&format!("/console/jobs/{job}"), Some(&b.cookie))
        .await;
    page.contains(&format!(r#"action="/console/jobs/{job}/tasks""#));
    let path = format!("/console/jobs/{job}/tasks");
    for (delay, error) in [
        ("soon", "delay: `soon` is not a whole number of seconds"),
        ("-5", "delay: must be between 0 and"),
        ("999999999999", "delay: must be between 0 and"),
    ] {
        t.submit(
            &b,
            &path,
            &[("delay_s", delay), ("key", ""), ("payload", "")],
        )
        .await
        .expect(StatusCode::UNPROCESSABLE_ENTITY)
        .contains(error);
    }
    let before = now_ms();
    let res = t
        .submit(
            &b,
            &path,
            &[
                ("delay_s", "90"),
                ("key", "order-7"),
                ("payload", "{\"order\":7}"),
            ],
        )
        .await;
    res.expect(StatusCode::SEE_OTHER);
    let id: i64 = res.location().rsplit('/').next().unwrap().parse().unwrap();
    let task = t.node.ports().store().get_task(id).await.unwrap();
    assert_eq!(task.key.as_deref(), Some("order-7"));
    assert_eq!(task.payload.as_deref(), Some("{\"order\":7}"));
    assert!(task.due_at >= before + 90_000 && task.due_at <= now_ms() + 90_000);
    // The same key again shows the same task.
    let again = t
        .submit(
            &b,
            &path,
            &[("delay_s", "5"), ("key", "order-7"), ("payload", "")],
        )
        .await;
    assert_eq!(again.location(), res.location());
    t.stop().await;
}

#[tokio::test]
async fn secrets_are_set_listed_and_deleted_and_their_values_never_shown() {
    const VALUE: &str = "never-show-me-4242";
    let t = start().await;
    let b = t.sign_in().await;
    // The app exists once something uses it; the API sets one secret, the form another.
    t.api(
        Method::PUT,
        "/api/v1/apps/shop/secrets/API_KEY",
        "application/json",
        json!({"value": VALUE}).to_string(),
    )
    .await;
    t.submit(
        &b,
        "/console/secrets",
        &[("app", "shop"), ("name", "DB_PASSWORD"), ("value", VALUE)],
    )
    .await
    .expect(StatusCode::SEE_OTHER);
    let page = t.get("/console/secrets", Some(&b.cookie)).await;
    page.expect(StatusCode::OK)
        .contains("<code>API_KEY</code>")
        .contains("<code>DB_PASSWORD</code>")
        .contains(r#"action="/console/secrets/shop/DB_PASSWORD/delete""#);
    assert!(!page.text.contains(VALUE), "the value is not on the page");
    // A bad name is shown next to its field, and the value is not echoed back.
    let bad = t
        .submit(
            &b,
            "/console/secrets",
            &[("app", "shop"), ("name", "bad name"), ("value", VALUE)],
        )
        .await;
    bad.expect(StatusCode::UNPROCESSABLE_ENTITY)
        .contains("may hold only letters");
    assert!(!bad.text.contains(VALUE));
    // The audit log names the secret, not its value.
    let audit = t.get("/console/audit", Some(&b.cookie)).await;
    audit.expect(StatusCode::OK).contains("shop/DB_PASSWORD");
    assert!(!audit.text.contains(VALUE));
    // A viewer sees names but may not set or delete.
    let viewer = make_user(&t, &b, "vera", "viewer", "shop").await;
    let page = t.get("/console/secrets", Some(&viewer.cookie)).await;
    page.expect(StatusCode::OK).contains("<code>API_KEY</code>");
    assert!(!page.text.contains("/delete"));
    t.submit(
        &viewer,
        "/console/secrets",
        &[("app", "shop"), ("name", "X"), ("value", "y")],
    )
    .await
    .expect(StatusCode::FORBIDDEN);
    t.submit(&viewer, "/console/secrets/shop/API_KEY/delete", &[])
        .await
        .expect(StatusCode::FORBIDDEN);
    t.submit(&b, "/console/secrets/shop/API_KEY/delete", &[])
        .await
        .expect(StatusCode::SEE_OTHER);
    let page = t.get("/console/secrets", Some(&b.cookie)).await;
    assert!(!page.text.contains("API_KEY"));
    t.stop().await;
}

#[tokio::test]
async fn a_pull_jobs_queue_shows_and_its_tasks_are_re_driven_and_moved_from_the_console() {
    let t = start().await;
    let b = t.sign_in().await;
    // A pull job from the form: the plugin field is ignored for it.
    let mut form = job_form("queue");
    form.push(("delivery", "pull"));
    let res = t.submit(&b, "/console/jobs", &form).await;
    res.expect(StatusCode::SEE_OTHER);
    let job = t
        .api(
            Method::GET,
            "/api/v1/jobs/queue",
            "application/json",
            String::new(),
        )
        .await;
    assert_eq!(job["delivery"]["kind"], "pull", "{job}");
    assert_eq!(job["plugin"], Value::Null);
    let job_id = job["id"].as_i64().unwrap();

    // One task pulled by consumer `billing-1` and nacked on its only attempt: dead.
    let task = t
        .api(
            Method::POST,
            "/api/v1/tasks",
            "application/json",
            json!({"job": "queue"}).to_string(),
        )
        .await["id"]
        .as_i64()
        .unwrap();
    let pulled = t
        .api(
            Method::POST,
            "/api/v1/jobs/queue/pull",
            "application/json",
            json!({"wait_ms": 10_000, "consumer": "billing-1"}).to_string(),
        )
        .await;
    let lease = pulled["items"][0]["lease"]
        .as_str()
        .expect("a lease")
        .to_owned();
    t.api(
        Method::POST,
        &format!("/api/v1/tasks/{task}/nack"),
        "application/json",
        json!({"lease": lease}).to_string(),
    )
    .await;
    let page = t
        .get(&format!("/console/jobs/{job_id}"), Some(&b.cookie))
        .await;
    page.expect(StatusCode::OK);
    for text in [
        "Queue",
        "consumers in the last minute",
        "billing-1",
        "Retry dead tasks (1)",
    ] {
        page.contains(text);
    }

    // The dead task's page re-drives it.
    let task_page = format!("/console/tasks/{task}");
    t.get(&task_page, Some(&b.cookie))
        .await
        .contains("Retry (a new attempt, now)");
    t.submit(&b, &format!("{task_page}/retry"), &[])
        .await
        .expect(StatusCode::SEE_OTHER);
    let after = t
        .api(
            Method::GET,
            &format!("/api/v1/tasks/{task}"),
            "application/json",
            String::new(),
        )
        .await;
    assert_eq!(
        after["status"], "failed",
        "due again after its failure: {after}"
    );

    // A pending task is moved from its page.
    let later = t
        .api(
            Method::POST,
            "/api/v1/tasks",
            "application/json",
            json!({"job": "queue", "delay_ms": 3_600_000}).to_string(),
        )
        .await["id"]
        .as_i64()
        .unwrap();
    let later_page = format!("/console/tasks/{later}");
    t.get(&later_page, Some(&b.cookie))
        .await
        .contains("Reschedule");
    t.submit(
        &b,
        &format!("{later_page}/reschedule"),
        &[("run_at", "2030-01-02T03:04:05"), ("priority", "7")],
    )
    .await
    .expect(StatusCode::SEE_OTHER);
    let moved = t
        .api(
            Method::GET,
            &format!("/api/v1/tasks/{later}"),
            "application/json",
            String::new(),
        )
        .await;
    assert_eq!(moved["due_at"], "2030-01-02T03:04:05.000Z");
    assert_eq!(moved["priority"], 7);
    t.submit(
        &b,
        &format!("{later_page}/reschedule"),
        &[("run_at", "soon")],
    )
    .await
    .expect(StatusCode::BAD_REQUEST);
    t.stop().await;
}

#[tokio::test]
async fn alarms_are_managed_from_their_page_and_a_test_send_says_what_happened() {
    // The channel below points at a port of 127.0.0.1: an explicit, test-only allowance.
    let t = TestApp::start_with(|config| {
        config.admin_password = Some(PASSWORD.into());
        config.egress = rota_net::egress::Policy::new(&["127.0.0.1".to_owned()], &[]).unwrap();
    })
    .await;
    let b = t.sign_in().await;
    t.get("/console/alarms", Some(&b.cookie))
        .await
        .expect(StatusCode::OK)
        .contains("No channels.");
    // A bad URL is shown above the channel form, and nothing is created.
    // The slack channel form, with its URL.
    let slack = |url: &str| {
        [
            ("name", "ops"),
            ("kind", "slack"),
            ("app", ""),
            ("url", url),
            ("to", ""),
            ("secret", ""),
        ]
        .map(|(k, v)| (k, v.to_owned()))
    };
    let (app, browser) = (&t, &b);
    let submit_slack = |url: &str| {
        let form = slack(url);
        async move {
            let fields: Vec<(&str, &str)> = form.iter().map(|(k, v)| (*k, v.as_str())).collect();
            app.submit(browser, "/console/alarms/channels", &fields)
                .await
        }
    };
    submit_slack("ftp://x/")
        .await
        .expect(StatusCode::UNPROCESSABLE_ENTITY)
        .contains("url: must be an http:// or https:// URL");
    // A destination the node's egress policy refuses is refused here, naming the rule.
    submit_slack("http://169.254.169.254/latest/meta-data/")
        .await
        .expect(StatusCode::UNPROCESSABLE_ENTITY)
        .contains("the egress policy refuses 169.254.169.254:80: the cloud metadata address");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let down = format!("http://127.0.0.1:{port}/hook?token=hidden");
    submit_slack(&down).await.expect(StatusCode::SEE_OTHER);
    let page = t.get("/console/alarms", Some(&b.cookie)).await;
    page.contains("<code>ops</code>");
    assert!(
        !page.text.contains("token=hidden"),
        "the URL's token is shown"
    );
    // The test button: the endpoint is down, and the page says so (not where it is: the
    // URL may hold a token).
    let tested = t.submit(&b, "/console/alarms/channels/ops/test", &[]).await;
    tested
        .expect(StatusCode::BAD_GATEWAY)
        .contains("did not deliver the test message")
        .contains("Connection refused");
    assert!(
        !tested.text.contains("token=hidden"),
        "the error shows the URL"
    );
    t.submit(
        &b,
        "/console/alarms/rules",
        &[
            ("name", "late"),
            ("app", "default"),
            ("job", ""),
            ("on", "lateness"),
            ("threshold", ""),
            ("channels", "ops"),
            ("throttle_s", ""),
        ],
    )
    .await
    .expect(StatusCode::UNPROCESSABLE_ENTITY)
    .contains("threshold");
    t.submit(
        &b,
        "/console/alarms/rules",
        &[
            ("name", "late"),
            ("app", "default"),
            ("job", ""),
            ("on", "lateness"),
            ("threshold", "500"),
            ("channels", "ops"),
            ("throttle_s", "30"),
        ],
    )
    .await
    .expect(StatusCode::SEE_OTHER);
    let rule = t
        .node
        .ports()
        .store()
        .alarm_rule("late")
        .await
        .unwrap()
        .unwrap();
    assert_eq!((rule.threshold, rule.throttle_ms), (Some(500), 30_000));
    t.get("/console/alarms", Some(&b.cookie))
        .await
        .contains("<code>late</code>");
    // A rule about one job shows the job by its name.
    t.upload_plugin().await;
    t.create_job(&b, "nightly-report").await;
    t.submit(
        &b,
        "/console/alarms/rules",
        &[
            ("name", "report-failed"),
            ("app", "default"),
            ("job", "nightly-report"),
            ("on", "run_failed"),
            ("threshold", ""),
            ("channels", "ops"),
            ("throttle_s", ""),
        ],
    )
    .await
    .expect(StatusCode::SEE_OTHER);
    t.get("/console/alarms", Some(&b.cookie))
        .await
        .contains("<td><code>report-failed</code></td><td>default</td><td>nightly-report</td>");
    // A channel in use is not deleted.
    t.submit(&b, "/console/alarms/channels/ops/delete", &[])
        .await
        .expect(StatusCode::CONFLICT)
        .contains("used by rule(s) late, report-failed");
}

/// One door: a job's changes are one use case whichever adapter takes them. Disabling and
/// deleting through the API and through the console are audited alike, each with its
/// actor, and the same mistake gets the same status and words through both.
#[tokio::test]
async fn job_and_run_changes_are_one_use_case_through_the_api_and_the_console() {
    let t = start().await;
    t.upload_plugin().await;
    let b = t.sign_in().await;
    let by_api = t.create_job(&b, "by-api").await;
    let by_console = t.create_job(&b, "by-console").await;

    t.api(
        Method::PATCH,
        &format!("/api/v1/jobs/{by_api}"),
        "application/json",
        json!({"enabled": false}).to_string(),
    )
    .await;
    t.submit(
        &b,
        &format!("/console/jobs/{by_console}/enabled"),
        &[("enabled", "false")],
    )
    .await
    .expect(StatusCode::SEE_OTHER);
    t.api(
        Method::DELETE,
        &format!("/api/v1/jobs/{by_api}?force=true"),
        "application/json",
        String::new(),
    )
    .await;
    t.submit(&b, &format!("/console/jobs/{by_console}/delete"), &[])
        .await
        .expect(StatusCode::SEE_OTHER);

    let audit = t.node.ports().store().list_audit(None, 20).await.unwrap();
    let rows: Vec<(String, String, String)> = audit
        .iter()
        .filter(|e| e.action.ends_with(" job"))
        .map(|e| (e.user_name.clone(), e.action.clone(), e.target.clone()))
        .collect();
    for (user, action, target) in [
        ("root", "disable job", "by-api"),
        ("admin", "disable job", "by-console"),
        ("root", "delete job", "by-api"),
        ("admin", "delete job", "by-console"),
    ] {
        assert!(
            rows.iter()
                .any(|(u, a, t)| (u.as_str(), a.as_str(), t.as_str()) == (user, action, target)),
            "no `{action}` of `{target}` by `{user}` in {rows:?}"
        );
    }

    // A job that is not there: the same 404 and words through both doors.
    let (status, body) = api_as(&t, TOKEN, Method::DELETE, "/api/v1/jobs/424242", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    let said: Value = serde_json::from_str(&body).unwrap();
    let message = said["error"].as_str().unwrap();
    assert_eq!(message, "job `424242` not found");
    t.submit(&b, "/console/jobs/424242/delete", &[])
        .await
        .expect(StatusCode::NOT_FOUND)
        .contains(message);
    // So is killing a run that is not there.
    let (status, body) = api_as(&t, TOKEN, Method::POST, "/api/v1/runs/424242/kill", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    let said: Value = serde_json::from_str(&body).unwrap();
    let message = said["error"].as_str().unwrap();
    assert!(message.contains("424242"), "{message}");
    t.submit(&b, "/console/runs/424242/kill", &[])
        .await
        .expect(StatusCode::NOT_FOUND)
        .contains(message);
    t.stop().await;
}

// ----- one door: every change through both adapters ---------------------------------------
//
// Each use case the REST API and the console both reach is tested through both: a change
// made through each door is audited with its actor (the API token acts as `root`, the
// console's admin is `admin`), and the same mistake gets the same status and the same
// words. Only the API reaches: queue consumers (pull, ack, nack, extend), batch and by-key
// task calls, changing an alarm rule. Only the console reaches: users, API tokens,
// passwords, sign-in.

/// This module's calls on the shared [`TestApp`] (a trait: each test module keeps its own).
trait ConsoleApiCalls {
    async fn call(&self, method: Method, path: &str, body: Option<Value>) -> Value;
}

impl ConsoleApiCalls for TestApp {
    /// An API call with the token and a JSON body (or none), which must succeed.
    async fn call(&self, method: Method, path: &str, body: Option<Value>) -> Value {
        let body = body.map_or_else(String::new, |b| b.to_string());
        self.api(method, path, "application/json", body).await
    }
}

/// Asserts the audit log has each `(actor, action, target)`.
async fn assert_audited(t: &TestApp, expected: &[(&str, &str, &str)]) {
    let rows: Vec<(String, String, String)> = t
        .node
        .ports()
        .store()
        .list_audit(None, 500)
        .await
        .unwrap()
        .into_iter()
        .map(|e| (e.user_name, e.action, e.target))
        .collect();
    for (user, action, target) in expected {
        assert!(
            rows.iter()
                .any(|(u, a, x)| (u.as_str(), a.as_str(), x.as_str()) == (*user, *action, *target)),
            "no `{action}` of `{target}` by `{user}` in {rows:?}"
        );
    }
}

/// What the API answers a mistake with `token`: its status and `error` message.
async fn refused_as(
    t: &TestApp,
    token: &str,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> (StatusCode, String) {
    let (status, text) = api_as(t, token, method, path, body).await;
    let said: Value = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{path}: {status}, not the error shape ({e}): {text}"));
    let message = said["error"]
        .as_str()
        .unwrap_or_else(|| panic!("{path}: {status}, no error: {text}"));
    (status, message.to_owned())
}

/// What the API answers a mistake with the test token.
async fn refused(
    t: &TestApp,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> (StatusCode, String) {
    refused_as(t, TOKEN, method, path, body).await
}

/// `text` as a page shows it (askama's escapes).
fn html(text: &str) -> String {
    text.replace('&', "&#38;")
        .replace('<', "&#60;")
        .replace('>', "&#62;")
        .replace('"', "&#34;")
        .replace('\'', "&#39;")
}

/// One mistake made through both doors: the API's request (method, path, JSON body), the
/// console's form (path, fields), the status both must answer, how the message starts.
type Mistake<'a> = (
    (Method, String, Option<Value>),
    (String, Vec<(&'a str, &'a str)>),
    StatusCode,
    &'a str,
);

/// Each mistake, as the admin: the API answers it with its status and a message starting
/// as given; the console answers with the same status and a page showing that message.
async fn refused_alike(t: &TestApp, b: &Browser, mistakes: Vec<Mistake<'_>>) {
    for ((method, api, body), (console, form), status, says) in mistakes {
        let (got, message) = refused(t, method, &api, body).await;
        assert_eq!(got, status, "{api}: {message}");
        assert!(
            message.starts_with(says),
            "{api}: `{message}` is not `{says}…`"
        );
        t.submit(b, &console, &form)
            .await
            .expect(status)
            .contains(&html(&message));
    }
}

/// A plugin upload: the API's with the token, or the console's (`b`) with the session and
/// the CSRF header its script sends.
fn upload_request(b: Option<&Browser>, name: &str, module: &'static str) -> Request<Body> {
    let req = match b {
        None => Request::post(format!("/api/v1/plugins?name={name}"))
            .header(header::AUTHORIZATION, format!("Bearer {TOKEN}")),
        Some(b) => Request::post(format!("/console/plugins?name={name}"))
            .header(header::COOKIE, &b.cookie)
            .header("x-csrf-token", &b.csrf),
    };
    req.header(header::CONTENT_TYPE, "application/wasm")
        .body(Body::from(module))
        .unwrap()
}

#[tokio::test]
async fn plugin_changes_are_one_use_case_through_the_api_and_the_console() {
    let t = start().await;
    let b = t.sign_in().await;
    for (door, name) in [(None, "by-api"), (Some(&b), "by-console")] {
        t.send(upload_request(door, name, START))
            .await
            .expect(StatusCode::CREATED);
    }
    t.call(Method::DELETE, "/api/v1/plugins/by-api", None).await;
    t.submit(&b, "/console/plugins/by-console/delete", &[])
        .await
        .expect(StatusCode::SEE_OTHER);
    assert_audited(
        &t,
        &[
            ("root", "upload plugin", "by-api v1"),
            ("admin", "upload plugin", "by-console v1"),
            ("root", "delete plugin", "by-api"),
            ("admin", "delete plugin", "by-console"),
        ],
    )
    .await;

    // Not a module, and a name that is not one: the same 422 and words (the console's
    // upload answers its script in the API's JSON).
    for (name, module, says) in [
        (
            "broken",
            "(module (func $oops",
            "nor valid WebAssembly text",
        ),
        ("bad%20name", START, "name: "),
    ] {
        let api = t.send(upload_request(None, name, module)).await;
        api.expect(StatusCode::UNPROCESSABLE_ENTITY);
        let message = api.error();
        assert!(message.contains(says), "{message}");
        let console = t.send(upload_request(Some(&b), name, module)).await;
        console.expect(StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(console.error(), message);
    }
    // A plugin a job binds, and one that is not there.
    t.upload_plugin().await;
    t.create_job(&b, "uses-echo").await;
    let delete = |name: &str| {
        (
            (Method::DELETE, format!("/api/v1/plugins/{name}"), None),
            (format!("/console/plugins/{name}/delete"), vec![]),
        )
    };
    let (echo, nope) = (delete("echo"), delete("nope"));
    refused_alike(
        &t,
        &b,
        vec![
            (
                echo.0,
                echo.1,
                StatusCode::CONFLICT,
                "plugin `echo` is used by job `uses-echo`; change or delete those jobs first",
            ),
            (
                nope.0,
                nope.1,
                StatusCode::NOT_FOUND,
                "plugin `nope` not found",
            ),
        ],
    )
    .await;
    t.stop().await;
}

/// A job's fields as the API takes them: `echo` runs it, on no schedule.
fn job_json(name: &str) -> Value {
    json!({"name": name, "app": "default", "plugin": "echo", "schedule": {"kind": "none"}})
}

/// How the job form shows the API's error `message`: the words after `field: ` next to the
/// field, or the whole message above the form when it names no field.
fn on_the_job_form(message: &str) -> String {
    match message.split_once(": ") {
        Some((field, rest)) if !field.contains(' ') => {
            format!(r#"<span class="field-error">{}</span>"#, html(rest))
        }
        _ => format!(r#"<p class="error">{}</p>"#, html(message)),
    }
}

#[tokio::test]
async fn creating_changing_and_triggering_a_job_are_one_use_case_through_both_doors() {
    let t = start().await;
    t.upload_plugin().await;
    let b = t.sign_in().await;
    let by_api = t
        .call(Method::POST, "/api/v1/jobs", Some(job_json("by-api")))
        .await["id"]
        .as_i64()
        .unwrap();
    let by_console = t.create_job(&b, "by-console").await;
    let (api_job, console_job) = (
        format!("/api/v1/jobs/{by_api}"),
        format!("/console/jobs/{by_console}"),
    );
    t.call(Method::PATCH, &api_job, Some(json!({"params": "--api"})))
        .await;
    let changed = with(job_form("by-console"), "params", "--console");
    t.submit(&b, &console_job, &changed)
        .await
        .expect(StatusCode::SEE_OTHER);
    t.call(Method::POST, &format!("{api_job}/trigger"), None)
        .await;
    t.submit(&b, &format!("{console_job}/trigger"), &[("params", "")])
        .await
        .expect(StatusCode::SEE_OTHER);
    assert_audited(
        &t,
        &[
            ("root", "create job", "by-api"),
            ("admin", "create job", "by-console"),
            ("root", "update job", "by-api"),
            ("admin", "update job", "by-console"),
            ("root", "trigger job", "by-api"),
            ("admin", "trigger job", "by-console"),
        ],
    )
    .await;

    // The same bad job through both: the API's status and `field: words`, the console's
    // page with that status and the words next to the field (or above the form when the
    // message names no field).
    let cron = with(job_form("new"), "schedule_kind", "cron");
    let cases = vec![
        (
            json!({"schedule": {"kind": "cron", "expr": "every day"}}),
            with(cron, "cron_expr", "every day"),
            StatusCode::UNPROCESSABLE_ENTITY,
            "schedule: ",
        ),
        (
            json!({"name": "  "}),
            job_form("  "),
            StatusCode::UNPROCESSABLE_ENTITY,
            "name: must not be empty",
        ),
        (
            json!({"max_attempts": 0}),
            with(job_form("new"), "max_attempts", "0"),
            StatusCode::UNPROCESSABLE_ENTITY,
            "max_attempts: must be between 1 and 100 (got 0)",
        ),
        (
            json!({"plugin": "nope"}),
            with(job_form("new"), "plugin", "nope"),
            StatusCode::NOT_FOUND,
            "plugin: plugin `nope` does not exist; upload it first with POST /api/v1/plugins?name=…",
        ),
        (
            json!({"name": "by-api"}),
            job_form("by-api"),
            StatusCode::CONFLICT,
            "a job named `by-api` already exists",
        ),
    ];
    for (change, form, status, says) in cases {
        let mut body = job_json("new");
        for (k, v) in change.as_object().unwrap() {
            body[k] = v.clone();
        }
        let (got, message) = refused(&t, Method::POST, "/api/v1/jobs", Some(body)).await;
        assert_eq!(got, status, "{message}");
        assert!(message.starts_with(says), "`{message}` is not `{says}…`");
        t.submit(&b, "/console/jobs", &form)
            .await
            .expect(status)
            .contains(&on_the_job_form(&message));
    }
    // Changed the same bad way.
    let (status, message) = refused(
        &t,
        Method::PATCH,
        &api_job,
        Some(json!({"max_attempts": 101})),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{message}");
    assert_eq!(message, "max_attempts: must be between 1 and 100 (got 101)");
    let changed = with(job_form("by-console"), "max_attempts", "101");
    t.submit(&b, &console_job, &changed)
        .await
        .expect(status)
        .contains(&on_the_job_form(&message));
    // Params too large to trigger with; a job that is not there, changed or triggered.
    let params = "x".repeat(64 * 1024 + 1);
    let gone = job_form("gone");
    refused_alike(
        &t,
        &b,
        vec![
            (
                (
                    Method::POST,
                    format!("{api_job}/trigger"),
                    Some(json!({"params": params})),
                ),
                (format!("{console_job}/trigger"), vec![("params", &params)]),
                StatusCode::PAYLOAD_TOO_LARGE,
                "params: is 65537 bytes",
            ),
            (
                (
                    Method::PATCH,
                    "/api/v1/jobs/424242".into(),
                    Some(json!({"params": "x"})),
                ),
                ("/console/jobs/424242".into(), gone),
                StatusCode::NOT_FOUND,
                "job `424242` not found",
            ),
            (
                (Method::POST, "/api/v1/jobs/424242/trigger".into(), None),
                ("/console/jobs/424242/trigger".into(), vec![("params", "")]),
                StatusCode::NOT_FOUND,
                "job `424242` not found",
            ),
        ],
    )
    .await;
    t.stop().await;
}

/// Creates a pull job `queue` (its tasks wait for consumers: no executor, no plugin).
async fn pull_job(t: &TestApp) -> i64 {
    let job = json!({"name": "queue", "app": "default", "schedule": {"kind": "none"},
                     "delivery": {"kind": "pull"}});
    t.call(Method::POST, "/api/v1/jobs", Some(job)).await["id"]
        .as_i64()
        .unwrap()
}

/// A task of `queue` from the API, due in `delay_ms`; its id.
async fn queue_task(t: &TestApp, delay_ms: i64) -> i64 {
    let task = json!({"job": "queue", "delay_ms": delay_ms});
    t.call(Method::POST, "/api/v1/tasks", Some(task)).await["id"]
        .as_i64()
        .unwrap()
}

/// Pulls `n` due tasks of `queue` and nacks each: with one attempt each, they are dead.
async fn pull_and_nack(t: &TestApp, n: usize) {
    let mut nacked = 0;
    while nacked < n {
        let pull = json!({"wait_ms": 10_000, "consumer": "c-1", "max": n - nacked});
        let pulled = t
            .call(Method::POST, "/api/v1/jobs/queue/pull", Some(pull))
            .await;
        for item in pulled["items"].as_array().unwrap() {
            let path = format!("/api/v1/tasks/{}/nack", item["task"]);
            t.call(Method::POST, &path, Some(json!({"lease": item["lease"]})))
                .await;
            nacked += 1;
        }
    }
}

#[tokio::test]
async fn task_changes_are_one_use_case_through_both_doors() {
    let t = start().await;
    let b = t.sign_in().await;
    let job = pull_job(&t).await;
    let hour = 3_600_000;
    let later = json!({"run_at": "2030-01-02T03:04:05Z"});
    let later_form = vec![("run_at", "2030-01-02T03:04:05"), ("priority", "")];

    // Cancel and reschedule, one task through each door.
    let mut tasks = Vec::new();
    for _ in 0..4 {
        tasks.push(queue_task(&t, hour).await);
    }
    let [cancel_api, cancel_console, move_api, move_console] = tasks[..] else {
        unreachable!()
    };
    t.call(Method::DELETE, &format!("/api/v1/tasks/{cancel_api}"), None)
        .await;
    t.submit(&b, &format!("/console/tasks/{cancel_console}/cancel"), &[])
        .await
        .expect(StatusCode::SEE_OTHER);
    t.call(
        Method::PATCH,
        &format!("/api/v1/tasks/{move_api}"),
        Some(later.clone()),
    )
    .await;
    t.submit(
        &b,
        &format!("/console/tasks/{move_console}/reschedule"),
        &later_form,
    )
    .await
    .expect(StatusCode::SEE_OTHER);

    // Two dead tasks, each re-driven through one door; dead again, the job's dead tasks
    // re-driven through each (one through the API, the rest from the job page).
    let dead = [queue_task(&t, 0).await, queue_task(&t, 0).await];
    pull_and_nack(&t, 2).await;
    t.call(
        Method::POST,
        &format!("/api/v1/tasks/{}/retry", dead[0]),
        None,
    )
    .await;
    t.submit(&b, &format!("/console/tasks/{}/retry", dead[1]), &[])
        .await
        .expect(StatusCode::SEE_OTHER);
    pull_and_nack(&t, 2).await;
    let bulk = json!({"job": "queue", "status": "dead", "limit": 1});
    let retried = t
        .call(Method::POST, "/api/v1/tasks/retry", Some(bulk))
        .await;
    assert_eq!(retried["retried"], 1, "{retried}");
    t.submit(&b, &format!("/console/jobs/{job}/retry-dead"), &[])
        .await
        .expect(StatusCode::SEE_OTHER);
    // A task scheduled by hand from the job page is the operator's action, audited; the
    // API's tasks are the queue's data, not audited one by one.
    t.submit(
        &b,
        &format!("/console/jobs/{job}/tasks"),
        &[("delay_s", "60"), ("key", ""), ("payload", "")],
    )
    .await
    .expect(StatusCode::SEE_OTHER);

    let ids = [
        cancel_api,
        cancel_console,
        move_api,
        move_console,
        dead[0],
        dead[1],
    ]
    .map(|id| id.to_string());
    let dead_ones = "1 dead task(s) of job `queue`";
    assert_audited(
        &t,
        &[
            ("root", "cancel task", &ids[0]),
            ("admin", "cancel task", &ids[1]),
            ("root", "reschedule task", &ids[2]),
            ("admin", "reschedule task", &ids[3]),
            ("root", "retry task", &ids[4]),
            ("admin", "retry task", &ids[5]),
            ("root", "retry dead tasks", dead_ones),
            ("admin", "retry dead tasks", dead_ones),
            ("admin", "schedule task", "queue in 60 s"),
        ],
    )
    .await;
    let audit = t.node.ports().store().list_audit(None, 500).await.unwrap();
    assert!(
        !audit
            .iter()
            .any(|e| e.user_name == "root" && e.action == "schedule task"),
        "the API's tasks are not audited"
    );

    // The same mistakes through both doors.
    let pending = queue_task(&t, hour).await;
    let task = |id: i64, to: &str| {
        (
            format!("/api/v1/tasks/{id}"),
            format!("/console/tasks/{id}/{to}"),
        )
    };
    let (cancel_gone, move_gone) = (task(424242, "cancel"), task(424242, "reschedule"));
    let (move_cancelled, move_pending) =
        (task(cancel_api, "reschedule"), task(pending, "reschedule"));
    let retry_pending = task(pending, "retry");
    let schedule_key = vec![("delay_s", "60"), ("key", "a\tb"), ("payload", "")];
    let (cancelled, not_dead) = (
        format!("task {cancel_api} is cancelled; only a pending task can be rescheduled"),
        format!("task {pending} is pending; only a dead task can be retried"),
    );
    refused_alike(
        &t,
        &b,
        vec![
            (
                (Method::DELETE, cancel_gone.0, None),
                (cancel_gone.1, vec![]),
                StatusCode::NOT_FOUND,
                "task 424242 not found",
            ),
            (
                (Method::PATCH, move_gone.0, Some(later.clone())),
                (move_gone.1, later_form.clone()),
                StatusCode::NOT_FOUND,
                "task 424242 not found",
            ),
            (
                (Method::PATCH, move_cancelled.0, Some(later.clone())),
                (move_cancelled.1, later_form.clone()),
                StatusCode::CONFLICT,
                &cancelled,
            ),
            (
                (
                    Method::PATCH,
                    move_pending.0,
                    Some(json!({"run_at": "2030-01-02T03:04:05Z", "priority": 1001})),
                ),
                (
                    move_pending.1,
                    vec![("run_at", "2030-01-02T03:04:05"), ("priority", "1001")],
                ),
                StatusCode::UNPROCESSABLE_ENTITY,
                "priority: must be between -1000 and 1000 (got 1001)",
            ),
            (
                (Method::POST, format!("{}/retry", retry_pending.0), None),
                (retry_pending.1, vec![]),
                StatusCode::CONFLICT,
                &not_dead,
            ),
            (
                (
                    Method::POST,
                    "/api/v1/tasks/retry".into(),
                    Some(json!({"job": 424242, "status": "dead"})),
                ),
                ("/console/jobs/424242/retry-dead".into(), vec![]),
                StatusCode::NOT_FOUND,
                "job: job 424242 does not exist",
            ),
            // A task of a job that is not there, and a key that is not a name.
            (
                (
                    Method::POST,
                    "/api/v1/tasks".into(),
                    Some(json!({"job": 424242, "delay_ms": 60_000})),
                ),
                (
                    "/console/jobs/424242/tasks".into(),
                    vec![("delay_s", "60"), ("key", ""), ("payload", "")],
                ),
                StatusCode::NOT_FOUND,
                "job: job 424242 does not exist",
            ),
            (
                (
                    Method::POST,
                    "/api/v1/tasks".into(),
                    Some(json!({"job": job, "delay_ms": 60_000, "key": "a\tb"})),
                ),
                (format!("/console/jobs/{job}/tasks"), schedule_key),
                StatusCode::UNPROCESSABLE_ENTITY,
                "key: must not contain control characters (newlines, tabs, …)",
            ),
        ],
    )
    .await;
    t.stop().await;
}

/// An executor that has every run it is asked to kill: its address.
async fn killing_executor() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = format!("http://{}", listener.local_addr().unwrap());
    let app = axum::Router::new()
        .fallback(|| async { axum::Json(json!({"killed": true, "message": "killed"})) });
    tokio::spawn(async move { axum::serve(listener, app).await });
    address
}

#[tokio::test]
async fn killing_a_run_is_one_use_case_through_both_doors() {
    let t = start().await;
    t.upload_plugin().await;
    let b = t.sign_in().await;
    let job = t.create_job(&b, "long").await;
    // Runs 7 and 8 on an executor, as if dispatched to it.
    let executor = killing_executor().await;
    let mut tasks = Vec::new();
    for _ in 0..2 {
        let task = json!({"job": job, "delay_ms": 3_600_000});
        let task = t.call(Method::POST, "/api/v1/tasks", Some(task)).await;
        tasks.push(task["id"].as_i64().unwrap());
    }
    let (store, lease, now) = (t.node.ports().store(), t.node.ports().lease(), now_ms());
    store
        .claim_due(
            lease,
            now,
            now + 3_600_001,
            now + 3_600_001,
            10,
            &mut |_| JobFires::default(),
        )
        .await
        .unwrap();
    let runs: Vec<Dispatched> = tasks
        .iter()
        .zip([7, 8])
        .map(|(&task_id, run_id)| Dispatched {
            run_id,
            job_id: job,
            task_id,
            attempt: 1,
            shard_index: 0,
            shard_total: 1,
            executor: executor.clone(),
            scheduled_at: now,
            dispatched_at: now,
        })
        .collect();
    store.record_dispatches(lease, &runs, now).await.unwrap();
    let (status, body) = api_as(&t, TOKEN, Method::POST, "/api/v1/runs/7/kill", None).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    t.submit(&b, "/console/runs/8/kill", &[])
        .await
        .expect(StatusCode::SEE_OTHER);
    assert_audited(&t, &[("root", "kill run", "7"), ("admin", "kill run", "8")]).await;

    // A run that has finished (pulled, then nacked): the same 409 and words.
    pull_job(&t).await;
    queue_task(&t, 0).await;
    pull_and_nack(&t, 1).await;
    let runs = t.call(Method::GET, "/api/v1/runs?job=queue", None).await;
    let finished = runs["items"][0]["id"].as_i64().unwrap();
    let says = format!("run {finished} has already finished");
    refused_alike(
        &t,
        &b,
        vec![(
            (Method::POST, format!("/api/v1/runs/{finished}/kill"), None),
            (format!("/console/runs/{finished}/kill"), vec![]),
            StatusCode::CONFLICT,
            &says,
        )],
    )
    .await;
    t.stop().await;
}

#[tokio::test]
async fn secret_changes_are_one_use_case_through_both_doors() {
    let t = start().await;
    let b = t.sign_in().await;
    let value = Some(json!({"value": "v"}));
    t.call(
        Method::PUT,
        "/api/v1/apps/shop/secrets/BY_API",
        value.clone(),
    )
    .await;
    let form = |app, name, value| vec![("app", app), ("name", name), ("value", value)];
    t.submit(&b, "/console/secrets", &form("shop", "BY_CONSOLE", "v"))
        .await
        .expect(StatusCode::SEE_OTHER);
    t.call(Method::DELETE, "/api/v1/apps/shop/secrets/BY_API", None)
        .await;
    t.submit(&b, "/console/secrets/shop/BY_CONSOLE/delete", &[])
        .await
        .expect(StatusCode::SEE_OTHER);
    assert_audited(
        &t,
        &[
            ("root", "set secret", "shop/BY_API"),
            ("admin", "set secret", "shop/BY_CONSOLE"),
            ("root", "delete secret", "shop/BY_API"),
            ("admin", "delete secret", "shop/BY_CONSOLE"),
        ],
    )
    .await;

    // A bad name (set and delete), a bad app, a value too large, a secret not there.
    let big = "x".repeat(64 * 1024 + 1);
    let bad_name =
        "secret name `bad name` may hold only letters, digits, `_`, `-` and `.`, not ' '";
    let set = |path: &str| "/api/v1/apps/".to_owned() + path;
    refused_alike(
        &t,
        &b,
        vec![
            (
                (Method::PUT, set("shop/secrets/bad%20name"), value.clone()),
                ("/console/secrets".into(), form("shop", "bad name", "v")),
                StatusCode::UNPROCESSABLE_ENTITY,
                bad_name,
            ),
            (
                (Method::DELETE, set("shop/secrets/bad%20name"), None),
                ("/console/secrets/shop/bad%20name/delete".into(), vec![]),
                StatusCode::UNPROCESSABLE_ENTITY,
                bad_name,
            ),
            (
                (Method::PUT, set("bad%20app/secrets/KEY"), value.clone()),
                ("/console/secrets".into(), form("bad app", "KEY", "v")),
                StatusCode::UNPROCESSABLE_ENTITY,
                "app: ",
            ),
            (
                (
                    Method::PUT,
                    set("shop/secrets/BIG"),
                    Some(json!({"value": big})),
                ),
                ("/console/secrets".into(), form("shop", "BIG", &big)),
                StatusCode::PAYLOAD_TOO_LARGE,
                "a secret may be at most 65536 bytes, not 65537",
            ),
            (
                (Method::DELETE, set("shop/secrets/NOPE"), None),
                ("/console/secrets/shop/NOPE/delete".into(), vec![]),
                StatusCode::NOT_FOUND,
                "secret `NOPE` of app `shop` not found",
            ),
        ],
    )
    .await;
    t.stop().await;
}

/// An email channel's form (no URL, so no egress rule applies).
fn channel_form<'a>(name: &'a str, kind: &'a str) -> Vec<(&'a str, &'a str)> {
    let to = "ops@example.com";
    vec![
        ("name", name),
        ("kind", kind),
        ("app", ""),
        ("url", ""),
        ("to", to),
        ("secret", ""),
    ]
}

fn rule_form<'a>(name: &'a str, channel: &'a str) -> Vec<(&'a str, &'a str)> {
    vec![
        ("name", name),
        ("app", "default"),
        ("job", ""),
        ("on", "task_dead"),
        ("threshold", ""),
        ("channels", channel),
        ("throttle_s", ""),
    ]
}

#[tokio::test]
async fn alarm_changes_are_one_use_case_through_both_doors() {
    let t = start().await;
    let b = t.sign_in().await;
    let channel = |name: &str| json!({"name": name, "kind": "email", "to": ["ops@example.com"]});
    let rule = |name: &str, channel: &str| json!({"name": name, "app": "default", "on": "task_dead", "channels": [channel]});
    let (channels, rules) = ("/api/v1/alarm-channels", "/api/v1/alarm-rules");
    t.call(Method::POST, channels, Some(channel("by-api")))
        .await;
    t.submit(
        &b,
        "/console/alarms/channels",
        &channel_form("by-console", "email"),
    )
    .await
    .expect(StatusCode::SEE_OTHER);
    t.call(Method::POST, rules, Some(rule("rule-api", "by-api")))
        .await;
    t.submit(
        &b,
        "/console/alarms/rules",
        &rule_form("rule-console", "by-console"),
    )
    .await
    .expect(StatusCode::SEE_OTHER);

    // The same mistakes through both doors (the console shows them above the form).
    let api = |method: Method, path: &str, body: Option<Value>| (method, path.to_owned(), body);
    let console = |path: &str, form: Vec<(&'static str, &'static str)>| (path.to_owned(), form);
    refused_alike(
        &t,
        &b,
        vec![
            (
                api(Method::DELETE, "/api/v1/alarm-channels/by-api", None),
                console("/console/alarms/channels/by-api/delete", vec![]),
                StatusCode::CONFLICT,
                "alarm channel `by-api` is used by rule(s) rule-api: change them first",
            ),
            (
                api(Method::DELETE, "/api/v1/alarm-channels/nope", None),
                console("/console/alarms/channels/nope/delete", vec![]),
                StatusCode::NOT_FOUND,
                "alarm channel `nope` not found",
            ),
            (
                api(Method::POST, "/api/v1/alarm-channels/nope/test", None),
                console("/console/alarms/channels/nope/test", vec![]),
                StatusCode::NOT_FOUND,
                "alarm channel `nope` not found",
            ),
            (
                api(Method::DELETE, "/api/v1/alarm-rules/nope", None),
                console("/console/alarms/rules/nope/delete", vec![]),
                StatusCode::NOT_FOUND,
                "alarm rule `nope` not found",
            ),
            (
                api(
                    Method::POST,
                    channels,
                    Some(json!({"name": "c2", "kind": "pigeon", "to": ["ops@example.com"]})),
                ),
                console("/console/alarms/channels", channel_form("c2", "pigeon")),
                StatusCode::UNPROCESSABLE_ENTITY,
                "kind: ",
            ),
            (
                api(Method::POST, channels, Some(channel("by-api"))),
                console("/console/alarms/channels", channel_form("by-api", "email")),
                StatusCode::CONFLICT,
                "alarm channel `by-api` already exists",
            ),
            (
                api(Method::POST, rules, Some(rule("r2", "nope"))),
                console("/console/alarms/rules", rule_form("r2", "nope")),
                StatusCode::NOT_FOUND,
                "channels[0]: alarm channel `nope` not found",
            ),
        ],
    )
    .await;
    // An operator may not add a channel for every app (admins only): the same 403 and
    // words through both.
    let otto = make_user(&t, &b, "otto", "operator", "default").await;
    let otto_token = make_token(&t, &otto, "otto-ci").await;
    let (status, message) = refused_as(
        &t,
        &otto_token,
        Method::POST,
        channels,
        Some(channel("otto-ops")),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{message}");
    assert!(message.contains("for every app"), "{message}");
    t.submit(
        &otto,
        "/console/alarms/channels",
        &channel_form("otto-ops", "email"),
    )
    .await
    .expect(status)
    .contains(&html(&message));

    t.call(Method::DELETE, "/api/v1/alarm-rules/rule-api", None)
        .await;
    t.submit(&b, "/console/alarms/rules/rule-console/delete", &[])
        .await
        .expect(StatusCode::SEE_OTHER);
    t.call(Method::DELETE, "/api/v1/alarm-channels/by-api", None)
        .await;
    t.submit(&b, "/console/alarms/channels/by-console/delete", &[])
        .await
        .expect(StatusCode::SEE_OTHER);
    assert_audited(
        &t,
        &[
            ("root", "create alarm channel", "by-api"),
            ("admin", "create alarm channel", "by-console"),
            ("root", "create alarm rule", "rule-api"),
            ("admin", "create alarm rule", "rule-console"),
            ("root", "delete alarm rule", "rule-api"),
            ("admin", "delete alarm rule", "rule-console"),
            ("root", "delete alarm channel", "by-api"),
            ("admin", "delete alarm channel", "by-console"),
        ],
    )
    .await;
    t.stop().await;
}

/// Reads refuse alike too: a job, task or run that is not there is the same 404 and words,
/// and the audit log is the admins' through both doors.
#[tokio::test]
async fn reads_refuse_alike_through_both_doors() {
    let t = start().await;
    let b = t.sign_in().await;
    for (api, console, message) in [
        (
            "/api/v1/jobs/424242",
            "/console/jobs/424242",
            "job `424242` not found",
        ),
        (
            "/api/v1/tasks/424242",
            "/console/tasks/424242",
            "task 424242 not found",
        ),
        (
            "/api/v1/runs/424242",
            "/console/runs/424242",
            "run 424242 not found",
        ),
    ] {
        assert_eq!(
            refused(&t, Method::GET, api, None).await,
            (StatusCode::NOT_FOUND, message.to_owned())
        );
        t.get(console, Some(&b.cookie))
            .await
            .expect(StatusCode::NOT_FOUND)
            .contains(&html(message));
    }
    let otto = make_user(&t, &b, "otto", "operator", "default").await;
    let token = make_token(&t, &otto, "otto-ci").await;
    let (status, message) = refused_as(&t, &token, Method::GET, "/api/v1/audit", None).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{message}");
    assert!(message.contains("reading the audit log"), "{message}");
    t.get("/console/audit", Some(&otto.cookie))
        .await
        .expect(status)
        .contains(&html(&message));
    t.stop().await;
}

/// The workflow pages: a definition drawn as its graph, an instance started from the form
/// (bad JSON refused, naming it) and drawn with each step's status, a failed one retried
/// and a running one cancelled from its page; in Chinese as in English.
#[tokio::test]
async fn workflows_are_drawn_started_retried_and_cancelled_from_their_pages() {
    let t = start().await;
    let b = t.sign_in().await;
    for name in ["pack", "ship"] {
        t.api(
            Method::POST,
            "/api/v1/jobs",
            "application/json",
            json!({"name": name, "app": "default", "schedule": {"kind": "none"},
                   "delivery": {"kind": "pull"}, "max_attempts": 1})
            .to_string(),
        )
        .await;
    }
    let wf = t
        .api(
            Method::POST,
            "/api/v1/workflows",
            "application/json",
            json!({"name": "order<1>", "app": "default", "steps": [
                {"name": "pack", "job": "pack"},
                {"name": "ship", "job": "ship", "after": ["pack"]},
            ]})
            .to_string(),
        )
        .await;
    let wf_id = wf["id"].as_i64().unwrap();
    t.get("/console/workflows", Some(&b.cookie))
        .await
        .expect(StatusCode::OK)
        .contains(&format!("/console/workflows/{wf_id}\">order&#60;1&#62;<"));
    let page = t
        .get(&format!("/console/workflows/{wf_id}"), Some(&b.cookie))
        .await;
    page.expect(StatusCode::OK)
        .contains(r#"<svg class="graph""#)
        .contains(r#"class="step status-defined""#)
        .contains(r#"class="edge""#)
        .contains(">ship</text>");
    assert!(!page.text.contains("order<1>"), "the name is escaped");

    let start = format!("/console/workflows/{wf_id}/start");
    t.submit(&b, &start, &[("input", "{nope"), ("key", "")])
        .await
        .expect(StatusCode::BAD_REQUEST)
        .contains("input: not JSON");
    let started = t
        .submit(
            &b,
            &start,
            &[("input", r#"{"order": 42}"#), ("key", "o-42")],
        )
        .await;
    started.expect(StatusCode::SEE_OTHER);
    let at = started.location().to_owned();
    let id: i64 = at
        .strip_prefix("/console/workflow-instances/")
        .and_then(|i| i.parse().ok())
        .unwrap_or_else(|| panic!("redirect to the instance: {at}"));
    t.get(&at, Some(&b.cookie))
        .await
        .expect(StatusCode::OK)
        .contains(r#"class="step status-running""#)
        .contains(r#"class="step status-pending""#)
        .contains("&#34;order&#34;: 42")
        .contains("Cancel instance");

    // The step fails (nacked, one attempt): the page offers a retry, which runs it again.
    let pulled = t
        .api(
            Method::POST,
            "/api/v1/jobs/pack/pull",
            "application/json",
            json!({"wait_ms": 10_000}).to_string(),
        )
        .await;
    let item = &pulled["items"][0];
    t.api(
        Method::POST,
        &format!("/api/v1/tasks/{}/nack", item["task"]),
        "application/json",
        json!({"lease": item["lease"]}).to_string(),
    )
    .await;
    t.get(&at, Some(&b.cookie))
        .await
        .contains(r#"class="step status-failed""#)
        .contains(r#"class="step status-skipped""#)
        .contains("Retry the failed steps");
    t.submit(&b, &format!("/console/workflow-instances/{id}/retry"), &[])
        .await
        .expect(StatusCode::SEE_OTHER);
    t.get(&at, Some(&b.cookie))
        .await
        .contains(r#"<span class="status running">running</span>"#);
    t.submit(&b, &format!("/console/workflow-instances/{id}/cancel"), &[])
        .await
        .expect(StatusCode::SEE_OTHER);
    let zh = Request::get(&at)
        .header(header::COOKIE, &b.cookie)
        .header(header::ACCEPT_LANGUAGE, "zh-CN")
        .body(Body::empty())
        .unwrap();
    t.send(zh)
        .await
        .expect(StatusCode::OK)
        .contains("工作流实例")
        .contains(r#"class="step status-cancelled""#);
    t.stop().await;
}

/// A bounded job's page shows its busiest buckets: throttled tasks and slots held per key.
#[tokio::test]
async fn a_bounded_jobs_page_shows_who_waits_for_a_slot() {
    let t = start().await;
    t.upload_plugin().await;
    let b = t.sign_in().await;
    let job = t.create_job(&b, "reports").await;
    t.api(
        Method::PATCH,
        &format!("/api/v1/jobs/{job}"),
        "application/json",
        json!({"concurrency": {"key": "/customer", "limit": 1}}).to_string(),
    )
    .await;
    let tasks: Vec<Value> = ["acme", "acme", "acme", "globex", "globex"]
        .iter()
        .map(|c| json!({"job": job, "delay_ms": 3_600_000, "payload": json!({"customer": c}).to_string()}))
        .collect();
    t.api(
        Method::POST,
        "/api/v1/tasks/batch",
        "application/json",
        json!({"tasks": tasks}).to_string(),
    )
    .await;
    let now = now_ms();
    t.node
        .ports()
        .store()
        .claim_due(
            t.node.ports().lease(),
            now,
            now + 3_600_001,
            now + 3_600_001,
            10,
            &mut |_| JobFires::default(),
        )
        .await
        .unwrap();
    let page = t
        .get(&format!("/console/jobs/{job}"), Some(&b.cookie))
        .await;
    page.expect(StatusCode::OK)
        .contains("Waiting for a slot, by key")
        .contains(r#"<td class="key">acme</td><td class="throttled">2</td><td>1 / 1</td>"#)
        .contains(r#"<td class="key">globex</td><td class="throttled">1</td><td>1 / 1</td>"#)
        // The form shows the bound's key for editing.
        .contains(r#"name="concurrency_key" value="/customer""#);

    // A rate-limited job's page shows the tasks deferred past the window, by key.
    let calls = t.create_job(&b, "calls").await;
    t.api(
        Method::PATCH,
        &format!("/api/v1/jobs/{calls}"),
        "application/json",
        json!({"rate_limit": {"key": "/partner", "limit": 1, "per_ms": 3_600_000}}).to_string(),
    )
    .await;
    let tasks: Vec<Value> = ["acme", "acme", "acme"]
        .iter()
        .map(|p| json!({"job": calls, "payload": json!({"partner": p}).to_string()}))
        .collect();
    t.api(
        Method::POST,
        "/api/v1/tasks/batch",
        "application/json",
        json!({"tasks": tasks}).to_string(),
    )
    .await;
    let now = now_ms();
    let claimed = t
        .node
        .ports()
        .store()
        .claim_due(
            t.node.ports().lease(),
            now,
            now + 5_000,
            now + 5_000,
            10,
            &mut |_| JobFires::default(),
        )
        .await
        .unwrap();
    assert!(
        claimed.throttled.contains(&(calls, 2)),
        "{:?}",
        claimed.throttled
    );
    t.get(&format!("/console/jobs/{calls}"), Some(&b.cookie))
        .await
        .expect(StatusCode::OK)
        .contains(r#"<td class="key">acme</td><td class="throttled">2</td>"#)
        .contains(r#"name="rate_limit" value="1""#)
        .contains(r#"name="rate_per_ms" value="3600000""#)
        .contains(r#"name="rate_key" value="/partner""#);
    t.stop().await;
}

/// A recurring job's page says how far behind its schedule its last fires started.
#[tokio::test]
async fn a_recurring_jobs_page_shows_how_far_behind_its_schedule_it_runs() {
    use crate::store_contract::{dispatched, report};
    use rota_scheduler::model::{NewTask, RunStatus, TaskKind, TaskNext};
    let t = start().await;
    t.upload_plugin().await;
    let b = t.sign_in().await;
    let job = t.create_job(&b, "every-second").await;
    t.api(
        Method::PATCH,
        &format!("/api/v1/jobs/{job}"),
        "application/json",
        json!({"schedule": {"kind": "fixed_rate", "every_ms": 1_000}}).to_string(),
    )
    .await;
    let page = t
        .get(&format!("/console/jobs/{job}"), Some(&b.cookie))
        .await;
    page.expect(StatusCode::OK);
    assert!(
        !page.text.contains("Behind its schedule"),
        "no fire ended yet: nothing to say"
    );
    // A fire of its own, an hour ahead (the node's scan leaves it), claimed and run here.
    let store = t.node.ports().store();
    let lease = t.node.ports().lease();
    let now = now_ms();
    let fire = NewTask {
        job_id: job,
        kind: TaskKind::Cron,
        key: None,
        payload: None,
        params: None,
        due_at: now + 3_600_000,
        max_attempts: None,
        backoff: None,
        priority: 0,
        traceparent: None,
        limit_key: None,
    };
    store.insert_tasks(&[fire], now).await.unwrap();
    let claimed = store
        .claim_due(
            lease,
            now,
            now + 3_700_000,
            now + 3_700_000,
            10,
            &mut |_| JobFires::default(),
        )
        .await
        .unwrap();
    let fire = claimed
        .tasks
        .iter()
        .find(|f| f.kind == TaskKind::Cron && f.due_at == now + 3_600_000)
        .unwrap();
    store
        .record_dispatches(lease, &[dispatched(fire, 9_001)], now_ms())
        .await
        .unwrap();
    let mut ended = report(fire, 9_001, RunStatus::Succeeded);
    ended.started_at = Some(fire.due_at + 900);
    store
        .apply_run_updates(&[ended], now_ms(), &mut |_| TaskNext::Succeeded)
        .await
        .unwrap();
    t.get(&format!("/console/jobs/{job}"), Some(&b.cookie))
        .await
        .expect(StatusCode::OK)
        .contains("Behind its schedule")
        .contains(r#"<span class="last">900 ms</span>"#)
        .contains(r#"<span class="skipped">0</span>"#);
    t.stop().await;
}
