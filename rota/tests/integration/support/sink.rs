//! An HTTP receiver of the test's own for what Rota POSTs out — a webhook job's
//! deliveries (`webhooks.rs`), an alarm channel's alarms (`alarms.rs`): it records every
//! request, answers with the next scripted answer (then `200 ok`), optionally slowly, and
//! checks signatures the way a receiver would, independently of Rota's code.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::{HeaderMap, StatusCode};
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use super::now_ms;

/// One request as it arrived.
#[derive(Debug, Clone)]
pub struct Received {
    pub headers: HeaderMap,
    pub body: String,
    /// When it arrived (the test's clock, epoch ms).
    pub at: i64,
}

impl Received {
    /// Header `name`, which must be there.
    pub fn header(&self, name: &str) -> String {
        self.headers
            .get(name)
            .unwrap_or_else(|| panic!("no `{name}` header"))
            .to_str()
            .unwrap()
            .to_owned()
    }

    /// Asserts `x-rota-signature` is `v1=` HMAC-SHA256(`secret`, timestamp + "." + body),
    /// as a receiver checks it.
    #[track_caller]
    pub fn assert_signed(&self, secret: &[u8]) {
        let mut mac = Hmac::<Sha256>::new_from_slice(secret).unwrap();
        mac.update(format!("{}.{}", self.header("x-rota-timestamp"), self.body).as_bytes());
        let expected = format!("v1={}", hex::encode(mac.finalize().into_bytes()));
        assert_eq!(
            self.header("x-rota-signature"),
            expected,
            "a bad signature on {}",
            self.body
        );
    }
}

/// A scripted answer: status, headers, body.
type Scripted = (u16, Vec<(&'static str, String)>, &'static str);

/// The receiver; clones share what it got.
#[derive(Clone, Default)]
pub struct Sink {
    got: Arc<Mutex<Vec<Received>>>,
    answers: Arc<Mutex<VecDeque<Scripted>>>,
    /// Each answer takes this long.
    slow: Option<Duration>,
    /// Requests in progress now, and the most there ever were.
    at_once: Arc<Mutex<usize>>,
    most_at_once: Arc<Mutex<usize>>,
}

impl Sink {
    /// Serves POSTs to `path` on `listener` until the test ends.
    pub fn serve(&self, path: &'static str, listener: tokio::net::TcpListener) {
        let me = self.clone();
        let app = axum::Router::new().route(
            path,
            axum::routing::post(move |headers: HeaderMap, body: String| {
                let me = me.clone();
                async move { me.take(headers, body).await }
            }),
        );
        tokio::spawn(async move { axum::serve(listener, app).await });
    }

    /// Serves `self` at `path` on a fresh port of 127.0.0.1; the sink and its URL.
    pub async fn start(self, path: &'static str) -> (Sink, String) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}{path}", listener.local_addr().unwrap());
        self.serve(path, listener);
        (self, url)
    }

    async fn take(&self, headers: HeaderMap, body: String) -> axum::response::Response {
        self.got.lock().unwrap().push(Received {
            headers,
            body,
            at: now_ms(),
        });
        if let Some(slow) = self.slow {
            {
                let mut n = self.at_once.lock().unwrap();
                *n += 1;
                let mut most = self.most_at_once.lock().unwrap();
                *most = (*most).max(*n);
            }
            tokio::time::sleep(slow).await;
            *self.at_once.lock().unwrap() -= 1;
        }
        let (status, headers, body) =
            self.answers
                .lock()
                .unwrap()
                .pop_front()
                .unwrap_or((200, vec![], "ok"));
        let mut res = axum::response::Response::new(axum::body::Body::from(body));
        *res.status_mut() = StatusCode::from_u16(status).unwrap();
        for (name, value) in headers {
            res.headers_mut().insert(name, value.parse().unwrap());
        }
        res
    }

    /// The next request is answered so.
    pub fn answer(&self, status: u16, headers: Vec<(&'static str, String)>, body: &'static str) {
        self.answers
            .lock()
            .unwrap()
            .push_back((status, headers, body));
    }

    /// Every request so far, in order.
    pub fn got(&self) -> Vec<Received> {
        self.got.lock().unwrap().clone()
    }

    /// A sink whose every answer takes `slow`.
    pub fn slow(slow: Duration) -> Sink {
        Sink {
            slow: Some(slow),
            ..Sink::default()
        }
    }

    /// The most requests it answered at once (counted only when `slow`).
    pub fn most_at_once(&self) -> usize {
        *self.most_at_once.lock().unwrap()
    }
}
