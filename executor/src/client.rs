//! The executor's HTTP client to its schedulers: every request signed with the executor
//! secret (`rota_proto::sign`), sent to the first scheduler that answers.
//!
//! Any scheduler node accepts registrations, heartbeats, callbacks and plugin downloads
//! (they share one database), so a call tries each configured scheduler in turn,
//! starting with the one that answered last, until one answers 2xx.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use rota_proto::error_chain;
use rota_proto::wire::{KvReply, KvRequest, PATH_KV, PATH_SECRET, SecretReply, SecretRequest};
use rota_proto::{HEADER_APP, Secret};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::clock::wall_ms;
use crate::runtime::host::{Call, CallFailed, SchedulerCalls};

/// Time for one request to one scheduler.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Time for one plugin download.
const PLUGIN_TIMEOUT: Duration = Duration::from_secs(60);
/// Largest plugin module accepted (the scheduler's upload cap is 32 MiB by default).
pub const MAX_PLUGIN_BYTES: usize = 64 << 20;
/// Longest error body kept from an answer.
const ERROR_BODY_MAX: usize = 300;

/// Why one scheduler did not take a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttemptError {
    Unreachable(String),
    Status { status: u16, body: String },
    BadAnswer(String),
}

impl fmt::Display for AttemptError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unreachable(reason) => write!(f, "unreachable: {reason}"),
            Self::Status { status, body } => write!(f, "answered {status}: {body}"),
            Self::BadAnswer(reason) => write!(f, "sent an answer Rota cannot read: {reason}"),
        }
    }
}

/// No scheduler took a request: what each one said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallError {
    pub attempts: Vec<(String, AttemptError)>,
}

impl CallError {
    /// A scheduler understood the request and refused its content (400, 422): sending
    /// the same bytes again cannot succeed.
    pub fn is_refused_content(&self) -> bool {
        self.attempts.iter().any(|(_, e)| {
            matches!(
                e,
                AttemptError::Status {
                    status: 400 | 422,
                    ..
                }
            )
        })
    }
}

impl CallError {
    /// The `error` a scheduler answered with `status`, if one did.
    pub fn refusal(&self, status: u16) -> Option<String> {
        self.attempts.iter().find_map(|(_, e)| match e {
            AttemptError::Status { status: s, body } if *s == status => Some(
                serde_json::from_str::<rota_proto::ErrorBody>(body)
                    .map(|b| b.error)
                    .unwrap_or_else(|_| body.clone()),
            ),
            _ => None,
        })
    }
}

impl fmt::Display for CallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.attempts.is_empty() {
            return f.write_str("no scheduler is configured");
        }
        for (i, (scheduler, error)) in self.attempts.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{scheduler} {error}")?;
        }
        Ok(())
    }
}

impl std::error::Error for CallError {}

#[derive(Debug)]
pub struct SchedulerClient {
    http: reqwest::Client,
    schedulers: Vec<String>,
    /// The app this executor serves: named in every request, whose key signs it.
    app: String,
    secret: Secret,
    /// The scheduler that answered last: tried first.
    preferred: AtomicUsize,
}

impl SchedulerClient {
    pub fn new(
        schedulers: &[String],
        app: &str,
        secret: Secret,
        tls: &rota_net::Tls,
    ) -> anyhow::Result<Self> {
        let http = tls
            .client()
            .timeout(REQUEST_TIMEOUT)
            .connect_timeout(CONNECT_TIMEOUT)
            .tcp_nodelay(true)
            .build()?;
        Ok(Self {
            http,
            schedulers: schedulers
                .iter()
                .map(|s| s.trim_end_matches('/').to_owned())
                .collect(),
            app: app.to_owned(),
            secret,
            preferred: AtomicUsize::new(0),
        })
    }

    /// POSTs `body` as JSON and reads a JSON answer from the first scheduler with a 2xx.
    pub async fn post<Req: Serialize, Resp: DeserializeOwned>(
        &self,
        path: &str,
        body: &Req,
    ) -> Result<Resp, CallError> {
        let body = Bytes::from(serde_json::to_vec(body).map_err(|e| CallError {
            attempts: vec![("(request)".into(), AttemptError::BadAnswer(e.to_string()))],
        })?);
        self.each(|base| {
            let body = body.clone();
            async move {
                let answer = self
                    .send(reqwest::Method::POST, &base, path, body, REQUEST_TIMEOUT)
                    .await?;
                serde_json::from_slice(&answer).map_err(|e| AttemptError::BadAnswer(e.to_string()))
            }
        })
        .await
    }

