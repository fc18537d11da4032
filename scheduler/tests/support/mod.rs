//! The node under test for the router-level suites (`api.rs`, `console.rs`,
//! `security.rs`): a started [`Node`] on a real SQLite store in a temp dir, and its router,
//! driven with `oneshot`. Each suite adds its own request helpers in an `impl TestApp`.
// Each suite compiles this module on its own and uses part of it.
#![allow(dead_code)]

use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, Request, StatusCode};
use rota_scheduler::api::{AppState, router};
use rota_scheduler::{Config, Node, Store};
use tokio::sync::watch;
use tower::ServiceExt;

/// A started node and its router; [`TestApp::stop`] drains it.
pub struct TestApp {
    pub app: Router,
    pub node: Node,
    stop: watch::Sender<bool>,
    _dir: tempfile::TempDir,
}

/// An answer, whole (a suite keeps what it looks at).
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
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
        let app = router(AppState { node: node.clone() });
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

    /// Sends `req` through the router and reads the whole answer.
    pub async fn reply(&self, req: Request<Body>) -> Reply {
        let res = self.app.clone().oneshot(req).await.expect("infallible");
        let status = res.status();
        let headers = res.headers().clone();
        let body = axum::body::to_bytes(res.into_body(), usize::MAX)
            .await
            .expect("body");
        Reply {
            status,
            headers,
            body,
        }
    }
}
