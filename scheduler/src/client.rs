//! The scheduler's HTTP client to executors: every request signed with the key of the
//! executor's app, derived from the master secret (calls to other scheduler nodes with the
//! master itself; see `docs/protocol.md`), one shared connection pool, a bounded timeout.

use std::time::Duration;

use rota_proto::error_chain;
use rota_proto::wire::{
    PATH_BEAT, PATH_IDLE_BEAT, PATH_KILL, PATH_LOG, PATH_RUNS_KNOWN, PATH_TRIGGER, PATH_WARM,
};
use rota_proto::{
    BeatAck, IdleBeatAck, IdleBeatRequest, KillAck, KillRequest, LogPage, LogRequest, RunsKnownAck,
    RunsKnownRequest, Secret, TriggerBatch, TriggerBatchAck, app_secret,
};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::model::wall_ms;

/// Why a call to an executor did not get an answer.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// No connection: the request certainly did not arrive, another executor may take it.
    #[error("executor {address} is unreachable: {reason}")]
    Unreachable { address: String, reason: String },
    /// Connected but no answer (timeout, reset): the request may have arrived.
    #[error("executor {address} did not answer: {reason}")]
    NoAnswer { address: String, reason: String },
    #[error("executor {address} answered {status}: {body}")]
    Refused {
        address: String,
        status: u16,
        body: String,
    },
    #[error("executor {address} sent an answer Rota cannot read: {reason}")]
    BadAnswer { address: String, reason: String },
}

#[derive(Clone)]
pub struct ExecutorClient {
    /// Shared with the calls to XXL-JOB executors (`xxl/client.rs`).
    pub(crate) http: reqwest::Client,
    /// The master secret: the key of calls to other scheduler nodes, and what each app's
    /// key is derived from.
    master: Secret,
}

/// Whom a request goes to, which decides the key that signs it.
#[derive(Debug, Clone, Copy)]
enum To<'a> {
    /// An executor of this app.
    App(&'a str),
    /// Another scheduler node.
    Peer,
}

impl ClientError {
    /// The request certainly did not reach the executor.
    pub fn not_delivered(&self) -> bool {
        matches!(
            self,
            Self::Unreachable { .. } | Self::Refused { status: 503, .. }
        )
    }
}

/// `body` as JSON, in a buffer of `capacity` to start with.
fn encode<T: Serialize>(address: &str, body: &T, capacity: usize) -> Result<Vec<u8>, ClientError> {
    let mut buf = Vec::with_capacity(capacity);
    serde_json::to_writer(&mut buf, body).map_err(|e| ClientError::BadAnswer {
        address: address.into(),
        reason: e.to_string(),
    })?;
    Ok(buf)
}

/// The body of a 2xx answer to a request `sent` to `address`; any other is refused.
pub(crate) async fn answer(
    address: &str,
    sent: Result<reqwest::Response, reqwest::Error>,
) -> Result<bytes::Bytes, ClientError> {
    let resp = sent.map_err(|e| sent_error(address, &e))?;
    let status = resp.status();
    // The request arrived; a lost answer leaves open whether it was acted on.
    let bytes = resp.bytes().await.map_err(|e| ClientError::NoAnswer {
        address: address.into(),
        reason: error_chain(&e),
    })?;
    if !status.is_success() {
        let body = String::from_utf8_lossy(&bytes[..bytes.len().min(500)]).into_owned();
        return Err(ClientError::Refused {
            address: address.into(),
            status: status.as_u16(),
            body,
        });
    }
    Ok(bytes)
}

/// A failed send: no connection means the request certainly did not arrive; any later
/// failure (a timeout while waiting for the answer, a reset) means it may have.
fn sent_error(address: &str, e: &reqwest::Error) -> ClientError {
    if e.is_connect() || e.is_builder() {
        ClientError::Unreachable {
            address: address.into(),
            reason: error_chain(e),
        }
    } else {
        ClientError::NoAnswer {
            address: address.into(),
            reason: error_chain(e),
        }
    }
}

impl ExecutorClient {
    pub fn new(master: Secret, timeout: Duration, tls: &rota_net::Tls) -> Self {
        let http = tls
            .client()
            .timeout(timeout)
            .connect_timeout(timeout.min(Duration::from_secs(1)))
            .pool_max_idle_per_host(64)
            .tcp_nodelay(true)
            .build()
            .unwrap_or_default();
        ExecutorClient { http, master }
    }

    async fn post<Req: Serialize, Resp: DeserializeOwned>(
        &self,
        to: To<'_>,
        address: &str,
        path: &str,
        body: &Req,
    ) -> Result<Resp, ClientError> {
        let body = encode(address, body, 128)?;
        self.post_bytes(to, address, path, body).await
    }

