//! The node under test for the router-level suites (`api.rs`, `console.rs`,
//! `security.rs`): a started [`Node`] on a real SQLite store in a temp dir, and its router,
//! driven with `oneshot`. Each suite adds its own request helpers in an `impl TestApp`.
// Each suite compiles this module on its own and uses part of it.
#![allow(dead_code)]

use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, Method, Request, StatusCode, header};
use rota_scheduler::api::{AppState, router};
use rota_scheduler::{Config, Node, Store};
use serde_json::Value;
use tokio::sync::watch;
use tower::ServiceExt;

/// The API token of [`Config::for_tests`].
pub const TOKEN: &str = "test-token";
/// The master secret of [`Config::for_tests`] (executors' keys derive from it).
pub const SECRET: &[u8] = b"test-secret";

/// A started node and its router; [`TestApp::stop`] drains it.
pub struct TestApp {
    pub app: Router,
    pub node: Node,
    stop: watch::Sender<bool>,
    _dir: tempfile::TempDir,
}

/// An answer, whole — its body as bytes and as (lossy) text — with the checks the suites
/// make of it.
pub struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
    pub text: String,
}

impl Answer {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text))
    }

    /// The `error` message; the answer must have the error shape, `{"error": "…"}`, and
    /// say something.
    #[track_caller]
    pub fn error(&self) -> String {
        let v = self.json();
        assert_eq!(v.as_object().map(|o| o.len()), Some(1), "error shape: {v}");
        let message = v["error"]
            .as_str()
            .unwrap_or_else(|| panic!("no error message: {v}"))
            .to_owned();
        assert!(message.len() > 5, "an error that says nothing: {v}");
        message
    }

    #[track_caller]
    pub fn expect(&self, status: StatusCode) -> &Self {
        assert_eq!(self.status, status, "body: {}", self.text);
        self
    }

    /// Asserts a 4xx/5xx with this status whose message contains `needle`.
    #[track_caller]
    pub fn expect_error(&self, status: StatusCode, needle: &str) {
        self.expect(status);
        let message = self.error();
        assert!(
            message.contains(needle),
            "`{message}` should mention `{needle}`"
        );
    }

    /// Where a redirect points (empty without one).
    pub fn location(&self) -> &str {
        self.headers
            .get(header::LOCATION)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }

    /// Asserts the page (or body) contains `needle`.
    #[track_caller]
    pub fn contains(&self, needle: &str) -> &Self {
        assert!(
            self.text.contains(needle),
            "`{needle}` not in the page:\n{}",
            self.text
        );
        self
    }

    /// The CSRF token of the page's forms.
    pub fn csrf(&self) -> String {
        let marker = r#"name="csrf" value=""#;
        let at = self.text.find(marker).expect("a form with a CSRF token") + marker.len();
        self.text[at..at + 64].to_owned()
    }
}

impl TestApp {
    /// A node with the test configuration, changed by `change`.
    pub async fn start_with(change: impl FnOnce(&mut Config)) -> TestApp {
        let dir = tempfile::tempdir().expect("temp dir");
        let url = format!("sqlite://{}", dir.path().join("rota.db").display());
        let mut config = Config::for_tests(url.clone());
        // No executor runs here; a short dispatch timeout keeps the drain at stop short.
        config.dispatch_timeout_ms = 100;
        change(&mut config);
        let store = Store::connect(&url).await.expect("store");
        let (stop, stop_rx) = watch::channel(false);
        let node = Node::start(config, store, stop_rx).await.expect("node");
        let app = router(AppState {
            ports: node.ports().clone(),
        });
        TestApp {
            app,
            node,
            stop,
            _dir: dir,
        }
    }

    pub async fn stop(self) {
        let _ = self.stop.send(true);
        self.node.stopped().await;
    }

    /// An API call with the admin token and a JSON body (or none).
    pub async fn token_call(&self, method: Method, path: &str, body: Option<Value>) -> Answer {
        let mut req = Request::builder()
            .method(method)
            .uri(path)
            .header(header::AUTHORIZATION, format!("Bearer {TOKEN}"));
        let body = match body {
            Some(v) => {
                req = req.header(header::CONTENT_TYPE, "application/json");
                Body::from(v.to_string())
            }
            None => Body::empty(),
        };
        self.reply(req.body(body).unwrap()).await
    }

    /// Sends `req` through the router and reads the whole answer.
    pub async fn reply(&self, req: Request<Body>) -> Answer {
        let res = self.app.clone().oneshot(req).await.expect("infallible");
        let status = res.status();
        let headers = res.headers().clone();
        let body = axum::body::to_bytes(res.into_body(), usize::MAX)
            .await
            .expect("body");
        Answer {
            status,
            headers,
            text: String::from_utf8_lossy(&body).into_owned(),
            body,
        }
    }
}