    /// POSTs JSON `body`; any 2xx counts, whatever its body.
    pub async fn post_accepted(&self, path: &str, body: Bytes) -> Result<(), CallError> {
        self.each(|base| {
            let body = body.clone();
            async move {
                self.send(reqwest::Method::POST, &base, path, body, REQUEST_TIMEOUT)
                    .await
                    .map(drop)
            }
        })
        .await
    }

    /// Downloads the module with this SHA-256 (not verified here).
    pub async fn fetch_plugin(&self, sha256: &str) -> Result<Bytes, CallError> {
        let path = rota_proto::wire::plugin_path(sha256);
        self.each(|base| {
            let path = path.clone();
            async move {
                self.send(
                    reqwest::Method::GET,
                    &base,
                    &path,
                    Bytes::new(),
                    PLUGIN_TIMEOUT,
                )
                .await
            }
        })
        .await
    }

    /// Runs `attempt` against each scheduler in turn, from the preferred one, until one
    /// succeeds.
    async fn each<T, F, Fut>(&self, mut attempt: F) -> Result<T, CallError>
    where
        F: FnMut(String) -> Fut,
        Fut: Future<Output = Result<T, AttemptError>>,
    {
        let n = self.schedulers.len();
        let first = self.preferred.load(Ordering::Relaxed);
        let mut attempts = Vec::new();
        for i in 0..n {
            let idx = (first + i) % n;
            let base = &self.schedulers[idx];
            match attempt(base.clone()).await {
                Ok(value) => {
                    self.preferred.store(idx, Ordering::Relaxed);
                    return Ok(value);
                }
                Err(e) => attempts.push((base.clone(), e)),
            }
        }
        Err(CallError { attempts })
    }

    async fn send(
        &self,
        method: reqwest::Method,
        base: &str,
        path: &str,
        body: Bytes,
        timeout: Duration,
    ) -> Result<Bytes, AttemptError> {
        let url = reqwest::Url::parse(&format!("{base}{path}"))
            .map_err(|e| AttemptError::Unreachable(format!("bad scheduler URL: {e}")))?;
        // What the receiver sees as the request target.
        let target = match url.query() {
            Some(query) => format!("{}?{query}", url.path()),
            None => url.path().to_owned(),
        };
        let signed = rota_proto::sign_now(
            self.secret.as_bytes(),
            method.as_str(),
            &target,
            wall_ms(),
            &body,
        );
        let mut request = self
            .http
            .request(method.clone(), url)
            .timeout(timeout)
            .header(HEADER_APP, &self.app);
        for (name, value) in signed.pairs() {
            request = request.header(name, value);
        }
        if method == reqwest::Method::POST {
            request = request
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(body);
        }
        let mut response = request
            .send()
            .await
            .map_err(|e| AttemptError::Unreachable(error_chain(&e)))?;
        let status = response.status();
        let mut answer = BytesMut::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| AttemptError::Unreachable(error_chain(&e)))?
        {
            if answer.len() + chunk.len() > MAX_PLUGIN_BYTES {
                return Err(AttemptError::BadAnswer(format!(
                    "answer larger than {} MiB",
                    MAX_PLUGIN_BYTES >> 20
                )));
            }
            answer.extend_from_slice(&chunk);
        }
        if !status.is_success() {
            let body =
                String::from_utf8_lossy(&answer[..answer.len().min(ERROR_BODY_MAX)]).into_owned();
            return Err(AttemptError::Status {
                status: status.as_u16(),
                body,
            });
        }
        Ok(answer.freeze())
    }
}

/// A run's `kv` and `secret` imports, answered by the schedulers.
impl SchedulerCalls for SchedulerClient {
    fn kv(self: Arc<Self>, req: KvRequest) -> Call<KvReply> {
        Box::pin(async move { self.post(PATH_KV, &req).await.map_err(CallFailed::from) })
    }

    fn secret(self: Arc<Self>, req: SecretRequest) -> Call<SecretReply> {
        Box::pin(async move { self.post(PATH_SECRET, &req).await.map_err(CallFailed::from) })
    }
}

impl From<CallError> for CallFailed {
    fn from(e: CallError) -> CallFailed {
        CallFailed {
            too_large: e.refusal(413),
            message: e.to_string(),
        }
    }
}