    /// Signs and sends a JSON body, and reads the JSON answer.
    async fn post_bytes<Resp: DeserializeOwned>(
        &self,
        to: To<'_>,
        address: &str,
        path: &str,
        body: Vec<u8>,
    ) -> Result<Resp, ClientError> {
        let url = format!("{}{}", address.trim_end_matches('/'), path);
        let signed_path = reqwest::Url::parse(&url)
            .map(|u| match u.query() {
                Some(q) => format!("{}?{q}", u.path()),
                None => u.path().to_owned(),
            })
            .map_err(|e| ClientError::Unreachable {
                address: address.into(),
                reason: format!("bad address: {e}"),
            })?;
        // To an executor, the signature covers its address too (`docs/protocol.md`): a
        // request for one executor is refused by every other.
        let (key, signed_target) = match to {
            To::App(app) => (
                app_secret(&self.master, app),
                format!("{}{signed_path}", address.trim_end_matches('/')),
            ),
            To::Peer => (self.master.clone(), signed_path),
        };
        // Wall time: the receiver checks it against its own wall clock (±60 s), not the
        // database's.
        let signed_at = wall_ms();
        let signed = rota_proto::sign_now(key.as_bytes(), "POST", &signed_target, signed_at, &body);
        let mut request = self.http.post(&url);
        for (name, value) in signed.pairs() {
            request = request.header(name, value);
        }
        let sent = request
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body)
            .send()
            .await;
        let bytes = answer(address, sent).await?;
        serde_json::from_slice(&bytes).map_err(|e| ClientError::BadAnswer {
            address: address.into(),
            reason: e.to_string(),
        })
    }

    pub async fn trigger(
        &self,
        app: &str,
        address: &str,
        batch: &TriggerBatch,
    ) -> Result<TriggerBatchAck, ClientError> {
        // Sized ahead: a batch runs to hundreds of KiB (about 400 bytes of JSON per trigger
        // besides its input), and growing the buffer by doubling copied it over and over.
        let capacity = batch
            .triggers
            .iter()
            .map(|t| 512 + t.input.len() + t.params.as_ref().map_or(0, String::len))
            .sum();
        let body = encode(address, batch, capacity)?;
        self.post_bytes(To::App(app), address, PATH_TRIGGER, body)
            .await
    }

    pub async fn kill(
        &self,
        app: &str,
        address: &str,
        run_id: i64,
    ) -> Result<KillAck, ClientError> {
        self.post(To::App(app), address, PATH_KILL, &KillRequest { run_id })
            .await
    }

    pub async fn log(
        &self,
        app: &str,
        address: &str,
        req: &LogRequest,
    ) -> Result<LogPage, ClientError> {
        self.post(To::App(app), address, PATH_LOG, req).await
    }

    pub async fn beat(&self, app: &str, address: &str) -> Result<BeatAck, ClientError> {
        self.post(To::App(app), address, PATH_BEAT, &serde_json::json!({}))
            .await
    }

    /// Asks the executor at `address` to compile these plugins ahead of their first run.
    pub async fn warm(
        &self,
        app: &str,
        address: &str,
        plugins: &[String],
    ) -> Result<serde_json::Value, ClientError> {
        self.post(
            To::App(app),
            address,
            PATH_WARM,
            &rota_proto::WarmRequest {
                plugins: plugins.to_vec(),
            },
        )
        .await
    }

    pub async fn idle_beat(
        &self,
        app: &str,
        address: &str,
        job_id: i64,
    ) -> Result<IdleBeatAck, ClientError> {
        self.post(
            To::App(app),
            address,
            PATH_IDLE_BEAT,
            &IdleBeatRequest { job_id },
        )
        .await
    }

    /// Asks the node at `address` (another scheduler) to cancel a task it holds.
    pub async fn node_cancel(
        &self,
        address: &str,
        req: &rota_proto::wire::PeerCancel,
    ) -> Result<rota_proto::wire::PeerCancelAck, ClientError> {
        self.post(To::Peer, address, rota_proto::wire::PATH_PEER_CANCEL, req)
            .await
    }

    /// Tells the node at `address` that a job changed.
    pub async fn node_job_changed(
        &self,
        address: &str,
        req: &rota_proto::wire::PeerJobChanged,
    ) -> Result<serde_json::Value, ClientError> {
        self.post(
            To::Peer,
            address,
            rota_proto::wire::PATH_PEER_JOB_CHANGED,
            req,
        )
        .await
    }

    /// Tells the node at `address` that tasks of these pull jobs became ready.
    pub async fn node_ready(
        &self,
        address: &str,
        req: &rota_proto::wire::PeerReady,
    ) -> Result<serde_json::Value, ClientError> {
        self.post(To::Peer, address, rota_proto::wire::PATH_PEER_READY, req)
            .await
    }

    pub async fn runs_known(
        &self,
        app: &str,
        address: &str,
        req: &RunsKnownRequest,
    ) -> Result<RunsKnownAck, ClientError> {
        self.post(To::App(app), address, PATH_RUNS_KNOWN, req).await
    }
}
